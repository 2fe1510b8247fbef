#include "models/flux/flux2_transformer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/flux/flux2_names.h"
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

std::unique_ptr<Flux2Transformer> Flux2Transformer::load(const std::string& path, const Flux2LoadOptions& options) {
  fs::path p(path);
  if (fs::is_directory(p) && !fs::exists(p / "config.json") && fs::is_directory(p / "transformer"))
    p /= "transformer";  // a pipeline folder
  TensorStore raw = TensorStore::open(p.string());  // a safetensors checkpoint or a GGUF file
  raw.set_description(p.string());
  Flux2Config config;
  if (fs::is_directory(p) && fs::exists(p / "config.json")) {
    config = flux2_config_from_json((p / "config.json").string());
  } else {
    config = flux2_config_detect(flux2_to_canonical(raw));
  }
  return from_store(raw, config, options);
}

std::unique_ptr<Flux2Transformer> Flux2Transformer::from_store(const TensorStore& raw, const Flux2Config& config,
                                                               const Flux2LoadOptions& options) {
  config.validate(raw.description());
  // fp8 single files: the weights stay in their bytes, with their scales (fp8_weights.h).
  const TensorStore canonical = merge_loras(flux2_to_canonical(fp8_weights_quantized(raw)), options.loras,
                                            flux2_lora_scheme(), options.dtype);
  WeightBinder binder(canonical, "transformer");
  std::unique_ptr<Flux2Transformer> model(new Flux2Transformer(config, options));
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
  FLUXRT_CHECK(complete, ErrorCode::Format, "{}: FLUX.2 weights incomplete", raw.description());
  return model;
}

std::unique_ptr<Flux2Transformer> Flux2Transformer::synthetic(const Flux2Config& config, uint64_t seed,
                                                              const Flux2LoadOptions& options) {
  config.validate("synthetic FLUX.2 weights");
  FLUXRT_CHECK(options.loras.empty(), ErrorCode::Unsupported,
               "LoRAs are merged into checkpoint weights; synthetic FLUX.2 weights have none to merge into");
  std::unique_ptr<Flux2Transformer> model(new Flux2Transformer(config, options));
  uint64_t counter = 0;
  QuantizedMatrix quantized;  // the last synthetic quantized weight (prepare copies it)
  if (options.synthetic_weights) {
    // Linears in the requested type, in the same fetch order (so the same counter seeds).
    const QuantType type = *options.synthetic_weights;
    model->fetch_quantized_ = [&, type](const std::string&, const Shape& shape) -> const QuantizedMatrix* {
      if (shape.size() != 2 || shape[1] % quant_traits(type).block != 0) return nullptr;
      ++counter;
      quantized = synthetic_quantized(shape[0], shape[1], type, seed * 1000003u + counter,
                                      1.0f / std::sqrt(static_cast<float>(shape[1])));
      return &quantized;
    };
  }
  model->bind([&](const std::string& name, const Shape& shape) {
    ++counter;
    const bool is_norm = name.find("_norm.scale") != std::string::npos;
    // Like PyTorch's default Linear init scale (1/sqrt(fan_in)); norm scales around 1.
    const float bound = is_norm ? 0.1f : 1.0f / std::sqrt(static_cast<float>(shape[shape.size() - 1]));
    Tensor t = synthetic_tensor(shape, DType::BF16, seed * 1000003u + counter, bound, is_norm ? 1.0f : 0.0f);
    return options.dtype == DType::F32 ? t.to(DType::F32) : t;
  });
  model->fetch_quantized_ = nullptr;
  return model;
}

nn::Linear Flux2Transformer::prepare(const Fetch& fetch, const std::string& name, const Shape& shape) {
  if (fetch_quantized_) {
    if (const QuantizedMatrix* q = fetch_quantized_(name, shape)) {
      weight_bytes_ += q->nbytes();
      // Registered like a dense one: per-request LoRAs attach their branches to it.
      nn::Linear prepared =
          nn::Linear::prepare_quantized(*q, Tensor(), options_.device, options_.linear_format);
      linears_[name] = prepared;
      return prepared;
    }
  }
  Tensor w = fetch(name, shape);
  if (!w.defined()) return nn::Linear();
  weight_bytes_ += w.nbytes();
  // No copy to the device first: prepare uploads what the backend needs (the CUDA backend keeps
  // its own device copy), and a moved source would hold every weight twice there.
  nn::Linear prepared = nn::Linear::prepare(w, Tensor(), options_.device, options_.linear_format);
  if (options_.release_prepared_sources) prepared.release_source();
  linears_[name] = prepared;
  return prepared;
}

void Flux2Transformer::bind(const Fetch& fetch) {
  const Flux2Config& c = config_;
  const int64_t d = c.hidden, m = c.mlp_hidden, hd = c.head_dim;
  auto norm = [&](const std::string& name) {
    Tensor t = fetch(name, {hd});
    if (t.defined()) weight_bytes_ += t.nbytes();
    return to_device(t, options_.device);
  };
  // Per-head QK RMSNorm (torch.nn.RMSNorm, eps from the config) over `heads` x `head_dim`. The
  // fetch order is the synthetic weights' seed order: keep it.
  auto qk_norm = [&](const std::string& p, nn::QkNormAttention& a) {
    a.norm = {norm(p + "query_norm.scale"), norm(p + "key_norm.scale"), c.eps, ops::RmsRounding::Once};
    a.heads = a.kv_heads = c.heads;
    a.head_dim = hd;
  };
  img_in_ = prepare(fetch, "img_in.weight", {d, c.in_channels});
  txt_in_ = prepare(fetch, "txt_in.weight", {d, c.context_dim});
  time_in_1_ = prepare(fetch, "time_in.in_layer.weight", {d, c.timestep_channels});
  time_in_2_ = prepare(fetch, "time_in.out_layer.weight", {d, d});
  mod_img_ = {prepare(fetch, "double_stream_modulation_img.lin.weight", {6 * d, d}), 2};
  mod_txt_ = {prepare(fetch, "double_stream_modulation_txt.lin.weight", {6 * d, d}), 2};
  mod_single_ = {prepare(fetch, "single_stream_modulation.lin.weight", {3 * d, d}), 1};
  double_.resize(static_cast<size_t>(c.double_blocks));
  for (int64_t i = 0; i < c.double_blocks; ++i) {
    for (const char* stream : {"img", "txt"}) {
      FluxStream& s = std::string(stream) == "img" ? double_[i].img : double_[i].txt;
      const std::string p = "double_blocks." + std::to_string(i) + "." + stream;
      s.attn.to_q = prepare(fetch, p + "_attn.q.weight", {d, d});
      s.attn.to_k = prepare(fetch, p + "_attn.k.weight", {d, d});
      s.attn.to_v = prepare(fetch, p + "_attn.v.weight", {d, d});
      qk_norm(p + "_attn.norm.", s.attn);
      s.attn.to_out = prepare(fetch, p + "_attn.proj.weight", {d, d});
      s.mlp.kind = nn::MlpKind::SwiGlu;
      s.mlp.in = prepare(fetch, p + "_mlp.0.weight", {2 * m, d});
      s.mlp.out = prepare(fetch, p + "_mlp.2.weight", {d, m});
    }
  }
  single_.resize(static_cast<size_t>(c.single_blocks));
  for (int64_t i = 0; i < c.single_blocks; ++i) {
    const std::string p = "single_blocks." + std::to_string(i) + ".";
    FluxSingleBlock& s = single_[i];
    s.linear1 = prepare(fetch, p + "linear1.weight", {3 * d + 2 * m, d});
    s.linear2 = prepare(fetch, p + "linear2.weight", {d, d + m});
    qk_norm(p + "norm.", s.attn);      // q, k, v themselves are linear1's columns
    s.mlp.kind = nn::MlpKind::SwiGlu;  // on linear1's last 2M columns
  }
  final_shift_ = prepare(fetch, "final_layer.shift.weight", {d, d});
  final_scale_ = prepare(fetch, "final_layer.scale.weight", {d, d});
  final_linear_ = prepare(fetch, "final_layer.linear.weight", {c.out_channels, d});
}

// ---------------------------------------------------------------------------------------------
// Forward

// diffusers Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0) + TimestepEmbedding, after
// Flux2Transformer2DModel.forward's `timestep.to(dtype) * 1000` (flux-reference.md 2.4).
Tensor Flux2Transformer::timestep_projection(const Tensor& timesteps) const {
  // [B, 256] rounded to the model dtype, as `timesteps_proj.to(timestep.dtype)`.
  return flux_timestep_projection(timesteps, config_.timestep_channels, options_.dtype, options_.device);
}

Flux2Transformer::Rope Flux2Transformer::rope_tables(const Tensor& x_ids, const Tensor& ctx_ids) const {
  return flux_rope_tables(x_ids, ctx_ids, config_.axes_dim, config_.rope_theta, options_.device);
}

// diffusers Flux2Transformer2DModel.forward (kv_cache_mode None).
void Flux2Transformer::check_inputs(const Tensor& x, const Tensor& x_ids, const Tensor& ctx, const Tensor& ctx_ids,
                                    const Tensor& timesteps) const {
  const Flux2Config& c = config_;
  FLUXRT_CHECK(x.dim() == 3 && x.size(2) == c.in_channels, ErrorCode::InvalidArgument,
               "[flux2] latents must be [B, Li, {}], got {}", c.in_channels, x.shape().str());
  const int64_t b = x.size(0), li = x.size(1);
  FLUXRT_CHECK(ctx.dim() == 3 && ctx.size(0) == b && ctx.size(2) == c.context_dim, ErrorCode::InvalidArgument,
               "[flux2] text embeddings must be [{}, Lt, {}], got {}", b, c.context_dim, ctx.shape().str());
  const int64_t lt = ctx.size(1);
  const int64_t axes = static_cast<int64_t>(c.axes_dim.size());
  auto check_ids = [&](const Tensor& ids, int64_t len, const char* what) {
    const bool ok = (ids.dim() == 2 && ids.size(0) == len && ids.size(1) == axes) ||
                    (ids.dim() == 3 && ids.size(0) == b && ids.size(1) == len && ids.size(2) == axes);
    FLUXRT_CHECK(ok, ErrorCode::InvalidArgument, "[flux2] {} must be [{}, {}] or [{}, {}, {}], got {}", what, len,
                 axes, b, len, axes, ids.shape().str());
  };
  check_ids(x_ids, li, "image ids");
  check_ids(ctx_ids, lt, "text ids");
  FLUXRT_CHECK(x_ids.dim() == ctx_ids.dim(), ErrorCode::InvalidArgument,
               "[flux2] image ids {} and text ids {} must both be 2-D or both 3-D", x_ids.shape().str(),
               ctx_ids.shape().str());
  FLUXRT_CHECK(timesteps.numel() == b, ErrorCode::InvalidArgument, "[flux2] need {} timesteps, got {}", b,
               timesteps.shape().str());
}

Tensor Flux2Transformer::forward(const Tensor& x, const Tensor& x_ids, const Tensor& ctx,
                                 const Tensor& ctx_ids, const Tensor& timesteps,
                                 FluxForwardHooks* hooks) const {
  check_inputs(x, x_ids, ctx, ctx_ids, timesteps);
  return forward_on_device(x, ctx, timestep_projection(timesteps), rope_tables(x_ids, ctx_ids), hooks);
}

size_t Flux2Transformer::ReferenceCache::bytes() const {
  size_t total = 0;
  for (const FluxReferenceKv& m : modules) total += m.k.nbytes() + m.v.nbytes();
  return total;
}

// diffusers Flux2Transformer2DModel.forward(kv_cache_mode="extract") on the reference rows: their
// modulation from ref_fixed_timestep 0 (image stream of the double blocks, the single blocks'),
// attention among themselves only, each module's keys and values stored after QK norm.
Flux2Transformer::ReferenceCache Flux2Transformer::reference_cache(const Tensor& refs,
                                                                   const Tensor& ids) const {
  const Flux2Config& c = config_;
  FLUXRT_CHECK(refs.dim() == 3 && refs.size(2) == c.in_channels && ids.dim() == 2 &&
                   ids.size(0) == refs.size(1) && ids.size(1) == static_cast<int64_t>(c.axes_dim.size()),
               ErrorCode::InvalidArgument,
               "[flux2] reference tokens must be [B, Lr, {}] with ids [Lr, {}], got {} and {}", c.in_channels,
               c.axes_dim.size(), refs.shape().str(), ids.shape().str());
  ReferenceCache cache;
  cache.ids = ids;
  const Tensor zero = Tensor::zeros({refs.size(0)}, DType::F32);
  const Tensor t_proj = to_device(timestep_projection(zero), options_.device);  // [Bref, 256]
  const Tensor temb_act = ops::silu(time_in_2_(time_in_1_(t_proj, nn::Activation::Silu)));
  const auto mod_img = mod_img_(temb_act);        // the reference rows' image-stream modulation
  const auto mod_single = mod_single_(temb_act);  // and single-block modulation
  // RoPE over the reference positions alone (no text rows: an empty text table).
  const Rope rope = flux_rope_tables(ids, Tensor::zeros({0, ids.size(1)}, DType::I64), c.axes_dim,
                                     c.rope_theta, options_.device);
  const ops::AttentionOptions attention = flux_attention_options(rope);
  Tensor img = img_in_(to_device(refs, options_.device).to(options_.dtype));  // [Bref, Lr, D]
  Tensor no_text;
  cache.modules.resize(double_.size() + single_.size());
  size_t module = 0;
  for (const FluxDoubleBlock& blk : double_) {
    flux_double_block(blk, img, no_text, mod_img, {}, attention, c.eps, nullptr, module,
                      {nullptr, &cache.modules[module], 0});
    ++module;
  }
  for (const FluxSingleBlock& blk : single_) {
    flux_single_block(blk, img, mod_single[0], attention, c.eps, nullptr, module,
                      {nullptr, &cache.modules[module], 0});
    ++module;
  }
  return cache;
}

Tensor Flux2Transformer::forward(const Tensor& x, const Tensor& x_ids, const Tensor& ctx,
                                 const Tensor& ctx_ids, const Tensor& timesteps,
                                 const ReferenceCache& refs) const {
  check_inputs(x, x_ids, ctx, ctx_ids, timesteps);
  FLUXRT_CHECK(
      x_ids.dim() == 2 && ctx_ids.dim() == 2 && refs.modules.size() == double_.size() + single_.size(),
      ErrorCode::InvalidArgument,
      "[flux2] a forward with cached reference keys takes 2-D ids and a cache of this model");
  const Rope rope = rope_tables(x_ids, ctx_ids);  // the queries: [text ; image]
  // The keys: [text ; reference ; image], where the cache's rows are inserted.
  const Rope key_rope = rope_tables(ops::concat({refs.ids, x_ids}, 0), ctx_ids);
  return forward_on_device(x, ctx, timestep_projection(timesteps), rope, nullptr, &refs, &key_rope);
}

Tensor Flux2Transformer::forward_on_device(const Tensor& x, const Tensor& ctx, const Tensor& timestep_proj,
                                           const Rope& rope, FluxForwardHooks* hooks) const {
  return forward_on_device(x, ctx, timestep_proj, rope, hooks, nullptr, nullptr);
}

Tensor Flux2Transformer::forward_on_device(const Tensor& x, const Tensor& ctx, const Tensor& timestep_proj,
                                           const Rope& rope, FluxForwardHooks* hooks,
                                           const ReferenceCache* refs, const Rope* key_rope) const {
  const Flux2Config& c = config_;
  const DType dt = options_.dtype;
  FLUXRT_CHECK(x.dim() == 3 && ctx.dim() == 3 && timestep_proj.dim() == 2 && timestep_proj.size(0) == x.size(0),
               ErrorCode::InvalidArgument, "[flux2] forward_on_device: latents {}, text {}, timestep projection {}",
               x.shape().str(), ctx.shape().str(), timestep_proj.shape().str());
  const int64_t li = x.size(1), lt = ctx.size(1);
  if (hooks)
    if (Tensor cached = hooks->cached_output(); cached.defined()) return cached;

  // 1. Timestep embedding and the shared modulations, once per forward.
  const Tensor t_proj = to_device(timestep_proj, options_.device);  // [B, 256]
  const Tensor h_t = time_in_1_(t_proj, nn::Activation::Silu);      // [B, D]
  const Tensor temb = time_in_2_(h_t);                              // [B, D]
  const Tensor temb_act = ops::silu(temb);                          // [B, D]
  const auto mod_img = mod_img_(temb_act);                          // (shift, scale, gate) x 2 of [B, D]
  const auto mod_txt = mod_txt_(temb_act);                          // (shift, scale, gate) x 2 of [B, D]
  const auto mod_single = mod_single_(temb_act);                    // (shift, scale, gate) of [B, D]

  // 2. Input projections.
  // Latents and text embeddings may come from the host (moved here) or already be on the device.
  Tensor img = img_in_(to_device(x, options_.device).to(dt));    // [B, Li, D]
  Tensor txt = txt_in_(to_device(ctx, options_.device).to(dt));  // [B, Lt, D]

  // 3. Double-stream blocks (RoPE over [text ; image] from rope_tables); 4. single-stream blocks
  // on [txt ; img].
  FluxBlockModulations mods;
  mods.double_block = [&](const FluxDoubleBlock&) { return std::pair{mod_img, mod_txt}; };
  mods.single_block = [&](const FluxSingleBlock&) { return mod_single[0]; };
  ops::AttentionOptions attention = flux_attention_options(key_rope ? *key_rope : rope);
  if (key_rope) attention.rope_q_table = {rope.cos, rope.sin};
  const Tensor h =
      flux_block_stack(double_, single_, std::move(img), std::move(txt), mods, attention, c.eps, hooks,
                       refs ? &refs->modules : nullptr);  // [B, L, D]

  // 5. Final layer (AdaLayerNormContinuous: scale/shift from temb) on the image rows.
  const Tensor shift = final_shift_(temb_act);                       // [B, D]
  const Tensor scale = final_scale_(temb_act);                       // [B, D]
  const Tensor out_rows = h.slice(1, lt, lt + li).contiguous();      // [B, Li, D]
  const Tensor n = ops::adaln_modulate(out_rows, shift, scale, c.eps);  // [B, Li, D]
  Tensor out = final_linear_(n);                                        // [B, Li, out]
  if (hooks) hooks->output_computed(out);
  return out;
}

}  // namespace fluxrt::models
