#pragma once
// nn::Linear: PyTorch nn.Linear (y = x @ W^T + b) over the prepared GEMM of ops/linear.h. Every
// projection of every model goes through it, so it is the one place where what changes a
// projection without changing the model code attaches:
// - an unmerged LoRA delta (issue 25): y = act(x W^T + b + s * (x A^T) B^T) as a low-rank side
//   branch. It has to be added before the activation and the gate, so a Linear carrying one would
//   run the fused forms below as GEMM + delta + epilogue; models see no difference.
// - quantized weights (issue 26): another weight representation prepared by `prepare`, i.e. a
//   different ops::PreparedLinear state; the forward methods stay as they are. That includes the
//   int8 format (W8A8, precision int8) a model asks for at prepare, which the layer remembers so
//   that what replaces its weight later (a per-request merged LoRA) is prepared the same way.
// Models never hold or name the prepared weight itself.
//
//   nn::Linear to_q = nn::Linear::prepare(w, b, device);   // once, at load
//   Tensor q = to_q(x);                                      // [..., in] -> [..., out]
//   to_out.add_gated_residual(attn, gate, x);                // x += gate * to_out(attn)
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "ops/linear.h"

namespace fluxrt::nn {

using ops::Activation;
using ops::LinearFormat;

/// The batch elements (dim 0 of every input: [B, L, in] or [B, in]) a low-rank branch of a Linear
/// applies to, [begin, begin + count); the default is every element. A batch of requests that each
/// carry their own LoRAs gives each request's branches its own rows.
struct BranchRows {
  int64_t begin = 0;
  int64_t count = -1;  // < 0: every element
  bool all() const { return count < 0; }
};

class Linear {
 public:
  /// An unbound layer (a weight that was missing at bind time): `bound()` is false and any
  /// forward is a logic error.
  Linear() = default;

  /// weight [out, in] (kept in its dtype: bf16 checkpoints stay bf16), bias [out] or undefined.
  /// The backend of `device` prepares (packs, uploads) it once, in `format` (Int8: W8A8,
  /// ops::prepare_linear). An undefined weight gives an unbound Linear, so binders can pass on
  /// what the weight binder reported missing.
  static Linear prepare(const Tensor& weight, const Tensor& bias = Tensor(), Device device = Device::cpu(),
                        LinearFormat format = LinearFormat::Native);

  /// A weight kept in its quantized bytes (GGUF blocks, fp8 + scale; core/quant.h), [out, in].
  /// Forward passes are the same; the CPU GEMM dequantizes a group of rows at a time, so only the
  /// quantized bytes stay resident (ops::prepare_linear_quantized says what each backend does,
  /// Int8 included).
  static Linear prepare_quantized(const QuantizedMatrix& weight, const Tensor& bias = Tensor(),
                                  Device device = Device::cpu(), LinearFormat format = LinearFormat::Native);

  /// The format this layer was prepared in: a replacement weight (attach_replacement) is
  /// prepared in it too, so a per-request merged LoRA keeps the layer's int8.
  LinearFormat format() const { return format_; }

  bool bound() const { return prepared_ != nullptr; }
  /// The quantized weight this layer was prepared from, or null for a dense one.
  const QuantizedMatrix* quantized() const { return prepared_ ? prepared_->quantized.get() : nullptr; }
  explicit operator bool() const { return bound(); }
  int64_t in_features() const;
  int64_t out_features() const;
  /// The source weight [out, in] and bias [out] (or undefined) as prepared, on the prepared device.
  const Tensor& weight() const;
  const Tensor& bias() const;
  /// Bytes of the weight and bias as bound (a released source still counts its full size; a
  /// quantized weight counts its quantized bytes).
  size_t parameter_bytes() const;

  /// Drops this layer's reference to the source weight, keeping a zero-memory stand-in of the
  /// same shape and dtype, for backends that packed their own copy (synthetic weights, fused
  /// copies): otherwise the weight is resident twice. Only safe when the backend's prepared state
  /// does not read the source and nothing else needs it.
  void release_source();

  /// y [..., out] = act(x [..., in] @ W^T + b), y in x's dtype; x may have strided rows.
  Tensor operator()(const Tensor& x, Activation act = Activation::None) const;
  /// The same into a preallocated y [..., out].
  void forward_into(const Tensor& x, const Tensor& y, Activation act = Activation::None) const;
  /// y = residual + gate[out] * act(x @ W^T + b), fused into the GEMM epilogue; residual may be y.
  void gated_residual_into(const Tensor& x, const Tensor& gate, const Tensor& residual, const Tensor& y,
                           Activation act = Activation::None) const;
  /// FLUX's gated residual x [B, L, out] += gate [B, out] * this(h [B, L, in]): the epilogue takes
  /// one gate row, so one fused GEMM per batch element (each still L rows).
  void add_gated_residual(const Tensor& h, const Tensor& gate, Tensor& x) const;

  using Rows = BranchRows;

  /// Unmerged LoRA: adds the branch up(down(x)) (down [r, in], up [out, r] with the strength and
  /// alpha / rank folded in) to every forward on `rows` until detached, before the activation and
  /// the gate: those rows then run as GEMM + branches + epilogue (composed ops, no fused
  /// epilogue), and rows no branch covers run the fused forms as without branches, so a request's
  /// rows give what they give alone. The branches are shared by the copies of this layer (the
  /// model's own included).
  void attach_low_rank(Linear down, Linear up, Rows rows = {});
  void detach_low_rank();
  size_t low_rank_branches() const;

  /// A per-request merged weight: every forward (and weight(), bias()) uses `replacement`, a layer
  /// of the same shape, until detached. For the LoRA kinds that have no low-rank form to add
  /// (LoKr, LoHa, DoRA's renormalised weight): the request gets a merged copy of just the layers
  /// they touch. Shared by the copies of this layer, like the branches.
  void attach_replacement(Linear replacement);
  void detach_replacement();
  bool replaced() const;

 private:
  struct LowRank;
  struct Attached;
  Linear(std::shared_ptr<ops::PreparedLinear> prepared, LinearFormat format);
  const ops::PreparedLinear& prepared() const;
  // act(x W^T + b + the branches covering batch element `first`), composed: x is a run of
  // elements that the same branches cover, starting at `first`.
  Tensor unfused(const Tensor& x, int64_t first, Activation act) const;
  // act(x W^T + b + branches) into y by runs of batch elements: unfused where branches cover them,
  // the fused form for the rest (x and y [B, ...]).
  void with_branches_into(const Tensor& x, const Tensor& y, Activation act) const;
  bool covered(int64_t b) const;  // whether a branch covers batch element b
  bool every_row() const;         // whether every branch covers every element

  // Shared by copies of the layer (FLUX.1's shared-weight benchmark blocks reuse block 0's).
  std::shared_ptr<ops::PreparedLinear> prepared_;
  std::shared_ptr<Attached> attached_;  // branches and replacement, shared by copies like prepared_
  LinearFormat format_ = LinearFormat::Native;
};

struct Linear::LowRank {
  Linear down, up;
  Rows rows;
};

struct Linear::Attached {
  std::vector<LowRank> branches;
  std::shared_ptr<ops::PreparedLinear> replacement;
};

}  // namespace fluxrt::nn
