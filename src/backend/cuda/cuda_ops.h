#pragma once
// Who fills which slots of the CUDA kernel table (cuda_kernels.cpp). One table serves every CUDA
// device: kernels find the device (and its stream) from their tensors.
#include "backend/kernel_table.h"

namespace fluxrt::cuda {

void fill_elementwise(backend::KernelTable& t);  // cuda_elementwise.cpp: element-wise, norms, VAE ops
void fill_linear(backend::KernelTable& t);       // cuda_linear.cpp: cuBLASLt
void fill_conv(backend::KernelTable& t);         // cuda_conv.cpp: cuDNN
void fill_attention(backend::KernelTable& t);    // cuda_attention.cpp
void fill_tile_blend(backend::KernelTable& t);   // cuda_tile_blend.cpp: the VAE's tiled passes

}  // namespace fluxrt::cuda
