// The reference backend's kernel table: naive loops that compute in f64 and round once to the
// output dtype. Every test compares the other backends against these.
#include "backend/kernel_table.h"

namespace fluxrt::backend {

void fill_ref_kernels(KernelTable& t) {
  t.name = "ref";
  // Element-wise, norms and VAE ops: src/backend/ref/ (filled in as they land).
  // Big ops: one line each, added by their owners (prepare_linear, linear, prepare_conv2d, conv2d,
  // attention).
}

const KernelTable& ref_kernels() {
  static const KernelTable table = [] {
    KernelTable t;
    fill_ref_kernels(t);
    return t;
  }();
  return table;
}

}  // namespace fluxrt::backend
