#include "models/t5/t5_encoder.h"

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

namespace fluxrt::models {
namespace {

using json = nlohmann::json;

int64_t json_int(const json& j, const char* key, const std::filesystem::path& path) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer())
    fail(ErrorCode::Format, "{}: missing or non-integer \"{}\"", path.string(), key);
  return it->get<int64_t>();
}

}  // namespace

// ---- config ---------------------------------------------------------------------------------

T5Config T5Config::from_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) fail(ErrorCode::Io, "{}: cannot open the text encoder config", path.string());
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail(ErrorCode::Format, "{}: invalid JSON ({})", path.string(), e.what());
  }
  if (!j.is_object()) fail(ErrorCode::Format, "{}: not a JSON object", path.string());
  if (auto mt = j.find("model_type"); mt != j.end() && mt->is_string() && *mt != "t5")
    fail(ErrorCode::Unsupported, "{}: model_type \"{}\" is not t5", path.string(), mt->get<std::string>());
  if (auto dec = j.find("is_decoder"); dec != j.end() && dec->is_boolean() && dec->get<bool>())
    fail(ErrorCode::Unsupported, "{}: a T5 decoder config (the text encoder is the encoder stack)", path.string());
  T5Config c;
  c.vocab_size = json_int(j, "vocab_size", path);
  c.d_model = json_int(j, "d_model", path);
  c.d_kv = json_int(j, "d_kv", path);
  c.d_ff = json_int(j, "d_ff", path);
  c.num_layers = json_int(j, "num_layers", path);
  c.num_heads = json_int(j, "num_heads", path);
  // transformers' defaults when absent.
  if (j.contains("relative_attention_num_buckets"))
    c.relative_attention_num_buckets = json_int(j, "relative_attention_num_buckets", path);
  if (j.contains("relative_attention_max_distance"))
    c.relative_attention_max_distance = json_int(j, "relative_attention_max_distance", path);
  if (auto it = j.find("layer_norm_epsilon"); it != j.end()) {
    if (!it->is_number()) fail(ErrorCode::Format, "{}: \"layer_norm_epsilon\" is not a number", path.string());
    c.layer_norm_epsilon = it->get<float>();
  }
  // T5 v1.1 is "gated-gelu" (transformers maps it to gelu_new, the tanh form); original T5's
  // "relu" and other activations are not what FLUX ships.
  const std::string ff = j.value("feed_forward_proj", std::string("relu"));
  if (ff != "gated-gelu")
    fail(ErrorCode::Unsupported, "{}: feed_forward_proj \"{}\" (only gated-gelu, T5 v1.1)", path.string(), ff);
  if (auto act = j.find("dense_act_fn"); act != j.end() && act->is_string() && *act != "gelu_new" &&
                                         *act != "gelu_pytorch_tanh")
    fail(ErrorCode::Unsupported, "{}: dense_act_fn \"{}\" (only the tanh GELU)", path.string(), act->get<std::string>());
  return c;
}

T5Config T5Config::t5_v1_1_xxl() { return T5Config{}; }

int64_t t5_relative_position_bucket(int64_t relative_position, int64_t num_buckets, int64_t max_distance) {
  const int64_t half = num_buckets / 2;
  int64_t bucket = relative_position > 0 ? half : 0;
  const int64_t distance = relative_position < 0 ? -relative_position : relative_position;
  const int64_t max_exact = half / 2;
  if (distance < max_exact) return bucket + distance;
  // torch evaluates this in f32 (float tensor / python scalar), then truncates toward zero.
  const float scaled = std::log(static_cast<float>(distance) / static_cast<float>(max_exact)) /
                       static_cast<float>(std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact))) *
                       static_cast<float>(half - max_exact);
  const int64_t large = std::min<int64_t>(max_exact + static_cast<int64_t>(scaled), half - 1);
  return bucket + large;
}

// ---- encoder --------------------------------------------------------------------------------

T5Encoder::T5Encoder(T5Config config, T5EncoderOptions options)
    : config_(std::move(config)), options_(std::move(options)) {
  validate(config_, options_);
}

void T5Encoder::validate(const T5Config& c, const T5EncoderOptions& o) {
  if (c.vocab_size < 1 || c.d_model < 1 || c.d_kv < 1 || c.d_ff < 1 || c.num_layers < 1 || c.num_heads < 1 ||
      c.relative_attention_num_buckets < 4 || c.relative_attention_num_buckets % 2 != 0 ||
      c.relative_attention_max_distance <= c.relative_attention_num_buckets / 4 || !(c.layer_norm_epsilon > 0))
    fail(ErrorCode::Format, "t5: invalid config (d_model {}, d_kv {}, d_ff {}, layers {}, heads {}, buckets {}/{})",
         c.d_model, c.d_kv, c.d_ff, c.num_layers, c.num_heads, c.relative_attention_num_buckets,
         c.relative_attention_max_distance);
  if (o.dtype != DType::BF16 && o.dtype != DType::F32)
    fail(ErrorCode::Unsupported, "t5: activation dtype {} (bf16 or f32; T5 v1.1 overflows float16)", dtype_name(o.dtype));
}

void T5Encoder::bind(const TensorStore& store) {
  const T5Config& c = config_;
  const int64_t D = c.d_model, inner = c.num_heads * c.d_kv, F = c.d_ff;
  WeightBinder binder(store, "text_encoder_2");
  // Weights in the activation dtype: a bf16 checkpoint stays zero-copy in bf16 mode; f32, f16 and
  // fp8 checkpoints (the widely shared t5xxl_fp16 / fp8_e4m3fn files) are converted once here.
  const std::optional<DType> wdtype = options_.dtype;
  // T5EncoderModel ties encoder.embed_tokens to shared; checkpoints hold one or both copies.
  const std::string embed_name =
      binder.has("shared.weight") ? "shared.weight" : "encoder.embed_tokens.weight";
  if (embed_name == "shared.weight") binder.ignore_prefix("encoder.embed_tokens.");
  // A GGUF's quantized table and linears stay in their bytes (the GEMM dequantizes per call).
  if (const QuantizedMatrix* q = binder.quantized(embed_name, {c.vocab_size, D}))
    shared_quantized_ = std::make_shared<const QuantizedMatrix>(*q);
  else
    shared_ = binder.require(embed_name, {c.vocab_size, D});
  auto lin = [&](const std::string& name, int64_t n, int64_t k) {
    if (const QuantizedMatrix* q = binder.quantized(name, {n, k}))
      return nn::Linear::prepare_quantized(*q, Tensor(), options_.device);
    return nn::Linear::prepare(binder.require(name, {n, k}, wdtype), Tensor(), options_.device);
  };
  // True when every one of `names` is a quantized [n, k] entry: those are bound one linear each.
  auto all_quantized = [&](const std::vector<std::string>& names, int64_t n, int64_t k) {
    for (const std::string& name : names) {
      const QuantizedMatrix* q = store.quantized(name);
      if (!q || q->rows != n || q->cols != k) return false;
    }
    return true;
  };
  // Several [n, k] weights stacked by rows into one linear (a copy: the mapping's tensors are
  // separate). Every name is required first, so the binder reports all problems at once.
  auto fused = [&](const std::vector<std::string>& names, int64_t n, int64_t k) {
    std::vector<Tensor> parts;
    for (const std::string& name : names) parts.push_back(binder.require(name, {n, k}, wdtype));
    for (const Tensor& w : parts)
      if (!w.defined()) return nn::Linear();
    const int64_t rows = n * static_cast<int64_t>(parts.size());
    Tensor stacked = Tensor::empty({rows, k}, parts[0].dtype());  // [parts * n, k]
    for (size_t i = 0; i < parts.size(); ++i)
      stacked.narrow(0, static_cast<int64_t>(i) * n, n).copy_from(parts[i]);
    nn::Linear p = nn::Linear::prepare(stacked, Tensor(), options_.device);
    // The CPU backends keep their own packed / reordered copy: drop the stacked one (a zero-memory
    // stand-in of the same shape) so those weights are not resident twice.
    if (options_.device.is_cpu()) p.release_source();
    return p;
  };
  layers_.clear();
  layers_.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "encoder.block." + std::to_string(i) + ".layer.";
    Layer& L = layers_[static_cast<size_t>(i)];
    L.attn_norm = binder.require(p + "0.layer_norm.weight", {D}, wdtype);
    const std::vector<std::string> qkv = {p + "0.SelfAttention.q.weight", p + "0.SelfAttention.k.weight",
                                          p + "0.SelfAttention.v.weight"};
    if (all_quantized(qkv, inner, D)) {
      L.q = lin(qkv[0], inner, D);
      L.k = lin(qkv[1], inner, D);
      L.v = lin(qkv[2], inner, D);
    } else {
      L.qkv = fused(qkv, inner, D);
    }
    L.o = lin(p + "0.SelfAttention.o.weight", D, inner);
    L.ff_norm = binder.require(p + "1.layer_norm.weight", {D}, wdtype);
    const std::vector<std::string> wi = {p + "1.DenseReluDense.wi_0.weight",
                                         p + "1.DenseReluDense.wi_1.weight"};
    if (all_quantized(wi, F, D)) {
      L.ff.in = lin(wi[0], F, D);
      L.ff.up = lin(wi[1], F, D);
    } else {
      L.ff.in = fused(wi, F, D);
    }
    L.ff.out = lin(p + "1.DenseReluDense.wo.weight", D, F);
  }
  // Only block 0 owns the relative position bias; the others reuse what it computes.
  Tensor bias = binder.require("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                               {c.relative_attention_num_buckets, c.num_heads});
  final_norm_ = binder.require("encoder.final_layer_norm.weight", {D}, wdtype);
  binder.finish();
  relative_bias_ = bias.to(DType::F32).contiguous();  // [buckets, heads], read on the host
  place_all();
}

void T5Encoder::place_all() {
  const Device device = options_.device;
  shared_ = to_device(shared_, device);
  final_norm_ = to_device(final_norm_, device);
  for (Layer& L : layers_) {
    L.attn_norm = to_device(L.attn_norm, device);
    L.ff_norm = to_device(L.ff_norm, device);
  }
}

T5Encoder T5Encoder::from_store(const T5Config& config, const TensorStore& store, const T5EncoderOptions& options) {
  T5Encoder e(config, options);
  // LoRAs merged into the weights as the transformer's are (docs/lora.md).
  e.bind(merge_loras(store, options.loras, LoraComponent::T5Text, options.dtype));
  return e;
}

T5Encoder T5Encoder::load(const std::filesystem::path& dir, const T5EncoderOptions& options) {
  T5Config config = T5Config::from_json_file(dir / "config.json");
  io::Checkpoint checkpoint = io::Checkpoint::open(dir.string());
  TensorStore store = TensorStore::from_checkpoint(checkpoint);
  return from_store(config, store, options);
}

T5Encoder T5Encoder::synthetic(const T5Config& config, const T5EncoderOptions& options, uint64_t seed) {
  T5Encoder e(config, options);
  const T5Config& c = config;
  const int64_t D = c.d_model, inner = c.num_heads * c.d_kv, F = c.d_ff;
  const DType wd = options.dtype == DType::F32 ? DType::F32 : DType::BF16;
  uint64_t s = seed;
  // Each weight is prepared as soon as it exists and its source replaced by a zero-stride stand-in
  // (the backend keeps its own packed copy), so random weights are not resident twice.
  auto lin = [&](int64_t n, int64_t k) {
    nn::Linear p =
        nn::Linear::prepare(synthetic_tensor({n, k}, wd, ++s, 1.0f / std::sqrt(static_cast<float>(k)), 0.0f),
                            Tensor(), options.device);
    p.release_source();
    return p;
  };
  auto norm = [&](int64_t n) { return synthetic_tensor({n}, wd, ++s, 0.1f, 1.0f); };
  e.shared_ = synthetic_tensor({c.vocab_size, D}, DType::BF16, ++s, 1.0f, 0.0f);  // [V, D]
  e.relative_bias_ = synthetic_tensor({c.relative_attention_num_buckets, c.num_heads}, DType::F32, ++s, 1.0f, 0.0f);
  e.final_norm_ = norm(D);
  e.layers_.resize(static_cast<size_t>(c.num_layers));
  for (Layer& L : e.layers_) {
    L.attn_norm = norm(D);
    L.qkv = lin(3 * inner, D);  // q, k, v stacked as bind() fuses them
    L.o = lin(D, inner);
    L.ff_norm = norm(D);
    L.ff.in = lin(2 * F, D);  // wi_0, wi_1
    L.ff.out = lin(D, F);
  }
  e.place_all();
  return e;
}

Tensor T5Encoder::position_bias(int64_t length) const {
  constexpr size_t kCachedLengths = 4;
  PositionBiasCache& cache = *bias_cache_;
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto& recent = cache.recent;
  if (auto it = cache.by_length.find(length); it != cache.by_length.end()) {
    recent.erase(std::find(recent.begin(), recent.end(), length));
    recent.push_back(length);
    return it->second;
  }
  Tensor bias = build_position_bias(length);
  if (recent.size() == kCachedLengths) {
    cache.by_length.erase(recent.front());
    recent.erase(recent.begin());
  }
  cache.by_length.emplace(length, bias);
  recent.push_back(length);
  return bias;
}

Tensor T5Encoder::build_position_bias(int64_t length) const {
  const T5Config& c = config_;
  const int64_t H = c.num_heads;
  // T5Attention.compute_bias: bucket(key - query) -> embedding row -> [1, H, Lq, Lk].
  std::vector<int64_t> bucket_of(static_cast<size_t>(2 * length - 1));
  for (int64_t r = -(length - 1); r < length; ++r)
    bucket_of[static_cast<size_t>(r + length - 1)] =
        t5_relative_position_bucket(r, c.relative_attention_num_buckets, c.relative_attention_max_distance);
  Tensor bias = Tensor::empty({1, H, length, length}, DType::F32);  // [1, H, L, L]
  const float* table = relative_bias_.data<float>();                // [buckets, H]
  float* out = bias.data<float>();
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < length; ++i)
      for (int64_t j = 0; j < length; ++j)
        out[(h * length + i) * length + j] = table[bucket_of[static_cast<size_t>(j - i + length - 1)] * H + h];
  return to_device(bias, options_.device);  // cached there: one upload per length
}

Tensor T5Encoder::forward(const Tensor& input_ids) const {
  const T5Config& c = config_;
  if (!input_ids.defined() || input_ids.dim() != 2)
    fail(ErrorCode::InvalidArgument, "t5: input_ids must be [B, L], got {}",
         input_ids.defined() ? input_ids.shape().str() : std::string("an undefined tensor"));
  if (input_ids.dtype() != DType::I32 && input_ids.dtype() != DType::I64)
    fail(ErrorCode::InvalidArgument, "t5: input_ids must be i32 or i64, got {}", dtype_name(input_ids.dtype()));
  const int64_t B = input_ids.size(0), Lseq = input_ids.size(1), H = c.num_heads, Dkv = c.d_kv;
  if (B < 1 || Lseq < 1) fail(ErrorCode::InvalidArgument, "t5: empty input_ids {}", input_ids.shape().str());
  const DType dt = options_.dtype;

  ops::AttentionOptions attn;
  attn.scale = 1.0f;                  // T5 folds the 1/sqrt(d_kv) into its initialisation
  attn.bias = position_bias(Lseq);    // [1, H, L, L], cached per length, used by every block

  // T5Stack.embed_tokens (= shared)
  Tensor x = shared_quantized_
                 ? to_device(quantized_embedding(*shared_quantized_, to_device(input_ids, Device::cpu()), dt),
                             options_.device)
                 : ops::embedding(shared_, to_device(input_ids, options_.device), dt);  // [B, L, D]
  for (const Layer& L : layers_) {
    // T5LayerSelfAttention: x = x + o(attention(T5LayerNorm(x)))
    Tensor h = ops::t5_rms_norm(x, L.attn_norm, c.layer_norm_epsilon);  // [B, L, D]
    Tensor a;
    if (L.qkv) {
      const Tensor qkv = L.qkv(h).view({B, Lseq, 3, H, Dkv});  // [B, L, 3, H, Dkv]
      a = ops::attention(qkv.select(2, 0), qkv.select(2, 1), qkv.select(2, 2), attn);
    } else {
      a = ops::attention(L.q(h).view({B, Lseq, H, Dkv}), L.k(h).view({B, Lseq, H, Dkv}),
                         L.v(h).view({B, Lseq, H, Dkv}), attn);  // [B, L, H, Dkv]
    }
    a = a.view({B, Lseq, H * Dkv});  // [B, L, H*Dkv]
    ops::add_(x, L.o(a));            // [B, L, D]
    // T5LayerFF with T5DenseGatedActDense: x = x + wo(gelu_tanh(wi_0 h) * wi_1 h)
    h = ops::t5_rms_norm(x, L.ff_norm, c.layer_norm_epsilon);                  // [B, L, D]
    ops::add_(x, L.ff(h));                                                     // [B, L, D]
  }
  return ops::t5_rms_norm(x, final_norm_, c.layer_norm_epsilon);  // [B, L, D]
}

double T5Encoder::flops(int64_t batch, int64_t length) const {
  const T5Config& c = config_;
  const double tokens = static_cast<double>(batch) * static_cast<double>(length);
  const double D = static_cast<double>(c.d_model), inner = static_cast<double>(c.num_heads * c.d_kv),
               F = static_cast<double>(c.d_ff);
  const double proj = 2.0 * tokens * (4.0 * D * inner + 3.0 * D * F);
  // Q.K^T and P.V over all L x L pairs (bidirectional), 2 flops per MAC.
  const double attention = 4.0 * tokens * static_cast<double>(length) * inner;
  return static_cast<double>(layers_.size()) * (proj + attention);
}

size_t T5Encoder::weight_bytes() const {
  size_t total = (shared_quantized_   ? shared_quantized_->nbytes()
                  : shared_.defined() ? shared_.nbytes()
                                      : 0) +
                 (final_norm_.defined() ? final_norm_.nbytes() : 0);
  for (const Layer& L : layers_) {
    for (const nn::Linear* p : {&L.qkv, &L.q, &L.k, &L.v, &L.o, &L.ff.in, &L.ff.up, &L.ff.out})
      total += p->parameter_bytes();
    total += L.attn_norm.nbytes() + L.ff_norm.nbytes();
  }
  return total;
}

// ---- prompt embedder ------------------------------------------------------------------------

T5PromptEmbedder::T5PromptEmbedder(T5Encoder encoder, tokenizers::T5Tokenizer tokenizer)
    : encoder_(std::move(encoder)), tokenizer_(std::move(tokenizer)) {
  if (tokenizer_.vocab_size() > static_cast<size_t>(encoder_.config().vocab_size))
    fail(ErrorCode::Format, "t5: the tokenizer has {} ids but the encoder embeds only {}", tokenizer_.vocab_size(),
         encoder_.config().vocab_size);
}

std::unique_ptr<T5PromptEmbedder> T5PromptEmbedder::load(const std::filesystem::path& model_root,
                                                         const T5EncoderOptions& options,
                                                         const std::filesystem::path& text_encoder_file) {
  T5Encoder encoder = text_encoder_file.empty() ? T5Encoder::load(model_root / "text_encoder_2", options)
                                                : T5Encoder::load_file(text_encoder_file, options);
  tokenizers::T5Tokenizer tokenizer = tokenizers::T5Tokenizer::from_directory(model_root / "tokenizer_2");
  return std::make_unique<T5PromptEmbedder>(std::move(encoder), std::move(tokenizer));
}

T5PromptEmbeddings T5PromptEmbedder::embed(const std::vector<std::string>& prompts, int max_sequence_length) const {
  if (prompts.empty()) fail(ErrorCode::InvalidArgument, "t5: no prompts to embed");
  tokenizers::PromptBatch batch = tokenizer_.encode_batch(prompts, max_sequence_length);
  T5PromptEmbeddings r;
  r.input_ids = Tensor::empty({batch.batch, batch.length}, DType::I32);  // [B, L]
  std::copy(batch.input_ids.begin(), batch.input_ids.end(), r.input_ids.data<int32_t>());
  r.attention_mask = Tensor::empty({batch.batch, batch.length}, DType::I32);  // [B, L]
  std::copy(batch.attention_mask.begin(), batch.attention_mask.end(), r.attention_mask.data<int32_t>());
  r.num_tokens = batch.num_tokens;
  r.embeds = encoder_.forward(r.input_ids);  // [B, L, D]: no mask, as diffusers calls text_encoder_2
  return r;
}

}  // namespace fluxrt::models
