// klein-9B-KV's cached reference keys and values (models/flux/flux_blocks.h FluxKvAccess,
// Flux2Transformer::reference_cache), against the uncached computation they replace:
//   Attention     queries [txt ; img] over keys [txt ; cached ref ; img] (keys rotated by the key
//                 table, queries by their own) equal those rows of one attention over the whole
//                 [txt ; ref ; img] sequence with diffusers' extract-pass mask (reference queries
//                 see reference keys only); the reference rows equal attention among themselves
//   Transformer   the reference pass keeps one (k, v) per attention module, of the reference
//                 tokens' shape; a forward with an empty-effect cache differs from one without
//                 (the keys are used), and the reference pass does not depend on the batch row
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "models/flux/flux2_config.h"
#include "models/flux/flux2_transformer.h"
#include "models/flux/flux_blocks.h"
#include "models/flux/flux_common.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/rope.h"
#include "support/compare.h"
#include "support/random_tensor.h"

namespace fluxrt::models {
namespace {

constexpr int64_t kHeads = 2, kHeadDim = 128;
const test::Tolerance kTight{test::Tolerance::Metric::Mixed, 1e-5, 1e-5};

Tensor ids_rows(int64_t rows, int64_t t, int64_t base) {
  Tensor ids = Tensor::zeros({rows, 4}, DType::I64);
  int64_t* p = ids.data<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    p[r * 4 + 0] = t;
    p[r * 4 + 1] = (base + r) / 3;
    p[r * 4 + 2] = (base + r) % 3;
  }
  return ids;
}

Tensor text_ids(int64_t rows) {
  Tensor ids = Tensor::zeros({rows, 4}, DType::I64);
  for (int64_t r = 0; r < rows; ++r) ids.data<int64_t>()[r * 4 + 3] = r;
  return ids;
}

TEST(FluxReferenceKv, CachedAttentionEqualsTheMaskedFullSequence) {
  const int64_t b = 2, lt = 5, lr = 7, li = 6, l = lt + lr + li;
  const Tensor q = test::random_normal({b, l, kHeads, kHeadDim}, DType::F32, 1);
  const Tensor k = test::random_normal({b, l, kHeads, kHeadDim}, DType::F32, 2);
  const Tensor v = test::random_normal({b, l, kHeads, kHeadDim}, DType::F32, 3);
  const Tensor txt = text_ids(lt), ref = ids_rows(lr, 10, 0), img = ids_rows(li, 0, 0);
  const std::vector<int64_t> axes(ops::kFlux2RopeAxes, ops::kFlux2RopeAxes + 4);

  // Uncached: one attention over [txt ; ref ; img] with the extract pass's mask.
  const FluxRope all =
      flux_rope_tables(ops::concat({ref, img}, 0), txt, axes, ops::kFlux2RopeTheta, Device::cpu());
  Tensor bias = Tensor::zeros({1, 1, l, l}, DType::F32);
  float* m = bias.data<float>();
  for (int64_t i = lt; i < lt + lr; ++i)
    for (int64_t j = 0; j < l; ++j)
      if (j < lt || j >= lt + lr) m[i * l + j] = -std::numeric_limits<float>::infinity();
  ops::AttentionOptions full = flux_attention_options(all);
  full.bias = bias;
  const Tensor uncached = ops::attention(q, k, v, full);  // [B, L, H, d]

  // Cached: queries [txt ; img] with their own table, keys [txt ; ref ; img] with the key table.
  auto rows = [](const Tensor& t, int64_t from, int64_t to) { return t.slice(1, from, to); };
  const Tensor q_ti = ops::concat({rows(q, 0, lt), rows(q, lt + lr, l)}, 1);
  const FluxRope queries = flux_rope_tables(img, txt, axes, ops::kFlux2RopeTheta, Device::cpu());
  ops::AttentionOptions cached = flux_attention_options(all);
  cached.rope_q_table = {queries.cos, queries.sin};
  const Tensor out = ops::attention(q_ti, k, v, cached);  // [B, Lt + Li, H, d]
  const Tensor expected = ops::concat({rows(uncached, 0, lt), rows(uncached, lt + lr, l)}, 1);
  EXPECT_TRUE(test::all_close(out, expected, kTight, DType::F32)) << test::compare(out, expected).str();

  // The reference rows: attention among themselves, by their own positions.
  const FluxRope own =
      flux_rope_tables(ref, Tensor::zeros({0, 4}, DType::I64), axes, ops::kFlux2RopeTheta, Device::cpu());
  const Tensor ref_out = ops::attention(rows(q, lt, lt + lr).contiguous(), rows(k, lt, lt + lr).contiguous(),
                                        rows(v, lt, lt + lr).contiguous(), flux_attention_options(own));
  const Tensor ref_expected = rows(uncached, lt, lt + lr).contiguous();
  EXPECT_TRUE(test::all_close(ref_out, ref_expected, kTight, DType::F32))
      << test::compare(ref_out, ref_expected).str();
}

Flux2Config tiny_config() {
  Flux2Config c;
  c.variant = "custom";
  c.hidden = kHeads * kHeadDim, c.heads = kHeads, c.head_dim = kHeadDim;
  c.double_blocks = 2, c.single_blocks = 2, c.context_dim = 24, c.mlp_hidden = 384;
  return c;
}

TEST(FluxReferenceKv, ReferencePassKeepsEveryModule) {
  const Flux2Config c = tiny_config();
  const auto model = Flux2Transformer::synthetic(c, 7, {DType::F32});
  const int64_t lr = 6, li = 4, lt = 3;
  const Tensor refs = test::random_normal({1, lr, c.in_channels}, DType::F32, 11);
  const Flux2Transformer::ReferenceCache cache = model->reference_cache(refs, ids_rows(lr, 10, 0));
  ASSERT_EQ(cache.modules.size(), 4u);
  for (const FluxReferenceKv& m : cache.modules) {
    EXPECT_EQ(m.k.shape(), (Shape{1, lr, kHeads, kHeadDim}));
    EXPECT_EQ(m.v.shape(), (Shape{1, lr, kHeads, kHeadDim}));
  }
  EXPECT_EQ(cache.bytes(), static_cast<size_t>(4 * 2 * lr * c.hidden * 4));

  // Two images share the request's cache (batch 1 broadcast); each row equals its forward alone.
  const Tensor x = test::random_normal({2, li, c.in_channels}, DType::F32, 12);
  const Tensor ctx = test::random_normal({2, lt, c.context_dim}, DType::F32, 13);
  const Tensor t = Tensor::from_vector({0.7f, 0.3f}, {2});
  const Tensor both = model->forward(x, ids_rows(li, 0, 0), ctx, text_ids(lt), t, cache);
  for (int64_t i = 0; i < 2; ++i) {
    const Tensor one = model->forward(x.slice(0, i, i + 1).contiguous(), ids_rows(li, 0, 0),
                                      ctx.slice(0, i, i + 1).contiguous(), text_ids(lt),
                                      Tensor::from_vector({i == 0 ? 0.7f : 0.3f}, {1}), cache);
    const Tensor row = both.slice(0, i, i + 1).contiguous();
    EXPECT_TRUE(test::all_close(row, one, kTight, DType::F32)) << test::compare(row, one).str();
  }
  // The keys are read: the same step without them differs.
  const Tensor plain = model->forward(x, ids_rows(li, 0, 0), ctx, text_ids(lt), t);
  EXPECT_GT(test::compare(plain, both).rel_l2, 1e-3);
}

TEST(FluxReferenceKv, RejectsMismatchedInputs) {
  const Flux2Config c = tiny_config();
  const auto model = Flux2Transformer::synthetic(c, 7, {DType::F32});
  const Tensor refs = test::random_normal({1, 6, c.in_channels}, DType::F32, 11);
  EXPECT_THROW(model->reference_cache(refs, ids_rows(5, 10, 0)), Error);
  const Flux2Transformer::ReferenceCache cache = model->reference_cache(refs, ids_rows(6, 10, 0));
  const Tensor x = test::random_normal({1, 4, c.in_channels}, DType::F32, 12);
  const Tensor ctx = test::random_normal({1, 3, c.context_dim}, DType::F32, 13);
  Flux2Transformer::ReferenceCache other;
  EXPECT_THROW(
      model->forward(x, ids_rows(4, 0, 0), ctx, text_ids(3), Tensor::from_vector({0.5f}, {1}), other), Error);
}

}  // namespace
}  // namespace fluxrt::models
