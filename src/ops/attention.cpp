#include "ops/attention.h"

#include <cmath>

#include "core/error.h"
#include "ops/dispatch.h"
#include "ops/op_utils.h"

namespace fluxrt::ops {
namespace {

using backend::AttentionArgs;
using backend::RopeLayout;

bool is_attention_dtype(DType d) { return d == DType::F32 || d == DType::BF16 || d == DType::F16; }

void check_4d(const Tensor& t, const char* name) {
  FLUXRT_CHECK(t.defined(), ErrorCode::InvalidArgument, "[attention] {} is undefined", name);
  FLUXRT_CHECK(t.dim() == 4, ErrorCode::InvalidArgument, "[attention] {} must be [B, L, H, D], got {}", name,
               t.shape().str());
  FLUXRT_CHECK(t.size(3) <= 1 || t.stride(3) == 1, ErrorCode::InvalidArgument,
               "[attention] {} needs a contiguous last dim (stride {})", name, t.stride(3));
}

void check_table(const Tensor& t, const char* name, int64_t B, int64_t rows, int64_t half) {
  FLUXRT_CHECK(t.defined(), ErrorCode::InvalidArgument, "[attention] RoPE needs {}", name);
  FLUXRT_CHECK(t.dtype() == DType::F32, ErrorCode::InvalidArgument, "[attention] {} must be f32, got {}", name,
               dtype_name(t.dtype()));
  FLUXRT_CHECK((t.dim() == 2 || (t.dim() == 3 && t.size(0) == B)) && t.size(-1) == half,
               ErrorCode::InvalidArgument, "[attention] {} must be [L, {}] or [{}, L, {}], got {}", name, half, B,
               half, t.shape().str());
  FLUXRT_CHECK(t.size(-2) >= rows, ErrorCode::InvalidArgument, "[attention] {} has {} rows, needs {}", name,
               t.size(-2), rows);
  FLUXRT_CHECK(t.stride(-1) == 1, ErrorCode::InvalidArgument, "[attention] {} needs a contiguous last dim", name);
}

}  // namespace

void validate_attention(const AttentionArgs& a) {
  check_4d(a.q, "q");
  check_4d(a.k, "k");
  check_4d(a.v, "v");
  check_4d(a.out, "out");
  const int64_t B = a.q.size(0), Lq = a.q.size(1), H = a.q.size(2), D = a.q.size(3);
  const int64_t Lk = a.k.size(1), Hkv = a.k.size(2);
  FLUXRT_CHECK(is_attention_dtype(a.q.dtype()), ErrorCode::Unsupported, "[attention] dtype {} (f32, bf16, f16 only)",
               dtype_name(a.q.dtype()));
  FLUXRT_CHECK(a.k.dtype() == a.q.dtype() && a.v.dtype() == a.q.dtype() && a.out.dtype() == a.q.dtype(),
               ErrorCode::InvalidArgument, "[attention] q, k, v, out dtypes differ ({}, {}, {}, {})",
               dtype_name(a.q.dtype()), dtype_name(a.k.dtype()), dtype_name(a.v.dtype()), dtype_name(a.out.dtype()));
  FLUXRT_CHECK(a.k.shape() == a.v.shape(), ErrorCode::InvalidArgument, "[attention] k {} and v {} differ",
               a.k.shape().str(), a.v.shape().str());
  FLUXRT_CHECK(a.k.size(0) == B && a.k.size(3) == D, ErrorCode::InvalidArgument,
               "[attention] q {} and k {} disagree on batch or head dim", a.q.shape().str(), a.k.shape().str());
  FLUXRT_CHECK(Hkv > 0 && H % Hkv == 0, ErrorCode::InvalidArgument,
               "[attention] {} query heads are not a multiple of {} kv heads", H, Hkv);
  FLUXRT_CHECK(a.out.shape() == a.q.shape(), ErrorCode::InvalidArgument, "[attention] out {} must match q {}",
               a.out.shape().str(), a.q.shape().str());
  const Device dev = a.q.device();
  detail::check_on_device(a.k, dev, "attention", "k");
  detail::check_on_device(a.v, dev, "attention", "v");
  detail::check_on_device(a.out, dev, "attention", "out");
  detail::check_on_device(a.rope_cos, dev, "attention", "rope_cos");
  detail::check_on_device(a.rope_sin, dev, "attention", "rope_sin");
  detail::check_on_device(a.rope_q_cos, dev, "attention", "rope_q_cos");
  detail::check_on_device(a.rope_q_sin, dev, "attention", "rope_q_sin");
  detail::check_on_device(a.key_padding_mask, dev, "attention", "key_padding_mask");
  detail::check_on_device(a.bias, dev, "attention", "bias");
  FLUXRT_CHECK(std::isfinite(a.scale), ErrorCode::InvalidArgument, "[attention] scale {} is not finite", a.scale);
  if (a.rope != RopeLayout::None) {
    FLUXRT_CHECK(D % 2 == 0, ErrorCode::InvalidArgument, "[attention] RoPE needs an even head dim, got {}", D);
    check_table(a.rope_cos, "rope_cos", B, Lk, D / 2);
    check_table(a.rope_sin, "rope_sin", B, Lk, D / 2);
    FLUXRT_CHECK(a.rope_cos.shape() == a.rope_sin.shape(), ErrorCode::InvalidArgument,
                 "[attention] rope_cos {} and rope_sin {} differ", a.rope_cos.shape().str(), a.rope_sin.shape().str());
    if (a.rope_q_cos.defined() || a.rope_q_sin.defined()) {
      check_table(a.rope_q_cos, "rope_q_cos", B, Lq, D / 2);
      check_table(a.rope_q_sin, "rope_q_sin", B, Lq, D / 2);
    } else {
      FLUXRT_CHECK(Lq <= Lk, ErrorCode::InvalidArgument,
                   "[attention] Lq {} > Lk {} needs query RoPE tables (rope_q_cos/rope_q_sin)", Lq, Lk);
    }
  }
  if (a.key_padding_mask.defined()) {
    const Tensor& m = a.key_padding_mask;
    FLUXRT_CHECK(m.dtype() == DType::U8 || m.dtype() == DType::Bool, ErrorCode::InvalidArgument,
                 "[attention] key_padding_mask must be u8/bool, got {}", dtype_name(m.dtype()));
    FLUXRT_CHECK(m.dim() == 2 && m.size(0) == B && m.size(1) == Lk, ErrorCode::InvalidArgument,
                 "[attention] key_padding_mask must be [{}, {}], got {}", B, Lk, m.shape().str());
  }
  if (a.bias.defined()) {
    const Tensor& b = a.bias;
    FLUXRT_CHECK(b.dtype() == DType::F32, ErrorCode::InvalidArgument, "[attention] bias must be f32, got {}",
                 dtype_name(b.dtype()));
    const int64_t full[4] = {B, H, Lq, Lk};
    bool ok = b.dim() == 4;
    for (int i = 0; ok && i < 4; ++i) ok = b.size(i) == 1 || b.size(i) == full[i];
    FLUXRT_CHECK(ok, ErrorCode::InvalidArgument, "[attention] bias {} does not broadcast to [{}, {}, {}, {}]",
                 b.shape().str(), B, H, Lq, Lk);
  }
}

void attention_into(const AttentionArgs& args) {
  validate_attention(args);
  const auto& table = kernels_for(args.q);
  require_kernel(table.attention, "attention", table)(args);
}

void attention_into(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                    const Tensor& out) {
  check_4d(q, "q");
  AttentionArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.scale = options.scale ? *options.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  a.rope = options.rope;
  a.rope_cos = options.rope_table.cos;
  a.rope_sin = options.rope_table.sin;
  a.rope_q_cos = options.rope_q_table.cos;
  a.rope_q_sin = options.rope_q_table.sin;
  a.causal = options.causal;
  if (options.key_padding_mask.defined())
    a.key_padding_mask = options.key_padding_mask.dtype() == DType::U8 || options.key_padding_mask.dtype() == DType::Bool
                             ? options.key_padding_mask
                             : options.key_padding_mask.to(DType::U8);
  if (options.bias.defined()) {
    a.bias = options.bias.to(DType::F32);
    while (a.bias.dim() < 4) a.bias = a.bias.unsqueeze(0);  // PyTorch broadcasting from the left
  }
  a.out = out;
  attention_into(a);
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options) {
  check_4d(q, "q");
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());
  attention_into(q, k, v, options, out);
  return out;
}

}  // namespace fluxrt::ops
