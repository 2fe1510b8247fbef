#pragma once
// The part of the CUDA backend visible without CUDA headers. With CUDA off, cuda_stub.cpp
// implements it and every entry point reports "built without CUDA".
#include <string>

namespace fluxrt::cuda {

bool built_with_cuda();
int device_count();  // 0 when no driver or no device is present
std::string device_name(int index);
// Throws Unsupported without CUDA, Device when the index is not present.
void require_device(int index);

}  // namespace fluxrt::cuda
