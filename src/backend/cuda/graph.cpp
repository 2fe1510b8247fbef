// CUDA graphs for a recorded denoising step (ops::DeviceGraph): stream capture of the work a
// function queues on the device's stream, instantiated once and launched per step.
//
// Why capture works with this backend's allocator: every tensor allocation is cudaMallocAsync on
// the context's stream (memory.cpp), which during capture becomes an allocation node owned by the
// graph, and the matching cudaFreeAsync a free node. The caller keeps the recorded function's
// intermediates inside it (only its fixed input / output buffers live outside), so the graph frees
// everything it allocates and can be launched any number of times.
#include <cuda_runtime.h>

#include <vector>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda_backend.h"
#include "core/error.h"

namespace fluxrt::cuda {

struct Graph {
  int index = 0;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::vector<void*> deferred;  // blocks from before the recording it let go of: freed with the graph

  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() {
    // No wait for a launch in flight: the driver frees an executable in use once its work is done,
    // and the deferred blocks are freed on the stream the graph was launched on, after it. The
    // graph memory it leaves unused stays with the graph allocator (counted as free by
    // tensor_free_bytes, trimmed on out-of-memory): trimming here would also unmap the memory of
    // the other kept graphs. Errors are ignored: destructors must not throw.
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess) cudaGetLastError();
    if (exec && cudaGraphExecDestroy(exec) != cudaSuccess) cudaGetLastError();
    if (graph && cudaGraphDestroy(graph) != cudaSuccess) cudaGetLastError();
    for (void* p : deferred) device_release(index, p);
    if (previous >= 0 && previous != index && cudaSetDevice(previous) != cudaSuccess) cudaGetLastError();
  }
};

namespace {

// The recording's own stream, this thread's stream for the device while it lives (see
// DeviceContext::stream): other threads' work on the device keeps running on the device's stream
// instead of being recorded. Nothing ever executes on it, so it is destroyed at once.
class RecordingStream {
 public:
  explicit RecordingStream(int index) : index_(index) {
    FLUXRT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "graph: recording stream");
    set_thread_stream(index_, stream_);
  }
  ~RecordingStream() {
    set_thread_stream(index_, nullptr);
    if (cudaStreamDestroy(stream_) != cudaSuccess) cudaGetLastError();
  }
  RecordingStream(const RecordingStream&) = delete;
  RecordingStream& operator=(const RecordingStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  int index_;
  cudaStream_t stream_ = nullptr;
};

// A call that maps graph memory (an upload, a launch of a graph whose memory was trimmed): when the
// device has no room, what the pool caches goes back to the driver (it still holds the direct
// step's intermediates, the sizes the graph needs) and the call is tried once more.
template <typename Call>
void map_graph_memory(DeviceContext& c, Call call, const char* what) {
  cudaError_t status = call();
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    trim_cached_memory(c);
    status = call();
  }
  FLUXRT_CUDA_CHECK(status, what);
}

}  // namespace

std::shared_ptr<Graph> capture_graph(int index, const std::function<void()>& fn) {
  DeviceContext& c = context(index);  // makes the device current
  auto g = std::make_shared<Graph>();
  g->index = index;
  cudaError_t ended = cudaSuccess;
  {
    RecordingStream recording(index);
    // Thread-local mode: this thread's unsafe calls (a synchronous copy, cudaMalloc) break the
    // recording; other threads' calls are theirs (and their work goes to the device's stream).
    FLUXRT_CUDA_CHECK(cudaStreamBeginCapture(recording.get(), cudaStreamCaptureModeThreadLocal),
                      "graph: begin capture");
    try {
      fn();
    } catch (...) {
      cudaGraph_t partial = nullptr;
      if (cudaStreamEndCapture(recording.get(), &partial) != cudaSuccess) cudaGetLastError();
      if (partial && cudaGraphDestroy(partial) != cudaSuccess) cudaGetLastError();
      g->deferred = take_deferred_frees();  // freed by ~Graph, once this thread records no more
      throw;
    }
    ended = cudaStreamEndCapture(recording.get(), &g->graph);
    g->deferred = take_deferred_frees();
  }
  if (ended != cudaSuccess) {
    cudaGetLastError();
    fail(ErrorCode::Device,
         "[graph] recording the step failed: {} ({}); an op synchronised, downloaded or uploaded inside it",
         cudaGetErrorName(ended), cudaGetErrorString(ended));
  }
  FLUXRT_CUDA_CHECK(cudaGraphInstantiate(&g->exec, g->graph, 0), "graph: instantiate");
  // Mapped now, so a device too full for the graph fails here (the step then runs directly) rather
  // than at a replay.
  map_graph_memory(c, [&] { return cudaGraphUpload(g->exec, c.default_stream); }, "graph: upload");
  return g;
}

void launch_graph(const Graph& graph) {
  DeviceContext& c = context(graph.index);
  // A kept graph whose memory was trimmed (to make room for something else) maps it again here.
  map_graph_memory(c, [&] { return cudaGraphLaunch(graph.exec, c.default_stream); }, "graph: launch");
}

}  // namespace fluxrt::cuda
