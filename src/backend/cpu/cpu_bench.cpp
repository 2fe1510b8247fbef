#include "backend/cpu_bench.h"

#include <cstring>
#include <memory>

#include <oneapi/dnnl/dnnl.hpp>

#include "backend/cpu/onednn_util.h"

namespace fluxrt::backend::cpu {

std::function<void()> make_gemm_peak_matmul(int size, bool bf16) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  const dt type = bf16 ? dt::bf16 : dt::f32;
  auto& eng = onednn::engine();
  auto& strm = onednn::stream();
  onednn::sync_threads();
  const dnnl::memory::dim n = size;
  dnnl::memory::desc src({n, n}, type, tag::ab), wts({n, n}, type, tag::any), dst({n, n}, dt::f32, tag::ab);
  dnnl::matmul::primitive_desc pd;
  try {
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wts, dst), eng);
  } catch (const dnnl::error&) {
    return {};  // no implementation for this type on this CPU
  }
  dnnl::memory a(src, eng), b(pd.weights_desc(), eng), c(dst, eng);
  std::memset(a.get_data_handle(), 0, src.get_size());
  std::memset(b.get_data_handle(), 0, pd.weights_desc().get_size());
  auto prim = std::make_shared<dnnl::matmul>(pd);
  return [prim, a, b, c, &strm] {
    prim->execute(strm, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    strm.wait();
  };
}

const char* gemm_isa_name() { return onednn::isa_name(); }

}  // namespace fluxrt::backend::cpu
