#pragma once
// Where a forward's time goes, op by op: while a ScopedKernelTiming is alive, every kernel called
// on this thread runs through a wrapper of its device's table that reads the clock around the
// call (after ops::synchronize, so a GPU's queued work is counted where it ran). `bench
// transformer --op-times` prints the table; what the slots do not cover (copies made by the ops
// layer or by views made contiguous, allocation) is the step's time minus their sum.
//
// A kernel that calls another slot on the same thread is counted once, under the outer call. A
// composed fallback (a slot the backend lacks) shows up as the kernels it is composed of.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/kernel_table.h"
#include "ops/dispatch.h"

namespace fluxrt::ops {

struct KernelTime {
  std::string op;  // "linear 3072->9216 M=256", "attention L=768 H=24 D=128", "rms_norm", ...
  int64_t calls = 0;
  double seconds = 0;
  double flops = 0;     // multiply-adds x 2 for linear and attention; 0 for the others
  bool matrix = false;  // linear, conv2d, attention: the FLOP-counted work
};

class ScopedKernelTiming {
 public:
  // One at a time in a process (the wrapped table is shared): a second one throws Unsupported.
  explicit ScopedKernelTiming(Device device);
  ~ScopedKernelTiming();
  ScopedKernelTiming(const ScopedKernelTiming&) = delete;
  ScopedKernelTiming& operator=(const ScopedKernelTiming&) = delete;

  // What has been timed so far, the longest first.
  std::vector<KernelTime> times() const;

 private:
  std::unique_ptr<ScopedKernelTable> forced_;
};

// Times an ops-layer region that is not a kernel slot (concat's copies) into the active table;
// does nothing when no ScopedKernelTiming is alive on this thread.
class TimedRegion {
 public:
  explicit TimedRegion(std::string_view op);
  ~TimedRegion();
  TimedRegion(const TimedRegion&) = delete;
  TimedRegion& operator=(const TimedRegion&) = delete;

 private:
  std::string_view op_;
  double start_ = -1;
};

}  // namespace fluxrt::ops
