#pragma once
// The part of the CUDA backend visible without CUDA headers. With CUDA off, cuda_stub.cpp
// implements it and every entry point that needs a GPU reports "built without CUDA".
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "backend/kernel_table.h"

namespace fluxrt::cuda {

bool built_with_cuda();
int device_count();  // 0 when no driver or no device is present
std::string device_name(int index);
// Throws Unsupported without CUDA, Device when the index is not present.
void require_device(int index);

// The CUDA kernel table (src/backend/cuda/cuda_kernels.cpp). Throws like require_device(index).
const backend::KernelTable& cuda_kernels(int index);

// Attention with options, for tests and benchmarks (the table slot runs force_online = false).
// With `stats`, counts the query rows that ran the exact online maximum: all of them with a bias
// or force_online, else those whose fixed Cauchy-Schwarz bound was too loose (this synchronises).
// tensor_core_rows: rows that ran the tensor-core kernel (FLUX shapes, FLUXRT_CUDA_ATTENTION=tc).
struct AttentionStats {
  int64_t calls = 0, rows = 0, fallback_rows = 0, online_rows = 0, tensor_core_rows = 0;
  int64_t gemm_rows = 0;  // rows done by the GEMM-composed path (wide heads without RoPE)
};
void attention(const backend::AttentionArgs& args, bool force_online, AttentionStats* stats);

// Waits until every kernel and copy queued on the device's stream has finished; surfaces
// asynchronous kernel errors as Error(Device). Benchmarks call it before reading a clock.
void synchronize(int index);

// A CUDA graph: the device work `fn` queues on device `index`, recorded (stream capture on a
// stream of the recording's own, so other threads' work on the device keeps running; nothing of
// `fn`'s runs) and instantiated with its memory mapped, to be launched later with launch_graph.
// Allocations made inside `fn` become the graph's own (cudaMallocAsync nodes) and must be freed
// inside it; memory `fn` reads or writes from outside must stay alive while the graph exists. `fn`
// must not synchronise, upload or download, and must not be the first use of a library handle or
// lazily made buffer: run the same work once eagerly first. Throws Device (naming the CUDA error)
// when recording fails, OutOfMemory when the device has no room for the graph's memory.
struct Graph;
std::shared_ptr<Graph> capture_graph(int index, const std::function<void()>& fn);
// Queues one replay of `graph` on its device's stream (asynchronous, like a kernel launch).
void launch_graph(const Graph& graph);

// Caching allocator figures for the timing report: bytes handed out to tensors now, the
// high-water mark since the last reset, and what the driver reports free / total.
struct MemoryStats {
  size_t in_use = 0, peak = 0, device_free = 0, device_total = 0;
};
MemoryStats memory_stats(int index);
void reset_peak_memory(int index);

}  // namespace fluxrt::cuda
