// 2-D convolution on CUDA through cuDNN's convolution API (cudnnConvolutionForward), NCHW.
// cuDNN's frontend graph API would allow fusing more, but the plain API covers every VAE
// convolution with far less code: the weights are uploaded (and converted to the activation
// dtype) once per dtype, the algorithm comes from cuDNN's heuristic once per shape and is cached.
//
// What cuDNN cannot express is done around it: the nearest 2x upsample and asymmetric padding
// (the VAE downsampler pads (0, 1, 0, 1)) become one pad/upsample copy of the input
// (launch_pad_upsample), and bias + residual one epilogue pass over the output. bf16/f16 run on
// tensor cores with f32 accumulation; f32 uses FMA math (no TF32: the f32 tolerance is rel-L2 1e-5).
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_ops.h"

#ifdef FLUXRT_HAVE_CUDNN
#include <cudnn.h>

#include <array>
#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

namespace fluxrt::cuda {
namespace {

void check_dnn(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) fail(ErrorCode::Device, "[conv2d] cuDNN {} failed: {}", what, cudnnGetErrorString(s));
}

// The caller holds c.cudnn_mutex until its convolution is queued.
cudnnHandle_t dnn_handle(DeviceContext& c) {
  make_current(c.index);  // a cuDNN handle belongs to the device current at cudnnCreate
  std::lock_guard lock(c.handles_mutex);
  if (!c.cudnn) {
    require_not_capturing(c, "[conv2d] creating the cuDNN handle");
    cudnnHandle_t h = nullptr;
    check_dnn(cudnnCreate(&h), "create");
    c.cudnn = h;
  }
  auto h = static_cast<cudnnHandle_t>(c.cudnn);
  check_dnn(cudnnSetStream(h, c.stream()), "set stream");
  return h;
}

cudnnDataType_t dnn_type(DType d) {
  switch (d) {
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    case DType::F16: return CUDNN_DATA_HALF;
    default: fail(ErrorCode::Unsupported, "[conv2d] dtype {} on CUDA", dtype_name(d));
  }
}

struct ConvState {
  Tensor weight;  // device, checkpoint dtype
  Tensor bias;    // device or undefined
  std::mutex mutex;
  std::map<DType, Tensor> weight_as;  // weight converted to an activation dtype
  // Per (x shape, dtype, stride, padding, y strides): the algorithm and the math type it was ranked with.
  std::map<std::array<int64_t, 12>, std::pair<cudnnConvolutionFwdAlgo_t, cudnnMathType_t>> algos;
};

// Algorithms whose workspace exceeds this are passed over while a leaner one exists: the heuristic
// ranks by speed alone, and an FFT workspace on a VAE-sized input can be gigabytes that the
// decode's memory plan never counted.
constexpr size_t kMaxConvWorkspace = size_t{512} << 20;

// cuDNN's legacy API indexes with 32-bit ints.
void check_32bit(const Tensor& t, const char* name) {
  int64_t reach = 1;
  for (int i = 0; i < t.dim(); ++i) reach += (t.size(i) - 1) * t.stride(i);
  FLUXRT_CHECK(t.numel() <= INT32_MAX && reach <= INT32_MAX, ErrorCode::Unsupported,
               "[conv2d] {} {} has over 2^31 elements, more than cuDNN indexes (decode in tiles: --vae-tiling on)", name,
               t.shape().str());
}

std::shared_ptr<backend::PreparedConv2d> prepare_conv2d(const Tensor& weight, const Tensor& bias) {
  // Placed on the device being prepared for by ops::prepare_conv2d (cuda:N keeps N).
  require_on_device(weight, "conv2d", "weight to prepare");
  require_on_device(bias, "conv2d", "bias to prepare");
  FLUXRT_CHECK(!bias.defined() || bias.device() == weight.device(), ErrorCode::InvalidArgument,
               "[conv2d] weight on {} but bias on {}", weight.device().str(), bias.device().str());
  auto p = std::make_shared<backend::PreparedConv2d>();
  auto state = std::make_shared<ConvState>();
  state->weight = weight.contiguous();
  if (bias.defined()) state->bias = bias.reshape({bias.numel()}).contiguous();
  p->weight = state->weight;
  p->bias = state->bias;
  p->state = state;
  return p;
}

struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ~Descriptors() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
};

void conv2d(const backend::Conv2dArgs& a) {
  require_on_device(a.x, "conv2d", "x");
  require_on_device(a.y, "conv2d", "y");
  require_on_device(a.residual, "conv2d", "residual");
  auto* state = static_cast<ConvState*>(a.w->state.get());
  FLUXRT_CHECK(state != nullptr && !state->weight.device().is_cpu(), ErrorCode::InvalidArgument,
               "[conv2d] weight was not prepared by the CUDA backend");
  FLUXRT_CHECK(state->weight.device() == a.x.device(), ErrorCode::InvalidArgument,
               "[conv2d] weight prepared on {} but x is on {}", state->weight.device().str(), a.x.device().str());
  DeviceContext& c = context_of(a.x);
  const DType dt = a.x.dtype();
  FLUXRT_CHECK(a.y.dtype() == dt, ErrorCode::Unsupported, "[conv2d] x {} but y {} on CUDA", dtype_name(dt),
               dtype_name(a.y.dtype()));
  Tensor w;
  {
    std::lock_guard lock(state->mutex);
    if (state->weight.dtype() == dt) {
      w = state->weight;
    } else {
      auto it = state->weight_as.find(dt);
      if (it == state->weight_as.end()) {
        require_not_capturing(c, "[conv2d] the converted weight");
        it = state->weight_as.emplace(dt, state->weight.to(dt)).first;
      }
      w = it->second;
    }
  }

  // The input cuDNN sees: x itself, or x upsampled and/or padded when cuDNN cannot do it.
  Tensor x = a.x.contiguous();
  int pad_h = a.pad_top, pad_w = a.pad_left;
  const bool symmetric = a.pad_top == a.pad_bottom && a.pad_left == a.pad_right;
  if (a.upsample_nearest_2x || !symmetric) {
    const int up = a.upsample_nearest_2x ? 2 : 1;
    const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    const int64_t pt = symmetric ? 0 : a.pad_top, pl = symmetric ? 0 : a.pad_left;
    const int64_t Ho = H * up + (symmetric ? 0 : a.pad_top + a.pad_bottom);
    const int64_t Wo = W * up + (symmetric ? 0 : a.pad_left + a.pad_right);
    Tensor staged = Tensor::empty({N, C, Ho, Wo}, dt, a.x.device());
    FLUXRT_CUDA_CHECK(kern::launch_pad_upsample(x.raw_data(), staged.raw_data(), dt, N * C, H, W, up, pt, pl, Ho, Wo,
                                                c.stream(), c.sm_count),
                      "conv2d input");
    x = staged;
    if (!symmetric) pad_h = pad_w = 0;
  }

  check_32bit(x, "input");
  check_32bit(a.y, "output");
  std::unique_lock dnn_lock(c.cudnn_mutex);
  cudnnHandle_t h = dnn_handle(c);
  Descriptors d;
  const cudnnDataType_t t = dnn_type(dt);
  check_dnn(cudnnCreateTensorDescriptor(&d.x), "descriptor");
  check_dnn(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NCHW, t, static_cast<int>(x.size(0)),
                                       static_cast<int>(x.size(1)), static_cast<int>(x.size(2)),
                                       static_cast<int>(x.size(3))),
            "x descriptor");
  check_dnn(cudnnCreateFilterDescriptor(&d.w), "descriptor");
  check_dnn(cudnnSetFilter4dDescriptor(d.w, t, CUDNN_TENSOR_NCHW, static_cast<int>(w.size(0)),
                                       static_cast<int>(w.size(1)), static_cast<int>(w.size(2)),
                                       static_cast<int>(w.size(3))),
            "w descriptor");
  check_dnn(cudnnCreateConvolutionDescriptor(&d.conv), "descriptor");
  check_dnn(cudnnSetConvolution2dDescriptor(d.conv, pad_h, pad_w, a.stride, a.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT),
            "conv descriptor");
  check_dnn(cudnnSetConvolutionMathType(d.conv, dt == DType::F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH), "math type");
  check_dnn(cudnnCreateTensorDescriptor(&d.y), "descriptor");
  check_dnn(cudnnSetTensor4dDescriptorEx(d.y, t, static_cast<int>(a.y.size(0)), static_cast<int>(a.y.size(1)),
                                         static_cast<int>(a.y.size(2)), static_cast<int>(a.y.size(3)),
                                         static_cast<int>(a.y.stride(0)), static_cast<int>(a.y.stride(1)),
                                         static_cast<int>(a.y.stride(2)), static_cast<int>(a.y.stride(3))),
            "y descriptor");

  const std::array<int64_t, 12> key{x.size(0),      x.size(1),      x.size(2),      x.size(3),
                                    static_cast<int64_t>(dt), a.stride, pad_h,    pad_w,
                                    a.y.stride(0),  a.y.stride(1),  a.y.stride(2),  a.y.stride(3)};
  std::pair<cudnnConvolutionFwdAlgo_t, cudnnMathType_t> choice;
  {
    std::lock_guard lock(state->mutex);
    auto it = state->algos.find(key);
    if (it == state->algos.end()) {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      int found = 0;
      check_dnn(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                       &found, perf),
                "heuristic");
      // The fastest usable one within the workspace cap, else the usable one needing least; for f32
      // no entry ranked with tensor-op math (TF32, outside the f32 tolerance), and the rest run
      // under FMA math.
      int pick = -1, leanest = -1;
      for (int i = 0; i < found; ++i) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
        if (dt == DType::F32 && perf[i].mathType != CUDNN_FMA_MATH && perf[i].mathType != CUDNN_DEFAULT_MATH) continue;
        if (pick < 0 && perf[i].memory <= kMaxConvWorkspace) pick = i;
        if (leanest < 0 || perf[i].memory < perf[leanest].memory) leanest = i;
      }
      if (pick < 0) pick = leanest;
      FLUXRT_CHECK(pick >= 0, ErrorCode::Unsupported, "[conv2d] cuDNN has no algorithm for x {} w {}",
                   x.shape().str(), w.shape().str());
      // The heuristic ranks each algorithm with a math type; running it under another can pick a
      // slower kernel, so the descriptor takes the ranked one (f32 stays on FMA math).
      const cudnnMathType_t math = dt == DType::F32 ? CUDNN_FMA_MATH : perf[pick].mathType;
      it = state->algos.emplace(key, std::make_pair(perf[pick].algo, math)).first;
    }
    choice = it->second;
  }
  const cudnnConvolutionFwdAlgo_t algo = choice.first;
  check_dnn(cudnnSetConvolutionMathType(d.conv, choice.second), "math type");
  size_t ws_bytes = 0;
  check_dnn(cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, algo, &ws_bytes), "workspace size");
  Scratch ws(c.index, ws_bytes);
  // A residual that is y itself is accumulated by cuDNN (beta = 1); any other goes to the epilogue.
  const bool residual_in_y = a.residual.defined() && a.residual.raw_data() == a.y.raw_data();
  const Tensor residual = residual_in_y ? Tensor() : a.residual;
  const float one = 1.0f, beta = residual_in_y ? 1.0f : 0.0f;
  check_dnn(cudnnConvolutionForward(h, &one, d.x, x.raw_data(), d.w, w.raw_data(), d.conv, algo, ws.get(), ws_bytes,
                                    &beta, d.y, a.y.raw_data()),
            "forward");
  dnn_lock.unlock();

  if (state->bias.defined() || residual.defined()) {
    // y = y + bias[c] + residual (an absent operand reads as 0). Packed y and residual are viewed
    // as [N*C, H*W] planes, which the 16-byte path can take; otherwise rows are the (n, c, h)
    // lines of width W.
    const int64_t N = a.y.size(0), C = a.y.size(1), Ho = a.y.size(2), Wo = a.y.size(3);
    const bool planes = a.y.is_contiguous() && (!residual.defined() || residual.is_contiguous());
    const Tensor y = planes ? a.y.view({N * C, Ho * Wo}) : a.y;
    const Tensor r = planes && residual.defined() ? residual.view({N * C, Ho * Wo}) : residual;
    kern::MapArgs m;
    m.op = kern::MapOp::BiasResidual;
    m.a = operand(y);
    m.y = m.a;
    m.rows = planes ? N * C : N * C * Ho;
    m.cols = planes ? Ho * Wo : Wo;
    if (state->bias.defined()) {
      m.b = column_vector(state->bias);
      m.b_chan_div = planes ? 1 : Ho;
      m.b_chan_mod = C;
    }
    if (r.defined()) m.c = operand(r);
    m.vectorized = planes && vector_friendly(y) && (!r.defined() || vector_friendly(r));
    FLUXRT_CUDA_CHECK(kern::launch_map(m, c.stream(), c.sm_count), "conv2d epilogue");
  }
}

}  // namespace

void fill_conv(backend::KernelTable& t) {
  t.prepare_conv2d = prepare_conv2d;
  t.conv2d = conv2d;
}

}  // namespace fluxrt::cuda

#else  // built without cuDNN: the ops layer reports conv2d as not implemented by the CUDA backend.

namespace fluxrt::cuda {
void fill_conv(backend::KernelTable&) {}
}  // namespace fluxrt::cuda

#endif
