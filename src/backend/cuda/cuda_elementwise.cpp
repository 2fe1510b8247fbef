// Host side of the element-wise, normalisation and VAE kernels (elementwise.cu, norm.cu): turn the
// Args of backend/args/*.h into launch structs. The ops layer validated shapes and dtypes; here we
// only check that every tensor really is on the device.
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_ops.h"

namespace fluxrt::cuda {
namespace {

// Rows of a [..., D] view (leading dims flattened).
int64_t rows_of(const Tensor& t) {
  if (t.dim() == 0) return 1;
  int64_t r = 1;
  for (int i = 0; i + 1 < t.dim(); ++i) r *= t.size(i);
  return r;
}
int64_t cols_of(const Tensor& t) { return t.dim() == 0 ? 1 : t.size(-1); }

// Tensors that are passed as [rows, D] where a 0-d tensor counts as [1, 1].
Tensor as_rows(const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; }

void run_map(kern::MapArgs& m, const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& y, const char* op) {
  require_on_device(a, op, "input");
  require_on_device(b, op, "second input");
  require_on_device(c, op, "third input");
  require_on_device(y, op, "output");
  DeviceContext& ctx = context_of(y);
  const Tensor ar = as_rows(a), yr = as_rows(y);
  m.a = operand(ar);
  m.y = operand(yr);
  m.rows = rows_of(yr);
  m.cols = cols_of(yr);
  m.vectorized = vector_friendly(ar) && vector_friendly(yr) && (m.b_chan_div > 0 || vector_friendly(b)) &&
                 (m.c_chan_div > 0 || vector_friendly(c));
  FLUXRT_CUDA_CHECK(kern::launch_map(m, ctx.stream(), ctx.sm_count), op);
}

void unary(const backend::UnaryArgs& a) {
  kern::MapArgs m;
  switch (a.op) {
    case backend::UnaryOp::Silu: m.op = kern::MapOp::Silu; break;
    case backend::UnaryOp::GeluTanh: m.op = kern::MapOp::GeluTanh; break;
    case backend::UnaryOp::QuickGelu: m.op = kern::MapOp::QuickGelu; break;
    case backend::UnaryOp::Scale: m.op = kern::MapOp::Scale; break;
  }
  m.alpha = a.alpha;
  run_map(m, a.x, Tensor(), Tensor(), a.y, "unary");
}

void binary(const backend::BinaryArgs& a) {
  kern::MapArgs m;
  m.op = a.op == backend::BinaryOp::Add ? kern::MapOp::Add : kern::MapOp::Mul;
  const Tensor b = as_rows(a.b);
  m.b = operand(b);
  run_map(m, a.a, b, Tensor(), a.y, "binary");
}

void glu(const backend::GluArgs& a) {
  kern::MapArgs m;
  m.op = a.act == backend::GluActivation::Silu ? kern::MapOp::GluSilu : kern::MapOp::GluGelu;
  m.b = operand(a.up);
  run_map(m, a.gate, a.up, Tensor(), a.y, "glu");
}

void gated_residual(const backend::GatedResidualArgs& a) {
  kern::MapArgs m;
  m.op = kern::MapOp::GatedResidual;
  m.b = operand(a.y);
  m.c = operand(a.gate, a.x.size(1));  // row r of [B, L, D] reads gate row r / L
  run_map(m, a.x, a.y, a.gate, a.out, "gated_residual");
}

void run_rows(kern::RowArgs& r, const Tensor& x, const Tensor& y, const char* op) {
  require_on_device(x, op, "x");
  require_on_device(y, op, "y");
  DeviceContext& ctx = context_of(y);
  const Tensor xr = as_rows(x), yr = as_rows(y);
  r.x = operand(xr);
  r.y = operand(yr);
  r.rows = rows_of(xr);
  r.cols = cols_of(xr);
  FLUXRT_CUDA_CHECK(kern::launch_rows(r, ctx.stream(), ctx.sm_count), op);
}

void softmax(const backend::SoftmaxArgs& a) {
  kern::RowArgs r;
  r.op = kern::RowOp::Softmax;
  run_rows(r, a.x, a.y, "softmax");
}

void layer_norm(const backend::LayerNormArgs& a) {
  require_on_device(a.weight, "layer_norm", "weight");
  require_on_device(a.bias, "layer_norm", "bias");
  kern::RowArgs r;
  r.op = kern::RowOp::LayerNorm;
  r.weight = column_vector(a.weight);
  r.bias = column_vector(a.bias);
  r.eps = a.eps;
  run_rows(r, a.x, a.y, "layer_norm");
}

void rms_norm(const backend::RmsNormArgs& a) {
  require_on_device(a.weight, "rms_norm", "weight");
  kern::RowArgs r;
  r.op = kern::RowOp::RmsNorm;
  r.weight = column_vector(a.weight);
  r.eps = a.eps;
  r.round_before_weight = a.round_before_weight;
  run_rows(r, a.x, a.y, "rms_norm");
}

void adaln_modulate(const backend::AdaLnArgs& a) {
  require_on_device(a.shift, "adaln_modulate", "shift");
  require_on_device(a.scale, "adaln_modulate", "scale");
  kern::RowArgs r;
  r.op = kern::RowOp::AdaLn;
  const int64_t L = a.x.size(1);
  r.shift = operand(a.shift, L);
  r.scale = operand(a.scale, L);
  r.eps = a.eps;
  run_rows(r, a.x, a.y, "adaln_modulate");
}

void embedding(const backend::EmbeddingArgs& a) {
  require_on_device(a.ids, "embedding", "ids");
  require_on_device(a.table, "embedding", "table");
  require_on_device(a.out, "embedding", "out");
  DeviceContext& ctx = context_of(a.out);
  // The ops layer checks ids only on the host; an id outside the table would be an illegal address
  // here, so read them back (token ids are few) and name the first bad one.
  Tensor ids = Tensor::empty(a.ids.shape(), a.ids.dtype());
  ids.copy_from(a.ids);
  const int64_t V = a.table.size(0);
  for (int64_t i = 0; i < ids.numel(); ++i) {
    const int64_t id = ids.dtype() == DType::I64 ? ids.data<int64_t>()[i] : ids.data<int32_t>()[i];
    FLUXRT_CHECK(id >= 0 && id < V, ErrorCode::InvalidArgument,
                 "[embedding] id {} at position {} is outside the table's {} rows", id, i, V);
  }
  FLUXRT_CUDA_CHECK(kern::launch_embedding(a.ids.raw_data(), a.ids.dtype(), a.ids.stride(0), a.ids.numel(),
                                           operand(a.table), operand(a.out), a.table.size(1), ctx.stream(),
                                           ctx.sm_count),
                    "embedding");
}

void group_norm(const backend::GroupNormArgs& a) {
  require_on_device(a.x, "group_norm", "x");
  require_on_device(a.y, "group_norm", "y");
  require_on_device(a.weight, "group_norm", "weight");
  require_on_device(a.bias, "group_norm", "bias");
  DeviceContext& ctx = context_of(a.y);
  const int64_t N = a.x.size(0), C = a.x.size(1);
  const int64_t hw = N * C == 0 ? 0 : a.x.numel() / (N * C);
  Scratch partials(ctx.index, static_cast<size_t>(kern::group_norm_scratch_floats(N, a.groups)) * sizeof(float));
  FLUXRT_CUDA_CHECK(kern::launch_group_norm(a.x.raw_data(), a.x.dtype(), a.y.raw_data(), a.y.dtype(),
                                            column_vector(a.weight), column_vector(a.bias), N, C, hw, a.groups, a.eps,
                                            a.silu, partials.as<float>(), ctx.stream(), ctx.sm_count),
                    "group_norm");
}

void upsample_nearest_2x(const backend::Upsample2xArgs& a) {
  require_on_device(a.x, "upsample_nearest_2x", "x");
  require_on_device(a.y, "upsample_nearest_2x", "y");
  FLUXRT_CHECK(a.x.dtype() == a.y.dtype(), ErrorCode::Unsupported, "[upsample_nearest_2x] {} -> {} on CUDA",
               dtype_name(a.x.dtype()), dtype_name(a.y.dtype()));
  FLUXRT_CHECK(a.x.element_size() == 2 || a.x.element_size() == 4, ErrorCode::Unsupported,
               "[upsample_nearest_2x] dtype {} on CUDA", dtype_name(a.x.dtype()));
  DeviceContext& ctx = context_of(a.y);
  const int64_t H = a.x.size(-2), W = a.x.size(-1);
  const int64_t planes = H * W == 0 ? 0 : a.x.numel() / (H * W);
  FLUXRT_CUDA_CHECK(kern::launch_pad_upsample(a.x.raw_data(), a.y.raw_data(), a.x.dtype(), planes, H, W, 2, 0, 0,
                                              2 * H, 2 * W, ctx.stream(), ctx.sm_count),
                    "upsample_nearest_2x");
}

void channel_norm(const backend::ChannelNormArgs& a) {
  require_on_device(a.mean, "channel_norm", "mean");
  require_on_device(a.var, "channel_norm", "var");
  const int64_t N = a.x.size(0), C = a.x.size(1);
  const int64_t hw = N * C == 0 ? 0 : a.x.numel() / (N * C);
  // Rows are the N*C planes of HW elements; mean/var are read per plane (channel = row % C).
  const Tensor x = a.x.reshape({N * C, hw}), y = a.y.reshape({N * C, hw});
  kern::MapArgs m;
  m.op = a.inverse ? kern::MapOp::ChannelDenorm : kern::MapOp::ChannelNorm;
  m.alpha = a.eps;
  m.b = column_vector(a.mean);
  m.c = column_vector(a.var);
  m.b_chan_div = m.c_chan_div = 1;
  m.b_chan_mod = m.c_chan_mod = C;
  run_map(m, x, a.mean, a.var, y, "channel_norm");
}

}  // namespace

void fill_elementwise(backend::KernelTable& t) {
  t.unary = unary;
  t.binary = binary;
  t.glu = glu;
  t.gated_residual = gated_residual;
  t.softmax = softmax;
  t.embedding = embedding;
  t.adaln_modulate = adaln_modulate;
  t.layer_norm = layer_norm;
  t.rms_norm = rms_norm;
  t.group_norm = group_norm;
  t.upsample_nearest_2x = upsample_nearest_2x;
  t.channel_norm = channel_norm;
}

}  // namespace fluxrt::cuda
