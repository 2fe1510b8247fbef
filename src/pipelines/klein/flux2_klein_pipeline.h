#pragma once
// FLUX.2-klein text-to-image and reference-image editing, step for step what diffusers'
// Flux2KleinPipeline does (flux-reference.md section 5): Qwen3 prompt embeddings (the klein chat
// template, padded to max_sequence_length), noise drawn as torch.randn on a CPU generator in the
// prompt dtype [B, 128, H/(2f), W/(2f)] (f = the VAE's vae_scale_factor, 2 ** (levels - 1): 8 for
// the released klein VAE, so H/16), flattened to tokens with ids (0, i, j, 0), text ids
// (0, 0, 0, l), the empirical-mu schedule, the Euler update in f32 with latents in the model
// dtype, true classifier-free guidance (two forwards) for the base variants, reference images
// VAE-encoded and appended as extra tokens with ids (10 + 10 r, i, j, 0), then BN-denormalise,
// unpatchify, decode, and the 8-bit conversion of VaeImageProcessor.
//
//   auto pipe = Flux2KleinPipeline::load("models/demo", {});
//   GenerateRequest req; req.prompts = {"a red circle"}; req.seed = 7;
//   GenerateResult out = pipe->generate(req);   // out.images[i]: RGB 8-bit
//
// Timings go to the Profiler given in the options under the span names of pipelines/spans.h, so
// the CLI and the benchmarks build their reports from one source.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "core/timer.h"
#include "io/image.h"
#include "models/flux/flux2_config.h"
#include "models/qwen3/qwen3_encoder.h"
#include "models/vae/flux2_vae.h"
#include "pipelines/memory_estimate.h"
#include "pipelines/pipeline.h"
#include "pipelines/reference_image.h"
#include "pipelines/schedule.h"

namespace fluxrt::models {
class Flux2Transformer;
}

namespace fluxrt::pipelines {

// Flux2KleinPipeline::synthetic variant with the shapes of tests/data/models/flux2-klein-tiny.
inline constexpr const char* kKleinTinySyntheticVariant = "flux.2-klein-tiny";
// The same shapes run with the klein-9B-KV recipe (KleinModelDefaults::reference_kv).
inline constexpr const char* kKleinTinyKvSyntheticVariant = "flux.2-klein-tiny-kv";

// What the model folder says about itself (model_index.json, scheduler config, transformer
// config): the defaults a request falls back to.
struct KleinModelDefaults {
  bool is_distilled = true;     // model_index.json "is_distilled"; base variants: false
  int num_steps = 4;            // distilled: 4; base: 50
  float guidance_scale = 1.0f;  // distilled: 1.0 (unused); base: 4.0
  int width = 1024;             // diffusers' default_sample_size 128 x vae_scale_factor
  int height = 1024;
  int max_sequence_length = 512;
  // FLUX.2-klein-9B-KV (model_index.json Flux2KleinKVPipeline, or a transformer file named
  // "...-kv..."): reference images run once as cached keys and values (Flux2Transformer::
  // reference_cache) instead of as tokens of every step. The weights are a separate
  // distillation for that recipe; the architecture is klein-9B's.
  bool reference_kv = false;
  // What the run should show (a transformer file whose name disagrees with the folder's
  // model_index.json, which is taken: VariantInfo::notes).
  std::vector<std::string> notes;
};

class Flux2KleinPipeline final : public Pipeline {
 public:
  // A diffusers Flux2KleinPipeline folder (model_index.json, transformer/, text_encoder/,
  // tokenizer/, vae/, scheduler/), given as a path already resolved by io::resolve_model.
  static std::unique_ptr<Flux2KleinPipeline> load(const std::filesystem::path& model_root,
                                                  const PipelineOptions& options);
  // Synthetic random weights of a variant's real shapes and no files (benchmarks): the real
  // tokenizer is still needed for the prompt path, so `tokenizer_dir` must hold the Qwen3
  // tokenizer (vocab.json + merges.txt or tokenizer.json). Variants: flux.2-klein-4b, -9b,
  // flux.2-klein-base-4b, -base-9b (CFG defaults), and kKleinTinySyntheticVariant (the tiny test
  // model's shapes, for fast smoke tests).
  static std::unique_ptr<Flux2KleinPipeline> synthetic(const std::string& variant,
                                                       const std::filesystem::path& tokenizer_dir,
                                                       const PipelineOptions& options, uint64_t seed = 42);
  ~Flux2KleinPipeline() override;

  const PipelineKind& kind() const override;
  const ModelFacts& facts() const override;
  using Pipeline::generate;
  GenerateResult generate(const std::vector<PlannedRequest>& batch, const CallContext& call) override;
  // PipelineKind::describe and ::plan of FLUX.2 klein.
  static ModelFacts describe(const std::filesystem::path& model_root, const PipelineOptions& options);
  static fluxrt::RequestPlan plan_for(const fluxrt::GenerateRequest& request, const ModelFacts& facts);

  const KleinModelDefaults& defaults() const;
  const models::Flux2Config& transformer_config() const;
  const PipelineOptions& options() const override;
  // diffusers' vae_scale_factor: 2 ** (len(vae.config.block_out_channels) - 1), from the folder's
  // vae/config.json (8 for the released klein VAE; the demo model's 3-level VAE: 4). Sizes are
  // multiples of 2 x this; one latent token covers that many pixels per side.
  int vae_scale_factor() const;
  // Throws InvalidArgument (one line) when a size is not a positive multiple of 2 x
  // vae_scale_factor (at most io::kMaxImageSide) or the batch is < 1, OutOfMemory when the
  // estimated activations plus memory.weight_bytes (the weights resident at the same time) exceed
  // the RAM (memory.ram_bytes, default the machine's); used by the CLI before anything is loaded
  // or written (the factor then comes from the folder's vae/config.json, the weights from the
  // checkpoint headers: pipeline_weight_bytes).
  static void validate_size(int width, int height, int batch, int vae_scale_factor = 8,
                            const MemoryCheck& memory = {});
  // The weights this pipeline keeps resident (from the checkpoint headers; 0 for synthetic ones).
  const ResidentWeights& resident_weights() const;

  struct Impl;

 private:
  explicit Flux2KleinPipeline(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Packed latents <-> tokens and the position ids the klein transformer receives.
Tensor pack_latents(const Tensor& latents);                          // [B,C,h,w] -> [B,h*w,C]
Tensor unpack_latents(const Tensor& tokens, int64_t h, int64_t w);   // [B,h*w,C] -> [B,C,h,w]
Tensor klein_image_ids(int64_t h, int64_t w, int64_t t_offset = 0);  // [h*w, 4] i64: (t, i, j, 0)
Tensor klein_text_ids(int64_t length);                               // [L, 4] i64: (0, 0, 0, l)

}  // namespace fluxrt::pipelines
