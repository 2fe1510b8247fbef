// Text encoders from single files (models/qwen3/qwen3_file.h, models/t5/t5_file.h): GGUFs written
// by tools/reference/make_tiny_encoder_gguf.py with gguf-py's own name tables and metadata keys
// (so the name maps here are checked against llama.cpp's converter, not against themselves), and
// the folders' own .safetensors files. A quantized encoder must equal the dense encoder built from
// its weights dequantized and keep only the quantized bytes resident; a BF16 GGUF of a folder's
// encoder must hold exactly the folder's tensors.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/error.h"
#include "core/quant.h"
#include "io/safetensors.h"
#include "models/llama_cpp_names.h"
#include "models/quantized_embedding.h"
#include "models/qwen3/qwen3_file.h"
#include "models/t5/t5_file.h"
#include "support/compare.h"
#include "support/dequantized_store.h"

namespace fluxrt::models {
namespace {

const std::string kData = FLUXRT_TEST_DATA_DIR;
const std::string kQwenQ8 = kData + "/gguf/qwen3-gqa-q8_0.gguf";
const std::string kQwenTinyBf16 = kData + "/gguf/klein-tiny-qwen3-bf16.gguf";
const std::string kT5Q8 = kData + "/gguf/t5-random-q8_0.gguf";
const std::string kT5TinyBf16 = kData + "/gguf/flux1-tiny-t5-bf16.gguf";

size_t quantized_entries(const TensorStore& store) {
  size_t n = 0;
  for (const std::string& name : store.names()) n += store.quantized(name) != nullptr;
  return n;
}

// Every tensor of `a` is in `b` under the same name with the same shape and bytes, and nothing else.
void expect_same_tensors(const TensorStore& a, const TensorStore& b) {
  ASSERT_EQ(a.names(), b.names());
  for (const std::string& name : a.names()) {
    SCOPED_TRACE(name);
    const Tensor& x = a.get(name);
    const Tensor& y = b.get(name);
    ASSERT_EQ(x.shape(), y.shape());
    ASSERT_EQ(x.dtype(), y.dtype());
    EXPECT_EQ(std::memcmp(x.contiguous().raw_data(), y.contiguous().raw_data(), x.nbytes()), 0);
  }
}

std::string error_of(const std::function<void()>& f, ErrorCode expected) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), expected) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(Qwen3File, GgufNamesAndConfigAreLlamaCpps) {
  const TensorStore store = qwen3_store_of_file(kQwenQ8);
  const Qwen3Config c = qwen3_config_of_file(kQwenQ8, store);
  const Qwen3Config folder = Qwen3Config::from_json_file(kData + "/qwen3_encoder/gqa_model/config.json");
  EXPECT_EQ(c.vocab_size, folder.vocab_size);
  EXPECT_EQ(c.hidden_size, folder.hidden_size);
  EXPECT_EQ(c.intermediate_size, folder.intermediate_size);
  EXPECT_EQ(c.num_layers, folder.num_layers);
  EXPECT_EQ(c.num_heads, folder.num_heads);
  EXPECT_EQ(c.num_kv_heads, folder.num_kv_heads);
  EXPECT_EQ(c.head_dim, folder.head_dim);
  EXPECT_EQ(c.rope_theta, folder.rope_theta);
  EXPECT_EQ(c.rms_norm_eps, folder.rms_norm_eps);
  EXPECT_FALSE(store.contains("output.weight")) << "the LM head is never computed";
  EXPECT_TRUE(store.quantized("embed_tokens.weight") != nullptr);
  EXPECT_TRUE(store.quantized("layers.5.self_attn.q_proj.weight") != nullptr);
}

TEST(Qwen3File, QuantizedEncoderEqualsTheDenseOneOnItsWeights) {
  Qwen3EncoderOptions o;
  o.dtype = DType::F32;
  const Qwen3Encoder quantized = Qwen3Encoder::load_file(kQwenQ8, o);
  const TensorStore store = qwen3_store_of_file(kQwenQ8);
  const Qwen3Encoder dense = Qwen3Encoder::from_store(quantized.config(), test::dequantized_store(store), o);
  EXPECT_EQ(quantized.layers_computed(), 27);
  EXPECT_LT(quantized.weight_bytes() * 2, dense.weight_bytes()) << "quantized weights must stay quantized";

  const io::Checkpoint d = io::Checkpoint::open(kData + "/qwen3_encoder/gqa_L48.safetensors");
  const Tensor ids = d.tensor("input_ids").clone(), mask = d.tensor("attention_mask").clone();
  const Tensor y = quantized.forward(ids, mask);
  const auto same = test::compare(y, dense.forward(ids, mask));
  EXPECT_LT(same.rel_l2, 1e-5) << "quantized GEMM and lookup vs dense on the same weights";
  // Against transformers on the unquantized weights: Q8_0's own error (reported).
  const auto vs_reference = test::compare(y, d.tensor("embeds_f32"));
  EXPECT_LT(vs_reference.rel_l2, 0.05);
  std::printf("Q8_0 Qwen3 vs transformers f32: rel-L2 %.4g\n", vs_reference.rel_l2);

  o.dtype = DType::BF16;
  const Qwen3Encoder bf16 = Qwen3Encoder::load_file(kQwenQ8, o);
  EXPECT_LT(test::compare(bf16.forward(ids, mask), d.tensor("embeds_bf16")).rel_l2, 0.05);
}

TEST(Qwen3File, Bf16GgufHoldsTheFoldersTensors) {
  const TensorStore gguf = qwen3_store_of_file(kQwenTinyBf16);
  const TensorStore folder =
      qwen3_store_of_file(kData + "/models/flux2-klein-tiny/text_encoder/model.safetensors");
  EXPECT_FALSE(folder.contains("lm_head.weight"));
  expect_same_tensors(gguf, folder);
  const Qwen3Config c = qwen3_config_of_file(kQwenTinyBf16, gguf);
  EXPECT_EQ(c.hidden_size, 8);
  EXPECT_EQ(c.num_layers, 36);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.num_heads, 2);
  EXPECT_EQ(c.num_kv_heads, 1);
}

TEST(Qwen3File, WrongFilesFailWithOneLine) {
  // A FLUX transformer GGUF, a T5 GGUF, a safetensors that is no Qwen3, a missing file.
  const std::string flux = kData + "/gguf/flux2-klein-tiny-q8_0.gguf";
  EXPECT_NE(error_of([&] { Qwen3Encoder::load_file(flux); }, ErrorCode::Unsupported).find("not qwen3"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Qwen3Encoder::load_file(kT5Q8); }, ErrorCode::Unsupported).find("t5encoder"),
            std::string::npos);
  const std::string not_qwen = kData + "/models/flux2-klein-tiny-bfl.safetensors";
  EXPECT_NE(error_of([&] { Qwen3Encoder::load_file(not_qwen); }, ErrorCode::Format).find("embed_tokens"),
            std::string::npos);
  error_of([&] { Qwen3Encoder::load_file(kData + "/gguf/none.gguf"); }, ErrorCode::NotFound);
}

TEST(T5File, GgufNamesAndConfigAreLlamaCpps) {
  const TensorStore store = t5_store_of_file(kT5Q8);
  const T5Config c = t5_config_of_file(kT5Q8, store);
  EXPECT_EQ(c.vocab_size, 300);
  EXPECT_EQ(c.d_model, 64);
  EXPECT_EQ(c.d_kv, 16);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.d_ff, 128);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.relative_attention_num_buckets, 32);
  EXPECT_EQ(c.layer_norm_epsilon, 1e-5f) << "from t5encoder.attention.layer_norm_rms_epsilon";
  EXPECT_EQ(quantized_entries(store), 15u);  // shared + 7 linears x 2 blocks
}

TEST(T5File, QuantizedEncoderEqualsTheDenseOneOnItsWeights) {
  T5EncoderOptions o;
  o.dtype = DType::F32;
  const T5Encoder quantized = T5Encoder::load_file(kT5Q8, o);
  const TensorStore store = t5_store_of_file(kT5Q8);
  const T5Encoder dense = T5Encoder::from_store(quantized.config(), test::dequantized_store(store), o);
  EXPECT_LT(quantized.weight_bytes() * 3, dense.weight_bytes()) << "quantized weights must stay quantized";
  Tensor ids = Tensor::empty({2, 40}, DType::I32);  // [B, L]
  std::mt19937 rng(5);
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int32_t>()[i] = static_cast<int32_t>(rng() % 300);
  const auto same = test::compare(quantized.forward(ids), dense.forward(ids));
  EXPECT_LT(same.rel_l2, 1e-5) << "quantized GEMMs and lookup vs dense on the same weights";
  o.dtype = DType::BF16;
  const T5Encoder bf16 = T5Encoder::load_file(kT5Q8, o);
  EXPECT_LT(test::compare(bf16.forward(ids), dense.forward(ids)).rel_l2, 0.02);
}

TEST(T5File, Bf16GgufHoldsTheFoldersTensors) {
  const TensorStore gguf = t5_store_of_file(kT5TinyBf16);
  TensorStore folder = TensorStore::open(kData + "/t5_encoder/model");
  folder.remove("encoder.embed_tokens.weight");  // tied to shared.weight; the GGUF has one token_embd
  expect_same_tensors(gguf, folder);
  const T5Config c = t5_config_of_file(kT5TinyBf16, gguf);
  const T5Config json = T5Config::from_json_file(kData + "/t5_encoder/model/config.json");
  EXPECT_EQ(c.d_model, json.d_model);
  EXPECT_EQ(c.d_kv, json.d_kv);
  EXPECT_EQ(c.num_heads, json.num_heads);
  EXPECT_EQ(c.d_ff, json.d_ff);
  EXPECT_EQ(c.num_layers, json.num_layers);
  EXPECT_EQ(c.vocab_size, json.vocab_size);
  EXPECT_EQ(c.layer_norm_epsilon, json.layer_norm_epsilon);
}

TEST(T5File, WrongFilesFailWithOneLine) {
  EXPECT_NE(error_of([&] { T5Encoder::load_file(kQwenQ8); }, ErrorCode::Unsupported).find("qwen3"),
            std::string::npos);
  const std::string flux = kData + "/gguf/flux1-dev-tiny-q8_0.gguf";
  EXPECT_NE(error_of([&] { T5Encoder::load_file(flux); }, ErrorCode::Unsupported).find("flux"),
            std::string::npos);
}

TEST(QuantizedEmbedding, RowsAreTheDequantizedTablesAndBadIdsAreRefused) {
  const TensorStore store = t5_store_of_file(kT5Q8);
  const QuantizedMatrix* table = store.quantized("shared.weight");
  ASSERT_NE(table, nullptr);
  Tensor ids = Tensor::empty({1, 3}, DType::I64);
  ids.data<int64_t>()[0] = 299, ids.data<int64_t>()[1] = 0, ids.data<int64_t>()[2] = 17;
  const Tensor rows = quantized_embedding(*table, ids, DType::F32);  // [1, 3, 64]
  ASSERT_EQ(rows.shape(), (Shape{1, 3, 64}));
  const Tensor full = dequantize_ref(*table);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(std::memcmp(rows.data<float>() + i * 64, full.data<float>() + ids.data<int64_t>()[i] * 64, 256),
              0);
  ids.data<int64_t>()[1] = 300;
  EXPECT_NE(error_of([&] { quantized_embedding(*table, ids, DType::BF16); }, ErrorCode::InvalidArgument)
                .find("id 300 at position 1"),
            std::string::npos);
}

// The shared walk: per-block and whole names mapped, skipped ones left out, unknown ones kept for
// the binder to report, and a hostile block index (too long to be a layer) taken as a plain name
// instead of throwing out of std::stoll.
TEST(LlamaCppNames, MapsSkipsAndKeepsUnknownNames) {
  TensorStore raw;
  const Tensor t = Tensor::zeros({2}, DType::F32);
  for (const char* name :
       {"blk.0.attn_q.weight", "blk.11.attn_q.weight", "blk.3.unknown.weight", "token_embd.weight",
        "output.weight", "blk.99999999999999999999.attn_q.weight", "blk.x.attn_q.weight"})
    raw.add(name, t);
  const LlamaCppNames names{"blk.",
                            "layers.",
                            {{"attn_q.weight", "q.weight"}},
                            {{"token_embd.weight", "embed.weight"}},
                            [](const std::string& n) { return n == "output.weight"; }};
  const TensorStore out = from_llama_cpp_names(raw, names);
  EXPECT_EQ(out.names(),
            (std::vector<std::string>{"blk.3.unknown.weight", "blk.99999999999999999999.attn_q.weight",
                                      "blk.x.attn_q.weight", "embed.weight", "layers.0.q.weight",
                                      "layers.11.q.weight"}));
  EXPECT_EQ(count_indexed_layers(out, "layers."), 12);
  EXPECT_EQ(count_indexed_layers(out, "blk."), 4);  // blk.3 (the others are not layer indices)
}

}  // namespace
}  // namespace fluxrt::models
