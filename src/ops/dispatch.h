#pragma once
// How an op front end finds its kernel: the table of the backend that owns the input's device,
// unless a test forces another table for the current thread (ScopedKernelTable). Also the generic
// composed-fallback policy every op shares: a null slot runs the fallback, logging once per
// (op, backend), and is an Unsupported error when the environment sets FLUXRT_STRICT_KERNELS=1.
//
//   const auto& k = ops::kernels_for(x);
//   if (k.adaln_modulate) { k.adaln_modulate(args); return y; }
//   ops::note_fallback("adaln_modulate", k);   // throws under strict mode
//   ... composed version ...
#include <string_view>

#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace fluxrt::ops {

// The table for tensors on `device` (or the forced one).
const backend::KernelTable& kernels_for(Device device);
const backend::KernelTable& kernels_for(const Tensor& t);

// Waits until the work queued on `device` has finished (a no-op on the CPU devices, whose kernels
// are synchronous). Timers call it before reading the clock; device errors surface here.
void synchronize(Device device);

// Forces every op called on this thread to use `table` (e.g. backend::ref_kernels()) while alive.
// Nests; restores the previous choice on destruction.
class ScopedKernelTable {
 public:
  explicit ScopedKernelTable(const backend::KernelTable& table);
  ~ScopedKernelTable();
  ScopedKernelTable(const ScopedKernelTable&) = delete;
  ScopedKernelTable& operator=(const ScopedKernelTable&) = delete;

 private:
  const backend::KernelTable* previous_;
};

// Runs every op called on this thread, on tensors of `device`'s backend, through that backend's
// planning table (KernelTable::planning) while alive: nothing is computed, the kernels only do
// the one-time work of their call shapes. A forward under it before the first timed step takes
// that work out of the step. Does nothing for a backend without a planning table.
class ScopedKernelPlanning {
 public:
  explicit ScopedKernelPlanning(Device device);
  ~ScopedKernelPlanning();
  ScopedKernelPlanning(const ScopedKernelPlanning&) = delete;
  ScopedKernelPlanning& operator=(const ScopedKernelPlanning&) = delete;
  // Whether this device's backend has a planning table (else a planned forward is wasted work).
  static bool available(Device device);

 private:
  const backend::KernelTable* previous_;
};

// True when FLUXRT_STRICT_KERNELS=1 (core/strict_kernels.h; read once per process; tests may
// override it).
bool strict_kernels();
void set_strict_kernels(bool strict);

// Called by an op about to run its composed fallback because `table` lacks the kernel. Logs once
// per (op, backend) at warn level; throws Unsupported under strict mode.
void note_fallback(std::string_view op, const backend::KernelTable& table);

// For ops without a fallback: throws Unsupported naming the op and backend when `slot` is null.
template <typename Fn>
Fn require_kernel(Fn slot, std::string_view op, const backend::KernelTable& table);

// How many times each op took its fallback in this process (tests check fusions really ran).
int fallback_count(std::string_view op);

namespace detail {
[[noreturn]] void missing_kernel(std::string_view op, const backend::KernelTable& table);
}

template <typename Fn>
Fn require_kernel(Fn slot, std::string_view op, const backend::KernelTable& table) {
  if (!slot) detail::missing_kernel(op, table);
  return slot;
}

}  // namespace fluxrt::ops
