#include "nn/modulation.h"

#include "core/error.h"
#include "ops/norm.h"

namespace fluxrt::nn {

std::vector<AdaLnParams> split_modulation(const Tensor& mod, int sets) {
  FLUXRT_CHECK(mod.dim() == 2 && sets >= 1 && mod.size(1) % (3 * sets) == 0, ErrorCode::InvalidArgument,
               "[modulation] expected [B, {} * 3 * D], got {}", sets, mod.shape().str());
  const int64_t d = mod.size(1) / (3 * sets);
  auto chunk = [&](int64_t i) { return mod.narrow(1, i * d, d); };  // [B, D] view
  std::vector<AdaLnParams> out;
  for (int64_t s = 0; s < sets; ++s) out.push_back({chunk(3 * s), chunk(3 * s + 1), chunk(3 * s + 2)});
  return out;
}

Tensor adaln(const Tensor& x, const AdaLnParams& p, float eps) {
  return ops::adaln_modulate(x, p.shift, p.scale, eps);
}

std::vector<AdaLnParams> Modulation::operator()(const Tensor& emb_act) const {
  return split_modulation(lin(emb_act), sets);  // [B, sets * 3D] -> sets x 3 x [B, D]
}

}  // namespace fluxrt::nn
