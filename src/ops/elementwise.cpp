#include "ops/elementwise.h"

#include "ops/dispatch.h"
#include "ops/kernel_timing.h"
#include "ops/op_utils.h"

namespace fluxrt::ops {
namespace {

using backend::BinaryOp;
using backend::GluActivation;
using backend::UnaryOp;

Tensor unary_op(const Tensor& x, UnaryOp op, float alpha, const char* name, Tensor* out = nullptr) {
  detail::check_float(x, name, "x");
  const Tensor xs = detail::rows_ready(x);  // a 0-d x becomes [1]; y keeps x's shape
  Tensor y = out ? *out : Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.numel() == 0) return y;
  const auto& k = kernels_for(x);
  backend::UnaryArgs a{op, alpha, xs, y.dim() == 0 ? y.reshape({1}) : y};
  require_kernel(k.unary, name, k)(a);
  return y;
}

Tensor binary_op(const Tensor& a, const Tensor& b, BinaryOp op, const char* name, Tensor* out = nullptr) {
  detail::check_float(a, name, "a");
  detail::check_float(b, name, "b");
  detail::check_same_device(a, b, name);
  Tensor bb = b.dtype() == a.dtype() ? b : b.to(a.dtype());
  FLUXRT_CHECK(bb.dim() <= a.dim(), ErrorCode::InvalidArgument, "[{}] cannot broadcast {} to {}", name,
               b.shape().str(), a.shape().str());
  for (int i = 0; i < bb.dim(); ++i) {
    const int64_t be = bb.size(i), ae = a.size(a.dim() - bb.dim() + i);
    FLUXRT_CHECK(be == ae || be == 1, ErrorCode::InvalidArgument, "[{}] cannot broadcast {} to {}", name,
                 b.shape().str(), a.shape().str());
  }
  const Tensor as = detail::rows_ready(a);
  bb = bb.expand(a.shape());
  // Kernels allow stride 0 or 1 on the last dim of b.
  if (bb.dim() > 0 && bb.stride(-1) != 1 && bb.stride(-1) != 0) bb = bb.contiguous();
  Tensor y = out ? *out : detail::empty_like(as);
  if (a.numel() == 0) return y;
  const auto& k = kernels_for(a);
  require_kernel(k.binary, name, k)(backend::BinaryArgs{op, as, bb, y});
  return y;
}

// act(gate) * up, both [..., M], into `out` when given (gate's shape and dtype, on its device,
// unit column stride, any leading strides: a column slice of a wider buffer), else a new tensor.
Tensor glu_op(const Tensor& gate, const Tensor& up, GluActivation act, const char* name,
              const Tensor& out = Tensor()) {
  detail::check_float(gate, name, "gate");
  detail::check_float(up, name, "up");
  detail::check_same_device(gate, up, name);
  FLUXRT_CHECK(gate.shape() == up.shape() && gate.dtype() == up.dtype(), ErrorCode::InvalidArgument,
               "[{}] gate {} and up {} must match", name, gate.str(), up.str());
  const Tensor g = detail::rows_ready(gate), u = detail::rows_ready(up);
  Tensor y = out;
  if (y.defined()) {
    detail::check_on_device(y, gate.device(), name, "y");
    FLUXRT_CHECK(
        y.shape() == gate.shape() && y.dtype() == gate.dtype() && (y.stride(-1) == 1 || y.size(-1) == 1),
        ErrorCode::InvalidArgument, "[{}] y {} must be {} with a unit column stride", name, y.str(),
        gate.str());
  } else {
    y = detail::empty_like(g);
  }
  if (y.numel() == 0) return y;
  const auto& k = kernels_for(gate);
  if (k.glu) {
    k.glu(backend::GluArgs{act, g, u, y});
    return y;
  }
  note_fallback(name, k);
  Tensor h = act == GluActivation::Silu ? silu(g) : gelu_tanh(g);
  if (!out.defined()) return mul(h, u);
  y.copy_from(mul(h, u));
  return y;
}

}  // namespace

Tensor silu(const Tensor& x) { return unary_op(x, UnaryOp::Silu, 1.0f, "silu"); }
Tensor gelu_tanh(const Tensor& x) { return unary_op(x, UnaryOp::GeluTanh, 1.0f, "gelu_tanh"); }
Tensor quick_gelu(const Tensor& x) { return unary_op(x, UnaryOp::QuickGelu, 1.0f, "quick_gelu"); }
Tensor scale(const Tensor& x, float alpha) { return unary_op(x, UnaryOp::Scale, alpha, "scale"); }

void scale_(Tensor& x, float alpha) {
  if (x.dim() > 0 && x.stride(-1) != 1 && x.size(-1) != 1) {
    x.copy_from(scale(x, alpha));
    return;
  }
  Tensor y = x;
  unary_op(x, UnaryOp::Scale, alpha, "scale_", &y);
}

Tensor add(const Tensor& a, const Tensor& b) { return binary_op(a, b, BinaryOp::Add, "add"); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op(a, b, BinaryOp::Mul, "mul"); }

void add_(Tensor& a, const Tensor& b) {
  if (a.dim() == 0 || (a.stride(-1) != 1 && a.size(-1) != 1)) {
    a.copy_from(add(a, b));
    return;
  }
  Tensor y = a;
  binary_op(a, b, BinaryOp::Add, "add_", &y);
}

void mul_(Tensor& a, const Tensor& b) {
  if (a.dim() == 0 || (a.stride(-1) != 1 && a.size(-1) != 1)) {
    a.copy_from(mul(a, b));
    return;
  }
  Tensor y = a;
  binary_op(a, b, BinaryOp::Mul, "mul_", &y);
}

Tensor swiglu(const Tensor& x) {
  detail::check_float(x, "swiglu", "x");
  FLUXRT_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0, ErrorCode::InvalidArgument,
               "[swiglu] last dim of {} must be even (gate and up halves)", x.shape().str());
  const int64_t m = x.size(-1) / 2;
  return glu_op(x.narrow(-1, 0, m), x.narrow(-1, m, m), GluActivation::Silu, "swiglu");
}

Tensor gated_gelu(const Tensor& gate, const Tensor& up) {
  return glu_op(gate, up, GluActivation::GeluTanh, "gated_gelu");
}

Tensor silu_mul(const Tensor& gate, const Tensor& up) { return glu_op(gate, up, GluActivation::Silu, "silu_mul"); }

void swiglu_into(const Tensor& x, const Tensor& y) {
  detail::check_float(x, "swiglu", "x");
  FLUXRT_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0, ErrorCode::InvalidArgument,
               "[swiglu] last dim of {} must be even (gate and up halves)", x.shape().str());
  const int64_t m = x.size(-1) / 2;
  glu_op(x.narrow(-1, 0, m), x.narrow(-1, m, m), GluActivation::Silu, "swiglu", y);
}

void gated_gelu_into(const Tensor& gate, const Tensor& up, const Tensor& y) {
  glu_op(gate, up, GluActivation::GeluTanh, "gated_gelu", y);
}

void silu_mul_into(const Tensor& gate, const Tensor& up, const Tensor& y) {
  glu_op(gate, up, GluActivation::Silu, "silu_mul", y);
}

namespace {

void check_gated_residual(const Tensor& x, const Tensor& gate, const Tensor& y) {
  detail::check_float(x, "gated_residual", "x");
  detail::check_float(y, "gated_residual", "y");
  detail::check_float(gate, "gated_residual", "gate");
  FLUXRT_CHECK(x.dim() == 3 && y.shape() == x.shape() && y.dtype() == x.dtype(), ErrorCode::InvalidArgument,
               "[gated_residual] x {} and y {} must be the same [B, L, D] tensor type", x.str(), y.str());
  FLUXRT_CHECK(gate.dim() == 2 && gate.size(0) == x.size(0) && gate.size(1) == x.size(2),
               ErrorCode::InvalidArgument, "[gated_residual] gate {} must be [B, D] for x {}",
               gate.shape().str(), x.shape().str());
  detail::check_same_device(x, y, "gated_residual");
  detail::check_same_device(x, gate, "gated_residual");
}

void run_gated_residual(const Tensor& x, const Tensor& gate, const Tensor& y, Tensor& out) {
  if (out.numel() == 0) return;
  const auto& k = kernels_for(x);
  Tensor g = gate.stride(1) == 1 ? gate : gate.contiguous();
  if (k.gated_residual) {
    k.gated_residual(backend::GatedResidualArgs{detail::rows_ready(x), g, detail::rows_ready(y), out});
    return;
  }
  note_fallback("gated_residual", k);
  out.copy_from(add(x, mul(y, g.unsqueeze(1))));
}

}  // namespace

Tensor gated_residual(const Tensor& x, const Tensor& gate, const Tensor& y) {
  check_gated_residual(x, gate, y);
  Tensor out = detail::empty_like(x);
  run_gated_residual(x, gate, y, out);
  return out;
}

void gated_residual_(Tensor& x, const Tensor& gate, const Tensor& y) {
  check_gated_residual(x, gate, y);
  if (x.stride(-1) != 1) {
    x.copy_from(gated_residual(x, gate, y));
    return;
  }
  run_gated_residual(x, gate, y, x);
}

Tensor softmax(const Tensor& x) {
  detail::check_float(x, "softmax", "x");
  const Tensor xs = detail::rows_ready(x);
  Tensor y = detail::empty_like(xs);
  if (x.numel() == 0) return y;
  const auto& k = kernels_for(x);
  require_kernel(k.softmax, "softmax", k)(backend::SoftmaxArgs{xs, y});
  return y;
}

Tensor embedding(const Tensor& table, const Tensor& ids, DType out_dtype) {
  detail::check_defined(table, "embedding", "table");
  detail::check_defined(ids, "embedding", "ids");
  FLUXRT_CHECK(table.dim() == 2 && dtype_is_float(table.dtype()), ErrorCode::InvalidArgument,
               "[embedding] table must be a float [V, D] tensor, got {}", table.str());
  FLUXRT_CHECK(ids.dtype() == DType::I32 || ids.dtype() == DType::I64, ErrorCode::InvalidArgument,
               "[embedding] ids must be i32 or i64, got {}", ids.str());
  FLUXRT_CHECK(detail::is_kernel_float(out_dtype), ErrorCode::Unsupported, "[embedding] output dtype {}",
               dtype_name(out_dtype));
  detail::check_same_device(table, ids, "embedding");
  const Tensor flat = detail::contiguous_ready(ids).reshape({ids.numel()});
  const int64_t V = table.size(0), D = table.size(1);
  if (flat.device().is_cpu()) {
    for (int64_t i = 0; i < flat.numel(); ++i) {
      const int64_t id = ids.dtype() == DType::I64 ? flat.data<int64_t>()[i] : flat.data<int32_t>()[i];
      FLUXRT_CHECK(id >= 0 && id < V, ErrorCode::InvalidArgument,
                   "[embedding] id {} at position {} is outside the table's {} rows", id, i, V);
    }
  }
  Shape out_shape = ids.shape();
  out_shape.push_back(D);
  Tensor out = Tensor::empty(out_shape, out_dtype, table.device());
  if (out.numel() == 0) return out;
  Tensor tab = detail::rows_ready(table);
  const auto& k = kernels_for(table);
  require_kernel(k.embedding, "embedding", k)(backend::EmbeddingArgs{flat, tab, out.view({flat.numel(), D})});
  return out;
}

Tensor concat(const std::vector<Tensor>& xs, int dim) {
  const TimedRegion timed("concat");
  FLUXRT_CHECK(!xs.empty(), ErrorCode::InvalidArgument, "[concat] no tensors");
  const Tensor& first = xs[0];
  detail::check_defined(first, "concat", "xs[0]");
  const int nd = first.dim();
  const int d = dim < 0 ? dim + nd : dim;
  FLUXRT_CHECK(d >= 0 && d < nd, ErrorCode::InvalidArgument, "[concat] dim {} out of range for {}", dim,
               first.shape().str());
  int64_t total = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    detail::check_defined(t, "concat", "input");
    detail::check_on_device(t, first.device(), "concat", "input " + std::to_string(i));
    bool ok = t.dim() == nd && t.dtype() == first.dtype() && t.device() == first.device();
    for (int j = 0; ok && j < nd; ++j) ok = j == d || t.size(j) == first.size(j);
    FLUXRT_CHECK(ok, ErrorCode::InvalidArgument, "[concat] input {} is {}, incompatible with {} along dim {}", i,
                 t.str(), first.str(), d);
    total += t.size(d);
  }
  Shape shape = first.shape();
  shape[d] = total;
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  int64_t at = 0;
  for (const Tensor& t : xs) {
    if (t.size(d) > 0) out.narrow(d, at, t.size(d)).copy_from(t);
    at += t.size(d);
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int dim) {
  detail::check_defined(x, "split", "x");
  const int d = dim < 0 ? dim + x.dim() : dim;
  FLUXRT_CHECK(d >= 0 && d < x.dim(), ErrorCode::InvalidArgument, "[split] dim {} out of range for {}", dim,
               x.shape().str());
  int64_t total = 0;
  for (int64_t s : sizes) {
    FLUXRT_CHECK(s >= 0, ErrorCode::InvalidArgument, "[split] negative size {}", s);
    total += s;
  }
  FLUXRT_CHECK(total == x.size(d), ErrorCode::InvalidArgument, "[split] sizes sum to {} but dim {} of {} is {}",
               total, d, x.shape().str(), x.size(d));
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(x.narrow(d, at, s));
    at += s;
  }
  return out;
}

}  // namespace fluxrt::ops
