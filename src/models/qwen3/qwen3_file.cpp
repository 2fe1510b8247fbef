#include "models/qwen3/qwen3_file.h"

#include <string>

#include "core/error.h"
#include "io/gguf.h"
#include "models/llama_cpp_names.h"

namespace fluxrt::models {
namespace {

// llama.cpp's names (gguf-py's TensorNameMap for MODEL_ARCH.QWEN3) -> transformers'. The LM head
// and llama.cpp's RoPE factors (absent for Qwen3) are never computed.
const LlamaCppNames kQwen3Names{
    "blk.",
    "layers.",
    {{"attn_norm.weight", "input_layernorm.weight"},
     {"ffn_norm.weight", "post_attention_layernorm.weight"},
     {"attn_q.weight", "self_attn.q_proj.weight"},
     {"attn_k.weight", "self_attn.k_proj.weight"},
     {"attn_v.weight", "self_attn.v_proj.weight"},
     {"attn_output.weight", "self_attn.o_proj.weight"},
     {"attn_q_norm.weight", "self_attn.q_norm.weight"},
     {"attn_k_norm.weight", "self_attn.k_norm.weight"},
     {"ffn_gate.weight", "mlp.gate_proj.weight"},
     {"ffn_up.weight", "mlp.up_proj.weight"},
     {"ffn_down.weight", "mlp.down_proj.weight"}},
    {{"token_embd.weight", "embed_tokens.weight"}, {"output_norm.weight", "norm.weight"}},
    [](const std::string& name) { return name == "output.weight" || name == "rope_freqs.weight"; },
};

}  // namespace

TensorStore qwen3_store_of_file(const std::filesystem::path& file) {
  const std::string path = file.string();
  FLUXRT_CHECK(std::filesystem::is_regular_file(file), ErrorCode::NotFound, "text encoder file {} not found",
               path);
  if (io::is_gguf_file(path))
    return from_llama_cpp_names(TensorStore::from_gguf(io::GgufFile::open(path)), kQwen3Names);
  // Qwen3ForCausalLM keeps the decoder under "model."; a bare Qwen3Model has no prefix.
  const io::Checkpoint checkpoint = io::Checkpoint::open(path);
  const std::string prefix = checkpoint.contains("model.embed_tokens.weight") ? "model." : "";
  TensorStore store = TensorStore::from_checkpoint(checkpoint, prefix);
  store.set_description(path);
  for (const std::string& name : store.names())
    if (name.rfind("lm_head.", 0) == 0) store.remove(name);  // the LM head is never computed
  return store;
}

Qwen3Config qwen3_config_of_file(const std::filesystem::path& file, const TensorStore& store) {
  const std::string path = file.string();
  Qwen3Config c;  // Qwen3's rope_theta and rms_norm_eps unless the file says otherwise
  if (io::is_gguf_file(path)) {
    const auto gguf = io::GgufFile::open(path);
    if (const io::GgufValue* arch = gguf_value(*gguf, "general.architecture")) {
      FLUXRT_CHECK(arch->type == io::GgufValueType::String && arch->s == "qwen3", ErrorCode::Unsupported,
                   "{}: general.architecture is {}, not qwen3 (FLUX.2 klein's text encoder is Qwen3)", path,
                   arch->str());
    }
    if (const io::GgufValue* v = gguf_value(*gguf, "qwen3.rope.freq_base"); v && v->number())
      c.rope_theta = *v->number();
    if (const io::GgufValue* v = gguf_value(*gguf, "qwen3.attention.layer_norm_rms_epsilon");
        v && v->number())
      c.rms_norm_eps = static_cast<float>(*v->number());
  }
  const Shape embed = detect_2d_shape(store, "embed_tokens.weight", "Qwen3 text encoder");
  c.vocab_size = embed[0];
  c.hidden_size = embed[1];
  const int64_t layers = count_indexed_layers(store, "layers.");
  FLUXRT_CHECK(layers > 0, ErrorCode::Format, "{}: cannot detect the Qwen3 text encoder: no decoder layers",
               path);
  c.num_layers = layers;
  FLUXRT_CHECK(store.contains("layers.0.self_attn.q_norm.weight") &&
                   store.shape("layers.0.self_attn.q_norm.weight").size() == 1,
               ErrorCode::Format,
               "{}: cannot detect the Qwen3 text encoder: no 1-D layer 0 q_norm (not a Qwen3 model?)", path);
  c.head_dim = store.shape("layers.0.self_attn.q_norm.weight")[0];
  const Shape q = detect_2d_shape(store, "layers.0.self_attn.q_proj.weight", "Qwen3 text encoder");
  const Shape k = detect_2d_shape(store, "layers.0.self_attn.k_proj.weight", "Qwen3 text encoder");
  FLUXRT_CHECK(
      c.head_dim > 0 && q[0] % c.head_dim == 0 && k[0] % c.head_dim == 0, ErrorCode::Format,
      "{}: cannot detect the Qwen3 text encoder: q_proj rows {} / k_proj rows {} are not heads of {}", path,
      q[0], k[0], c.head_dim);
  c.num_heads = q[0] / c.head_dim;
  c.num_kv_heads = k[0] / c.head_dim;
  c.intermediate_size = detect_2d_shape(store, "layers.0.mlp.gate_proj.weight", "Qwen3 text encoder")[0];
  return c;
}

Qwen3Encoder Qwen3Encoder::load_file(const std::filesystem::path& file, const Qwen3EncoderOptions& options) {
  const TensorStore store = qwen3_store_of_file(file);
  const Qwen3Config config = qwen3_config_of_file(file, store);
  FLUXRT_CHECK(options.taps.empty() || config.num_layers >= options.taps.back(), ErrorCode::Unsupported,
               "{}: the Qwen3 text encoder has {} layers; FLUX.2 klein reads hidden state {}", file.string(),
               config.num_layers, options.taps.back());
  return from_store(config, store, options);
}

}  // namespace fluxrt::models
