// Device discovery for the CUDA backend. Kernels and the kernel table follow in later files.
#include <cuda_runtime.h>

#include "backend/cuda_backend.h"
#include "core/error.h"

namespace fluxrt::cuda {

bool built_with_cuda() { return true; }

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
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return {};
  return prop.name;
}

void require_device(int index) {
  int n = device_count();
  FLUXRT_CHECK(index >= 0 && index < n, ErrorCode::Device, "CUDA device {} not present ({} found)",
               index, n);
}

}  // namespace fluxrt::cuda
