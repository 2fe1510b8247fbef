#pragma once
// The Qwen3 text encoder from one file instead of a transformers folder: GGUF files in llama.cpp's
// tensor names (unsloth's and others' Qwen3-4B / 8B GGUFs, which ComfyUI-GGUF and
// stable-diffusion.cpp run klein with) and single .safetensors files in transformers' names
// (ComfyUI's text_encoders/qwen_3_4b.safetensors). Neither carries a config.json: the config is
// read from the GGUF metadata where it says something the shapes cannot (RoPE base, norm
// epsilon), the rest from the tensors' shapes.
#include <filesystem>

#include "models/qwen3/qwen3_encoder.h"
#include "models/weight_binder.h"

namespace fluxrt::models {

// The file's tensors under Qwen3Model's names (embed_tokens.weight, layers.N.self_attn.q_proj.weight,
// ...), quantized GGUF entries kept quantized. llama.cpp stores Qwen's q/k rows unpermuted
// (NeoX RoPE, like transformers), so the map is a rename. Tensors it does not know keep their
// names, so the binder reports them as unused.
TensorStore qwen3_store_of_file(const std::filesystem::path& file);

// The config of such a file: vocab and hidden size from the embedding, layers from the highest
// layer index, head_dim from q_norm, heads from q/k rows, intermediate size from gate_proj;
// rope_theta and rms_norm_eps from the GGUF's qwen3.* keys when present, else Qwen3's (1e6, 1e-6).
// A GGUF whose general.architecture is not qwen3 fails with Unsupported naming it.
Qwen3Config qwen3_config_of_file(const std::filesystem::path& file, const TensorStore& store);

}  // namespace fluxrt::models
