#include "models/t5/t5_file.h"

#include <string>

#include "core/error.h"
#include "io/gguf.h"
#include "models/llama_cpp_names.h"

namespace fluxrt::models {
namespace {

bool is_decoder_or_head(const std::string& name) {
  return name.rfind("dec.", 0) == 0 || name.rfind("decoder.", 0) == 0 || name.rfind("output.", 0) == 0 ||
         name.rfind("lm_head.", 0) == 0;
}

// llama.cpp's encoder names (gguf-py's TensorNameMap for MODEL_ARCH.T5ENCODER) -> transformers'. A
// whole T5's decoder is left out: FLUX reads the encoder only.
const LlamaCppNames kT5Names{
    "enc.blk.",
    "encoder.block.",
    {{"attn_norm.weight", "layer.0.layer_norm.weight"},
     {"attn_q.weight", "layer.0.SelfAttention.q.weight"},
     {"attn_k.weight", "layer.0.SelfAttention.k.weight"},
     {"attn_v.weight", "layer.0.SelfAttention.v.weight"},
     {"attn_o.weight", "layer.0.SelfAttention.o.weight"},
     {"attn_rel_b.weight", "layer.0.SelfAttention.relative_attention_bias.weight"},
     {"ffn_norm.weight", "layer.1.layer_norm.weight"},
     {"ffn_gate.weight", "layer.1.DenseReluDense.wi_0.weight"},
     {"ffn_up.weight", "layer.1.DenseReluDense.wi_1.weight"},
     {"ffn_down.weight", "layer.1.DenseReluDense.wo.weight"}},
    {{"token_embd.weight", "shared.weight"}, {"enc.output_norm.weight", "encoder.final_layer_norm.weight"}},
    is_decoder_or_head,
};

}  // namespace

TensorStore t5_store_of_file(const std::filesystem::path& file) {
  const std::string path = file.string();
  FLUXRT_CHECK(std::filesystem::is_regular_file(file), ErrorCode::NotFound, "text encoder file {} not found",
               path);
  if (io::is_gguf_file(path))
    return from_llama_cpp_names(TensorStore::from_gguf(io::GgufFile::open(path)), kT5Names);
  TensorStore store = TensorStore::from_checkpoint(io::Checkpoint::open(path));
  for (const std::string& name : store.names())
    if (is_decoder_or_head(name)) store.remove(name);  // a whole T5ForConditionalGeneration
  return store;
}

T5Config t5_config_of_file(const std::filesystem::path& file, const TensorStore& store) {
  const std::string path = file.string();
  T5Config c = T5Config::t5_v1_1_xxl();  // epsilon and max distance unless the file says otherwise
  if (io::is_gguf_file(path)) {
    const auto gguf = io::GgufFile::open(path);
    std::string arch = "t5encoder";
    if (const io::GgufValue* a = gguf_value(*gguf, "general.architecture")) {
      arch = a->type == io::GgufValueType::String ? a->s : a->str();
      FLUXRT_CHECK(arch == "t5encoder" || arch == "t5", ErrorCode::Unsupported,
                   "{}: general.architecture is {}, not t5encoder (FLUX.1's second text encoder is T5)", path,
                   a->str());
    }
    // llama.cpp's converter writes T5's epsilon as the RMS-norm one; older files as the plain key.
    for (const char* key : {"attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon"}) {
      if (const io::GgufValue* v = gguf_value(*gguf, arch + "." + key); v && v->number()) {
        c.layer_norm_epsilon = static_cast<float>(*v->number());
        break;
      }
    }
  }
  const std::string embed = store.contains("shared.weight") ? "shared.weight" : "encoder.embed_tokens.weight";
  const Shape e = detect_2d_shape(store, embed, "T5 text encoder");
  c.vocab_size = e[0];
  c.d_model = e[1];
  const int64_t layers = count_indexed_layers(store, "encoder.block.");
  FLUXRT_CHECK(layers > 0, ErrorCode::Format, "{}: cannot detect the T5 text encoder: no encoder blocks",
               path);
  c.num_layers = layers;
  const Shape bias = detect_2d_shape(
      store, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", "T5 text encoder");
  c.relative_attention_num_buckets = bias[0];
  c.num_heads = bias[1];
  const Shape q = detect_2d_shape(store, "encoder.block.0.layer.0.SelfAttention.q.weight", "T5 text encoder");
  FLUXRT_CHECK(c.num_heads > 0 && q[0] % c.num_heads == 0, ErrorCode::Format,
               "{}: cannot detect the T5 text encoder: q rows {} are not {} heads", path, q[0], c.num_heads);
  c.d_kv = q[0] / c.num_heads;
  c.d_ff = detect_2d_shape(store, "encoder.block.0.layer.1.DenseReluDense.wi_0.weight", "T5 text encoder")[0];
  return c;
}

T5Encoder T5Encoder::load_file(const std::filesystem::path& file, const T5EncoderOptions& options) {
  const TensorStore store = t5_store_of_file(file);
  return from_store(t5_config_of_file(file, store), store, options);
}

}  // namespace fluxrt::models
