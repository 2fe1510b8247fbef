#pragma once
// FLUX.2 klein diffusion transformer (flux-reference.md sections 2.1, 2.3, 2.4), mirroring diffusers'
// Flux2Transformer2DModel: bias-free linears, modulation computed once per forward from the
// timestep embedding and shared by every block, double-stream blocks then single-stream blocks,
// text tokens first, per-head QK RMSNorm, 4-axis adjacent-pair RoPE (theta 2000), SwiGLU MLPs and
// the final AdaLN layer. Backend-free: nn:: layers (the blocks: flux_blocks.h) and src/ops/ front ends.
//
// Weights: bound by canonical names (flux2_names.h) with their expected shapes. In bf16 mode the
// checkpoint's bf16 tensors are handed to nn::Linear::prepare as zero-copy views of the mapping
// (what the backend then does with them is its business: the AVX2 packed GEMM keeps one packed
// bf16 copy); in f32 mode they are converted once at load. q, k and v of the double blocks run
// as three GEMMs on [D, D] views, so the BFL fused qkv and diffusers' split to_q/to_k/to_v both
// bind without a copy (a fused [3D, D] GEMM would force a concatenation copy for diffusers
// folders; the three GEMMs have the same FLOPs and M, only the activation panel is packed 3x).
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "models/flux/flux2_config.h"
#include "models/flux/flux_blocks.h"
#include "models/flux/flux_common.h"
#include "models/lora/lora_delta.h"
#include "models/weight_binder.h"
#include "nn/linear.h"

namespace fluxrt::models {

struct Flux2LoadOptions {
  DType dtype = DType::BF16;  // activation dtype; weights are used as stored in bf16 mode
  Device device = Device::cpu();
  // The linears' format: Native uses each weight as stored; Int8 requantizes them to W8A8 at load
  // (precision int8, docs/quantization.md), the activations between them staying in `dtype`.
  nn::LinearFormat linear_format = nn::LinearFormat::Native;
  // Benchmarks with synthetic weights: after nn::Linear::prepare, drop the model's reference to
  // the source tensor (keeping a zero-memory stand-in of the same shape), so a backend that packed
  // its own copy does not hold the weights twice. Only safe when nothing else needs the source.
  bool release_prepared_sources = false;
  // Synthetic weights only: the linears' weights in this type instead of bf16 (benchmarks of
  // quantized checkpoints: `fluxrt bench transformer --weights q4_K`); unset keeps them dense.
  std::optional<QuantType> synthetic_weights;
  // LoRAs merged into the weights at load (lora_delta.h: f32 math, one rounding, new buffers for
  // the touched weights only).
  std::vector<LoraSpec> loras;
};

class Flux2Transformer {
 public:
  // `path`: a diffusers transformer folder (config.json + weights, sharded or not), a pipeline
  // folder holding transformer/, or a single .safetensors file in either layout (the config is
  // then detected from the weights).
  static std::unique_ptr<Flux2Transformer> load(const std::string& path, const Flux2LoadOptions& options = {});
  // From a checkpoint store in any layout (converted with flux2_to_canonical) and a config.
  // Throws Format listing every missing, mis-shaped and unused tensor.
  static std::unique_ptr<Flux2Transformer> from_store(const TensorStore& raw, const Flux2Config& config,
                                                      const Flux2LoadOptions& options = {});
  // Random bf16 weights of the config's shapes (never zeros), generated one tensor at a time.
  static std::unique_ptr<Flux2Transformer> synthetic(const Flux2Config& config, uint64_t seed,
                                                     const Flux2LoadOptions& options = {});

  // x [B, Li, in] packed latents (reference-image tokens are extra rows); x_ids [Li, 4] or
  // [B, Li, 4]; ctx [B, Lt, C] text embeddings; ctx_ids [Lt, 4] or [B, Lt, 4]; timesteps [B] as
  // the diffusers transformer receives them (sigma in [0, 1]; scaled by 1000 inside in the model
  // dtype). Returns the velocity [B, Li, out] in the model dtype.
  // `hooks`: a step cache's (flux_forward_hooks.h), or null.
  Tensor forward(const Tensor& x, const Tensor& x_ids, const Tensor& ctx, const Tensor& ctx_ids,
                 const Tensor& timesteps, FluxForwardHooks* hooks = nullptr) const;

  // FLUX.2-klein-9B-KV (diffusers Flux2KVCache): every attention module's reference keys and
  // values, computed once per request. The reference tokens only attend to each other and are
  // modulated at timestep 0, so what diffusers' "extract" step computes for them does not depend
  // on the text or the latents: one pass over the reference tokens alone gives the cache, and
  // every step (the first included) then runs the latents with it ("cached" mode).
  struct ReferenceCache {
    std::vector<FluxReferenceKv> modules;  // double blocks, then single blocks
    Tensor ids;                            // [Lr, 4] the reference tokens' position ids
    int64_t tokens() const { return ids.defined() ? ids.size(0) : 0; }
    size_t bytes() const;
  };
  // refs [Bref, Lr, in] packed reference latents (Bref 1: shared by every image of a call),
  // ids [Lr, 4]. Keys and values in the model dtype on the model's device.
  ReferenceCache reference_cache(const Tensor& refs, const Tensor& ids) const;
  // forward() with the cache's keys and values inserted after the text keys of every attention
  // (x_ids 2-D; the queries keep [text ; image] positions).
  Tensor forward(const Tensor& x, const Tensor& x_ids, const Tensor& ctx, const Tensor& ctx_ids,
                 const Tensor& timesteps, const ReferenceCache& refs) const;

  // forward() in its two parts, for recording a step once and replaying it (ops::DeviceGraph):
  // what the host builds per call and uploads (the timesteps' sinusoidal projection [B, 256], the
  // RoPE tables of the ids), and the device part, which reads nothing from the host besides its
  // tensor arguments, so its work can be recorded and replayed on new contents of the same
  // buffers. forward(x, x_ids, ctx, ctx_ids, t) == forward_on_device(x, ctx,
  // timestep_projection(t), rope) with rope = rope_tables(x_ids, ctx_ids), bit for bit.
  using Rope = FluxRope;  // [(B,) Lt + Li, head_dim / 2] on the model's device
  Tensor timestep_projection(const Tensor& timesteps) const;
  Rope rope_tables(const Tensor& x_ids, const Tensor& ctx_ids) const;
  Tensor forward_on_device(const Tensor& x, const Tensor& ctx, const Tensor& timestep_proj, const Rope& rope,
                           FluxForwardHooks* hooks = nullptr) const;

  const Flux2Config& config() const { return config_; }
  DType dtype() const { return options_.dtype; }
  // Bytes of the weight tensors the model was bound to (their checkpoint / synthetic size).
  size_t weight_bytes() const { return weight_bytes_; }
  // Every bound linear by its canonical weight name ("double_blocks.0.img_attn.q.weight"): where
  // per-request LoRAs attach (LoraAttachment). Copies share the model's layers.
  const std::map<std::string, nn::Linear>& linears() const { return linears_; }

 private:
  using Fetch = std::function<Tensor(const std::string& name, const Shape& shape)>;
  // Set while binding a store with quantized entries: the weight kept quantized, or null.
  using FetchQuantized = std::function<const QuantizedMatrix*(const std::string& name, const Shape& shape)>;

  Flux2Transformer(Flux2Config config, Flux2LoadOptions options) : config_(std::move(config)), options_(options) {}
  void bind(const Fetch& fetch);
  nn::Linear prepare(const Fetch& fetch, const std::string& name, const Shape& shape);

  // forward_on_device with reference keys and values (key_rope: over [text ; reference ; image]).
  Tensor forward_on_device(const Tensor& x, const Tensor& ctx, const Tensor& timestep_proj, const Rope& rope,
                           FluxForwardHooks* hooks, const ReferenceCache* refs, const Rope* key_rope) const;
  void check_inputs(const Tensor& x, const Tensor& x_ids, const Tensor& ctx, const Tensor& ctx_ids,
                    const Tensor& timesteps) const;

  Flux2Config config_;
  Flux2LoadOptions options_;
  size_t weight_bytes_ = 0;
  FetchQuantized fetch_quantized_;
  std::map<std::string, nn::Linear> linears_;
  nn::Linear img_in_, txt_in_, time_in_1_, time_in_2_;
  nn::Modulation mod_img_, mod_txt_, mod_single_;  // shared by every block
  std::vector<FluxDoubleBlock> double_;
  std::vector<FluxSingleBlock> single_;
  nn::Linear final_shift_, final_scale_, final_linear_;
};

}  // namespace fluxrt::models
