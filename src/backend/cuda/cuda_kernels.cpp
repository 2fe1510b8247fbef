// The CUDA backend's kernel table. Slots are filled by the files that implement them
// (cuda_elementwise.cpp, cuda_linear.cpp, cuda_conv.cpp, cuda_attention.cpp,
// cuda_tile_blend.cpp); a null slot makes the ops layer run its composed fallback.
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/launch.h"
#include "backend/cuda_backend.h"
#include "core/tensor.h"

namespace fluxrt::cuda {

static_assert(kern::kMaxRank == kMaxDims, "launch.h mirrors core/tensor.h");

void fill_cuda_kernels(backend::KernelTable& t) {
  t.name = "cuda";
  fill_elementwise(t);
  fill_linear(t);
  fill_conv(t);
  fill_attention(t);
  fill_tile_blend(t);
}

const backend::KernelTable& cuda_kernels(int index) {
  require_device(index);
  static const backend::KernelTable table = [] {
    backend::KernelTable t;
    fill_cuda_kernels(t);
    return t;
  }();
  return table;
}

}  // namespace fluxrt::cuda
