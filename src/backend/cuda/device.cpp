// Device discovery, the per-device contexts and the registration of the device-memory hooks.
// The hooks are registered from this file's static initialiser: ops/dispatch.cpp calls
// cuda_kernels() from here, so any program that can dispatch to CUDA links this object file.
#include <cuda_runtime.h>

#include <array>
#include <unordered_set>
#include <utility>
#include <vector>
#include <memory>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda_backend.h"
#include "core/device_memory.h"
#include "core/error.h"

namespace fluxrt::cuda {

void* tensor_allocate(Device device, size_t bytes);  // memory.cpp
void tensor_release(Device device, void* ptr);
void tensor_copy(const Tensor& dst, const Tensor& src);
size_t tensor_free_bytes(Device device);
void tensor_fill(const Tensor& dst, double value);

namespace {

constexpr DeviceMemoryHooks kHooks{tensor_allocate, tensor_release, tensor_copy, tensor_free_bytes, tensor_fill};

const bool g_registered = [] {
  register_device_memory(DeviceType::CUDA, &kHooks);
  return true;
}();

constexpr int kMaxDevices = 16;
std::array<std::unique_ptr<DeviceContext>, kMaxDevices> g_contexts;
std::array<std::once_flag, kMaxDevices> g_context_once;

std::unique_ptr<DeviceContext> create_context(int index) {
  auto c = std::make_unique<DeviceContext>();
  c->index = index;
  FLUXRT_CUDA_CHECK(cudaSetDevice(index), "cudaSetDevice");
  cudaDeviceProp prop{};
  FLUXRT_CUDA_CHECK(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  c->sm_count = prop.multiProcessorCount;
  c->cc_major = prop.major;
  c->cc_minor = prop.minor;
  c->total_bytes = prop.totalGlobalMem;
  FLUXRT_CUDA_CHECK(cudaStreamCreateWithFlags(&c->default_stream, cudaStreamNonBlocking), "cudaStreamCreate");
  FLUXRT_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&c->pool, index), "cudaDeviceGetDefaultMemPool");
  // Keep freed blocks in the pool instead of returning them to the driver at every synchronise:
  // this is what makes cudaMallocAsync a caching allocator (memory.cpp trims it on OOM).
  uint64_t keep_all = UINT64_MAX;
  FLUXRT_CUDA_CHECK(cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrReleaseThreshold, &keep_all),
                    "cudaMemPoolSetAttribute");
  return c;
}

}  // namespace

void fail_cuda(cudaError_t status, std::string_view what) {
  // The runtime also keeps the error as the thread's last one; left there, the next launch that
  // asks (cudaGetLastError) would report it, failing whatever a caller does after catching this.
  cudaGetLastError();
  if (status == cudaErrorMemoryAllocation)
    fail(ErrorCode::OutOfMemory, "[{}] CUDA out of memory ({})", what, cudaGetErrorString(status));
  fail(ErrorCode::Device, "[{}] CUDA error {}: {}", what, cudaGetErrorName(status), cudaGetErrorString(status));
}

bool built_with_cuda() { return g_registered; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" status
    return 0;
  }
  return n;
}

std::string device_name(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return prop.name;
}

void require_device(int index) {
  int n = device_count();
  FLUXRT_CHECK(index >= 0 && index < n, ErrorCode::Device, "CUDA device {} not present ({} found)", index, n);
}

DeviceContext& context(int index) {
  FLUXRT_CHECK(index >= 0 && index < kMaxDevices, ErrorCode::Device, "CUDA device index {} out of range", index);
  // A throwing initialiser leaves the flag unset, so a later call retries (and fails the same way).
  std::call_once(g_context_once[index], [index] {
    require_device(index);
    g_contexts[index] = create_context(index);
  });
  make_current(index);
  return *g_contexts[index];
}

void make_current(int index) {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) cudaGetLastError();
  if (current != index) FLUXRT_CUDA_CHECK(cudaSetDevice(index), "cudaSetDevice");
}

namespace {
struct ThreadStream {
  int index = -1;
  cudaStream_t stream = nullptr;
  std::unordered_set<void*> allocations;  // made by this thread's recording
  std::vector<void*> deferred;            // older blocks it let go of (see defer_free)
};
thread_local ThreadStream t_stream;
}  // namespace

cudaStream_t DeviceContext::stream() const {
  return t_stream.index == index && t_stream.stream ? t_stream.stream : default_stream;
}

void set_thread_stream(int index, cudaStream_t s) { t_stream = s ? ThreadStream{index, s, {}, {}} : ThreadStream{}; }

void note_recorded_allocation(void* p) { t_stream.allocations.insert(p); }
bool forget_recorded_allocation(void* p) { return t_stream.allocations.erase(p) > 0; }
void defer_free(void* p) { t_stream.deferred.push_back(p); }
std::vector<void*> take_deferred_frees() { return std::exchange(t_stream.deferred, {}); }

void require_not_capturing(DeviceContext& c, std::string_view what) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  FLUXRT_CUDA_CHECK(cudaStreamIsCapturing(c.stream(), &status), "cudaStreamIsCapturing");
  FLUXRT_CHECK(status == cudaStreamCaptureStatusNone, ErrorCode::Device,
               "{} cannot run inside a CUDA graph recording (run the work once outside one first)", what);
}

void synchronize(int index) {
  DeviceContext& c = context(index);
  FLUXRT_CUDA_CHECK(cudaStreamSynchronize(c.stream()), "synchronize");
}

}  // namespace fluxrt::cuda
