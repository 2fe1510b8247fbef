// The CPU backend's kernel table: oneDNN for GEMM and convolution, Highway SIMD + OpenMP for the
// rest. A nullptr slot falls back to the ops layer's composed version.
#include "backend/kernel_table.h"

namespace fluxrt::backend {

void fill_cpu_kernels(KernelTable& t) {
  t.name = "cpu";
  // Element-wise, norms and VAE ops: src/backend/cpu/ (filled in as they land).
  // Big ops: one line each, added by their owners (prepare_linear, linear, prepare_conv2d, conv2d,
  // attention).
}

const KernelTable& cpu_kernels() {
  static const KernelTable table = [] {
    KernelTable t;
    fill_cpu_kernels(t);
    return t;
  }();
  return table;
}

}  // namespace fluxrt::backend
