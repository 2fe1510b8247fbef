#pragma once
// GGUF files converted by llama.cpp name a model's tensors per block ("blk.N.attn_q.weight",
// "enc.blk.N.attn_o.weight") plus a few whole names ("token_embd.weight"). The text encoders map
// them to transformers' names with one table each; this is the walk they share.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "io/gguf.h"
#include "models/weight_binder.h"

namespace fluxrt::models {

struct LlamaCppNames {
  std::string block_prefix;                                // llama.cpp's: "blk." (Qwen3), "enc.blk." (T5)
  std::string layer_prefix;                                // transformers': "layers.", "encoder.block."
  std::vector<std::pair<std::string, std::string>> block;  // per-block name -> transformers' name
  std::vector<std::pair<std::string, std::string>> whole;  // whole name -> transformers' name
  bool (*skip)(const std::string& name) = nullptr;         // tensors never computed: left out
};

// `raw` under transformers' names, quantized entries kept quantized. Names the table does not know
// keep their own, so the binder reports them as unused.
TensorStore from_llama_cpp_names(const TensorStore& raw, const LlamaCppNames& names);

// The GGUF metadata value `key`, or null.
const io::GgufValue* gguf_value(const io::GgufFile& file, const std::string& key);

// 1 + the highest N among the store's names "<prefix>N.<rest>" (0 when there is none): a model's
// layer count, read from a checkpoint without a config.
int64_t count_indexed_layers(const TensorStore& store, const std::string& prefix);

}  // namespace fluxrt::models
