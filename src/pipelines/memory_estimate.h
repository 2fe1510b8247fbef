#pragma once
// What a generate call must fit in memory, known before anything is loaded: the weights that are
// resident together (read from the checkpoint headers only) and the machine's RAM. The pipelines'
// validate_size adds their activation estimate and refuses a size or batch that cannot fit.
#include <cstddef>
#include <filesystem>
#include <string>

#include "core/dtype.h"
#include "nn/linear.h"

namespace fluxrt::pipelines {

// Bytes one component's weights occupy once loaded for a run in `dtype`: every tensor of the
// checkpoint at `weights` (a .safetensors file, a sharded index, or a folder holding either) at
// the element size the loaders keep (f32 runs: 4 bytes; bf16 runs: 2, fp8 and f32 files are
// converted to bf16). A ComfyUI all-in-one file counts only its model.diffusion_model.* tensors.
// 0 when `weights` is empty or does not exist; Format when a header is unreadable.
// `linears` Int8 (a FLUX transformer at precision int8, whose 2-D tensors are all linear weights):
// each 2-D tensor at one byte per element, what W8A8 keeps of it (plus a scale per row, left out),
// unless its quantized type is smaller (the 2-6 bit GGUF types stay in their bytes).
size_t checkpoint_weight_bytes(const std::filesystem::path& weights, DType dtype,
                               nn::LinearFormat linears = nn::LinearFormat::Native);

// Weight bytes of a pipeline's large components.
struct ResidentWeights {
  size_t transformer = 0;
  size_t text_encoders = 0;  // klein: Qwen3; FLUX.1: CLIP-L + T5-XXL (loaded and freed together)
  size_t vae = 0;

  // All three stay resident normally; in low-memory mode one component is resident at a time, so
  // the largest bounds the peak; with the text encoder apart (PipelineOptions::free_text_encoder)
  // it is freed before the transformer and the VAE load.
  size_t peak(bool low_memory, bool text_encoder_apart = false) const;
};

// The components of a diffusers pipeline folder (transformer/, text_encoder/, text_encoder_2/,
// vae/), with `transformer_file` (a single checkpoint) counted instead of transformer/ when given,
// and `text_encoder_file` instead of the folder's large text encoder (text_encoder_2/ when the
// folder has one, FLUX.1's T5; else text_encoder/, klein's Qwen3). `transformer_linears`: the
// transformer's linear format (PipelineOptions::transformer_linears).
ResidentWeights pipeline_weight_bytes(const std::filesystem::path& root, DType dtype,
                                      const std::filesystem::path& transformer_file = {},
                                      const std::filesystem::path& text_encoder_file = {},
                                      nn::LinearFormat transformer_linears = nn::LinearFormat::Native);

// What the size checks compare against.
struct MemoryCheck {
  size_t weight_bytes = 0;  // weights resident while the activations live (ResidentWeights::peak)
  size_t ram_bytes = 0;     // 0: the machine's physical RAM (tests inject a small limit)
  // Appended to the error when low-memory mode would need less (all components resident now).
  bool suggest_low_memory = false;
};

// The size checks every pipeline makes before estimating memory (InvalidArgument, one line): a VAE
// factor in [1, 64], positive multiples of 2 x that factor (pixels per packed token side), at most
// io::kMaxImageSide per side, a batch of at least one image.
void check_image_size(int width, int height, int batch, int vae_scale_factor);

// The machine's physical RAM in bytes (0 when unknown: the check is then skipped).
size_t physical_ram_bytes();

// OutOfMemory (one line) when activations + check.weight_bytes exceed the RAM limit, saying the
// bytes needed (split into weights and activations) and available. `what` names the request
// ("image size 1024x1024 x 4").
void check_fits_in_memory(size_t activation_bytes, const MemoryCheck& check, const std::string& what);

}  // namespace fluxrt::pipelines
