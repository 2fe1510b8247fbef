// The FLUX.1 T5 v1.1 encoder against transformers/diffusers dumps (tools/reference/dump_t5_encoder.py):
// a tiny random T5EncoderModel (real bucket settings, sharded checkpoint) driven through diffusers'
// FluxPipeline._get_t5_prompt_embeds with the real T5 tokenizer at 512 and 256 tokens, and fed
// padded ids directly. f32 runs of the bf16 weights must match to rel-L2 <= 1e-5, bf16 runs within
// the module-golden bf16 bound.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/t5/t5_encoder.h"
#include "support/compare.h"

namespace fluxrt::models {
namespace {

namespace fs = std::filesystem;
const fs::path kData = FLUXRT_TEST_DATA_DIR;
const fs::path kDumps = kData / "t5_encoder";
const fs::path kModel = kDumps / "model";
const fs::path kTokenizer = kData / "tokenizers" / "t5";

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return nlohmann::json::parse(s.str());
}

struct Dump {
  Tensor input_ids, f32, bf16;
};

Dump read_dump(const std::string& name) {
  io::Checkpoint ck = io::Checkpoint::open((kDumps / (name + ".safetensors")).string());
  return {ck.tensor("input_ids").clone(), ck.tensor("last_hidden_state_f32").clone(),
          ck.tensor("last_hidden_state_bf16").clone()};
}

T5EncoderOptions opts(DType dtype) {
  T5EncoderOptions o;
  o.dtype = dtype;
  return o;
}

// The bf16 module-golden bound, or 1.5x the reference's own bf16 error when the tiny model is
// already that far off in torch (docs/numerics.md).
::testing::AssertionResult bf16_close(const Tensor& y, const Dump& d) {
  const double own = test::compare(d.bf16, d.f32).rel_l2;
  const double bound = std::max(test::tolerance_for(test::TolClass::ModuleGolden, DType::BF16).bound, 1.5 * own);
  const double got = test::compare(y, d.f32).rel_l2;
  if (got <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "bf16 rel-L2 vs torch f32 " << got << " > " << bound;
}

void check_case(const std::string& name) {
  SCOPED_TRACE(name);
  const Dump d = read_dump(name);
  const T5Encoder e32 = T5Encoder::load(kModel, opts(DType::F32));
  const T5Encoder e16 = T5Encoder::load(kModel, opts(DType::BF16));
  const Tensor y = e32.forward(d.input_ids);
  const Tensor yb = e16.forward(d.input_ids);
  ASSERT_EQ(y.shape(), d.f32.shape());
  ASSERT_EQ(yb.dtype(), DType::BF16);
  std::cout << "  " << name << " f32 vs torch f32:   " << test::compare(y, d.f32).str() << "\n"
            << "  " << name << " bf16 vs torch bf16: " << test::compare(yb, d.bf16).str() << "\n"
            << "  " << name << " bf16 vs torch f32:  " << test::compare(yb, d.f32).str() << "\n"
            << "  " << name << " torch bf16 vs f32:  " << test::compare(d.bf16, d.f32).str() << "\n";
  EXPECT_TRUE(test::all_close(y, d.f32, test::TolClass::ModuleGolden));
  EXPECT_TRUE(test::all_close(yb, d.bf16, test::TolClass::ModuleGolden));
  EXPECT_TRUE(bf16_close(yb, d));
}

TEST(T5Config, ReadsTransformersConfig) {
  T5Config c = T5Config::from_json_file(kModel / "config.json");
  EXPECT_EQ(c.d_model, 16);
  EXPECT_EQ(c.d_kv, 8);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.d_ff, 40);
  EXPECT_EQ(c.num_layers, 3);
  EXPECT_EQ(c.vocab_size, 32128);
  EXPECT_EQ(c.relative_attention_num_buckets, 32);
  EXPECT_EQ(c.relative_attention_max_distance, 128);
  EXPECT_FLOAT_EQ(c.layer_norm_epsilon, 1e-6f);
  T5Config xxl = T5Config::t5_v1_1_xxl();
  EXPECT_EQ(xxl.d_model, 4096);
  EXPECT_EQ(xxl.num_heads * xxl.d_kv, 4096);
  EXPECT_EQ(xxl.d_ff, 10240);
  EXPECT_EQ(xxl.num_layers, 24);
}

TEST(T5Config, RejectsOtherModels) {
  const fs::path dir = fs::temp_directory_path() / ("fluxrt_t5_cfg_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto config = read_json(kModel / "config.json");
  auto expect_code = [&](const nlohmann::json& j, ErrorCode code) {
    std::ofstream(dir / "config.json") << j.dump();
    try {
      T5Config::from_json_file(dir / "config.json");
      ADD_FAILURE() << "accepted " << j.dump();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
    }
  };
  auto relu = config;
  relu["feed_forward_proj"] = "relu";  // original T5, not v1.1
  expect_code(relu, ErrorCode::Unsupported);
  auto decoder = config;
  decoder["is_decoder"] = true;
  expect_code(decoder, ErrorCode::Unsupported);
  auto clip = config;
  clip["model_type"] = "clip_text_model";
  expect_code(clip, ErrorCode::Unsupported);
  auto missing = config;
  missing.erase("d_model");
  expect_code(missing, ErrorCode::Format);
  std::ofstream(dir / "config.json") << "{\"d_model\": ";
  EXPECT_THROW(T5Config::from_json_file(dir / "config.json"), Error);
  fs::remove_all(dir);
}

TEST(T5Encoder, RelativePositionBucketsMatchTransformers) {
  const auto doc = read_json(kDumps / "buckets.json");
  const int64_t first = doc.at("relative_position_from");
  const auto buckets = doc.at("buckets").get<std::vector<int64_t>>();
  ASSERT_EQ(buckets.size(), 1201u);
  for (size_t i = 0; i < buckets.size(); ++i) {
    const int64_t r = first + static_cast<int64_t>(i);
    ASSERT_EQ(t5_relative_position_bucket(r, 32, 128), buckets[i]) << "relative position " << r;
  }
}

TEST(T5Encoder, PositionBiasIsTheBucketRowPerHead) {
  const T5Encoder e = T5Encoder::load(kModel, opts(DType::F32));
  io::Checkpoint ck = io::Checkpoint::open(kModel.string());
  const Tensor table =
      ck.tensor("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight").to(DType::F32).contiguous();
  const Tensor bias = e.position_bias(200);  // [1, 4, 200, 200]
  ASSERT_EQ(bias.shape(), Shape({1, 4, 200, 200}));
  const float* b = bias.data<float>();
  const float* t = table.data<float>();
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i : {0, 7, 100, 199})
      for (int64_t j : {0, 3, 100, 150, 199})
        EXPECT_EQ(b[(h * 200 + i) * 200 + j], t[t5_relative_position_bucket(j - i, 32, 128) * 4 + h]);
}

// Built once per length and reused (every forward at that length, copies of the encoder too); a
// few lengths are kept, and one rebuilt after eviction holds the same values.
TEST(T5Encoder, PositionBiasIsCachedPerLength) {
  const T5Encoder e = T5Encoder::load(kModel, opts(DType::F32));
  const Tensor first = e.position_bias(64);
  EXPECT_EQ(e.position_bias(64).raw_data(), first.raw_data());
  const T5Encoder copy = e;
  EXPECT_EQ(copy.position_bias(64).raw_data(), first.raw_data());
  EXPECT_NE(e.position_bias(65).raw_data(), first.raw_data());
  for (int64_t length : {1, 2, 3, 4, 5}) EXPECT_EQ(e.position_bias(length).shape(), Shape({1, 4, length, length}));
  const Tensor rebuilt = e.position_bias(64);  // evicted by the five lengths above
  ASSERT_EQ(rebuilt.shape(), first.shape());
  EXPECT_EQ(std::memcmp(rebuilt.raw_data(), first.raw_data(), first.nbytes()), 0);
}

TEST(T5Encoder, PipelinePromptsAt512) { check_case("pipeline_L512"); }
TEST(T5Encoder, PipelinePromptsAt256Truncated) { check_case("pipeline_L256"); }
TEST(T5Encoder, PaddedIdsAttendToPads) { check_case("direct_L160"); }

TEST(T5Encoder, I32AndI64IdsAgree) {
  const Dump d = read_dump("direct_L160");
  const T5Encoder e = T5Encoder::load(kModel, opts(DType::F32));
  EXPECT_TRUE(test::all_close(e.forward(d.input_ids.to(DType::I32)), e.forward(d.input_ids), test::TolClass::Exact));
}

TEST(T5PromptEmbedder, MatchesFluxPipeline) {
  const auto cases = read_json(kDumps / "cases.json");
  T5PromptEmbedder embedder(T5Encoder::load(kModel, opts(DType::F32)),
                            tokenizers::T5Tokenizer::from_directory(kTokenizer));
  for (const char* name : {"pipeline_L512", "pipeline_L256"}) {
    SCOPED_TRACE(name);
    const Dump d = read_dump(name);
    const auto prompts = cases.at(name).at("prompts").get<std::vector<std::string>>();
    const int length = cases.at(name).at("max_sequence_length");
    T5PromptEmbeddings r = embedder.embed(prompts, length);
    EXPECT_TRUE(test::all_close(r.input_ids.to(DType::I64), d.input_ids, test::TolClass::Exact));
    EXPECT_TRUE(test::all_close(r.embeds, d.f32, test::TolClass::ModuleGolden));
    const auto real = cases.at(name).at("real_tokens").get<std::vector<int32_t>>();
    EXPECT_EQ(r.num_tokens, real);
    ASSERT_EQ(r.attention_mask.shape(), Shape({static_cast<int64_t>(prompts.size()), length}));
    EXPECT_EQ(r.attention_mask.data<int32_t>()[real[0] - 1], 1);
    EXPECT_EQ(r.attention_mask.data<int32_t>()[real[0]], 0);
  }
  EXPECT_THROW(embedder.embed({}), Error);
}

TEST(T5PromptEmbedder, LoadsAPipelineFolder) {
  const fs::path root = fs::temp_directory_path() / ("fluxrt_t5_root_" + std::to_string(::getpid()));
  fs::create_directories(root / "tokenizer_2");
  fs::create_directory_symlink(fs::absolute(kModel), root / "text_encoder_2");
  fs::copy_file(kTokenizer / "spiece.model", root / "tokenizer_2" / "spiece.model");
  auto embedder = T5PromptEmbedder::load(root, opts(DType::BF16));
  T5PromptEmbeddings r = embedder->embed({"a photo of a cat"}, 256);
  EXPECT_EQ(r.embeds.shape(), Shape({1, 256, 16}));
  EXPECT_EQ(r.embeds.dtype(), DType::BF16);
  fs::remove_all(root);
}

TEST(T5Encoder, OtherCheckpointDtypesAreConvertedAtLoad) {
  // The same weights stored as f32 (exact upcast of the bf16 file) must give the bf16 run's
  // result bit for bit in bf16 mode, and the f32 run's in f32 mode.
  io::Checkpoint ck = io::Checkpoint::open(kModel.string());
  const T5Config config = T5Config::from_json_file(kModel / "config.json");
  const TensorStore bf16_store = TensorStore::from_checkpoint(ck);
  TensorStore f32_store;
  for (const std::string& name : bf16_store.names()) f32_store.add(name, bf16_store.get(name).to(DType::F32));
  const Dump d = read_dump("direct_L160");
  for (DType dtype : {DType::BF16, DType::F32}) {
    const Tensor want = T5Encoder::from_store(config, bf16_store, opts(dtype)).forward(d.input_ids);
    const Tensor got = T5Encoder::from_store(config, f32_store, opts(dtype)).forward(d.input_ids);
    EXPECT_EQ(got.dtype(), dtype);
    EXPECT_TRUE(test::all_close(got, want, test::TolClass::Exact)) << dtype_name(dtype);
  }
}

TEST(T5Encoder, BindingErrorsNameTheTensors) {
  io::Checkpoint ck = io::Checkpoint::open(kModel.string());
  const T5Config config = T5Config::from_json_file(kModel / "config.json");
  TensorStore store = TensorStore::from_checkpoint(ck);
  store.remove("encoder.block.2.layer.1.DenseReluDense.wo.weight");
  store.add("encoder.block.3.layer.0.layer_norm.weight", Tensor::zeros({16}, DType::F32));
  try {
    T5Encoder::from_store(config, store, opts(DType::F32));
    FAIL() << "bound an incomplete checkpoint";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::Format);
    EXPECT_NE(what.find("encoder.block.2.layer.1.DenseReluDense.wo.weight"), std::string::npos) << what;
    EXPECT_NE(what.find("encoder.block.3.layer.0.layer_norm.weight"), std::string::npos) << what;
  }
  T5Config wrong = config;
  wrong.num_heads = 2;  // relative_attention_bias is [32, 4]
  EXPECT_THROW(T5Encoder::from_store(wrong, TensorStore::from_checkpoint(ck), opts(DType::F32)), Error);
}

TEST(T5Encoder, BadInputsAreErrors) {
  const T5Encoder e = T5Encoder::load(kModel, opts(DType::F32));
  auto expect_invalid = [&](const Tensor& ids) {
    try {
      e.forward(ids);
      ADD_FAILURE() << "accepted " << ids.shape().str();
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), ErrorCode::InvalidArgument) << err.what();
    }
  };
  expect_invalid(Tensor::zeros({4}, DType::I64));
  expect_invalid(Tensor::zeros({1, 4}, DType::F32));
  expect_invalid(Tensor::full({1, 3}, DType::I64, 32128));  // past the embedding
  expect_invalid(Tensor::full({1, 3}, DType::I64, -1));
  expect_invalid(Tensor());
  T5EncoderOptions f16;
  f16.dtype = DType::F16;
  EXPECT_THROW(T5Encoder::load(kModel, f16), Error);
}

TEST(T5Encoder, SyntheticHasTheRealShapes) {
  T5Config small = T5Config::t5_v1_1_xxl();
  small.num_layers = 1;
  small.d_model = 64;
  small.num_heads = 4;
  small.d_kv = 16;
  small.d_ff = 96;
  small.vocab_size = 1000;
  const T5Encoder e = T5Encoder::synthetic(small, opts(DType::BF16));
  Tensor ids = Tensor::zeros({2, 33}, DType::I32);
  const Tensor y = e.forward(ids);
  EXPECT_EQ(y.shape(), Shape({2, 33, 64}));
  const Tensor yf = y.to(DType::F32);
  double sum = 0;
  for (int64_t i = 0; i < yf.numel(); ++i) sum += std::abs(yf.data<float>()[i]);
  EXPECT_GT(sum, 0.0);
  // One layer: 2 x (4 x 64 x 64 + 3 x 64 x 96) flops per token for the projections, plus
  // 4 x L x 64 for the two attention matmuls.
  EXPECT_DOUBLE_EQ(e.flops(2, 33), 2.0 * 33 * (2.0 * (4 * 64 * 64 + 3 * 64 * 96) + 4.0 * 33 * 64));
}

}  // namespace
}  // namespace fluxrt::models
