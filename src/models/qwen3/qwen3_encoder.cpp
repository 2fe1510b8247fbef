#include "models/qwen3/qwen3_encoder.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/quantized_embedding.h"
#include "models/synthetic_weights.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/norm.h"
#include "ops/rope.h"

namespace fluxrt::models {
namespace {

using json = nlohmann::json;

int64_t json_int(const json& j, const char* key, const std::filesystem::path& path) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer())
    fail(ErrorCode::Format, "{}: missing or non-integer \"{}\"", path.string(), key);
  return it->get<int64_t>();
}

// transformers' Qwen3RMSNorm: statistics in f32, `weight * hidden.to(input_dtype)`, i.e. the
// normalised value is rounded to the activation dtype before the weight multiply (a no-op in f32).
Tensor qwen_rms_norm(const Tensor& x, const Tensor& weight, float eps) {
  return ops::rms_norm(x, weight, eps, ops::RmsRounding::BeforeWeight);
}

// Qwen3Attention's heads, and Qwen3RMSNorm's rounding for q_norm / k_norm (as qwen_rms_norm).
void qwen3_attention_shape(const Qwen3Config& c, nn::QkNormAttention& a) {
  a.norm.eps = c.rms_norm_eps;
  a.norm.rounding = ops::RmsRounding::BeforeWeight;
  a.heads = c.num_heads;
  a.kv_heads = c.num_kv_heads;
  a.head_dim = c.head_dim;
}

}  // namespace

// ---- config ---------------------------------------------------------------------------------

Qwen3Config Qwen3Config::from_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) fail(ErrorCode::Io, "{}: cannot open the text encoder config", path.string());
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail(ErrorCode::Format, "{}: invalid JSON ({})", path.string(), e.what());
  }
  if (!j.is_object()) fail(ErrorCode::Format, "{}: not a JSON object", path.string());
  if (auto mt = j.find("model_type"); mt != j.end() && mt->is_string() && *mt != "qwen3")
    fail(ErrorCode::Unsupported, "{}: model_type \"{}\" is not qwen3", path.string(), mt->get<std::string>());
  Qwen3Config c;
  c.vocab_size = json_int(j, "vocab_size", path);
  c.hidden_size = json_int(j, "hidden_size", path);
  c.intermediate_size = json_int(j, "intermediate_size", path);
  c.num_layers = json_int(j, "num_hidden_layers", path);
  c.num_heads = json_int(j, "num_attention_heads", path);
  c.num_kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                       ? json_int(j, "num_key_value_heads", path)
                       : c.num_heads;
  c.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? json_int(j, "head_dim", path)
                                                                    : c.hidden_size / std::max<int64_t>(1, c.num_heads);
  if (auto it = j.find("rms_norm_eps"); it != j.end()) {
    if (!it->is_number()) fail(ErrorCode::Format, "{}: \"rms_norm_eps\" is not a number", path.string());
    c.rms_norm_eps = it->get<float>();
  }
  // transformers 4.x writes rope_theta at the top level, 5.x inside rope_parameters.
  const json* theta = nullptr;
  if (auto it = j.find("rope_theta"); it != j.end()) theta = &*it;
  if (auto rp = j.find("rope_parameters"); rp != j.end() && rp->is_object()) {
    if (auto t = rp->find("rope_theta"); t != rp->end()) theta = &*t;
    if (auto ty = rp->find("rope_type"); ty != rp->end() && ty->is_string() && *ty != "default")
      fail(ErrorCode::Unsupported, "{}: rope_type \"{}\" (only default RoPE)", path.string(), ty->get<std::string>());
  }
  if (auto rs = j.find("rope_scaling"); rs != j.end() && !rs->is_null())
    fail(ErrorCode::Unsupported, "{}: rope_scaling is not supported", path.string());
  if (theta) {
    if (!theta->is_number()) fail(ErrorCode::Format, "{}: rope_theta is not a number", path.string());
    c.rope_theta = theta->get<double>();
  }
  if (auto it = j.find("attention_bias"); it != j.end() && it->is_boolean() && it->get<bool>())
    fail(ErrorCode::Unsupported, "{}: attention_bias true is not supported", path.string());
  if (auto it = j.find("use_sliding_window"); it != j.end() && it->is_boolean() && it->get<bool>())
    fail(ErrorCode::Unsupported, "{}: use_sliding_window true is not supported", path.string());
  if (auto it = j.find("hidden_act"); it != j.end() && it->is_string() && *it != "silu")
    fail(ErrorCode::Unsupported, "{}: hidden_act \"{}\" (only silu)", path.string(), it->get<std::string>());
  return c;
}

Qwen3Config Qwen3Config::qwen3_4b() { return Qwen3Config{}; }

Qwen3Config Qwen3Config::qwen3_8b() {
  Qwen3Config c;
  c.hidden_size = 4096;
  c.intermediate_size = 12288;
  return c;
}

// ---- encoder --------------------------------------------------------------------------------

Qwen3Encoder::Qwen3Encoder(Qwen3Config config, Qwen3EncoderOptions options)
    : config_(std::move(config)), options_(std::move(options)) {
  validate(config_, options_);
}

void Qwen3Encoder::validate(const Qwen3Config& c, const Qwen3EncoderOptions& o) {
  if (c.hidden_size < 1 || c.intermediate_size < 1 || c.num_layers < 1 || c.num_heads < 1 || c.num_kv_heads < 1 ||
      c.head_dim < 2 || c.head_dim % 2 != 0 || c.vocab_size < 1)
    fail(ErrorCode::Format, "qwen3: invalid config (hidden {}, layers {}, heads {}/{}, head_dim {})", c.hidden_size,
         c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim);
  if (c.num_heads % c.num_kv_heads != 0)
    fail(ErrorCode::Format, "qwen3: {} attention heads not a multiple of {} kv heads", c.num_heads, c.num_kv_heads);
  if (o.dtype != DType::BF16 && o.dtype != DType::F32)
    fail(ErrorCode::Unsupported, "qwen3: activation dtype {} (bf16 or f32)", dtype_name(o.dtype));
  if (o.taps.empty()) fail(ErrorCode::InvalidArgument, "qwen3: no hidden-state taps");
  for (size_t i = 0; i < o.taps.size(); ++i) {
    if (o.taps[i] < 1 || o.taps[i] > c.num_layers || (i > 0 && o.taps[i] <= o.taps[i - 1]))
      fail(ErrorCode::InvalidArgument, "qwen3: hidden-state taps must ascend within 1..{} (got {})", c.num_layers,
           o.taps[i]);
  }
}

void Qwen3Encoder::bind(const TensorStore& store) {
  const Qwen3Config& c = config_;
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  // hidden_states[k] is the output of decoder layer k-1: the last tap needs layers 0..tap-1.
  const int64_t computed = options_.taps.back();
  WeightBinder binder(store, "text_encoder");
  // Weights keep the checkpoint dtype in bf16 mode; the f32 mode widens them once here.
  const std::optional<DType> wdtype =
      options_.dtype == DType::F32 ? std::optional<DType>(DType::F32) : std::nullopt;
  // A GGUF's quantized table and linears stay in their bytes (the GEMM dequantizes per call).
  if (const QuantizedMatrix* q = binder.quantized("embed_tokens.weight", {c.vocab_size, H}))
    embed_quantized_ = std::make_shared<const QuantizedMatrix>(*q);
  else
    embed_tokens_ = to_device(binder.require("embed_tokens.weight", {c.vocab_size, H}), options_.device);
  auto lin = [&](const std::string& name, int64_t n, int64_t k) {
    if (const QuantizedMatrix* q = binder.quantized(name, {n, k}))
      return nn::Linear::prepare_quantized(*q, Tensor(), options_.device);
    return nn::Linear::prepare(binder.require(name, {n, k}, wdtype), Tensor(), options_.device);
  };
  layers_.clear();
  layers_.resize(static_cast<size_t>(computed));
  for (int64_t i = 0; i < computed; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    Layer& L = layers_[static_cast<size_t>(i)];
    L.input_norm = to_device(binder.require(p + "input_layernorm.weight", {H}, wdtype), options_.device);
    L.post_norm = to_device(binder.require(p + "post_attention_layernorm.weight", {H}, wdtype), options_.device);
    L.attn.norm.query =
        to_device(binder.require(p + "self_attn.q_norm.weight", {D}, wdtype), options_.device);
    L.attn.norm.key = to_device(binder.require(p + "self_attn.k_norm.weight", {D}, wdtype), options_.device);
    L.attn.to_q = lin(p + "self_attn.q_proj.weight", c.num_heads * D, H);
    L.attn.to_k = lin(p + "self_attn.k_proj.weight", c.num_kv_heads * D, H);
    L.attn.to_v = lin(p + "self_attn.v_proj.weight", c.num_kv_heads * D, H);
    L.attn.to_out = lin(p + "self_attn.o_proj.weight", H, c.num_heads * D);
    L.mlp.in = lin(p + "mlp.gate_proj.weight", I, H);
    L.mlp.up = lin(p + "mlp.up_proj.weight", I, H);
    L.mlp.out = lin(p + "mlp.down_proj.weight", H, I);
    qwen3_attention_shape(c, L.attn);
  }
  // Deliberately unused: layers after the last tap, the final norm (FLUX takes no normed state).
  for (int64_t i = computed; i < c.num_layers; ++i) binder.ignore_prefix("layers." + std::to_string(i) + ".");
  binder.ignore_prefix("norm.");
  binder.finish();
}

Qwen3Encoder Qwen3Encoder::from_store(const Qwen3Config& config, const TensorStore& store,
                                      const Qwen3EncoderOptions& options) {
  Qwen3Encoder e(config, options);
  e.bind(store);
  return e;
}

Qwen3Encoder Qwen3Encoder::load(const std::filesystem::path& dir, const Qwen3EncoderOptions& options) {
  Qwen3Config config = Qwen3Config::from_json_file(dir / "config.json");
  io::Checkpoint checkpoint = io::Checkpoint::open(dir.string());
  // Qwen3ForCausalLM keeps the decoder under "model."; its lm_head (tied or not) is outside that
  // prefix and never read. A bare Qwen3Model has no prefix.
  const std::string prefix = checkpoint.contains("model.embed_tokens.weight") ? "model." : "";
  TensorStore store = TensorStore::from_checkpoint(checkpoint, prefix);
  if (!prefix.empty()) store.set_description(checkpoint.path());
  return from_store(config, store, options);
}

Qwen3Encoder Qwen3Encoder::synthetic(const Qwen3Config& config, const Qwen3EncoderOptions& options, uint64_t seed) {
  Qwen3Encoder e(config, options);
  const Qwen3Config& c = config;
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  const DType wd = options.dtype == DType::F32 ? DType::F32 : DType::BF16;
  uint64_t s = seed;
  // Layer by layer, each weight prepared as soon as it exists. The backend keeps its own packed /
  // reordered copy, so the generated source is replaced by a zero-stride stand-in of the same shape
  // (only shape and dtype are read from it afterwards): a checkpoint's weights are file-backed
  // mmap pages, but random ones would otherwise double the resident memory (Qwen3-4B: 5.4 GB twice).
  // Uniform amplitudes ~ 1/sqrt(fan_in) keep the residual stream bounded over 27 layers.
  // With options.synthetic_weights the linears and the table are of that quantized type, as a
  // GGUF encoder's are (benchmarks of quantized checkpoints).
  const std::optional<QuantType> q = options.synthetic_weights;
  auto lin = [&](int64_t n, int64_t k) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(k));
    if (q)
      return nn::Linear::prepare_quantized(synthetic_quantized(n, k, *q, ++s, bound), Tensor(),
                                           options.device);
    nn::Linear p =
        nn::Linear::prepare(synthetic_tensor({n, k}, wd, ++s, bound, 0.0f), Tensor(), options.device);
    p.release_source();
    return p;
  };
  auto norm = [&](int64_t n) { return to_device(synthetic_tensor({n}, wd, ++s, 0.1f, 1.0f), options.device); };
  if (q)
    e.embed_quantized_ =
        std::make_shared<const QuantizedMatrix>(synthetic_quantized(c.vocab_size, H, *q, ++s, 0.05f));
  else
    e.embed_tokens_ = to_device(synthetic_tensor({c.vocab_size, H}, DType::BF16, ++s, 0.05f, 0.0f),
                                options.device);  // [V, H]
  e.layers_.resize(static_cast<size_t>(options.taps.back()));
  for (Layer& L : e.layers_) {
    L.input_norm = norm(H);
    L.post_norm = norm(H);
    L.attn.norm.query = norm(D);
    L.attn.norm.key = norm(D);
    L.attn.to_q = lin(c.num_heads * D, H);
    L.attn.to_k = lin(c.num_kv_heads * D, H);
    L.attn.to_v = lin(c.num_kv_heads * D, H);
    L.attn.to_out = lin(H, c.num_heads * D);
    L.mlp.in = lin(I, H);
    L.mlp.up = lin(I, H);
    L.mlp.out = lin(H, I);
    qwen3_attention_shape(c, L.attn);
  }
  return e;
}

Tensor Qwen3Encoder::forward(const Tensor& input_ids, const Tensor& attention_mask) const {
  const Qwen3Config& c = config_;
  if (input_ids.dim() != 2)
    fail(ErrorCode::InvalidArgument, "qwen3: input_ids must be [B, L], got {}", input_ids.shape().str());
  if (!attention_mask.defined() || attention_mask.shape() != input_ids.shape())
    fail(ErrorCode::InvalidArgument, "qwen3: attention_mask must match input_ids {}", input_ids.shape().str());
  const int64_t B = input_ids.size(0), Lseq = input_ids.size(1), H = c.hidden_size, D = c.head_dim;
  const DType dt = options_.dtype;
  // transformers' default position_ids are 0..L-1 (the pipeline passes none; right padding keeps
  // the real tokens at 0..n-1). Qwen3RotaryEmbedding: rotate-half tables in f32.
  ops::AttentionOptions attn;
  attn.rope = ops::RopeLayout::HalfSplit;
  // ids, mask and RoPE tables are built on the host; they move to the device once per forward.
  const Device dev = options_.device;
  const ops::RopeTable rope = ops::rope_rotate_half(Lseq, D, c.rope_theta);
  attn.rope_table = {to_device(rope.cos, dev), to_device(rope.sin, dev)};
  attn.causal = true;  // transformers' causal mask combined with the padding mask
  attn.key_padding_mask =
      to_device(attention_mask.dtype() == DType::U8 ? attention_mask : attention_mask.to(DType::U8), dev);
  attn.scale = 1.0f / std::sqrt(static_cast<float>(D));

  // Qwen3Model.embed_tokens
  Tensor x =
      embed_quantized_
          ? to_device(quantized_embedding(*embed_quantized_, to_device(input_ids, Device::cpu()), dt), dev)
          : ops::embedding(embed_tokens_, to_device(input_ids, dev), dt);  // [B, L, H]
  const int64_t ntaps = static_cast<int64_t>(options_.taps.size());
  Tensor out = Tensor::empty({B, Lseq, ntaps, H}, dt, dev);  // [B, L, taps, H]
  size_t next_tap = 0;
  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& L = layers_[li];
    // Qwen3DecoderLayer: x = x + self_attn(input_layernorm(x))
    Tensor h = qwen_rms_norm(x, L.input_norm, c.rms_norm_eps);  // [B, L, H]
    // Qwen3Attention: q [B, L, nh, D], k, v [B, L, nkv, D], q_norm / k_norm per head before RoPE,
    // then o_proj.
    ops::add_(x, L.attn(h, attn));  // [B, L, H]
    // Qwen3MLP: x = x + down(silu(gate(h)) * up(h)), h = post_attention_layernorm(x)
    h = qwen_rms_norm(x, L.post_norm, c.rms_norm_eps);  // [B, L, H]
    ops::add_(x, L.mlp(h));                             // [B, L, H]
    // hidden_states[li + 1] is this layer's output (no final norm on any tap below num_layers).
    if (next_tap < options_.taps.size() && options_.taps[next_tap] == static_cast<int>(li + 1)) {
      out.select(2, static_cast<int64_t>(next_tap)).copy_from(x);  // [B, L, H]
      ++next_tap;
    }
  }
  // torch.stack(dim=1) -> [B, taps, L, H], permute(0, 2, 1, 3).reshape: per token [tap0 | tap1 | tap2].
  return out.view({B, Lseq, ntaps * H});  // [B, L, taps*H]
}

double Qwen3Encoder::flops(int64_t batch, int64_t length) const {
  const Qwen3Config& c = config_;
  const double tokens = static_cast<double>(batch) * static_cast<double>(length);
  const double H = static_cast<double>(c.hidden_size), I = static_cast<double>(c.intermediate_size);
  const double qd = static_cast<double>(c.num_heads * c.head_dim), kvd = static_cast<double>(c.num_kv_heads * c.head_dim);
  const double proj = 2.0 * tokens * (H * qd + 2.0 * H * kvd + qd * H + 3.0 * H * I);
  // Q.K^T and P.V over the causal triangle: L(L+1)/2 pairs per head, 2 flops per MAC, 2 matmuls.
  const double pairs = static_cast<double>(batch) * static_cast<double>(length) * static_cast<double>(length + 1) / 2.0;
  const double attention = 4.0 * pairs * qd;
  return static_cast<double>(layers_.size()) * (proj + attention);
}

size_t Qwen3Encoder::weight_bytes() const {
  size_t total = embed_quantized_          ? embed_quantized_->nbytes()
                 : embed_tokens_.defined() ? embed_tokens_.nbytes()
                                           : 0;
  for (const Layer& L : layers_) {
    for (const nn::Linear* p :
         {&L.attn.to_q, &L.attn.to_k, &L.attn.to_v, &L.attn.to_out, &L.mlp.in, &L.mlp.up, &L.mlp.out})
      total += p->parameter_bytes();
    total +=
        L.input_norm.nbytes() + L.post_norm.nbytes() + L.attn.norm.query.nbytes() + L.attn.norm.key.nbytes();
  }
  return total;
}

// ---- prompt embedder ------------------------------------------------------------------------

KleinPromptEmbedder::KleinPromptEmbedder(Qwen3Encoder encoder, tokenizers::BpeTokenizer tokenizer)
    : encoder_(std::move(encoder)), tokenizer_(std::move(tokenizer)) {
  prompt_encoder_ = std::make_unique<tokenizers::QwenPromptEncoder>(tokenizer_);
}

std::unique_ptr<KleinPromptEmbedder> KleinPromptEmbedder::load(
    const std::filesystem::path& model_root, const Qwen3EncoderOptions& options,
    const std::filesystem::path& text_encoder_file) {
  Qwen3Encoder encoder = text_encoder_file.empty() ? Qwen3Encoder::load(model_root / "text_encoder", options)
                                                   : Qwen3Encoder::load_file(text_encoder_file, options);
  tokenizers::BpeTokenizer tokenizer = tokenizers::BpeTokenizer::from_directory(model_root / "tokenizer");
  return std::make_unique<KleinPromptEmbedder>(std::move(encoder), std::move(tokenizer));
}

PromptEmbeddings KleinPromptEmbedder::embed(const std::vector<std::string>& prompts, int max_sequence_length) const {
  if (prompts.empty()) fail(ErrorCode::InvalidArgument, "qwen3: no prompts to embed");
  tokenizers::PromptBatch batch = prompt_encoder_->encode_batch(prompts, max_sequence_length);
  PromptEmbeddings r;
  r.input_ids = Tensor::empty({batch.batch, batch.length}, DType::I32);               // [B, L]
  std::copy(batch.input_ids.begin(), batch.input_ids.end(), r.input_ids.data<int32_t>());
  r.attention_mask = Tensor::empty({batch.batch, batch.length}, DType::I32);          // [B, L]
  std::copy(batch.attention_mask.begin(), batch.attention_mask.end(), r.attention_mask.data<int32_t>());
  r.num_tokens = batch.num_tokens;
  r.embeds = encoder_.forward(r.input_ids, r.attention_mask);                         // [B, L, 3H]
  return r;
}

}  // namespace fluxrt::models
