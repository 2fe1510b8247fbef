// Linear on CUDA through cuBLASLt: y[M, N] = epilogue(x[M, K] @ W[N, K]^T).
//
// Row-major y = x W^T is column-major y^T = W^T-as-stored... concretely: cuBLASLt sees A = W as a
// column-major K x N matrix (ld = W.stride(0)) used transposed, B = x as column-major K x M
// (ld = x.stride(0)), D = y as column-major N x M (ld = y.stride(0)). No copies, any row strides.
//
// Precision: bf16/f16 inputs with f32 accumulation (CUBLAS_COMPUTE_32F); f32 inputs with strict
// f32 (no TF32: the f32 tolerance is rel-L2 1e-5). Split-K partial sums stay in f32 too (the
// reduction schemes that add them in the output type are excluded). Mixed x/W dtypes run in f32
// (the weight is widened once and cached). Bias and GELU-tanh go into cuBLASLt's epilogue when x,
// W and y share a dtype; GELU only for 16-bit outputs (the epilogue's tanh is of unknown accuracy,
// which a bf16/f16 rounding hides and an f32 result would not; FLUXRT_CUDA_GELU_EPILOGUE=0 keeps it
// out entirely: tests check its formula against the reference). SiLU and the gated residual run in
// our epilogue kernel on an f32 GEMM result, so the output is rounded once; so does anything
// cuBLASLt has no fused algorithm for. The algorithm (or that there is none) is chosen once per
// (shape, dtypes, epilogue, strides, alignment) by cuBLASLt's heuristic and cached.
#include <cublasLt.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_ops.h"

namespace fluxrt::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

void check_lt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    fail(ErrorCode::Device, "[linear] cuBLASLt {} failed: cublasStatus_t {}", what, static_cast<int>(s));
}

cublasLtHandle_t lt_handle(DeviceContext& c) {
  make_current(c.index);  // the handle and its workspace are per device; the matmul runs on c.stream()
  std::lock_guard lock(c.handles_mutex);
  if (!c.cublaslt) {
    require_not_capturing(c, "[linear] the cuBLASLt workspace");
    cublasLtHandle_t h = nullptr;
    check_lt(cublasLtCreate(&h), "create");
    c.cublaslt = h;
    c.cublaslt_workspace = device_allocate(c.index, kWorkspaceBytes);
    c.cublaslt_workspace_bytes = kWorkspaceBytes;
  }
  return static_cast<cublasLtHandle_t>(c.cublaslt);
}

cudaDataType_t cuda_type(DType d) {
  switch (d) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    default: fail(ErrorCode::Unsupported, "[linear] dtype {} on CUDA", dtype_name(d));
  }
}

bool gelu_epilogue_allowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("FLUXRT_CUDA_GELU_EPILOGUE");
    return !(v && std::string(v) == "0");
  }();
  return allowed;
}

int alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (int b : {256, 128, 64, 32, 16, 8, 4}) if (a % b == 0) return b;
  return 2;
}

struct LinearState {
  Tensor weight;  // [N, K] on the device, contiguous, checkpoint dtype
  Tensor bias;    // [N] on the device or undefined
  std::mutex mutex;
  Tensor weight_f32;  // widened copy for mixed-dtype calls, made on first need
};

struct PlanKey {
  int device;
  int64_t m, n, k, ldx, ldw, ldy;
  int xt, wt, yt, epilogue, bias_type;
  int align_x, align_w, align_y, align_bias;
  int w_nk;
  auto tie() const {
    return std::tie(device, m, n, k, ldx, ldw, ldy, xt, wt, yt, epilogue, bias_type, align_x, align_w, align_y,
                    align_bias, w_nk);
  }
  bool operator<(const PlanKey& o) const { return tie() < o.tie(); }
};

// A shape's algorithm, or none: cuBLASLt has no algorithm for some fused epilogues (a bias or
// pointer alignment it cannot use, say), and asking its heuristic again every call would be slow.
struct Plan {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};

std::mutex g_plan_mutex;
std::map<PlanKey, Plan>& plan_cache() {
  static auto* cache = new std::map<PlanKey, Plan>();  // never destroyed: used until exit
  return *cache;
}

struct Layouts {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  ~Layouts() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

// D[N x M] = op(W) x in cuBLASLt's column-major terms, i.e. row-major y[M, N] = alpha * x[M, K] W'
// written to `out` (row stride ld_out) in out_type. False, with nothing run, when cuBLASLt has no
// algorithm for this configuration.
bool gemm(DeviceContext& c, int64_t M, int64_t N, int64_t K, const GemmOperand& x, const GemmOperand& w, bool w_nk,
          float alpha, void* out, DType out_type, int64_t ld_out, int epilogue_code, const Tensor& bias) {
  const auto epilogue = epilogue_code == 0 ? CUBLASLT_EPILOGUE_DEFAULT : static_cast<cublasLtEpilogue_t>(epilogue_code);
  // A single row's (or column's) stride is never used, but cuBLASLt requires leading dimensions
  // >= the rows of the column-major matrix.
  const int64_t ldx = M == 1 ? std::max(x.ld, K) : x.ld;
  const int64_t ldw = w_nk ? (N == 1 ? std::max(w.ld, K) : w.ld) : (K == 1 ? std::max(w.ld, N) : w.ld);
  if (M == 1) ld_out = std::max(ld_out, N);
  cublasLtHandle_t handle = lt_handle(c);
  Layouts L;
  check_lt(cublasLtMatmulDescCreate(&L.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  // W [N, K] row-major is column-major K x N, used transposed; W [K, N] is column-major N x K as is.
  const cublasOperation_t ta = w_nk ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(L.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "transa");
  check_lt(cublasLtMatmulDescSetAttribute(L.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "transb");
  check_lt(cublasLtMatmulDescSetAttribute(L.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)), "epilogue");
  const void* bias_ptr = bias.defined() ? bias.raw_data() : nullptr;
  if (bias_ptr) {
    check_lt(cublasLtMatmulDescSetAttribute(L.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)),
             "bias pointer");
    const cudaDataType_t bt = cuda_type(bias.dtype());
    check_lt(cublasLtMatmulDescSetAttribute(L.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)), "bias type");
  }
  check_lt(cublasLtMatrixLayoutCreate(&L.a, cuda_type(w.dtype), w_nk ? K : N, w_nk ? N : K, ldw), "layout W");
  check_lt(cublasLtMatrixLayoutCreate(&L.b, cuda_type(x.dtype), K, M, ldx), "layout x");
  check_lt(cublasLtMatrixLayoutCreate(&L.d, cuda_type(out_type), N, M, ld_out), "layout y");

  const PlanKey key{c.index, M, N, K, ldx, ldw, ld_out, static_cast<int>(x.dtype),
                    static_cast<int>(w.dtype), static_cast<int>(out_type), static_cast<int>(epilogue),
                    bias_ptr ? static_cast<int>(bias.dtype()) : -1, alignment_of(x.data),
                    alignment_of(w.data), alignment_of(out), bias_ptr ? alignment_of(bias_ptr) : 0, w_nk ? 1 : 0};
  Plan plan;
  bool cached = false;
  {
    std::lock_guard lock(g_plan_mutex);
    auto it = plan_cache().find(key);
    if (it != plan_cache().end()) {
      plan = it->second;
      cached = true;
    }
  }
  if (!cached) {
    cublasLtMatmulPreference_t pref = nullptr;
    check_lt(cublasLtMatmulPreferenceCreate(&pref), "preference");
    const size_t ws = c.cublaslt_workspace_bytes;
    auto set = [&](cublasLtMatmulPreferenceAttributes_t attr, const auto& v) {
      check_lt(cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof(v)), "preference");
    };
    set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, ws);
    const uint32_t ax = alignment_of(x.data), aw = alignment_of(w.data), ay = alignment_of(out);
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, aw);
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, ax);
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, ay);
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, ay);
    // Split-K may add its partial sums in place in the output type (bf16 partials: one rounding
    // per split instead of one in all); only no split or an f32 workspace reduction keep the sum in f32.
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, schemes);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(handle, L.op, L.a, L.b, L.d, L.d, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    // NOT_SUPPORTED is how the heuristic says "nothing for this configuration".
    if (s != CUBLAS_STATUS_NOT_SUPPORTED) check_lt(s, "heuristic");
    plan.found = s == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    plan.algo = result.algo;
    std::lock_guard lock(g_plan_mutex);
    plan_cache()[key] = plan;
  }
  if (!plan.found) return false;
  const float beta = 0.0f;
  check_lt(cublasLtMatmul(handle, L.op, &alpha, w.data, L.a, x.data, L.b, &beta, out, L.d, out, L.d,
                          &plan.algo, c.cublaslt_workspace, c.cublaslt_workspace_bytes, c.stream()),
           "matmul");
  return true;
}

namespace {

GemmOperand rows_of(const Tensor& t) { return {t.raw_data(), t.dtype(), t.stride(0)}; }

// y = x W^T (+ epilogue) for linear: x [M, K], W [N, K].
bool linear_gemm(DeviceContext& c, const Tensor& x, const Tensor& w, void* out, DType out_type, int64_t ld_out,
                 cublasLtEpilogue_t epilogue, const Tensor& bias) {
  return gemm(c, x.size(0), w.size(0), x.size(1), rows_of(x), rows_of(w), true, 1.0f, out, out_type, ld_out,
              static_cast<int>(epilogue), bias);
}

std::shared_ptr<backend::PreparedLinear> prepare_linear(const Tensor& weight, const Tensor& bias) {
  // ops::prepare_linear has placed both on the device being prepared for (cuda:N): using their
  // device keeps N (an implicit cuda:0 would run every layer of a cuda:1 model on the wrong GPU).
  require_on_device(weight, "linear", "weight to prepare");
  require_on_device(bias, "linear", "bias to prepare");
  FLUXRT_CHECK(!bias.defined() || bias.device() == weight.device(), ErrorCode::InvalidArgument,
               "[linear] weight on {} but bias on {}", weight.device().str(), bias.device().str());
  auto p = std::make_shared<backend::PreparedLinear>();
  auto state = std::make_shared<LinearState>();
  // Resident once per model in the checkpoint dtype: the placed tensor itself when it is packed
  // already (a device copy only for strided views).
  state->weight = weight.contiguous();
  if (bias.defined()) state->bias = bias.reshape({weight.size(0)}).contiguous();
  p->weight = state->weight;
  p->bias = state->bias;
  p->state = state;
  return p;
}

void linear(const backend::LinearArgs& a) {
  require_on_device(a.x, "linear", "x");
  require_on_device(a.y, "linear", "y");
  require_on_device(a.residual, "linear", "residual");
  require_on_device(a.gate, "linear", "gate");
  auto* state = static_cast<LinearState*>(a.w->state.get());
  FLUXRT_CHECK(state != nullptr && state->weight.defined() && !state->weight.device().is_cpu(),
               ErrorCode::InvalidArgument, "[linear] weight was not prepared by the CUDA backend");
  FLUXRT_CHECK(state->weight.device() == a.x.device(), ErrorCode::InvalidArgument,
               "[linear] weight prepared on {} but x is on {}", state->weight.device().str(), a.x.device().str());
  DeviceContext& c = context_of(a.x);
  const int64_t M = a.x.size(0), N = state->weight.size(0);

  Tensor x = a.x, w = state->weight;
  // Broadcast rows (stride 0) are no matrix cuBLASLt accepts: packed first.
  if (M > 1 && x.stride(0) < x.size(1)) x = x.contiguous();
  if (x.dtype() != w.dtype()) {
    // Mixed dtypes: compute in f32 (exact widening of the 16-bit side).
    if (w.dtype() != DType::F32) {
      std::lock_guard lock(state->mutex);
      if (!state->weight_f32.defined()) {
        require_not_capturing(c, "[linear] the widened f32 weight");
        state->weight_f32 = w.to(DType::F32);
      }
      w = state->weight_f32;
    }
    if (x.dtype() != DType::F32) x = x.to(DType::F32);
  }
  const bool same_type = x.dtype() == a.y.dtype() && w.dtype() == a.y.dtype();
  const bool bias_fusable = !state->bias.defined() || state->bias.dtype() == a.y.dtype();
  const bool act_fusable = a.activation == backend::Activation::None ||
                           (a.activation == backend::Activation::GeluTanh && a.y.dtype() != DType::F32 &&
                            gelu_epilogue_allowed());
  if (same_type && bias_fusable && act_fusable && !a.gate.defined()) {
    cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_DEFAULT;
    if (a.activation == backend::Activation::GeluTanh)
      ep = state->bias.defined() ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    else if (state->bias.defined())
      ep = CUBLASLT_EPILOGUE_BIAS;
    if (linear_gemm(c, x, w, a.y.raw_data(), a.y.dtype(), a.y.stride(0), ep, state->bias)) return;
  }
  // f32 GEMM result, then bias + activation + gated residual and one rounding in our epilogue.
  Scratch acc(c.index, static_cast<size_t>(M * N) * sizeof(float));
  if (!linear_gemm(c, x, w, acc.get(), DType::F32, N, CUBLASLT_EPILOGUE_DEFAULT, Tensor())) {
    // Only a misaligned view can leave the plain GEMM without an algorithm: a packed copy is
    // 256-byte aligned.
    FLUXRT_CHECK(linear_gemm(c, x.clone(), w, acc.get(), DType::F32, N, CUBLASLT_EPILOGUE_DEFAULT,
                      Tensor()),
                 ErrorCode::Unsupported, "[linear] cuBLASLt has no algorithm for M={} N={} K={} ({} x {})", M, N,
                 x.size(1), dtype_name(x.dtype()), dtype_name(w.dtype()));
  }
  kern::Act act = kern::Act::None;
  if (a.activation == backend::Activation::GeluTanh) act = kern::Act::GeluTanh;
  if (a.activation == backend::Activation::Silu) act = kern::Act::Silu;
  FLUXRT_CUDA_CHECK(kern::launch_linear_epilogue(acc.as<float>(), N, operand(a.y), column_vector(state->bias), act,
                                                 column_vector(a.gate), operand(a.residual), M, N, c.stream(),
                                                 c.sm_count),
                    "linear epilogue");
}

}  // namespace

void fill_linear(backend::KernelTable& t) {
  t.prepare_linear = prepare_linear;
  t.linear = linear;
}

}  // namespace fluxrt::cuda
