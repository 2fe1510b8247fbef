#pragma once
// What a FLUX transformer checkpoint's tensor names and shapes say, from its header alone: which
// naming it uses, the prefix on every key, the sizes, and which of the two architectures' own
// layers it has. The pipeline kinds' variant detection reads it (pipelines/variant.h).
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "core/tensor.h"

namespace fluxrt::models {

struct FluxCheckpointShape {
  // BFL names (img_in, double_blocks; ComfyUI too), else diffusers' (x_embedder, transformer_blocks).
  bool bfl_names = false;
  std::string key_prefix;   // "model.diffusion_model." in ComfyUI repackagings, else empty
  int64_t hidden_size = 0;  // img_in / x_embedder rows
  int64_t head_dim = 0;     // the first block's q norm width
  int64_t num_heads = 0;    // hidden_size / head_dim when both are known
  int64_t double_blocks = 0;
  int64_t single_blocks = 0;
  int64_t in_channels = 0;
  int64_t context_dim = 0;  // txt_in / context_embedder input width
  bool guidance_embed = false;
  // FLUX.2: one modulation shared by every double block and one by every single block
  // (single_stream_modulation), where FLUX.1 modulates each block itself.
  bool shared_modulation = false;
  // FLUX.1: the timestep embedder beside the pooled CLIP text vector (time_in + vector_in,
  // diffusers' time_text_embed).
  bool pooled_text_embedder = false;
};

// nullopt when the names are neither BFL's nor diffusers' FLUX transformer names.
std::optional<FluxCheckpointShape> read_flux_checkpoint_shape(const std::map<std::string, Shape>& shapes);

}  // namespace fluxrt::models
