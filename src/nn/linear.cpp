#include "nn/linear.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "ops/elementwise.h"

namespace fluxrt::nn {

Linear::Linear(std::shared_ptr<ops::PreparedLinear> prepared, LinearFormat format)
    : prepared_(std::move(prepared)), attached_(std::make_shared<Attached>()), format_(format) {}

Linear Linear::prepare(const Tensor& weight, const Tensor& bias, Device device, LinearFormat format) {
  if (!weight.defined()) return Linear();
  return Linear(ops::prepare_linear(weight, bias, device, format), format);
}

Linear Linear::prepare_quantized(const QuantizedMatrix& weight, const Tensor& bias, Device device,
                                 LinearFormat format) {
  return Linear(ops::prepare_linear_quantized(weight, bias, device, format), format);
}

const ops::PreparedLinear& Linear::prepared() const {
  FLUXRT_CHECK(prepared_ != nullptr, ErrorCode::Internal, "[nn::Linear] used before its weight was bound");
  return attached_->replacement ? *attached_->replacement : *prepared_;
}

int64_t Linear::in_features() const { return prepared().in_features(); }
int64_t Linear::out_features() const { return prepared().out_features(); }
const Tensor& Linear::weight() const { return prepared().weight; }
const Tensor& Linear::bias() const { return prepared().bias; }

size_t Linear::parameter_bytes() const {
  if (!prepared_) return 0;
  const size_t weight_bytes =
      prepared_->quantized ? prepared_->quantized->nbytes() : prepared_->weight.nbytes();
  return weight_bytes + (prepared_->bias.defined() ? prepared_->bias.nbytes() : 0);
}

void Linear::release_source() {
  const Tensor& w = prepared().weight;
  // A stride-0 broadcast of one element: the same shape and dtype, no memory.
  prepared_->weight = Tensor::zeros({1, 1}, w.dtype(), w.device()).expand(w.shape());
}

void Linear::attach_low_rank(Linear down, Linear up, Rows rows) {
  FLUXRT_CHECK(down.bound() && up.bound() && down.in_features() == in_features() &&
                   up.out_features() == out_features() && up.in_features() == down.out_features(),
               ErrorCode::InvalidArgument,
               "[nn::Linear] low-rank branch [{}, {}] x [{}, {}] does not fit a [{}, {}] layer",
               up.bound() ? up.out_features() : 0, up.bound() ? up.in_features() : 0,
               down.bound() ? down.out_features() : 0, down.bound() ? down.in_features() : 0, out_features(),
               in_features());
  FLUXRT_CHECK(rows.all() || (rows.begin >= 0 && rows.count > 0), ErrorCode::InvalidArgument,
               "[nn::Linear] a low-rank branch on rows [{}, +{}]", rows.begin, rows.count);
  attached_->branches.push_back({std::move(down), std::move(up), rows});
}

void Linear::detach_low_rank() {
  if (attached_) attached_->branches.clear();
}

size_t Linear::low_rank_branches() const { return attached_ ? attached_->branches.size() : 0; }

void Linear::attach_replacement(Linear replacement) {
  FLUXRT_CHECK(bound() && replacement.bound() && replacement.in_features() == in_features() &&
                   replacement.out_features() == out_features() && !replaced(),
               ErrorCode::InvalidArgument,
               "[nn::Linear] a replacement weight must fit an unreplaced [{}, {}] layer",
               bound() ? out_features() : 0, bound() ? in_features() : 0);
  attached_->replacement = replacement.prepared_;
}

void Linear::detach_replacement() {
  if (attached_) attached_->replacement.reset();
}

bool Linear::replaced() const { return attached_ && attached_->replacement != nullptr; }

namespace {

Tensor activate(Tensor y, Activation act) {
  switch (act) {
    case Activation::None:
      return y;
    case Activation::GeluTanh:
      return ops::gelu_tanh(y);
    case Activation::Silu:
      return ops::silu(y);
  }
  return y;
}

bool covers(const Linear::Rows& rows, int64_t b) {
  return rows.all() || (b >= rows.begin && b < rows.begin + rows.count);
}

// [begin, end) runs of batch elements that the same branches cover, in order (a template so that it
// takes the layer's private branch list as it is).
template <typename Branches>
std::vector<std::pair<int64_t, int64_t>> segments(const Branches& branches, int64_t batch) {
  std::vector<int64_t> cuts{0, batch};
  for (const auto& branch : branches) {
    const Linear::Rows& r = branch.rows;
    if (r.all()) continue;
    FLUXRT_CHECK(r.begin + r.count <= batch, ErrorCode::Internal,
                 "[nn::Linear] a low-rank branch on batch elements [{}, {}) of an input of {}", r.begin,
                 r.begin + r.count, batch);
    cuts.push_back(r.begin);
    cuts.push_back(r.begin + r.count);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) runs.emplace_back(cuts[i], cuts[i + 1]);
  return runs;
}

}  // namespace

bool Linear::covered(int64_t b) const {
  for (const LowRank& l : attached_->branches)
    if (covers(l.rows, b)) return true;
  return false;
}

bool Linear::every_row() const {
  for (const LowRank& l : attached_->branches)
    if (!l.rows.all()) return false;
  return true;
}

Tensor Linear::unfused(const Tensor& x, int64_t first, Activation act) const {
  Tensor y = ops::linear(x, prepared());  // [..., out]
  for (const LowRank& b : attached_->branches)
    if (covers(b.rows, first)) ops::add_(y, ops::linear(ops::linear(x, b.down.prepared()), b.up.prepared()));
  return activate(std::move(y), act);
}

void Linear::with_branches_into(const Tensor& x, const Tensor& y, Activation act) const {
  for (const auto& [begin, end] : segments(attached_->branches, x.size(0))) {
    const Tensor xs = x.narrow(0, begin, end - begin);
    Tensor ys = y.narrow(0, begin, end - begin);
    if (covered(begin))
      ys.copy_from(unfused(xs, begin, act));
    else
      ops::linear_into(xs, prepared(), ys, act);  // as without branches
  }
}

Tensor Linear::operator()(const Tensor& x, Activation act) const {
  if (low_rank_branches() == 0) return ops::linear(x, prepared(), act);
  if (every_row()) return unfused(x, 0, act);
  Shape shape = x.shape();
  shape[x.dim() - 1] = out_features();
  Tensor y = Tensor::empty(shape, x.dtype(), x.device());
  with_branches_into(x, y, act);
  return y;
}

void Linear::forward_into(const Tensor& x, const Tensor& y, Activation act) const {
  if (low_rank_branches() == 0) {
    ops::linear_into(x, prepared(), y, act);
  } else if (every_row()) {
    Tensor out = y;
    out.copy_from(unfused(x, 0, act));
  } else {
    with_branches_into(x, y, act);
  }
}

void Linear::gated_residual_into(const Tensor& x, const Tensor& gate, const Tensor& residual, const Tensor& y,
                                 Activation act) const {
  if (low_rank_branches() == 0) {
    ops::linear_gated_residual_into(x, prepared(), gate, residual, y, act);
    return;
  }
  // y = residual + gate[out] * act(...), gate broadcast over the rows, run by runs of rows that the
  // same branches cover (the fused form where none does).
  const bool in_place = residual.storage() == y.storage() && residual.offset() == y.offset() &&
                        residual.strides() == y.strides();
  for (const auto& [begin, end] : segments(attached_->branches, x.size(0))) {
    const int64_t n = end - begin;
    const Tensor xs = x.narrow(0, begin, n), rs = residual.narrow(0, begin, n);
    Tensor ys = y.narrow(0, begin, n);
    if (!covered(begin)) {
      ops::linear_gated_residual_into(xs, prepared(), gate, rs, ys, act);
      continue;
    }
    const Tensor update = ops::mul(unfused(xs, begin, act), gate);
    if (!in_place) ys.copy_from(rs);
    ops::add_(ys, update);
  }
}

void Linear::add_gated_residual(const Tensor& h, const Tensor& gate, Tensor& x) const {
  if (low_rank_branches() != 0 && every_row()) {
    ops::gated_residual_(x, gate, unfused(h, 0, Activation::None));  // x += gate * this(h)
    return;
  }
  const ops::PreparedLinear& w = prepared();
  for (int64_t b = 0; b < x.size(0); ++b) {
    Tensor xb = x.select(0, b);  // [L, out]
    if (low_rank_branches() != 0 && covered(b)) {
      Tensor x1 = x.narrow(0, b, 1);  // [1, L, out]
      ops::gated_residual_(x1, gate.narrow(0, b, 1), unfused(h.narrow(0, b, 1), b, Activation::None));
      continue;
    }
    ops::linear_gated_residual_into(h.select(0, b), w, gate.select(0, b), xb, xb);
  }
}

}  // namespace fluxrt::nn
