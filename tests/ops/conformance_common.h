#pragma once
// Shared machinery of the op conformance tests (tests/ops/test_conformance_*.cpp): the backends to
// check against ref, parameter structs whose names print every parameter, and helpers to run an op
// under a chosen kernel table.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/cuda_backend.h"
#include "backend/kernel_table.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/dispatch.h"
#include "support/compare.h"
#include "support/random_tensor.h"

namespace fluxrt::test {

// Backends checked against ref by these host-tensor tests. CUDA kernels need device tensors, so
// the CUDA table is checked by tests/ops/test_cuda_conformance_gpu.cpp (same tolerances), not here.
inline std::vector<std::string> conformance_backends() { return {"cpu"}; }

inline const backend::KernelTable& table_named(const std::string& name) {
  if (name == "ref") return backend::ref_kernels();
  if (name == "cpu") return backend::cpu_kernels();
  return backend::kernels_for(Device::cuda(0));
}

struct OpCase {
  std::string backend = "cpu";
  DType dtype = DType::F32;
  std::vector<int64_t> dims;
  std::vector<std::string> dim_names;  // printed before each extent: {"B", "L", "D"}
  std::string variant;                 // "", "strided", "inplace", "silu", ...
  Shape shape() const { return Shape(dims); }
};

inline void PrintTo(const OpCase& c, std::ostream* os) {
  *os << c.backend << " " << dtype_name(c.dtype) << " " << Shape(c.dims).str() << " " << c.variant;
}

inline std::string case_name(const ::testing::TestParamInfo<OpCase>& info) {
  const OpCase& c = info.param;
  std::string s = c.backend + "_" + std::string(dtype_name(c.dtype));
  for (size_t i = 0; i < c.dims.size(); ++i) {
    if (i < c.dim_names.size()) s += "_" + c.dim_names[i] + std::to_string(c.dims[i]);
    else s += (i == 0 ? "_" : "x") + std::to_string(c.dims[i]);  // unnamed dims: 2x3x5
  }
  if (!c.variant.empty()) s += "_" + c.variant;
  return s;
}

// Every backend x dtype for each shape and variant.
inline std::vector<OpCase> make_cases(const std::vector<std::vector<int64_t>>& shapes,
                                      const std::vector<std::string>& dim_names,
                                      const std::vector<DType>& dtypes = {DType::F32, DType::BF16, DType::F16},
                                      const std::vector<std::string>& variants = {""}) {
  std::vector<OpCase> out;
  for (const auto& b : conformance_backends())
    for (DType d : dtypes)
      for (const auto& s : shapes)
        for (const auto& v : variants) out.push_back(OpCase{b, d, s, dim_names, v});
  return out;
}

// Runs `fn` with every op dispatched to the named table; for "ref" this is the oracle.
template <typename Fn>
auto run_on(const std::string& backend, Fn&& fn) {
  ops::ScopedKernelTable scope(table_named(backend));
  return fn();
}

// Sizes around the SIMD widths (8 f32 lanes on AVX2, 16 on AVX-512) and block boundaries.
inline const std::vector<int64_t> kEdgeSizes{1, 7, 8, 9, 15, 16, 17, 127, 128, 129};

}  // namespace fluxrt::test
