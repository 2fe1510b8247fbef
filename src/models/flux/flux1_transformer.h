#pragma once
// FLUX.1 dev / schnell diffusion transformer (flux-reference.md sections 2.1, 2.2, 2.4), mirroring
// diffusers' FluxTransformer2DModel: linears with biases, conditioning vector = timestep embedding
// (+ guidance embedding for dev) + pooled CLIP projection, per-block modulation linears on
// SiLU(vector), double-stream blocks then single-stream blocks, text tokens first, per-head QK
// RMSNorm, 3-axis adjacent-pair RoPE (16, 56, 56, theta 10000), GELU-tanh MLPs, final AdaLN.
// Backend-free: nn:: layers (the blocks, shared with FLUX.2: flux_blocks.h) and src/ops/ front ends.
//
// Weights: bound by canonical names (flux1_names.h) with their expected shapes. bf16 checkpoint
// tensors are used as zero-copy views of the mapping in bf16 mode; fp8 files keep their weights
// in their bytes (fp8_weights_quantized; the GEMM dequantizes per call); f32 mode converts once at load.
// Fused BFL tensors (double-block qkv, single-block linear1) are row views, so q, k, v (and the single-block
// MLP input) run as separate GEMMs: both layouts bind without a copy and the MLP input GEMM carries the GELU
// in its epilogue.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/quant.h"
#include "core/tensor.h"
#include "models/flux/flux1_config.h"
#include "models/flux/flux_blocks.h"
#include "models/flux/flux_common.h"
#include "models/lora/lora_delta.h"
#include "models/weight_binder.h"
#include "nn/linear.h"

namespace fluxrt::models {

struct Flux1LoadOptions {
  DType dtype = DType::BF16;  // activation dtype; bf16 weights are used as stored in bf16 mode
  Device device = Device::cpu();
  // The linears' format: Native uses each weight as stored; Int8 requantizes them to W8A8 at load
  // (precision int8, docs/quantization.md), the activations between them staying in `dtype`.
  nn::LinearFormat linear_format = nn::LinearFormat::Native;
  // Benchmarks with synthetic weights: after nn::Linear::prepare, drop the model's reference to
  // the source tensor (keeping a zero-memory stand-in of the same shape), so a backend that packed
  // its own copy does not hold the weights twice. Only safe when nothing else needs the source.
  bool release_prepared_sources = false;
  // LoRAs merged into the weights at load (lora_delta.h: f32 math, one rounding, new buffers for
  // the touched weights only).
  std::vector<LoraSpec> loras;
};

class Flux1Transformer {
 public:
  // `path`: a diffusers transformer folder (config.json + weights, sharded or not), a pipeline
  // folder holding transformer/, or a single .safetensors file in the BFL or diffusers layout, bf16
  // or fp8 (the config is then detected from the weights: guidance_in present -> dev), including
  // ComfyUI all-in-one files (only the `model.diffusion_model.*` tensors are read), or a GGUF file
  // (city96's layout; block-quantized weights stay quantized).
  static std::unique_ptr<Flux1Transformer> load(const std::string& path, const Flux1LoadOptions& options = {});
  // The raw tensors load() reads from `path` (a checkpoint file or folder, or a GGUF file): of a
  // ComfyUI all-in-one file only the `model.diffusion_model.*` tensors (prefix kept).
  static TensorStore open_checkpoint(const std::string& path);
  // From a checkpoint store in any layout (fp8 kept as quantized entries, then flux1_to_canonical) and a
  // config. Throws Format listing every missing, mis-shaped and unused tensor.
  static std::unique_ptr<Flux1Transformer> from_store(const TensorStore& raw, const Flux1Config& config,
                                                      const Flux1LoadOptions& options = {});
  // Random bf16 weights of the config's shapes (never zeros), generated one tensor at a time. With
  // config.shared_block_weights only double block 0 and single block 0 get weights; the other
  // blocks run on those same tensors (weight_bytes() counts them once).
  static std::unique_ptr<Flux1Transformer> synthetic(const Flux1Config& config, uint64_t seed,
                                                     const Flux1LoadOptions& options = {});

  // x [B, Li, in] packed latents; x_ids [Li, 3] or [B, Li, 3]; ctx [B, Lt, C] T5 embeddings;
  // ctx_ids [Lt, 3] or [B, Lt, 3]; pooled [B, P] CLIP pooled embeddings; timesteps [B] as the
  // diffusers transformer receives them (sigma in [0, 1]); guidance [B] the distilled guidance
  // scale (dev: required; schnell: must be undefined). Timesteps and guidance are scaled by 1000
  // inside, in the model dtype (bf16: 3.5 -> 3504, as the reference). Returns the velocity
  // [B, Li, out] in the model dtype.
  // `hooks`: a step cache's (flux_forward_hooks.h), or null.
  Tensor forward(const Tensor& x, const Tensor& x_ids, const Tensor& ctx, const Tensor& ctx_ids,
                 const Tensor& pooled, const Tensor& timesteps, const Tensor& guidance = Tensor(),
                 FluxForwardHooks* hooks = nullptr) const;
  // The conditioning vector [B, D] (diffusers time_text_embed output) every modulation reads.
  Tensor conditioning(const Tensor& timesteps, const Tensor& guidance, const Tensor& pooled) const;

  // forward split for recorded steps (pipelines/step_graph.h): what the host builds per call (the
  // sinusoidal projections of the timesteps and of the guidance, the RoPE tables), uploaded, and
  // the device work, which reads only tensors. forward(x, x_ids, ctx, ctx_ids, pooled, t, g) ==
  // forward_on_device(x, ctx, pooled, projection(t), projection(g) or undefined,
  // rope_tables(x_ids, ctx_ids)), bit for bit.
  using Rope = FluxRope;  // [(B,) Lt + Li, head_dim / 2] on the model's device
  // [B, 256] in the model dtype on the model's device, of timesteps or guidance as forward takes them.
  Tensor projection(const Tensor& values) const;
  Rope rope_tables(const Tensor& x_ids, const Tensor& ctx_ids) const;
  Tensor forward_on_device(const Tensor& x, const Tensor& ctx, const Tensor& pooled,
                           const Tensor& timestep_proj, const Tensor& guidance_proj, const Rope& rope,
                           FluxForwardHooks* hooks = nullptr) const;

  const Flux1Config& config() const { return config_; }
  DType dtype() const { return options_.dtype; }
  // Bytes of the weight tensors the model was bound to (as bound: bf16 or f32).
  size_t weight_bytes() const { return weight_bytes_; }
  // Every bound linear by its canonical weight name ("double_blocks.0.img_attn.q.weight"): where
  // per-request LoRAs attach (LoraAttachment). Copies share the model's layers.
  const std::map<std::string, nn::Linear>& linears() const { return linears_; }

 private:
  struct MlpEmbedder {  // diffusers TimestepEmbedding / PixArtAlphaTextProjection
    nn::Linear in, out;
  };
  using Fetch = std::function<Tensor(const std::string& name, const Shape& shape)>;
  // Set while binding a store with quantized entries: the weight kept quantized, or null.
  using FetchQuantized = std::function<const QuantizedMatrix*(const std::string& name, const Shape& shape)>;

  Flux1Transformer(Flux1Config config, Flux1LoadOptions options) : config_(std::move(config)), options_(options) {}
  void bind(const Fetch& fetch);
  // "<prefix>.weight" [n, k] and "<prefix>.bias" [n].
  nn::Linear prepare(const Fetch& fetch, const std::string& prefix, int64_t n, int64_t k);
  Tensor vector(const Fetch& fetch, const std::string& name, int64_t n);
  Tensor embed(const MlpEmbedder& e, const Tensor& input) const;
  void check_conditioning_inputs(const Tensor& timesteps, const Tensor& guidance, const Tensor& pooled) const;
  Tensor conditioning_on_device(const Tensor& timestep_proj, const Tensor& guidance_proj, const Tensor& pooled) const;

  Flux1Config config_;
  Flux1LoadOptions options_;
  size_t weight_bytes_ = 0;
  FetchQuantized fetch_quantized_;
  std::map<std::string, nn::Linear> linears_;
  nn::Linear img_in_, txt_in_;
  MlpEmbedder time_in_, guidance_in_, vector_in_;
  std::vector<FluxDoubleBlock> double_;  // each with its own img_mod / txt_mod
  std::vector<FluxSingleBlock> single_;  // each with its own modulation
  nn::Linear final_shift_, final_scale_, final_linear_;
};

}  // namespace fluxrt::models
