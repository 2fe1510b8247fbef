// The CLIP-L text model against transformers dumps (tools/reference/dump_clip_text_model.py): a tiny
// CLIPTextModel with the current pooling rule (first eos_token_id), its weights under transformers
// 4's "text_model." prefix, and a full-vocabulary model with the legacy rule of CLIP-L's config
// driven through diffusers' FluxPipeline._get_clip_prompt_embeds with the real tokenizer. f32 runs
// of the bf16 weights match to rel-L2 <= 1e-5, bf16 runs within the module-golden bf16 bound.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/clip/clip_text_model.h"
#include "support/compare.h"
#include "tokenizers/clip_tokenizer.h"

namespace fluxrt::models {
namespace {

const std::filesystem::path kDumps = std::filesystem::path(FLUXRT_TEST_DATA_DIR) / "clip_text_model";
const std::filesystem::path kTokenizer = std::filesystem::path(FLUXRT_TEST_DATA_DIR) / "tokenizers" / "clip";

struct Dump {
  Tensor input_ids, hidden_f32, pooled_f32, hidden_bf16, pooled_bf16, pooled_pipeline_bf16;
};

Dump read_dump(const std::string& name) {
  io::Checkpoint ck = io::Checkpoint::open((kDumps / (name + ".safetensors")).string());
  Dump d{ck.tensor("input_ids").clone(),  ck.tensor("hidden_f32").clone(),  ck.tensor("pooled_f32").clone(),
         ck.tensor("hidden_bf16").clone(), ck.tensor("pooled_bf16").clone(), Tensor()};
  if (ck.contains("pooled_pipeline_bf16")) d.pooled_pipeline_bf16 = ck.tensor("pooled_pipeline_bf16").clone();
  return d;
}

ClipTextOptions opts(DType dtype) {
  ClipTextOptions o;
  o.dtype = dtype;
  return o;
}

void expect_error(ErrorCode code, const std::function<void()>& body) {
  try {
    body();
    ADD_FAILURE() << "expected fluxrt::Error " << error_code_name(code);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

void check(const ClipTextModel& f32, const ClipTextModel& bf16, const Dump& d) {
  ClipTextOutput y = f32.forward(d.input_ids);
  ASSERT_EQ(y.last_hidden_state.shape(), d.hidden_f32.shape());
  ASSERT_EQ(y.pooled.shape(), d.pooled_f32.shape());
  EXPECT_EQ(y.pooled.dtype(), DType::F32);
  EXPECT_TRUE(test::all_close(y.last_hidden_state, d.hidden_f32, test::TolClass::ModuleGolden)) << "f32 hidden";
  EXPECT_TRUE(test::all_close(y.pooled, d.pooled_f32, test::TolClass::ModuleGolden)) << "f32 pooled";
  ClipTextOutput yb = bf16.forward(d.input_ids);
  EXPECT_EQ(yb.pooled.dtype(), DType::BF16);
  EXPECT_TRUE(test::all_close(yb.last_hidden_state, d.hidden_bf16, test::TolClass::ModuleGolden)) << "bf16 hidden";
  EXPECT_TRUE(test::all_close(yb.pooled, d.pooled_bf16, test::TolClass::ModuleGolden)) << "bf16 pooled";
  std::cout << "  f32 pooled vs torch f32:   " << test::compare(y.pooled, d.pooled_f32).str() << "\n"
            << "  f32 hidden vs torch f32:   " << test::compare(y.last_hidden_state, d.hidden_f32).str() << "\n"
            << "  bf16 pooled vs torch bf16: " << test::compare(yb.pooled, d.pooled_bf16).str() << "\n"
            << "  bf16 hidden vs torch bf16: " << test::compare(yb.last_hidden_state, d.hidden_bf16).str() << "\n"
            << "  torch bf16 vs f32 pooled:  " << test::compare(d.pooled_bf16, d.pooled_f32).str() << "\n";
}

TEST(ClipTextConfig, ReadsTransformersConfig) {
  ClipTextConfig c = ClipTextConfig::from_json_file(kDumps / "tiny" / "config.json");
  EXPECT_EQ(c.vocab_size, 1000);
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_layers, 3);
  EXPECT_EQ(c.max_position_embeddings, 77);
  EXPECT_EQ(c.eos_token_id, 998);
  EXPECT_FLOAT_EQ(c.layer_norm_eps, 1e-5f);
  ClipTextConfig full = ClipTextConfig::from_json_file(kDumps / "full_vocab" / "config.json");
  EXPECT_EQ(full.vocab_size, 49408);
  EXPECT_EQ(full.eos_token_id, 2);
  ClipTextConfig l = ClipTextConfig::clip_l();
  EXPECT_EQ(l.hidden_size, 768);
  EXPECT_EQ(l.num_layers, 12);
}

TEST(ClipTextModel, TinyMatchesTransformers) {
  ClipTextModel f32 = ClipTextModel::load(kDumps / "tiny", opts(DType::F32));
  ClipTextModel bf16 = ClipTextModel::load(kDumps / "tiny", opts(DType::BF16));
  for (const char* name : {"tiny_L77", "tiny_L16"}) {
    SCOPED_TRACE(name);
    check(f32, bf16, read_dump(name));
  }
}

TEST(ClipTextModel, PoolsAtTheFirstEndTokenNotTheLargestId) {
  ClipTextModel tiny = ClipTextModel::load(kDumps / "tiny", opts(DType::F32));
  Dump d = read_dump("tiny_L77");
  // Rows are [997, text..., 998, 999 pads]: the end token follows the text, the pads hold the max.
  const std::vector<int64_t> at = tiny.pooled_positions(d.input_ids);
  EXPECT_EQ(at, (std::vector<int64_t>{6, 31, 1, 76}));
}

TEST(ClipTextModel, TextModelPrefixLayoutLoadsTheSameWeights) {
  ClipTextModel prefixed = ClipTextModel::load(kDumps / "tiny_text_model_prefix", opts(DType::F32));
  Dump d = read_dump("tiny_L16");
  ClipTextOutput y = prefixed.forward(d.input_ids);
  EXPECT_TRUE(test::all_close(y.pooled, d.pooled_f32, test::TolClass::ModuleGolden));
}

TEST(ClipTextModel, FullVocabularyThroughTheFluxPipeline) {
  ClipTextModel f32 = ClipTextModel::load(kDumps / "full_vocab", opts(DType::F32));
  ClipTextModel bf16 = ClipTextModel::load(kDumps / "full_vocab", opts(DType::BF16));
  Dump d = read_dump("full_vocab_pipeline");
  check(f32, bf16, d);
  // Our tokenizer gives the pipeline's ids, and the bf16 pooled output is the pipeline's result.
  const auto tokenizer = tokenizers::ClipTokenizer::from_directory(kTokenizer);
  std::ifstream in(kDumps / "cases.json");
  const auto prompts = nlohmann::json::parse(in)["full_vocab_pipeline_prompts"].get<std::vector<std::string>>();
  ASSERT_EQ(static_cast<int64_t>(prompts.size()), d.input_ids.size(0));
  Tensor ids = Tensor::empty({static_cast<int64_t>(prompts.size()), tokenizers::kClipMaxLength}, DType::I32);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t> row = tokenizer.encode_padded(prompts[i]);
    std::copy(row.begin(), row.end(), ids.data<int32_t>() + i * tokenizers::kClipMaxLength);
  }
  EXPECT_TRUE(test::all_close(ids, d.input_ids, test::TolClass::Exact));
  // The prompt with "<|endoftext|>" in its text pools there, not at the final end token.
  const auto at = f32.pooled_positions(ids);
  EXPECT_LT(at.back(), at.front() + 10);
  EXPECT_EQ(ids.data<int32_t>()[(prompts.size() - 1) * tokenizers::kClipMaxLength + at.back()], 49407);
  ClipTextOutput yb = bf16.forward(ids);
  EXPECT_TRUE(test::all_close(yb.pooled, d.pooled_pipeline_bf16, test::TolClass::ModuleGolden));
}

// The pipeline-level embedder on a FluxPipeline-style folder (text_encoder/ + tokenizer/).
TEST(ClipPromptEmbedder, PooledOutputOfTheFluxPipeline) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("fluxrt_clip_root_" + std::to_string(::getpid()));
  fs::create_directories(root);
  fs::create_directory_symlink(fs::absolute(kDumps / "full_vocab"), root / "text_encoder");
  fs::create_directory_symlink(fs::absolute(kTokenizer), root / "tokenizer");
  const auto embedder = ClipPromptEmbedder::load(root, opts(DType::BF16));
  fs::remove_all(root);
  std::ifstream in(kDumps / "cases.json");
  const auto prompts = nlohmann::json::parse(in)["full_vocab_pipeline_prompts"].get<std::vector<std::string>>();
  const Dump d = read_dump("full_vocab_pipeline");
  const ClipPromptEmbeddings e = embedder->embed(prompts);
  EXPECT_TRUE(test::all_close(e.input_ids, d.input_ids, test::TolClass::Exact));
  EXPECT_EQ(e.pooled.shape(), (Shape{static_cast<int64_t>(prompts.size()), 8}));
  EXPECT_TRUE(test::all_close(e.pooled, d.pooled_pipeline_bf16, test::TolClass::ModuleGolden));
  EXPECT_EQ(e.truncated, (std::vector<bool>{false, false, false, true, false}));
  expect_error(ErrorCode::InvalidArgument, [&] { embedder->embed({}); });
  expect_error(ErrorCode::InvalidArgument, [&] { embedder->embed({"ok", "bad \xff utf-8"}); });
}

TEST(ClipTextModel, BadInputsFailWithOneLine) {
  ClipTextModel tiny = ClipTextModel::load(kDumps / "tiny", opts(DType::F32));
  expect_error(ErrorCode::InvalidArgument, [&] { tiny.forward(Tensor::zeros({2, 78}, DType::I32)); });
  expect_error(ErrorCode::InvalidArgument, [&] { tiny.forward(Tensor::zeros({77}, DType::I32)); });
  expect_error(ErrorCode::InvalidArgument, [&] { tiny.forward(Tensor::zeros({1, 4}, DType::F32)); });
  Tensor out_of_range = Tensor::zeros({1, 4}, DType::I32);
  out_of_range.data<int32_t>()[2] = 1000;
  expect_error(ErrorCode::InvalidArgument, [&] { tiny.forward(out_of_range); });
  expect_error(ErrorCode::Unsupported, [&] { ClipTextModel::load(kDumps / "tiny", opts(DType::F16)); });
  // Weights of one config under another's shapes: the binder lists what does not fit.
  io::Checkpoint ck = io::Checkpoint::open((kDumps / "tiny" / "model.safetensors").string());
  ClipTextConfig wrong = ClipTextConfig::from_json_file(kDumps / "tiny" / "config.json");
  wrong.num_layers = 4;
  expect_error(ErrorCode::Format, [&] { ClipTextModel::from_store(wrong, TensorStore::from_checkpoint(ck)); });
  wrong = ClipTextConfig::from_json_file(kDumps / "tiny" / "config.json");
  wrong.hidden_size = 64;
  expect_error(ErrorCode::Format, [&] { ClipTextModel::from_store(wrong, TensorStore::from_checkpoint(ck)); });
  expect_error(ErrorCode::Io, [&] { ClipTextConfig::from_json_file(kDumps / "missing.json"); });
}

TEST(ClipTextModel, SyntheticRealShapes) {
  ClipTextConfig c = ClipTextConfig::clip_l();
  c.num_layers = 1;  // one real-shape layer keeps the test quick
  ClipTextModel m = ClipTextModel::synthetic(c);
  Tensor ids = Tensor::zeros({1, 77}, DType::I32);
  ids.data<int32_t>()[0] = 49406;
  ids.data<int32_t>()[5] = 49407;
  ClipTextOutput y = m.forward(ids);
  EXPECT_EQ(y.last_hidden_state.shape(), (Shape{1, 77, 768}));
  EXPECT_EQ(y.pooled.shape(), (Shape{1, 768}));
  EXPECT_GT(m.flops(1, 77), 0.0);
  EXPECT_GT(m.weight_bytes(), size_t{49408 * 768 * 2});
}

}  // namespace
}  // namespace fluxrt::models
