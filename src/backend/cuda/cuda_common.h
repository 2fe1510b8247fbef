#pragma once
// Shared by the host side of the CUDA backend (.cpp files, compiled by g++; never by nvcc, see launch.h): error
// checks that turn CUDA status codes into fluxrt::Error, and the per-device context (one stream,
// the caching allocator's pool, library handles, pinned staging buffers).
//
// Ordering model: every kernel, copy, allocation and free of a device goes to that device's one
// stream, so stream order alone makes buffers safe to reuse (stream-ordered allocation) and no
// event juggling is needed. Host-visible results (downloads) synchronise the stream. The one
// exception is a thread recording a CUDA graph: its work goes to the recording's own stream (see
// DeviceContext::stream), and the recorded graph is then launched on the device's stream.
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>
#include <string_view>
#include <unordered_map>

#include "backend/cuda/launch.h"
#include "core/error.h"
#include "core/tensor.h"

namespace fluxrt::cuda {

// Throws Error(Device) "[what] CUDA error <name>: <text>".
[[noreturn]] void fail_cuda(cudaError_t status, std::string_view what);

#define FLUXRT_CUDA_CHECK(expr, what)                                 \
  do {                                                                \
    const cudaError_t fluxrt_cuda_status_ = (expr);                   \
    if (fluxrt_cuda_status_ != cudaSuccess) ::fluxrt::cuda::fail_cuda(fluxrt_cuda_status_, (what)); \
  } while (0)

// After a kernel launch: reports bad launch configurations at once (execution errors surface at
// the next synchronising call).
#define FLUXRT_CUDA_LAUNCHED(what) FLUXRT_CUDA_CHECK(cudaGetLastError(), (what))

struct DeviceContext {
  int index = 0;
  cudaStream_t default_stream = nullptr;  // the device's one stream
  // Where the calling thread's work on this device goes: default_stream, except while this thread
  // records a graph (graph.cpp), when it is that recording's private stream. Capture belongs to a
  // stream, not a thread: recording on the shared stream would also record (and not run) what
  // other threads queue on the device meanwhile.
  cudaStream_t stream() const;
  cudaMemPool_t pool = nullptr;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  size_t total_bytes = 0;

  // Caching allocator accounting (memory.cpp).
  std::mutex sizes_mutex;
  std::unordered_map<void*, size_t> sizes;
  std::atomic<size_t> in_use{0}, peak{0};

  // Pinned staging for host -> device uploads (memory.cpp): each upload in flight holds a set of
  // two buffers used in turn (the host memcpy into one overlaps the DMA out of the other); sets
  // not in use wait here, so concurrent uploads (components loaded in parallel) each copy from
  // their mapping into their own buffers instead of queueing for one pair.
  struct StagingSet {
    void* buffer[2] = {nullptr, nullptr};
    cudaEvent_t free[2] = {nullptr, nullptr};  // recorded after the DMA that last read each buffer
  };
  std::mutex staging_mutex;
  std::vector<std::unique_ptr<StagingSet>> staging_idle;

  // Library handles, created on first use by their files (linear.cpp, conv.cpp).
  std::mutex handles_mutex;
  void* cublaslt = nullptr;        // cublasLtHandle_t
  void* cublaslt_workspace = nullptr;
  size_t cublaslt_workspace_bytes = 0;
  void* cudnn = nullptr;           // cudnnHandle_t
  // cuDNN handles must not be used by two threads at once (concurrent requests' VAE passes on one
  // device): held from taking the handle until the convolution is queued.
  std::mutex cudnn_mutex;
};

// The context of device `index`, created on first use, made current on the calling thread.
// Throws Device when the index is not present. Every entry point takes the context of its tensors'
// device before it allocates, launches or uses a library handle, so cuda:N work never runs on
// whatever device the thread had current (streams, pools and handles belong to one device).
DeviceContext& context(int index);
// cudaSetDevice(index) unless it is current already (asks the runtime, so a device set elsewhere,
// by a library or the application, is never mistaken for ours).
void make_current(int index);
inline DeviceContext& context_of(const Tensor& t) { return context(t.device().index); }

// Every tensor handed to a CUDA kernel must live on a CUDA device (a host tensor would be an
// illegal address on the GPU, so this is checked even in release builds: it is one compare).
inline void require_on_device(const Tensor& t, std::string_view op, std::string_view name) {
  if (t.defined() && t.device().is_cpu())
    fail(ErrorCode::InvalidArgument, "[{}] {} is a host tensor but the kernel runs on CUDA", op, name);
}

// Sends the calling thread's work on device `index` to `s` (nullptr: back to the device's stream).
// Only graph.cpp's recording uses it.
void set_thread_stream(int index, cudaStream_t s);
// Blocks allocated by the calling thread's current recording: a recording may free only those on
// its own stream (memory.cpp frees any other block on the device's stream).
void note_recorded_allocation(void* p);
bool forget_recorded_allocation(void* p);  // true when p was one (and is no longer tracked)
// An older block the recording lets go of may still be read by the graph at every replay: it is
// kept (not freed) until the graph goes (graph.cpp takes them with take_deferred_frees).
void defer_free(void* p);
std::vector<void*> take_deferred_frees();

// Long-lived buffers made on first use (library workspaces, widened weights) must not be made
// while the device's stream records a CUDA graph: the allocation would belong to the graph. The
// pipelines run a step directly before recording one, so this only fails for a new use inside a
// recording, with Error(Device) naming `what` (the recording then falls back to direct steps).
void require_not_capturing(DeviceContext& c, std::string_view what);

// Waits for the device's stream and gives what the pool caches unused, and graph memory no graph
// holds, back to the driver (memory.cpp): the first step of the out-of-memory path.
void trim_cached_memory(DeviceContext& c);

// Device memory from the caching allocator (memory.cpp), for kernel scratch.
void* device_allocate(int index, size_t bytes);
void device_release(int index, void* ptr);

// A scratch buffer that goes back to the pool (stream-ordered) when it leaves scope.
class Scratch {
 public:
  Scratch(int index, size_t bytes) : index_(index), ptr_(device_allocate(index, bytes)) {}
  ~Scratch() { device_release(index_, ptr_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  int index_;
  void* ptr_;
};

// A tensor (any rank, last dim = columns) as a kernel operand; undefined -> absent operand.
kern::Operand operand(const Tensor& t, int64_t row_div = 1);
// A 1-D vector (stride any) read per column.
kern::Operand column_vector(const Tensor& t);
// True when every row of t starts 16-byte aligned and holds whole 8-element vectors with unit
// stride (the condition for the kernels' 16-byte vector loads).
bool vector_friendly(const Tensor& t);

// A row-major matrix operand of gemm (unit column stride): data, dtype, row stride in elements.
struct GemmOperand {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t ld = 0;
};
// cuBLASLt (cuda_linear.cpp): row-major y[M, N] = alpha * x[M, K] W' with f32 accumulation (f32
// inputs: no TF32), W' = W^T for w_nk (W is [N, K]) else W itself ([K, N]); y in out_type with
// row stride ld_out; epilogue_code a cublasLtEpilogue_t (0 = none) with its bias. False, with
// nothing queued, when cuBLASLt has no algorithm for the configuration. Algorithms are cached.
bool gemm(DeviceContext& c, int64_t M, int64_t N, int64_t K, const GemmOperand& x, const GemmOperand& w, bool w_nk,
          float alpha, void* out, DType out_type, int64_t ld_out, int epilogue_code = 0,
          const Tensor& bias = Tensor());

// Device-to-device copy with dtype conversion between any two same-shape views on one device
// (copy.cu). f8 types are not converted on the device.
void copy_on_device(const Tensor& dst, const Tensor& src);

}  // namespace fluxrt::cuda
