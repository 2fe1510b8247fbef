#pragma once
// Device work recorded once and replayed with one launch: what removes a denoising step's
// hundreds of kernel launches from the host's critical path on a GPU (a CUDA graph on cuda:N).
//
// The recorded function must read and write only device memory that outlives the graph (fixed
// input / output buffers, weights) and keep its intermediates inside it; a replay repeats exactly
// the recorded kernels on the buffers' current contents. Anything the host computes inside the
// function (a scalar kernel argument, a shape) is frozen at recording time.
//
// On the host placement-check devices cpu:N (N >= 1) a stand-in keeps the function and runs it
// again at every replay, so the callers' buffer handling (copy in, replay, read out) is tested
// without a GPU. Plain cpu has no graphs: callers run their work directly there.
#include <functional>
#include <memory>

#include "core/device.h"
#include "core/error.h"

namespace fluxrt::cuda {
struct Graph;
}

namespace fluxrt::ops {

class DeviceGraph {
 public:
  // Whether record() works on `device`: cuda:N in a CUDA build, and cpu:N for N >= 1.
  static bool available(Device device);
  // Records `fn`'s work on `device` without running it (on cuda:N: stream capture; see
  // cuda::capture_graph for what `fn` must not do). Throws Device when recording fails, and
  // Unsupported when !available(device).
  static DeviceGraph record(Device device, std::function<void()> fn);

  // Tests of the callers' fallback: the next record() on a host stand-in (cpu:N) throws an Error
  // with `code`, as a failed stream capture (Device) or a graph too big for the device
  // (OutOfMemory) does on a GPU.
  static void fail_next_stand_in_recording(ErrorCode code);

  // Queues one replay (asynchronous on a GPU, like a kernel launch).
  void replay() const;

 private:
  std::shared_ptr<cuda::Graph> cuda_;
  std::function<void()> host_stand_in_;
};

// Replays of any DeviceGraph in this process (tests check that a path really replayed).
int64_t device_graph_replays();

}  // namespace fluxrt::ops
