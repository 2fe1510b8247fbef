#include "backend/cpu/onednn_util.h"

#include <omp.h>

#include "core/error.h"
#include "core/threads.h"

namespace fluxrt::backend::onednn {

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

bool native_bf16() {
  static const bool native = [] {
    // cpu_isa values are bit sets: every ISA with native bf16 contains avx512_core_bf16's bits.
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    return (isa & bf16) == bf16;
  }();
  return native;
}

const char* isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

dnnl::memory::data_type to_dnnl(DType dtype) {
  switch (dtype) {
    case DType::F32: return dnnl::memory::data_type::f32;
    case DType::BF16: return dnnl::memory::data_type::bf16;
    case DType::F16: return dnnl::memory::data_type::f16;
    default: fail(ErrorCode::Unsupported, "[onednn] no oneDNN type for {}", dtype_name(dtype));
  }
}

void sync_threads() {
  // oneDNN's OpenMP runtime follows omp_get_max_threads() of the calling thread.
  const int n = num_threads();
  if (omp_get_max_threads() != n) omp_set_num_threads(n);
}

}  // namespace fluxrt::backend::onednn
