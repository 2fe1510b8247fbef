// CUDA graphs for a recorded denoising step (ops::DeviceGraph): stream capture of the work a
// function queues on the device's stream, instantiated once and launched per step.
//
// Why capture works with this backend's allocator: every tensor allocation is cudaMallocAsync on
// the context's stream (memory.cpp), which during capture becomes an allocation node owned by the
// graph, and the matching cudaFreeAsync a free node. The caller keeps the recorded function's
// intermediates inside it (only its fixed input / output buffers live outside), so the graph frees
// everything it allocates and can be launched any number of times.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda_backend.h"
#include "core/error.h"

namespace fluxrt::cuda {

struct Graph {
  int index = 0;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;

  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() {
    // A launch may still be running: wait for the stream before the executable goes (the graph's
    // own memory is returned with it). Errors are ignored: destructors must not throw.
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess) cudaGetLastError();
    if (cudaSetDevice(index) == cudaSuccess) {
      try {
        if (cudaStreamSynchronize(context(index).stream) != cudaSuccess) cudaGetLastError();
      } catch (const Error&) {
      }
    }
    if (exec && cudaGraphExecDestroy(exec) != cudaSuccess) cudaGetLastError();
    if (graph && cudaGraphDestroy(graph) != cudaSuccess) cudaGetLastError();
    if (previous >= 0 && previous != index && cudaSetDevice(previous) != cudaSuccess) cudaGetLastError();
  }
};

std::shared_ptr<Graph> capture_graph(int index, const std::function<void()>& fn) {
  DeviceContext& c = context(index);  // makes the device current
  auto g = std::make_shared<Graph>();
  g->index = index;
  // Thread-local mode: only this thread's unsafe calls (a synchronous copy, cudaMalloc) break the
  // recording; other threads may keep working on other streams.
  FLUXRT_CUDA_CHECK(cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeThreadLocal), "graph: begin capture");
  try {
    fn();
  } catch (...) {
    cudaGraph_t partial = nullptr;
    if (cudaStreamEndCapture(c.stream, &partial) != cudaSuccess) cudaGetLastError();
    if (partial) cudaGraphDestroy(partial);
    throw;
  }
  const cudaError_t ended = cudaStreamEndCapture(c.stream, &g->graph);
  if (ended != cudaSuccess) {
    cudaGetLastError();
    fail(ErrorCode::Device,
         "[graph] recording the step failed: {} ({}); an op synchronised, downloaded or uploaded from pageable "
         "memory inside it",
         cudaGetErrorName(ended), cudaGetErrorString(ended));
  }
  FLUXRT_CUDA_CHECK(cudaGraphInstantiate(&g->exec, g->graph, 0), "graph: instantiate");
  return g;
}

void launch_graph(const Graph& graph) {
  DeviceContext& c = context(graph.index);
  FLUXRT_CUDA_CHECK(cudaGraphLaunch(graph.exec, c.stream), "graph: launch");
}

}  // namespace fluxrt::cuda
