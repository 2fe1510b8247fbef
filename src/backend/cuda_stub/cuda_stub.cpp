// Linked when fluxrt is built without CUDA: the backend reports itself unavailable and any attempt
// to use it names the reason.
#include "backend/cuda_backend.h"

#include "core/error.h"

namespace fluxrt::cuda {

bool built_with_cuda() { return false; }
int device_count() { return 0; }
std::string device_name(int) { return {}; }
void require_device(int) { fail(ErrorCode::Unsupported, "built without CUDA"); }
const backend::KernelTable& cuda_kernels(int) { fail(ErrorCode::Unsupported, "built without CUDA"); }
void attention(const backend::AttentionArgs&, bool, AttentionStats*) {
  fail(ErrorCode::Unsupported, "built without CUDA");
}
void synchronize(int) { fail(ErrorCode::Unsupported, "built without CUDA"); }
struct Graph {};
std::shared_ptr<Graph> capture_graph(int, const std::function<void()>&) { fail(ErrorCode::Unsupported, "built without CUDA"); }
void launch_graph(const Graph&) { fail(ErrorCode::Unsupported, "built without CUDA"); }
MemoryStats memory_stats(int) { return {}; }
void reset_peak_memory(int) {}

}  // namespace fluxrt::cuda
