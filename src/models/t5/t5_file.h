#pragma once
// The T5 encoder from one file instead of a transformers folder: GGUF files in llama.cpp's tensor
// names (city96's t5-v1_1-xxl-encoder GGUFs, general.architecture "t5encoder", or a whole "t5"
// model whose decoder is skipped) and single .safetensors files in transformers' names (ComfyUI's
// t5xxl_fp16.safetensors). Neither carries a config.json: the config is read from the shapes, and
// from the GGUF metadata for the norm epsilon (the bucket distance is T5 v1.1's 128).
#include <filesystem>

#include "models/t5/t5_encoder.h"
#include "models/weight_binder.h"

namespace fluxrt::models {

// The file's encoder tensors under T5EncoderModel's names (shared.weight,
// encoder.block.N.layer.0.SelfAttention.q.weight, ...), quantized GGUF entries kept quantized.
// Decoder tensors and the LM head are left out; encoder tensors the map does not know keep their
// names, so the binder reports them as unused.
TensorStore t5_store_of_file(const std::filesystem::path& file);

// d_model and vocab from the embedding, layers from the highest block index, heads and buckets
// from the relative attention bias, d_kv from q's rows, d_ff from wi_0's rows; the epsilon from
// the GGUF's t5encoder.* / t5.* keys when present, else T5 v1.1's. A GGUF whose
// general.architecture is neither fails with Unsupported naming it.
T5Config t5_config_of_file(const std::filesystem::path& file, const TensorStore& store);

}  // namespace fluxrt::models
