#include "models/clip/clip_text_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/lora/lora_delta.h"
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

ClipTextConfig ClipTextConfig::from_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) fail(ErrorCode::Io, "{}: cannot open the CLIP text encoder config", path.string());
  json root;
  try {
    root = json::parse(in);
  } catch (const json::exception& e) {
    fail(ErrorCode::Format, "{}: invalid JSON ({})", path.string(), e.what());
  }
  if (!root.is_object()) fail(ErrorCode::Format, "{}: not a JSON object", path.string());
  const json* j = &root;
  const std::string model_type = root.value("model_type", std::string());
  if (model_type == "clip") {  // a whole CLIPModel: the text tower's settings are nested
    auto text = root.find("text_config");
    if (text == root.end() || !text->is_object())
      fail(ErrorCode::Format, "{}: CLIPModel config without a \"text_config\" object", path.string());
    j = &*text;
  } else if (!model_type.empty() && model_type != "clip_text_model") {
    fail(ErrorCode::Unsupported, "{}: model_type \"{}\" is not a CLIP text model", path.string(), model_type);
  }
  ClipTextConfig c;
  c.vocab_size = json_int(*j, "vocab_size", path);
  c.hidden_size = json_int(*j, "hidden_size", path);
  c.intermediate_size = json_int(*j, "intermediate_size", path);
  c.num_layers = json_int(*j, "num_hidden_layers", path);
  c.num_heads = json_int(*j, "num_attention_heads", path);
  c.max_position_embeddings = json_int(*j, "max_position_embeddings", path);
  // transformers' CLIPTextConfig default is 49407; openai/clip-vit-large-patch14 writes 2.
  c.eos_token_id = j->contains("eos_token_id") ? json_int(*j, "eos_token_id", path) : 49407;
  if (auto it = j->find("layer_norm_eps"); it != j->end()) {
    if (!it->is_number()) fail(ErrorCode::Format, "{}: \"layer_norm_eps\" is not a number", path.string());
    c.layer_norm_eps = it->get<float>();
  }
  const std::string act = j->value("hidden_act", std::string("quick_gelu"));
  if (act != "quick_gelu")
    fail(ErrorCode::Unsupported, "{}: hidden_act \"{}\" (only quick_gelu, CLIP-L's)", path.string(), act);
  return c;
}

ClipTextConfig ClipTextConfig::clip_l() { return ClipTextConfig{}; }

// ---- model ----------------------------------------------------------------------------------

ClipTextModel::ClipTextModel(ClipTextConfig config, ClipTextOptions options)
    : config_(std::move(config)), options_(std::move(options)) {
  validate(config_, options_);
}

void ClipTextModel::validate(const ClipTextConfig& c, const ClipTextOptions& o) {
  if (c.vocab_size < 1 || c.hidden_size < 1 || c.intermediate_size < 1 || c.num_layers < 1 || c.num_heads < 1 ||
      c.max_position_embeddings < 1 || c.hidden_size % c.num_heads != 0 || !(c.layer_norm_eps > 0.0f))
    fail(ErrorCode::Format, "clip: invalid config (vocab {}, hidden {}, heads {}, layers {}, positions {})",
         c.vocab_size, c.hidden_size, c.num_heads, c.num_layers, c.max_position_embeddings);
  if (o.dtype != DType::BF16 && o.dtype != DType::F32)
    fail(ErrorCode::Unsupported, "clip: activation dtype {} (bf16 or f32)", dtype_name(o.dtype));
}

void ClipTextModel::bind(const TensorStore& store) {
  const ClipTextConfig& c = config_;
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  WeightBinder binder(store, "text_encoder");
  // Weights keep the checkpoint dtype in bf16 mode; the f32 mode widens them once here.
  const std::optional<DType> wdtype = options_.dtype == DType::F32 ? std::optional<DType>(DType::F32) : std::nullopt;
  token_embedding_ = binder.require("embeddings.token_embedding.weight", {c.vocab_size, H});
  position_embedding_ =
      binder.require("embeddings.position_embedding.weight", {c.max_position_embeddings, H}, options_.dtype);
  auto lin = [&](const std::string& name, int64_t n, int64_t k) {
    Tensor w = binder.require(name + ".weight", {n, k}, wdtype);
    Tensor b = binder.require(name + ".bias", {n}, wdtype);
    return w.defined() && b.defined() ? nn::Linear::prepare(w, b, options_.device) : nn::Linear();
  };
  auto qkv = [&](const std::string& attn) {
    std::vector<Tensor> ws, bs;
    for (const char* proj : {"q_proj", "k_proj", "v_proj"}) {
      ws.push_back(binder.require(attn + proj + ".weight", {H, H}, wdtype));
      bs.push_back(binder.require(attn + proj + ".bias", {H}, wdtype));
    }
    for (size_t i = 0; i < 3; ++i)
      if (!ws[i].defined() || !bs[i].defined()) return nn::Linear();
    return nn::Linear::prepare(ops::concat(ws, 0), ops::concat(bs, 0), options_.device);  // [3H, H], [3H]
  };
  layers_.assign(static_cast<size_t>(c.num_layers), Layer{});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "encoder.layers." + std::to_string(i) + ".";
    Layer& L = layers_[static_cast<size_t>(i)];
    L.ln1_weight = binder.require(p + "layer_norm1.weight", {H}, wdtype);
    L.ln1_bias = binder.require(p + "layer_norm1.bias", {H}, wdtype);
    L.ln2_weight = binder.require(p + "layer_norm2.weight", {H}, wdtype);
    L.ln2_bias = binder.require(p + "layer_norm2.bias", {H}, wdtype);
    L.qkv = qkv(p + "self_attn.");
    L.out = lin(p + "self_attn.out_proj", H, H);
    L.mlp.in = lin(p + "mlp.fc1", I, H);
    L.mlp.out = lin(p + "mlp.fc2", H, I);
  }
  final_ln_weight_ = binder.require("final_layer_norm.weight", {H}, wdtype);
  final_ln_bias_ = binder.require("final_layer_norm.bias", {H}, wdtype);
  // Older transformers saved the (constant) position_ids buffer with the weights.
  binder.ignore_prefix("embeddings.position_ids");
  binder.finish();
  place_all();
}

// The parameters the ops read directly (embeddings, LayerNorm weights and biases) go to the
// model's device once; the linears were placed by nn::Linear::prepare.
void ClipTextModel::place_all() {
  std::vector<Tensor*> params{&token_embedding_, &position_embedding_, &final_ln_weight_, &final_ln_bias_};
  for (Layer& L : layers_)
    for (Tensor* t : {&L.ln1_weight, &L.ln1_bias, &L.ln2_weight, &L.ln2_bias}) params.push_back(t);
  for (Tensor* t : params) *t = to_device(*t, options_.device);
}

ClipTextModel ClipTextModel::from_store(const ClipTextConfig& config, const TensorStore& store,
                                        const ClipTextOptions& options) {
  ClipTextModel m(config, options);
  // LoRAs merged into the weights as the transformer's are (docs/lora.md).
  m.bind(merge_loras(store, options.loras, LoraComponent::ClipText, options.dtype));
  return m;
}

ClipTextModel ClipTextModel::load(const std::filesystem::path& dir, const ClipTextOptions& options) {
  ClipTextConfig config = ClipTextConfig::from_json_file(dir / "config.json");
  io::Checkpoint checkpoint = io::Checkpoint::open(dir.string());
  // transformers 4 wrapped the text tower in "text_model." (CLIPTextModel and CLIPModel alike);
  // transformers 5's CLIPTextModel saves bare names.
  const std::string prefix =
      checkpoint.contains("text_model.embeddings.token_embedding.weight") ? "text_model." : "";
  TensorStore store = TensorStore::from_checkpoint(checkpoint, prefix);
  if (!prefix.empty()) store.set_description(checkpoint.path());
  return from_store(config, store, options);
}

ClipTextModel ClipTextModel::synthetic(const ClipTextConfig& config, const ClipTextOptions& options, uint64_t seed) {
  ClipTextModel m(config, options);
  const ClipTextConfig& c = config;
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const DType wd = options.dtype == DType::F32 ? DType::F32 : DType::BF16;
  uint64_t s = seed;
  auto lin = [&](int64_t n, int64_t k) {
    // two statements: the seeds must not depend on the order arguments are evaluated in
    Tensor weight = synthetic_tensor({n, k}, wd, ++s, 1.0f / std::sqrt(static_cast<float>(k)), 0.0f);
    Tensor bias = synthetic_tensor({n}, wd, ++s, 0.02f, 0.0f);
    return nn::Linear::prepare(weight, bias, options.device);
  };
  auto norm_weight = [&] { return synthetic_tensor({H}, wd, ++s, 0.1f, 1.0f); };
  auto norm_bias = [&] { return synthetic_tensor({H}, wd, ++s, 0.02f, 0.0f); };
  m.token_embedding_ = synthetic_tensor({c.vocab_size, H}, DType::BF16, ++s, 0.05f, 0.0f);             // [V, H]
  m.position_embedding_ = synthetic_tensor({c.max_position_embeddings, H}, options.dtype, ++s, 0.05f, 0.0f);  // [P, H]
  m.layers_.resize(static_cast<size_t>(c.num_layers));
  for (Layer& L : m.layers_) {
    L.ln1_weight = norm_weight();
    L.ln1_bias = norm_bias();
    L.ln2_weight = norm_weight();
    L.ln2_bias = norm_bias();
    L.qkv = lin(3 * H, H);
    L.out = lin(H, H);
    L.mlp.in = lin(I, H);
    L.mlp.out = lin(H, I);
  }
  m.final_ln_weight_ = norm_weight();
  m.final_ln_bias_ = norm_bias();
  m.place_all();
  return m;
}

std::vector<int64_t> ClipTextModel::pooled_positions(const Tensor& input_ids) const {
  if (input_ids.dim() != 2 || (input_ids.dtype() != DType::I32 && input_ids.dtype() != DType::I64))
    fail(ErrorCode::InvalidArgument, "clip: input_ids must be [B, L] i32/i64, got {}", input_ids.str());
  const Tensor ids = to_device(input_ids, Device::cpu()).to(DType::I64).contiguous();  // read on the host
  const int64_t B = ids.size(0), L = ids.size(1);
  const int64_t* data = ids.data<int64_t>();
  std::vector<int64_t> positions(static_cast<size_t>(B), 0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t* row = data + b * L;
    int64_t best = 0;
    for (int64_t i = 0; i < L; ++i) {
      if (config_.eos_token_id == 2) {
        if (row[i] > row[best]) best = i;  // argmax: the first maximal id
      } else if (row[i] == config_.eos_token_id) {
        best = i;
        break;
      }
    }
    positions[static_cast<size_t>(b)] = best;
  }
  return positions;
}

ClipTextOutput ClipTextModel::forward(const Tensor& input_ids) const {
  const ClipTextConfig& c = config_;
  if (input_ids.dim() != 2 || input_ids.size(1) < 1 || input_ids.size(0) < 1)
    fail(ErrorCode::InvalidArgument, "clip: input_ids must be [B, L] with B, L >= 1, got {}", input_ids.shape().str());
  const int64_t B = input_ids.size(0), Lseq = input_ids.size(1), H = c.hidden_size;
  const int64_t nh = c.num_heads, D = H / nh;
  if (Lseq > c.max_position_embeddings)
    fail(ErrorCode::InvalidArgument, "clip: sequence length {} exceeds max_position_embeddings {}", Lseq,
         c.max_position_embeddings);
  const std::vector<int64_t> pool_at = pooled_positions(input_ids);
  const DType dt = options_.dtype;
  ops::AttentionOptions attn;
  attn.causal = true;  // _create_4d_causal_attention_mask; the pipeline passes no padding mask
  attn.scale = 1.0f / std::sqrt(static_cast<float>(D));

  // CLIPTextEmbeddings: token_embedding(ids) + position_embedding(0..L-1)
  Tensor x = ops::embedding(token_embedding_, to_device(input_ids, options_.device), dt);  // [B, L, H]
  ops::add_(x, position_embedding_.narrow(0, 0, Lseq));         // [B, L, H]
  for (const Layer& L : layers_) {
    // CLIPEncoderLayer: x = x + out_proj(attn(layer_norm1(x)))
    Tensor h = ops::layer_norm(x, L.ln1_weight, L.ln1_bias, c.layer_norm_eps);  // [B, L, H]
    Tensor qkv = L.qkv(h).view({B, Lseq, 3, nh, D});                            // [B, L, 3, nh, D]
    Tensor q = qkv.select(2, 0), k = qkv.select(2, 1), v = qkv.select(2, 2);    // [B, L, nh, D] views
    Tensor a = ops::attention(q, k, v, attn).view({B, Lseq, H});                // [B, L, H]
    ops::add_(x, L.out(a));                                                     // [B, L, H]
    // CLIPMLP: x = x + fc2(quick_gelu(fc1(layer_norm2(x))))
    h = ops::layer_norm(x, L.ln2_weight, L.ln2_bias, c.layer_norm_eps);  // [B, L, H]
    ops::add_(x, L.mlp(h));                                              // [B, L, H]
  }
  ClipTextOutput out;
  out.last_hidden_state = ops::layer_norm(x, final_ln_weight_, final_ln_bias_, c.layer_norm_eps);  // [B, L, H]
  out.pooled = Tensor::empty({B, H}, dt, options_.device);                                          // [B, H]
  for (int64_t b = 0; b < B; ++b)
    out.pooled.select(0, b).copy_from(out.last_hidden_state.select(0, b).select(0, pool_at[static_cast<size_t>(b)]));
  return out;
}

double ClipTextModel::flops(int64_t batch, int64_t length) const {
  const ClipTextConfig& c = config_;
  const double tokens = static_cast<double>(batch) * static_cast<double>(length);
  const double H = static_cast<double>(c.hidden_size), I = static_cast<double>(c.intermediate_size);
  const double proj = 2.0 * tokens * (4.0 * H * H + 2.0 * H * I);
  // Q.K^T and P.V over the causal triangle: L(L+1)/2 pairs, 2 flops per MAC, 2 matmuls.
  const double pairs = static_cast<double>(batch) * static_cast<double>(length) * static_cast<double>(length + 1) / 2.0;
  return static_cast<double>(layers_.size()) * (proj + 4.0 * pairs * H);
}

size_t ClipTextModel::weight_bytes() const {
  size_t total = token_embedding_.nbytes() + position_embedding_.nbytes() + final_ln_weight_.nbytes() +
                 final_ln_bias_.nbytes();
  for (const Layer& L : layers_) {
    for (const nn::Linear* p : {&L.qkv, &L.out, &L.mlp.in, &L.mlp.out}) total += p->parameter_bytes();
    total += L.ln1_weight.nbytes() + L.ln1_bias.nbytes() + L.ln2_weight.nbytes() + L.ln2_bias.nbytes();
  }
  return total;
}

// ---- prompt embedder ------------------------------------------------------------------------

ClipPromptEmbedder::ClipPromptEmbedder(ClipTextModel model, tokenizers::ClipTokenizer tokenizer)
    : model_(std::move(model)), tokenizer_(std::move(tokenizer)) {}

std::unique_ptr<ClipPromptEmbedder> ClipPromptEmbedder::load(const std::filesystem::path& model_root,
                                                             const ClipTextOptions& options) {
  ClipTextModel model = ClipTextModel::load(model_root / "text_encoder", options);
  tokenizers::ClipTokenizer tokenizer = tokenizers::ClipTokenizer::from_directory(model_root / "tokenizer");
  return std::make_unique<ClipPromptEmbedder>(std::move(model), std::move(tokenizer));
}

ClipPromptEmbeddings ClipPromptEmbedder::embed(const std::vector<std::string>& prompts) const {
  if (prompts.empty()) fail(ErrorCode::InvalidArgument, "clip: no prompts to embed");
  // FluxPipeline's tokenizer_max_length, capped by the model's positions for non-standard configs.
  const int length = static_cast<int>(
      std::min<int64_t>(tokenizers::kClipMaxLength, model_.config().max_position_embeddings));
  const int64_t B = static_cast<int64_t>(prompts.size());
  ClipPromptEmbeddings r;
  r.input_ids = Tensor::empty({B, length}, DType::I32);  // [B, 77]
  for (int64_t b = 0; b < B; ++b) {
    bool truncated = false;
    const std::vector<int32_t> row = tokenizer_.encode_padded(prompts[static_cast<size_t>(b)], length, truncated);
    std::copy(row.begin(), row.end(), r.input_ids.data<int32_t>() + b * length);
    r.truncated.push_back(truncated);
  }
  r.pooled = model_.forward(r.input_ids).pooled;  // [B, H]
  return r;
}

}  // namespace fluxrt::models
