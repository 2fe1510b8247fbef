#include "models/flux/flux1_transformer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "models/flux/flux1_names.h"
#include "models/flux/flux2_transformer.h"
#include "models/flux/flux_common.h"
#include "models/flux/flux_lora_names.h"
#include "models/fp8_weights.h"
#include "models/synthetic_weights.h"
#include "ops/elementwise.h"
#include "ops/norm.h"

namespace fluxrt::models {
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Loading

std::unique_ptr<Flux1Transformer> Flux1Transformer::load(const std::string& path, const Flux1LoadOptions& options) {
  fs::path p(path);
  if (fs::is_directory(p) && !fs::exists(p / "config.json") && fs::is_directory(p / "transformer"))
    p /= "transformer";  // a pipeline folder
  TensorStore raw = open_checkpoint(p.string());
  raw.set_description(p.string());
  raw = fp8_weights_quantized(raw);  // fp8 weights stay in their bytes
  Flux1Config config;
  if (fs::is_directory(p) && fs::exists(p / "config.json")) {
    config = flux1_config_from_json((p / "config.json").string());
  } else {
    config = flux1_config_detect(flux1_to_canonical(raw));
  }
  return from_store(raw, config, options);
}

TensorStore Flux1Transformer::open_checkpoint(const std::string& path) {
  if (io::is_gguf_file(path)) return TensorStore::open(path);  // city96's layout: BFL names
  const io::Checkpoint checkpoint = io::Checkpoint::open(path);
  TensorStore raw = TensorStore::from_checkpoint(checkpoint);
  // ComfyUI all-in-one checkpoints hold the text encoders and the VAE next to the transformer's
  // `model.diffusion_model.*` tensors: take only those.
  const std::string comfy = "model.diffusion_model.";
  const auto names = raw.names();
  const auto prefixed =
      std::count_if(names.begin(), names.end(), [&](const std::string& n) { return n.rfind(comfy, 0) == 0; });
  if (prefixed > 0 && static_cast<size_t>(prefixed) < names.size())
    raw = TensorStore::from_checkpoint(checkpoint, comfy);
  return raw;
}

std::unique_ptr<Flux1Transformer> Flux1Transformer::from_store(const TensorStore& raw, const Flux1Config& config,
                                                               const Flux1LoadOptions& options) {
  config.validate(raw.description());
  FLUXRT_CHECK(!config.shared_block_weights, ErrorCode::InvalidArgument,
               "{}: shared block weights are for synthetic weights only", raw.description());
  const TensorStore canonical = merge_loras(flux1_to_canonical(fp8_weights_quantized(raw)), options.loras,
                                            flux1_lora_scheme(), options.dtype);
  WeightBinder binder(canonical, "transformer");
  std::unique_ptr<Flux1Transformer> model(new Flux1Transformer(config, options));
  const DType wdtype = options.dtype == DType::F32 ? DType::F32 : DType::BF16;
  bool complete = true;
  // GGUF weights stay quantized in the linears (the CPU dequantizes a block of rows per GEMM).
  model->fetch_quantized_ = [&](const std::string& name, const Shape& shape) {
    return binder.quantized(name, shape);
  };
  model->bind([&](const std::string& name, const Shape& shape) {
    Tensor t = binder.require(name, shape, wdtype);
    if (!t.defined()) complete = false;
    return t;
  });
  model->fetch_quantized_ = nullptr;
  binder.finish();  // throws the one error listing every problem
  FLUXRT_CHECK(complete, ErrorCode::Format, "{}: FLUX.1 weights incomplete", raw.description());
  return model;
}

std::unique_ptr<Flux1Transformer> Flux1Transformer::synthetic(const Flux1Config& config, uint64_t seed,
                                                              const Flux1LoadOptions& options) {
  config.validate("synthetic FLUX.1 weights");
  FLUXRT_CHECK(options.loras.empty(), ErrorCode::Unsupported,
               "LoRAs are merged into checkpoint weights; synthetic FLUX.1 weights have none to merge into");
  std::unique_ptr<Flux1Transformer> model(new Flux1Transformer(config, options));
  uint64_t counter = 0;
  model->bind([&](const std::string& name, const Shape& shape) {
    ++counter;
    const bool is_norm = name.find("_norm.scale") != std::string::npos;
    const bool is_bias = shape.size() == 1 && !is_norm;
    // Like PyTorch's default Linear init scale (1/sqrt(fan_in)); small biases; norm scales around 1.
    const float bound =
        is_norm ? 0.1f : (is_bias ? 0.02f : 1.0f / std::sqrt(static_cast<float>(shape[shape.size() - 1])));
    Tensor t = synthetic_tensor(shape, DType::BF16, seed * 1000003u + counter, bound, is_norm ? 1.0f : 0.0f);
    return options.dtype == DType::F32 ? t.to(DType::F32) : t;
  });
  return model;
}

Tensor Flux1Transformer::vector(const Fetch& fetch, const std::string& name, int64_t n) {
  Tensor t = fetch(name, {n});
  if (!t.defined()) return t;
  weight_bytes_ += t.nbytes();
  return flux_to_device(t, options_.device);
}

nn::Linear Flux1Transformer::prepare(const Fetch& fetch, const std::string& prefix, int64_t n, int64_t k) {
  // A GGUF weight stays quantized (fetch_quantized_ is set only while binding such a store).
  const QuantizedMatrix* q = fetch_quantized_ ? fetch_quantized_(prefix + ".weight", {n, k}) : nullptr;
  Tensor w = q ? Tensor() : fetch(prefix + ".weight", {n, k});
  Tensor b = vector(fetch, prefix + ".bias", n);
  if ((!q && !w.defined()) || !b.defined()) return nn::Linear();
  weight_bytes_ += q ? q->nbytes() : w.nbytes();
  // No copy to the device first: prepare uploads what the backend needs (the CUDA backend keeps
  // its own device copy), and a moved source would hold every weight twice there.
  const nn::LinearFormat format = options_.linear_format;
  nn::Linear prepared = q ? nn::Linear::prepare_quantized(*q, b, options_.device, format)
                          : nn::Linear::prepare(w, b, options_.device, format);
  if (!q && options_.release_prepared_sources) prepared.release_source();
  linears_[prefix + ".weight"] = prepared;  // per-request LoRAs attach here, quantized or not
  return prepared;
}

void Flux1Transformer::bind(const Fetch& fetch) {
  const Flux1Config& c = config_;
  const int64_t d = c.hidden, m = c.mlp_hidden, hd = c.head_dim;
  // Per-head QK RMSNorm (torch.nn.RMSNorm, eps from the config) over `heads` x `head_dim`. The
  // fetch order is the synthetic weights' seed order: keep it.
  auto qk_norm = [&](const std::string& p, nn::QkNormAttention& a) {
    a.norm = {vector(fetch, p + "query_norm.scale", hd), vector(fetch, p + "key_norm.scale", hd), c.eps,
              ops::RmsRounding::Once};
    a.heads = a.kv_heads = c.heads;
    a.head_dim = hd;
  };
  img_in_ = prepare(fetch, "img_in", d, c.in_channels);
  txt_in_ = prepare(fetch, "txt_in", d, c.context_dim);
  time_in_ = {prepare(fetch, "time_in.in_layer", d, c.timestep_channels), prepare(fetch, "time_in.out_layer", d, d)};
  if (c.guidance)
    guidance_in_ = {prepare(fetch, "guidance_in.in_layer", d, c.timestep_channels),
                    prepare(fetch, "guidance_in.out_layer", d, d)};
  vector_in_ = {prepare(fetch, "vector_in.in_layer", d, c.pooled_dim), prepare(fetch, "vector_in.out_layer", d, d)};
  // Shared weights (synthetic benchmarks): bind block 0 only; the copies below share its tensors.
  const int64_t distinct_double = c.shared_block_weights ? std::min<int64_t>(c.double_blocks, 1) : c.double_blocks;
  const int64_t distinct_single = c.shared_block_weights ? std::min<int64_t>(c.single_blocks, 1) : c.single_blocks;
  double_.resize(static_cast<size_t>(c.double_blocks));
  for (int64_t i = 0; i < distinct_double; ++i) {
    for (const std::string stream : {"img", "txt"}) {
      FluxStream& s = stream == "img" ? double_[i].img : double_[i].txt;
      const std::string p = "double_blocks." + std::to_string(i) + "." + stream;
      s.mod = {prepare(fetch, p + "_mod.lin", 6 * d, d), 2};
      s.attn.to_q = prepare(fetch, p + "_attn.q", d, d);
      s.attn.to_k = prepare(fetch, p + "_attn.k", d, d);
      s.attn.to_v = prepare(fetch, p + "_attn.v", d, d);
      qk_norm(p + "_attn.norm.", s.attn);
      s.attn.to_out = prepare(fetch, p + "_attn.proj", d, d);
      s.mlp.kind = nn::MlpKind::GeluTanh;
      s.mlp.in = prepare(fetch, p + "_mlp.0", m, d);
      s.mlp.out = prepare(fetch, p + "_mlp.2", d, m);
    }
  }
  for (int64_t i = distinct_double; i < c.double_blocks; ++i) double_[i] = double_[0];
  single_.resize(static_cast<size_t>(c.single_blocks));
  for (int64_t i = 0; i < distinct_single; ++i) {
    FluxSingleBlock& s = single_[i];
    const std::string p = "single_blocks." + std::to_string(i) + ".";
    s.mod = {prepare(fetch, p + "modulation.lin", 3 * d, d), 1};
    s.attn.to_q = prepare(fetch, p + "q", d, d);
    s.attn.to_k = prepare(fetch, p + "k", d, d);
    s.attn.to_v = prepare(fetch, p + "v", d, d);
    s.mlp.kind = nn::MlpKind::GeluTanh;
    s.mlp.in = prepare(fetch, p + "mlp", m, d);
    s.linear2 = prepare(fetch, p + "linear2", d, d + m);
    qk_norm(p + "norm.", s.attn);
  }
  for (int64_t i = distinct_single; i < c.single_blocks; ++i) single_[i] = single_[0];
  final_shift_ = prepare(fetch, "final_layer.shift", d, d);
  final_scale_ = prepare(fetch, "final_layer.scale", d, d);
  final_linear_ = prepare(fetch, "final_layer.linear", c.out_channels, d);
}

// ---------------------------------------------------------------------------------------------
// Forward

// diffusers TimestepEmbedding / PixArtAlphaTextProjection(act "silu"): linear_1, SiLU, linear_2.
Tensor Flux1Transformer::embed(const MlpEmbedder& e, const Tensor& input) const {
  const Tensor h = e.in(input, nn::Activation::Silu);  // [B, D]
  return e.out(h);                                     // [B, D]
}

// diffusers CombinedTimestepGuidanceTextProjEmbeddings (dev) / CombinedTimestepTextProjEmbeddings
// (schnell), after FluxTransformer2DModel.forward's `timestep.to(dtype) * 1000` (and guidance).
void Flux1Transformer::check_conditioning_inputs(const Tensor& timesteps, const Tensor& guidance,
                                                 const Tensor& pooled) const {
  const Flux1Config& c = config_;
  const int64_t b = pooled.dim() == 2 ? pooled.size(0) : -1;
  FLUXRT_CHECK(pooled.dim() == 2 && pooled.size(1) == c.pooled_dim, ErrorCode::InvalidArgument,
               "[flux1] pooled text embedding must be [B, {}], got {}", c.pooled_dim, pooled.shape().str());
  FLUXRT_CHECK(timesteps.defined() && timesteps.numel() == b, ErrorCode::InvalidArgument,
               "[flux1] need {} timesteps, got {}", b, timesteps.defined() ? timesteps.shape().str() : "none");
  if (c.guidance) {
    FLUXRT_CHECK(guidance.defined() && guidance.numel() == b, ErrorCode::InvalidArgument,
                 "[flux1] {} is guidance-distilled: need {} guidance values, got {}", c.variant, b,
                 guidance.defined() ? guidance.shape().str() : "none");
  } else {
    FLUXRT_CHECK(!guidance.defined(), ErrorCode::InvalidArgument,
                 "[flux1] {} has no guidance embedding (guidance_in): pass no guidance", c.variant);
  }
}

Tensor Flux1Transformer::projection(const Tensor& values) const {
  return flux_timestep_projection(values, config_.timestep_channels, options_.dtype, options_.device);
}

Tensor Flux1Transformer::conditioning_on_device(const Tensor& timestep_proj, const Tensor& guidance_proj,
                                                const Tensor& pooled) const {
  Tensor vec = embed(time_in_, timestep_proj);                                        // [B, D]
  if (config_.guidance) vec = ops::add(vec, embed(guidance_in_, guidance_proj));       // [B, D]
  const Tensor pooled_dev = flux_to_device(pooled.to(options_.dtype).contiguous(), options_.device);
  return ops::add(vec, embed(vector_in_, pooled_dev));                                // [B, D]
}

Tensor Flux1Transformer::conditioning(const Tensor& timesteps, const Tensor& guidance, const Tensor& pooled) const {
  check_conditioning_inputs(timesteps, guidance, pooled);
  return conditioning_on_device(projection(timesteps), config_.guidance ? projection(guidance) : Tensor(), pooled);
}

// diffusers FluxTransformer2DModel.forward.
Tensor Flux1Transformer::forward(const Tensor& x, const Tensor& x_ids, const Tensor& ctx,
                                 const Tensor& ctx_ids, const Tensor& pooled, const Tensor& timesteps,
                                 const Tensor& guidance, FluxForwardHooks* hooks) const {
  const Flux1Config& c = config_;
  FLUXRT_CHECK(x.dim() == 3 && x.size(2) == c.in_channels, ErrorCode::InvalidArgument,
               "[flux1] latents must be [B, Li, {}], got {}", c.in_channels, x.shape().str());
  const int64_t b = x.size(0), li = x.size(1);
  FLUXRT_CHECK(ctx.dim() == 3 && ctx.size(0) == b && ctx.size(2) == c.context_dim, ErrorCode::InvalidArgument,
               "[flux1] text embeddings must be [{}, Lt, {}], got {}", b, c.context_dim, ctx.shape().str());
  FLUXRT_CHECK(pooled.dim() == 2 && pooled.size(0) == b, ErrorCode::InvalidArgument,
               "[flux1] pooled text embedding must be [{}, {}], got {}", b, c.pooled_dim, pooled.shape().str());
  const int64_t lt = ctx.size(1);
  const int64_t axes = static_cast<int64_t>(c.axes_dim.size());
  auto check_ids = [&](const Tensor& ids, int64_t len, const char* what) {
    const bool ok = (ids.dim() == 2 && ids.size(0) == len && ids.size(1) == axes) ||
                    (ids.dim() == 3 && ids.size(0) == b && ids.size(1) == len && ids.size(2) == axes);
    FLUXRT_CHECK(ok, ErrorCode::InvalidArgument, "[flux1] {} must be [{}, {}] or [{}, {}, {}], got {}", what, len,
                 axes, b, len, axes, ids.shape().str());
  };
  check_ids(x_ids, li, "image ids");
  check_ids(ctx_ids, lt, "text ids");
  FLUXRT_CHECK(x_ids.dim() == ctx_ids.dim(), ErrorCode::InvalidArgument,
               "[flux1] image ids {} and text ids {} must both be 2-D or both 3-D", x_ids.shape().str(),
               ctx_ids.shape().str());
  check_conditioning_inputs(timesteps, guidance, pooled);
  return forward_on_device(x, ctx, pooled, projection(timesteps),
                           c.guidance ? projection(guidance) : Tensor(), rope_tables(x_ids, ctx_ids), hooks);
}

Flux1Transformer::Rope Flux1Transformer::rope_tables(const Tensor& x_ids, const Tensor& ctx_ids) const {
  return flux_rope_tables(x_ids, ctx_ids, config_.axes_dim, config_.rope_theta, options_.device);
}

Tensor Flux1Transformer::forward_on_device(const Tensor& x, const Tensor& ctx, const Tensor& pooled,
                                           const Tensor& timestep_proj, const Tensor& guidance_proj,
                                           const Rope& rope, FluxForwardHooks* hooks) const {
  const Flux1Config& c = config_;
  const DType dt = options_.dtype;
  FLUXRT_CHECK(x.dim() == 3 && ctx.dim() == 3 && timestep_proj.dim() == 2 && timestep_proj.size(0) == x.size(0) &&
                   guidance_proj.defined() == c.guidance,
               ErrorCode::InvalidArgument, "[flux1] forward_on_device: latents {}, text {}, timestep projection {}",
               x.shape().str(), ctx.shape().str(), timestep_proj.shape().str());
  const int64_t li = x.size(1), lt = ctx.size(1);
  if (hooks)
    if (Tensor cached = hooks->cached_output(); cached.defined()) return cached;

  // 1. Conditioning vector; every block's modulation linear reads SiLU(vec).
  const Tensor vec = conditioning_on_device(timestep_proj, guidance_proj, pooled);  // [B, D]
  const Tensor vec_act = ops::silu(vec);                                            // [B, D]

  // 2. Input projections.
  Tensor img = img_in_(flux_to_device(x.to(dt).contiguous(), options_.device));    // [B, Li, D]
  Tensor txt = txt_in_(flux_to_device(ctx.to(dt).contiguous(), options_.device));  // [B, Lt, D]

  // 3. Double-stream blocks (RoPE over [text ; image] from rope_tables), each modulated by its
  // own img_mod / txt_mod: (shift, scale, gate) x 2 of [B, D]; 4. single-stream blocks on
  // [txt ; img], modulation (shift, scale, gate) of [B, D] each.
  FluxBlockModulations mods;
  mods.double_block = [&](const FluxDoubleBlock& blk) {
    return std::pair{blk.img.mod(vec_act), blk.txt.mod(vec_act)};
  };
  mods.single_block = [&](const FluxSingleBlock& blk) { return blk.mod(vec_act)[0]; };
  const Tensor h = flux_block_stack(double_, single_, std::move(img), std::move(txt), mods,
                                    flux_attention_options(rope), c.eps, hooks);  // [B, L, D]

  // 5. Final layer (AdaLayerNormContinuous: scale/shift from vec) on the image rows.
  const Tensor shift = final_shift_(vec_act);                           // [B, D]
  const Tensor scale = final_scale_(vec_act);                           // [B, D]
  const Tensor out_rows = h.slice(1, lt, lt + li).contiguous();         // [B, Li, D]
  const Tensor n = ops::adaln_modulate(out_rows, shift, scale, c.eps);  // [B, Li, D]
  Tensor out = final_linear_(n);                                        // [B, Li, out]
  if (hooks) hooks->output_computed(out);
  return out;
}

}  // namespace fluxrt::models
