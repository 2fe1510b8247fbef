// The Qwen3 text encoder against transformers/diffusers dumps (tools/reference/dump_qwen3_encoder.py):
// the tiny klein text encoder driven through diffusers' _get_qwen3_prompt_embeds with the real
// Qwen3 tokenizer files, and a 4-query/2-kv-head model fed ids directly. f32 runs of the bf16
// weights must match to rel-L2 <= 1e-5, bf16 runs within the module-golden bf16 bound.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/qwen3/qwen3_encoder.h"
#include "support/compare.h"

namespace fluxrt::models {
namespace {

const std::filesystem::path kData = FLUXRT_TEST_DATA_DIR;
const std::filesystem::path kTiny = kData / "models" / "flux2-klein-tiny";
const std::filesystem::path kDumps = kData / "qwen3_encoder";

// The prompts of tools/reference/dump_qwen3_encoder.py (PROMPTS, LONG_PROMPT).
std::vector<std::string> dump_prompts() {
  std::string long_prompt;
  for (int i = 0; i < 6; ++i)
    long_prompt += (i ? " " : "") + std::string("a very detailed painting of a lighthouse at dawn with waves and gulls");
  return {"a photo of a cat sitting on a red sofa", "",
          "Ein Fuchs im Schnee, \xe9\x9b\xaa\xe3\x81\xae\xe4\xb8\xad\xe3\x81\xae\xe7\x8b\x90 \xf0\x9f\xa6\x8a "
          "\xe2\x80\x94 watercolor, soft light; 3 birds & a \"quote\" (1920s)",
          long_prompt};
}

struct Dump {
  Tensor input_ids, attention_mask, embeds_f32, embeds_bf16;
};

Dump read_dump(const std::string& name) {
  io::Checkpoint ck = io::Checkpoint::open((kDumps / (name + ".safetensors")).string());
  return {ck.tensor("input_ids").clone(), ck.tensor("attention_mask").clone(), ck.tensor("embeds_f32").clone(),
          ck.tensor("embeds_bf16").clone()};
}

Qwen3EncoderOptions opts(DType dtype) {
  Qwen3EncoderOptions o;
  o.dtype = dtype;
  return o;
}

TEST(Qwen3Config, ReadsTransformers5Config) {
  Qwen3Config c = Qwen3Config::from_json_file(kTiny / "text_encoder" / "config.json");
  EXPECT_EQ(c.hidden_size, 8);
  EXPECT_EQ(c.num_layers, 36);
  EXPECT_EQ(c.num_heads, 2);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  Qwen3Config g = Qwen3Config::from_json_file(kDumps / "gqa_model" / "config.json");
  EXPECT_EQ(g.num_heads, 4);
  EXPECT_EQ(g.num_kv_heads, 2);
  EXPECT_EQ(g.hidden_size, 32);
}

TEST(Qwen3Config, RealShapes) {
  Qwen3Config a = Qwen3Config::qwen3_4b(), b = Qwen3Config::qwen3_8b();
  EXPECT_EQ(a.hidden_size * 3, 7680);   // klein-4B joint_attention_dim
  EXPECT_EQ(b.hidden_size * 3, 12288);  // klein-9B joint_attention_dim
  EXPECT_EQ(a.num_heads * a.head_dim, 4096);
}

TEST(Qwen3Encoder, StopsAfterTheLastTap) {
  Qwen3Encoder e = Qwen3Encoder::load(kTiny / "text_encoder", opts(DType::F32));
  EXPECT_EQ(e.layers_computed(), 27);  // hidden_states[27] = output of 0-based layer 26
  EXPECT_EQ(e.output_dim(), 24);
}

void check_dump_f32_and_bf16(const Qwen3Encoder& f32, const Qwen3Encoder& bf16, const Dump& d) {
  Tensor y = f32.forward(d.input_ids, d.attention_mask);
  ASSERT_EQ(y.shape(), d.embeds_f32.shape());
  EXPECT_EQ(y.dtype(), DType::F32);
  EXPECT_TRUE(test::all_close(y, d.embeds_f32, test::TolClass::ModuleGolden)) << "f32";
  Tensor yb = bf16.forward(d.input_ids, d.attention_mask);
  EXPECT_EQ(yb.dtype(), DType::BF16);
  EXPECT_TRUE(test::all_close(yb, d.embeds_bf16, test::TolClass::ModuleGolden)) << "bf16 vs torch bf16";
  std::cout << "  f32 vs torch f32:   " << test::compare(y, d.embeds_f32).str() << "\n"
            << "  bf16 vs torch bf16: " << test::compare(yb, d.embeds_bf16).str() << "\n"
            << "  bf16 vs torch f32:  " << test::compare(yb, d.embeds_f32).str() << "\n"
            << "  torch bf16 vs f32:  " << test::compare(d.embeds_bf16, d.embeds_f32).str() << "\n";
}

TEST(Qwen3Encoder, TinyKleinMatchesPipelineDumps) {
  Qwen3Encoder f32 = Qwen3Encoder::load(kTiny / "text_encoder", opts(DType::F32));
  Qwen3Encoder bf16 = Qwen3Encoder::load(kTiny / "text_encoder", opts(DType::BF16));
  for (const char* name : {"tiny_L64", "tiny_L512"}) {
    SCOPED_TRACE(name);
    check_dump_f32_and_bf16(f32, bf16, read_dump(name));
  }
}

TEST(Qwen3Encoder, GroupedQueryModelMatchesTransformers) {
  // 4 query heads over 2 kv heads, distinct norm weights, untied lm_head and a 28th layer
  // (both present in the checkpoint and deliberately unbound).
  Qwen3Encoder f32 = Qwen3Encoder::load(kDumps / "gqa_model", opts(DType::F32));
  Qwen3Encoder bf16 = Qwen3Encoder::load(kDumps / "gqa_model", opts(DType::BF16));
  EXPECT_EQ(f32.layers_computed(), 27);
  check_dump_f32_and_bf16(f32, bf16, read_dump("gqa_L48"));
}

TEST(Qwen3Encoder, PaddedRowsDependOnlyOnRealTokens) {
  // A pad query attends to the real keys before it, never to other pads: the first rows of a
  // longer padding are identical to the shorter run.
  Qwen3Encoder e = Qwen3Encoder::load(kDumps / "gqa_model", opts(DType::F32));
  Dump d = read_dump("gqa_L48");
  Tensor ids = d.input_ids.narrow(0, 0, 1).contiguous(), mask = d.attention_mask.narrow(0, 0, 1).contiguous();
  Tensor full = e.forward(ids, mask);
  Tensor part = e.forward(ids.narrow(1, 0, 30).contiguous(), mask.narrow(1, 0, 30).contiguous());
  EXPECT_TRUE(test::all_close(part, full.narrow(1, 0, 30).contiguous(), test::TolClass::Exact));
}

TEST(KleinPromptEmbedder, TokenisesAndEncodesLikeThePipeline) {
  auto embedder = KleinPromptEmbedder::load(kTiny, opts(DType::F32));
  std::vector<std::string> prompts = dump_prompts();
  Dump d = read_dump("tiny_L64");
  PromptEmbeddings r = embedder->embed(prompts, 64);
  ASSERT_EQ(r.input_ids.shape(), d.input_ids.shape());
  EXPECT_EQ(r.input_ids.to(DType::I64).to_vector(), d.input_ids.to_vector());
  EXPECT_EQ(r.attention_mask.to(DType::I64).to_vector(), d.attention_mask.to_vector());
  EXPECT_EQ(r.num_tokens, (std::vector<int32_t>{22, 12, 50, 64}));
  EXPECT_TRUE(test::all_close(r.embeds, d.embeds_f32, test::TolClass::ModuleGolden));
}

TEST(Qwen3Encoder, ReportsMissingTensorsAndBadInputs) {
  io::Checkpoint ck = io::Checkpoint::open((kDumps / "gqa_model").string());
  TensorStore store = TensorStore::from_checkpoint(ck, "model.");
  store.remove("layers.3.self_attn.k_norm.weight");
  Qwen3Config c = Qwen3Config::from_json_file(kDumps / "gqa_model" / "config.json");
  try {
    Qwen3Encoder::from_store(c, store, opts(DType::F32));
    FAIL() << "a missing tensor was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Format);
    EXPECT_NE(std::string(e.what()).find("layers.3.self_attn.k_norm.weight"), std::string::npos) << e.what();
  }
  Qwen3Encoder e = Qwen3Encoder::load(kDumps / "gqa_model", opts(DType::F32));
  Tensor ids = Tensor::zeros({1, 4}, DType::I64);
  EXPECT_THROW(e.forward(ids, Tensor::zeros({1, 5}, DType::I64)), Error);
  Qwen3EncoderOptions bad = opts(DType::F32);
  bad.taps = {9, 30};
  EXPECT_THROW(Qwen3Encoder::load(kDumps / "gqa_model", bad), Error);
}

TEST(Qwen3Encoder, SyntheticWeightsRun) {
  Qwen3Config c = Qwen3Config::from_json_file(kDumps / "gqa_model" / "config.json");
  Qwen3Encoder e = Qwen3Encoder::synthetic(c, opts(DType::BF16));
  Tensor ids = Tensor::zeros({1, 8}, DType::I32), mask = Tensor::full({1, 8}, DType::I32, 1);
  Tensor y = e.forward(ids, mask);
  EXPECT_EQ(y.shape(), Shape({1, 8, 96}));
  for (float v : y.to_vector()) ASSERT_TRUE(std::isfinite(v));
  EXPECT_GT(e.flops(1, 8), 0);
}

}  // namespace
}  // namespace fluxrt::models
