// Device memory for tensors: a stream-ordered caching allocator on the device's default
// cudaMemPool (freed blocks stay cached in the pool, see device.cpp), and the copies between host
// and device behind Tensor::copy_from. Uploads of large host buffers (weights straight from the
// safetensors mapping) go through pinned staging buffers, two per upload in flight, so the host-side
// memcpy of one chunk overlaps the DMA of the previous one and concurrent uploads copy side by side.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda_backend.h"
#include "core/device_memory.h"
#include "core/log.h"

namespace fluxrt::cuda {
namespace {

constexpr size_t kStagingChunk = size_t{32} << 20;  // per buffer; two of them
constexpr size_t kDirectCopyLimit = size_t{1} << 20;  // below this the driver's own staging is fine

double gib(size_t bytes) { return static_cast<double>(bytes) / static_cast<double>(size_t{1} << 30); }

void note_alloc(DeviceContext& c, void* p, size_t bytes) {
  {
    std::lock_guard lock(c.sizes_mutex);
    c.sizes[p] = bytes;
  }
  const size_t now = c.in_use.fetch_add(bytes) + bytes;
  size_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
}

[[noreturn]] void fail_oom(DeviceContext& c, size_t bytes) {
  size_t free_bytes = 0, total_bytes = 0;
  make_current(c.index);  // cudaMemGetInfo reports the current device
  cudaMemGetInfo(&free_bytes, &total_bytes);
  cudaGetLastError();
  fail(ErrorCode::OutOfMemory,
       "out of CUDA memory on cuda:{}: asked {} bytes ({:.2f} GiB), {:.2f} GiB free of {:.2f} GiB, {:.2f} GiB held by "
       "fluxrt tensors",
       c.index, bytes, gib(bytes), gib(free_bytes), gib(total_bytes), gib(c.in_use.load()));
}

// A staging set for one upload: an idle one of the device, or a new one (pinned buffers are
// allocated once and kept for the process: at most one set per upload ever in flight at once).
std::unique_ptr<DeviceContext::StagingSet> take_staging(DeviceContext& c) {
  {
    std::lock_guard lock(c.staging_mutex);
    if (!c.staging_idle.empty()) {
      std::unique_ptr<DeviceContext::StagingSet> set = std::move(c.staging_idle.back());
      c.staging_idle.pop_back();
      return set;
    }
  }
  auto set = std::make_unique<DeviceContext::StagingSet>();
  try {
    // Events never recorded stand for no work: the first wait on each returns at once. Blocking
    // waits: a loader thread waiting for its DMA sleeps instead of spinning on a core the other
    // loaders' host copies need (a 32 MiB chunk's DMA takes milliseconds; waking costs microseconds).
    for (int i = 0; i < 2; ++i) {
      FLUXRT_CUDA_CHECK(cudaHostAlloc(&set->buffer[i], kStagingChunk, cudaHostAllocDefault), "pinned staging buffer");
      FLUXRT_CUDA_CHECK(cudaEventCreateWithFlags(&set->free[i], cudaEventDisableTiming | cudaEventBlockingSync),
                        "staging event");
    }
  } catch (const Error&) {
    for (int i = 0; i < 2; ++i) {
      if (set->buffer[i] && cudaFreeHost(set->buffer[i]) != cudaSuccess) cudaGetLastError();
      if (set->free[i] && cudaEventDestroy(set->free[i]) != cudaSuccess) cudaGetLastError();
    }
    throw;
  }
  return set;
}

// Host -> device bytes through a pinned staging set. Uploads from several threads share the
// device's stream (their DMAs run in queue order) but not their buffers, so their host copies
// (the page faults of a fresh mapping included) run side by side.
void upload_staged(DeviceContext& c, void* dst, const void* src, size_t bytes) {
  std::unique_ptr<DeviceContext::StagingSet> set = take_staging(c);
  struct GiveBack {  // also when a step below throws: the set's events stay valid
    DeviceContext& c;
    std::unique_ptr<DeviceContext::StagingSet>& set;
    ~GiveBack() {
      std::lock_guard lock(c.staging_mutex);
      c.staging_idle.push_back(std::move(set));
    }
  } give_back{c, set};
  const char* from = static_cast<const char*>(src);
  char* to = static_cast<char*>(dst);
  int turn = 0;
  for (size_t done = 0; done < bytes; done += kStagingChunk, turn ^= 1) {
    const size_t n = std::min(kStagingChunk, bytes - done);
    // Wait until the DMA that last read this buffer has finished, then refill it.
    FLUXRT_CUDA_CHECK(cudaEventSynchronize(set->free[turn]), "upload");
    std::memcpy(set->buffer[turn], from + done, n);
    FLUXRT_CUDA_CHECK(cudaMemcpyAsync(to + done, set->buffer[turn], n, cudaMemcpyHostToDevice, c.stream()), "upload");
    FLUXRT_CUDA_CHECK(cudaEventRecord(set->free[turn], c.stream()), "upload");
  }
}

void upload_bytes(DeviceContext& c, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  // Recorded, a copy from host memory would replay whatever that memory holds later (a staging
  // buffer reused by the next upload): graphs take their inputs in device buffers instead.
  require_not_capturing(c, "[upload] a host-to-device copy");
  if (bytes < kDirectCopyLimit) {
    // Pageable source: the driver copies it to its own staging memory before returning, so the
    // caller may free `src` at once.
    FLUXRT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c.stream()), "upload");
    return;
  }
  upload_staged(c, dst, src, bytes);
}

void download_bytes(DeviceContext& c, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  require_not_capturing(c, "[download] a device-to-host copy");
  FLUXRT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c.stream()), "download");
  FLUXRT_CUDA_CHECK(cudaStreamSynchronize(c.stream()), "download");
}

// Host tensor -> device tensor (same shape): the host side does layout and dtype conversion
// (PyTorch-exact, core/dtype.h), the device receives one contiguous block.
void host_to_device(const Tensor& dst, const Tensor& src) {
  DeviceContext& c = context_of(dst);
  Tensor host = src;
  if (src.dtype() != dst.dtype() || !src.is_contiguous()) {
    host = Tensor::empty(src.shape(), dst.dtype());
    host.copy_from(src);
  }
  if (dst.is_contiguous()) {
    upload_bytes(c, dst.raw_data(), host.raw_data(), host.nbytes());
    return;
  }
  Tensor staging = Tensor::empty(dst.shape(), dst.dtype(), dst.device());
  upload_bytes(c, staging.raw_data(), host.raw_data(), host.nbytes());
  copy_on_device(dst, staging);
}

void device_to_host(const Tensor& dst, const Tensor& src) {
  DeviceContext& c = context_of(src);
  const Tensor packed = src.is_contiguous() ? src : src.contiguous();  // a device-side copy
  if (dst.is_contiguous() && dst.dtype() == src.dtype()) {
    download_bytes(c, dst.raw_data(), packed.raw_data(), packed.nbytes());
    return;
  }
  Tensor host = Tensor::empty(src.shape(), src.dtype());
  download_bytes(c, host.raw_data(), packed.raw_data(), packed.nbytes());
  Tensor view = dst;  // Tensor is a handle: copying it shares the storage
  view.copy_from(host);
}

}  // namespace

void trim_cached_memory(DeviceContext& c) {
  FLUXRT_CUDA_CHECK(cudaStreamSynchronize(c.default_stream), "allocate");
  if (cudaDeviceGraphMemTrim(c.index) != cudaSuccess) cudaGetLastError();
  if (cudaMemPoolTrimTo(c.pool, 0) != cudaSuccess) cudaGetLastError();
}

void* device_allocate(int index, size_t bytes) {
  DeviceContext& c = context(index);
  const size_t rounded = std::max<size_t>((bytes + 255) / 256 * 256, 256);
  void* p = nullptr;
  // Out of memory: wait for the queued frees, give the pool's cached blocks (and the graph memory
  // of dropped graphs) back to the driver, and retry.
  auto trim_and_retry = [&] {
    cudaGetLastError();
    trim_cached_memory(c);
    return cudaMallocAsync(&p, rounded, c.pool, c.stream());
  };
  cudaError_t status = cudaMallocAsync(&p, rounded, c.pool, c.stream());
  // First what the pool caches (freed blocks of the wrong sizes), then what the memory caches hold
  // (kept step graphs, core/device_memory.h), each followed by one retry.
  if (status == cudaErrorMemoryAllocation) status = trim_and_retry();
  if (status == cudaErrorMemoryAllocation && reclaim_device_memory(Device::cuda(index))) status = trim_and_retry();
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    fail_oom(c, bytes);
  }
  FLUXRT_CUDA_CHECK(status, "cudaMallocAsync");
  note_alloc(c, p, rounded);
  if (c.stream() != c.default_stream) note_recorded_allocation(p);
  return p;
}

namespace {

// Stream-ordered: the block is reused only by work queued after every kernel that used it. A
// recording may free only what it allocated (a free node of the graph); a block from before it
// may be read by every replay, so it is freed when the graph goes (defer_free).
void free_block(DeviceContext& c, void* ptr) {
  bool recorded = false;
  if (c.stream() != c.default_stream) {
    recorded = forget_recorded_allocation(ptr);
    if (!recorded) {
      defer_free(ptr);
      return;
    }
  }
  const cudaError_t freed = cudaFreeAsync(ptr, c.stream());
  if (freed != cudaSuccess) cudaGetLastError();
  // A recorded block whose free failed (the recording broke before it) never had memory of its own.
  if (freed != cudaSuccess && !recorded) {
    // At exit the runtime may be gone already; anything else is a block lost, kept in the stats.
    if (freed != cudaErrorCudartUnloading)
      FLUXRT_LOG_WARN("[cuda] freeing a block on cuda:{} failed: {}", c.index, cudaGetErrorString(freed));
    return;
  }
  size_t bytes = 0;
  {
    std::lock_guard lock(c.sizes_mutex);
    auto it = c.sizes.find(ptr);
    if (it != c.sizes.end()) {
      bytes = it->second;
      c.sizes.erase(it);
    }
  }
  c.in_use.fetch_sub(bytes);
}

}  // namespace

void device_release(int index, void* ptr) {
  if (!ptr) return;
  // A release runs from destructors, often in the middle of another device's op (a temporary of
  // cuda:0 dropped while cuda:1 works): free on the block's device, then give the thread back the
  // device it had, so the op's next launch still goes to its own device.
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) cudaGetLastError();
  try {
    free_block(context(index), ptr);
  } catch (const Error&) {
    // Destructors must not throw; a failed free at exit leaks nothing the process keeps.
  }
  if (previous >= 0 && previous != index && cudaSetDevice(previous) != cudaSuccess) cudaGetLastError();
}

size_t tensor_free_bytes(Device device) {
  DeviceContext& c = context(device.index);
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  // The pool keeps freed blocks (release threshold = max), and the graph allocator the memory of
  // graphs that no longer use it: the driver counts both as used, but they are free for our
  // tensors all the same (the allocator trims them when it needs them).
  auto unused = [](cudaError_t a, cudaError_t b, uint64_t reserved, uint64_t used) -> size_t {
    if (a != cudaSuccess || b != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return static_cast<size_t>(reserved > used ? reserved - used : 0);
  };
  uint64_t reserved = 0, used = 0, graph_reserved = 0, graph_used = 0;
  free_bytes += unused(cudaMemPoolGetAttribute(c.pool, cudaMemPoolAttrReservedMemCurrent, &reserved),
                       cudaMemPoolGetAttribute(c.pool, cudaMemPoolAttrUsedMemCurrent, &used), reserved, used);
  free_bytes += unused(cudaDeviceGetGraphMemAttribute(c.index, cudaGraphMemAttrReservedMemCurrent, &graph_reserved),
                       cudaDeviceGetGraphMemAttribute(c.index, cudaGraphMemAttrUsedMemCurrent, &graph_used),
                       graph_reserved, graph_used);
  return free_bytes;
}

void* tensor_allocate(Device device, size_t bytes) { return device_allocate(device.index, bytes); }
void tensor_release(Device device, void* ptr) { device_release(device.index, ptr); }

void tensor_copy(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  const bool dst_dev = !dst.device().is_cpu(), src_dev = !src.device().is_cpu();
  if (dst_dev && src_dev) {
    if (dst.device() == src.device()) {
      copy_on_device(dst, src);
      return;
    }
    // Across devices: through the host (rare: multi-GPU placement moves whole components once).
    Tensor host = Tensor::empty(src.shape(), src.dtype());
    device_to_host(host, src);
    host_to_device(dst, host);
    return;
  }
  if (dst_dev)
    host_to_device(dst, src);
  else
    device_to_host(dst, src);
}

// On the device, without an upload: the value is converted once on the host (Tensor::full, the
// exact host conversion) and its bits are written by a kernel, or by a memset when they are zero
// and dst is one block. Nothing reads host memory later, so a fill may also run inside a recorded
// graph.
void tensor_fill(const Tensor& dst, double value) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  DeviceContext& c = context_of(dst);
  const Tensor one = Tensor::full({}, dst.dtype(), value);
  uint64_t pattern = 0;
  std::memcpy(&pattern, one.raw_data(), dst.element_size());
  if (pattern == 0 && dst.is_contiguous()) {
    FLUXRT_CUDA_CHECK(cudaMemsetAsync(dst.raw_data(), 0, dst.nbytes(), c.stream()), "cuda fill");
    return;
  }
  kern::CopyLayout l;
  l.rank = dst.dim();
  for (int i = 0; i < l.rank; ++i) {
    l.extent[i] = dst.size(i);
    l.dst_stride[i] = dst.stride(i);
  }
  FLUXRT_CUDA_CHECK(kern::fill_strided(dst.raw_data(), dst.element_size(), pattern, l, n, c.stream(), c.sm_count),
                    "cuda fill");
}

MemoryStats memory_stats(int index) {
  DeviceContext& c = context(index);
  MemoryStats s;
  s.in_use = c.in_use.load();
  s.peak = c.peak.load();
  if (cudaMemGetInfo(&s.device_free, &s.device_total) != cudaSuccess) cudaGetLastError();
  return s;
}

void reset_peak_memory(int index) {
  DeviceContext& c = context(index);
  c.peak.store(c.in_use.load());
}

}  // namespace fluxrt::cuda

namespace fluxrt::cuda {

kern::Operand operand(const Tensor& t, int64_t row_div) {
  kern::Operand o;
  if (!t.defined()) return o;
  o.data = t.raw_data();
  o.dtype = t.dtype();
  o.row_div = row_div;
  const int n = t.dim();
  for (int i = 0; i + 1 < n; ++i) {
    o.rows.extent[o.rows.lead] = t.size(i);
    o.rows.stride[o.rows.lead++] = t.stride(i);
  }
  o.rows.col_stride = n ? t.stride(-1) : 1;
  return o;
}

kern::Operand column_vector(const Tensor& t) {
  kern::Operand o;
  if (!t.defined()) return o;
  o.data = t.raw_data();
  o.dtype = t.dtype();
  o.rows.col_stride = t.dim() ? t.stride(-1) : 1;
  return o;
}

bool vector_friendly(const Tensor& t) {
  if (!t.defined()) return true;
  // load8/store8 know these three: 8 elements in one (16-bit) or two (f32) 16-byte accesses.
  if (t.dtype() != DType::F32 && t.dtype() != DType::BF16 && t.dtype() != DType::F16) return false;
  if (t.dim() == 0 || t.stride(-1) != 1 || t.size(-1) % 8 != 0) return false;
  if (reinterpret_cast<uintptr_t>(t.raw_data()) % 16 != 0) return false;
  for (int i = 0; i + 1 < t.dim(); ++i)
    if (t.size(i) > 1 && t.stride(i) % 8 != 0) return false;
  return true;
}

void copy_on_device(const Tensor& dst, const Tensor& src) {
  FLUXRT_CHECK(dst.shape() == src.shape(), ErrorCode::InvalidArgument, "[cuda copy] shape {} into {}",
               src.shape().str(), dst.shape().str());
  const int64_t n = dst.numel();
  if (n == 0) return;
  DeviceContext& c = context_of(dst);
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    FLUXRT_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(), cudaMemcpyDeviceToDevice, c.stream()),
                      "cuda copy");
    return;
  }
  // The device widens fp8 exactly but has no rounding into it.
  auto is_f8 = [](DType d) { return d == DType::F8E4M3 || d == DType::F8E5M2; };
  FLUXRT_CHECK(dst.dtype() == src.dtype() || !is_f8(dst.dtype()), ErrorCode::Unsupported,
               "[cuda copy] {} -> {} is not converted on the device (convert on the host)", dtype_name(src.dtype()),
               dtype_name(dst.dtype()));
  kern::CopyLayout l;
  l.rank = dst.dim();
  for (int i = 0; i < l.rank; ++i) {
    l.extent[i] = dst.size(i);
    l.dst_stride[i] = dst.stride(i);
    l.src_stride[i] = src.stride(i);
  }
  FLUXRT_CUDA_CHECK(kern::copy_strided(dst.raw_data(), dst.dtype(), src.raw_data(), src.dtype(), l, n, c.stream(),
                                       c.sm_count),
                    "cuda copy");
}

}  // namespace fluxrt::cuda
