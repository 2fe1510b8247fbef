// Long sequences (FLUX.2-klein at 1024^2: L = 4096 image + 512 text = 4608), all heads of a
// klein-4B layer; rows at the start, middle and end are checked against the f64 oracle, for both
// CPU implementations.
#include "test_attention_common.h"

namespace fluxrt::test_attention {
namespace {

Case long_case(DType dt, int64_t L, int64_t H, Inputs in, Rope rope) {
  Case c;
  c.dtype = dt;
  c.Lq = c.Lk = L;
  c.H = c.Hkv = H;
  c.D = 128;
  c.inputs = in;
  c.rope = rope;
  return c;
}

void check_rows(const Case& c, const backend::cpu::AttentionCpuOptions& options = {}) {
  check_case(c, {{0, 40}, {c.Lq / 2 - 20, c.Lq / 2 + 20}, {c.Lq - 40, c.Lq}}, 1234, options);
}

TEST(AttentionSlow, Bf16Flux2L4608AllHeads) { check_rows(long_case(DType::BF16, 4608, 24, Inputs::Random, Rope::Flux2)); }
TEST(AttentionSlow, F32Flux1L4608) { check_rows(long_case(DType::F32, 4608, 2, Inputs::Random, Rope::Flux1)); }
TEST(AttentionSlow, Bf16MixedNormL4608) { check_rows(long_case(DType::BF16, 4608, 4, Inputs::MixedNorm, Rope::Flux2)); }
TEST(AttentionSlow, F32SelfSimilarL4608) { check_rows(long_case(DType::F32, 4608, 2, Inputs::SelfSimilar, Rope::Flux2)); }

// The oneDNN implementation (attention_onednn.h) on the same long sequences: five 1024-key chunks
// with a narrower last one.
TEST(AttentionSlow, OneDnnBf16Flux2L4608AllHeads) {
  const Case c = long_case(DType::BF16, 4608, 24, Inputs::Random, Rope::Flux2);
  check_rows(c, onednn_options(c));
}
TEST(AttentionSlow, OneDnnF32Flux1L4608) {
  const Case c = long_case(DType::F32, 4608, 2, Inputs::Random, Rope::Flux1);
  check_rows(c, onednn_options(c));
}
TEST(AttentionSlow, OneDnnBf16MixedNormL4608) {
  const Case c = long_case(DType::BF16, 4608, 4, Inputs::MixedNorm, Rope::Flux2);
  check_rows(c, onednn_options(c));
}

}  // namespace
}  // namespace fluxrt::test_attention
