#include "ops/device_graph.h"

#include <atomic>

#include "backend/cuda_backend.h"
#include "core/error.h"

namespace fluxrt::ops {
namespace {
std::atomic<int64_t> g_replays{0};
std::atomic<int> g_stand_in_failure{-1};  // an ErrorCode, or -1
}  // namespace

void DeviceGraph::fail_next_stand_in_recording(ErrorCode code) { g_stand_in_failure.store(static_cast<int>(code)); }

bool DeviceGraph::available(Device device) {
  if (device.is_cpu()) return device.index >= 1;
  return cuda::built_with_cuda();
}

DeviceGraph DeviceGraph::record(Device device, std::function<void()> fn) {
  FLUXRT_CHECK(available(device), ErrorCode::Unsupported, "[graph] no recorded device work on {}", device.str());
  DeviceGraph g;
  if (device.is_cpu()) {
    const int failure = g_stand_in_failure.exchange(-1);
    if (failure >= 0) fail(static_cast<ErrorCode>(failure), "[graph] recording failed (injected by a test)");
    g.host_stand_in_ = std::move(fn);  // recording runs nothing, as on a GPU
  }
  else
    g.cuda_ = cuda::capture_graph(device.index, fn);
  return g;
}

void DeviceGraph::replay() const {
  FLUXRT_CHECK(cuda_ || host_stand_in_, ErrorCode::InvalidArgument, "[graph] replay of a graph never recorded");
  if (cuda_)
    cuda::launch_graph(*cuda_);
  else
    host_stand_in_();
  g_replays.fetch_add(1, std::memory_order_relaxed);
}

int64_t device_graph_replays() { return g_replays.load(std::memory_order_relaxed); }

}  // namespace fluxrt::ops
