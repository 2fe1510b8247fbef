#include "ops/linear.h"

#include "core/error.h"
#include "ops/dispatch.h"
#include "ops/op_utils.h"

namespace fluxrt::ops {
namespace {

bool is_gemm_dtype(DType d) { return d == DType::F32 || d == DType::BF16 || d == DType::F16; }

// [..., C] as a 2-D [rows, C] with unit column stride: a 2-D view as is, leading dims collapsed
// when the layout allows, else a contiguous copy (inputs only).
// [..., C] with unit column stride as [rows, C] without a copy, when its leading dims merge (a
// contiguous tensor, or a column slice of one: rows of one stride); undefined when they do not.
Tensor rows_view(const Tensor& t) {
  if (t.dim() == 0 || t.stride(-1) != 1) return Tensor();
  if (t.dim() == 1) return t.unsqueeze(0);
  Tensor r = t;
  while (r.dim() > 2) {
    if (!r.can_merge(0)) return Tensor();
    r = r.merge(0);
  }
  return r;
}

Tensor as_rows(const Tensor& t) {
  Tensor r = rows_view(t);
  if (r.defined()) return r;
  return t.contiguous().reshape({-1, t.size(-1)});
}

// Outputs must be written in place: only views are allowed.
Tensor output_rows(const Tensor& y, const char* what) {
  Tensor r = rows_view(y);
  FLUXRT_CHECK(r.defined(), ErrorCode::InvalidArgument,
               "[linear] {} must be rows of one stride with unit column stride, got {} with strides {}", what,
               y.shape().str(), y.strides().str());
  return r;
}

Shape out_shape(const Tensor& x, int64_t n) {
  Shape s = x.shape();
  s[s.size() - 1] = n;
  return s;
}

void run(const Tensor& x, const backend::PreparedLinear& w, const Tensor& gate, const Tensor& residual,
         const Tensor& y, Activation act) {
  FLUXRT_CHECK(x.defined() && x.dim() >= 1, ErrorCode::InvalidArgument, "[linear] x is undefined or a scalar");
  FLUXRT_CHECK(is_gemm_dtype(x.dtype()), ErrorCode::Unsupported, "[linear] x dtype {} is not f32/bf16/f16",
               dtype_name(x.dtype()));
  const int64_t k = w.in_features(), n = w.out_features();
  FLUXRT_CHECK(x.size(-1) == k, ErrorCode::InvalidArgument, "[linear] x {} does not end in K = {} (weight {})",
               x.shape().str(), k, w.weight.shape().str());
  FLUXRT_CHECK(y.shape() == out_shape(x, n), ErrorCode::InvalidArgument, "[linear] y {} should be {}",
               y.shape().str(), out_shape(x, n).str());
  FLUXRT_CHECK(is_gemm_dtype(y.dtype()), ErrorCode::Unsupported, "[linear] y dtype {} is not f32/bf16/f16",
               dtype_name(y.dtype()));
  FLUXRT_CHECK(x.device() == y.device(), ErrorCode::InvalidArgument, "[linear] x on {} but y on {}",
               x.device().str(), y.device().str());
  FLUXRT_CHECK(x.device() == w.device, ErrorCode::InvalidArgument, "[linear] tensors on {} and {} (x, weight)",
               x.device().str(), w.device.str());
  detail::check_on_device(gate, x.device(), "linear", "gate");
  detail::check_on_device(residual, x.device(), "linear", "residual");
  backend::LinearArgs args;
  args.x = as_rows(x);
  args.w = &w;
  args.activation = act;
  args.y = output_rows(y, "y");
  if (gate.defined()) {
    FLUXRT_CHECK(gate.numel() == n, ErrorCode::InvalidArgument, "[linear] gate {} should have N = {} elements",
                 gate.shape().str(), n);
    FLUXRT_CHECK(residual.defined() && residual.shape() == y.shape(), ErrorCode::InvalidArgument,
                 "[linear] residual {} should be {}", residual.defined() ? residual.shape().str() : "undefined",
                 y.shape().str());
    args.gate = gate.is_contiguous() ? gate.view({n}) : gate.contiguous().view({n});
    args.residual = residual.raw_data() == y.raw_data() ? output_rows(residual, "residual") : as_rows(residual);
  }
  const auto& k_table = kernels_for(x);
  auto kernel = require_kernel(k_table.linear, "linear", k_table);
  if (args.x.size(0) == 0) return;  // no rows: nothing to compute (kernels assume M >= 1)
  kernel(args);
}

// The format's preparation slot of `table`: Unsupported, naming the backend, where it has none
// (a model asked for int8 must not run in bf16 unnoticed).
template <typename Slot>
Slot int8_slot(Slot slot, const backend::KernelTable& table) {
  FLUXRT_CHECK(slot != nullptr, ErrorCode::Unsupported,
               "[linear] int8 linears run on the CPU only; the {} backend has none (use bf16)", table.name);
  return slot;
}

}  // namespace

std::shared_ptr<backend::PreparedLinear> prepare_linear(const Tensor& weight, const Tensor& bias,
                                                        Device device, LinearFormat format) {
  FLUXRT_CHECK(weight.defined() && weight.dim() == 2, ErrorCode::InvalidArgument,
               "[linear] weight must be [N, K], got {}", weight.defined() ? weight.shape().str() : "undefined");
  FLUXRT_CHECK(is_gemm_dtype(weight.dtype()), ErrorCode::Unsupported, "[linear] weight dtype {} is not f32/bf16/f16",
               dtype_name(weight.dtype()));
  FLUXRT_CHECK(weight.size(0) > 0 && weight.size(1) > 0, ErrorCode::InvalidArgument,
               "[linear] weight {} has an empty dimension", weight.shape().str());
  if (bias.defined())
    FLUXRT_CHECK(bias.numel() == weight.size(0), ErrorCode::InvalidArgument,
                 "[linear] bias {} does not match N = {}", bias.shape().str(), weight.size(0));
  const auto& table = kernels_for(device);
  const Tensor w = detail::place_parameter(weight, device);
  const Tensor b = detail::place_parameter(bias.defined() ? bias.reshape({weight.size(0)}) : bias, device);
  std::shared_ptr<backend::PreparedLinear> p;
  if (format == LinearFormat::Int8) {
    p = int8_slot(table.prepare_linear_int8, table)(w, b);
  } else if (table.prepare_linear) {
    p = table.prepare_linear(w, b);
  } else {  // a backend without a preparation step uses the weight as is
    p = std::make_shared<backend::PreparedLinear>();
    p->weight = w;
    p->bias = b;
  }
  p->device = device;
  return p;
}

std::shared_ptr<backend::PreparedLinear> prepare_linear_quantized(const QuantizedMatrix& weight,
                                                                  const Tensor& bias, Device device,
                                                                  LinearFormat format) {
  validate_quantized(weight, "[linear]");
  if (bias.defined())
    FLUXRT_CHECK(bias.numel() == weight.rows, ErrorCode::InvalidArgument,
                 "[linear] bias {} does not match N = {}", bias.shape().str(), weight.rows);
  const auto& table = kernels_for(device);
  const auto prepare = format == LinearFormat::Int8 ? int8_slot(table.prepare_linear_quantized_int8, table)
                                                    : table.prepare_linear_quantized;
  if (!prepare) {
    auto p = prepare_linear(dequantize_ref(weight).to(DType::BF16), bias, device);
    p->quantized = std::make_shared<QuantizedMatrix>(weight);
    return p;
  }
  const Tensor b = detail::place_parameter(bias.defined() ? bias.reshape({weight.rows}) : bias, device);
  auto p = prepare(weight, b);
  // The weight must carry the device label the checks compare: a dequantized one is relabelled, a
  // stride-0 stand-in is made anew there (placing it would allocate its full size).
  if (p->weight.device() != device) {
    p->weight = p->weight.is_contiguous()
                    ? detail::place_parameter(p->weight, device)
                    : Tensor::zeros({1, 1}, p->weight.dtype(), device).expand(p->weight.shape());
  }
  p->device = device;
  return p;
}

Tensor linear(const Tensor& x, const backend::PreparedLinear& w, Activation act) {
  Tensor y = Tensor::empty(out_shape(x, w.out_features()), x.dtype(), x.device());
  run(x, w, Tensor(), Tensor(), y, act);
  return y;
}

void linear_into(const Tensor& x, const backend::PreparedLinear& w, const Tensor& y, Activation act) {
  run(x, w, Tensor(), Tensor(), y, act);
}

Tensor linear_gated_residual(const Tensor& x, const backend::PreparedLinear& w, const Tensor& gate,
                             const Tensor& residual, Activation act) {
  Tensor y = Tensor::empty(out_shape(x, w.out_features()), x.dtype(), x.device());
  run(x, w, gate, residual, y, act);
  return y;
}

void linear_gated_residual_into(const Tensor& x, const backend::PreparedLinear& w, const Tensor& gate,
                                const Tensor& residual, const Tensor& y, Activation act) {
  FLUXRT_CHECK(gate.defined(), ErrorCode::InvalidArgument, "[linear] gated residual needs a gate");
  run(x, w, gate, residual, y, act);
}

}  // namespace fluxrt::ops
