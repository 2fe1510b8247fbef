// `fluxrt quantize` (runtime/quantize_model): the tiny klein and FLUX.1-dev transformers written as
// Q8_0 GGUF must be, tensor for tensor, what the gguf package writes from the same weights in
// city96's layout (tests/data/gguf/*-q8_0.gguf, tools/reference/make_tiny_gguf.py): the same names,
// types, shapes and bytes; from the diffusers-named folder too (names mapped back to BFL).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "runtime/quantize_model.h"

namespace fluxrt::runtime {
namespace {

namespace fs = std::filesystem;

const std::string kData = FLUXRT_TEST_DATA_DIR;

void expect_same_tensors(const std::string& ours, const std::string& reference) {
  const auto a = io::GgufFile::open(ours);
  const auto b = io::GgufFile::open(reference);
  EXPECT_EQ(a->metadata().at("general.architecture").s, "flux");
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (const io::GgufTensorInfo& t : b->tensors()) {
    SCOPED_TRACE(t.name);
    ASSERT_TRUE(a->contains(t.name));
    const io::GgufTensorInfo& u = a->info(t.name);
    EXPECT_EQ(u.type, t.type);
    EXPECT_EQ(u.shape, t.shape);
    ASSERT_EQ(u.nbytes, t.nbytes);
    EXPECT_EQ(std::memcmp(a->matrix(t.name).row(0), b->matrix(t.name).row(0), t.nbytes), 0);
  }
}

fs::path temp_file(const char* tag) {
  return fs::temp_directory_path() / fmt::format("fluxrt_quantize_{}_{}.gguf", tag, std::random_device{}());
}

TEST(QuantizeModel, BflFileEqualsTheGgufPackagesFile) {
  const fs::path out = temp_file("bfl");
  const QuantizeReport r =
      quantize_model({kData + "/models/flux2-klein-tiny-bfl.safetensors", QuantType::Q8_0, out.string()});
  EXPECT_EQ(r.family, "flux.2");
  EXPECT_EQ(r.quantized, 18u);  // every 2-D weight but txt_in (rows of 24)
  EXPECT_GT(r.rel_l2_max, 0.0);
  EXPECT_LT(r.rel_l2_max, 0.02);  // Q8_0: about 0.4% per tensor
  expect_same_tensors(out.string(), kData + "/gguf/flux2-klein-tiny-q8_0.gguf");
  fs::remove(out);
}

TEST(QuantizeModel, Flux1BflFileEqualsTheGgufPackagesFile) {
  const fs::path out = temp_file("flux1");
  const QuantizeReport r =
      quantize_model({kData + "/flux1_transformer/flux1-dev-bfl.safetensors", QuantType::Q8_0, out.string()});
  EXPECT_EQ(r.family, "flux.1");
  expect_same_tensors(out.string(), kData + "/gguf/flux1-dev-tiny-q8_0.gguf");
  fs::remove(out);
}

TEST(QuantizeModel, DiffusersFolderGivesTheSameFile) {
  const fs::path out = temp_file("diffusers");
  quantize_model({kData + "/models/flux2-klein-tiny", QuantType::Q8_0, out.string()});
  expect_same_tensors(out.string(), kData + "/gguf/flux2-klein-tiny-q8_0.gguf");
  fs::remove(out);
}

// The K types (ggml's reference quantizers, bit for bit: tests/unit/test_quant_kquants.cpp) go
// where a row is whole 256-value blocks: in the tiny klein single_blocks.0.linear2 (128 + 384 =
// 512 columns) and time_in.in_layer (256). Rows of whole 32-value blocks (the 128-column weights)
// take llama.cpp's fallback type; txt_in (24 columns) stays F16.
TEST(QuantizeModel, KTypesQuantizeTheRowsOfWholeSuperBlocks) {
  for (QuantType type :
       {QuantType::Q2_K, QuantType::Q3_K, QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K}) {
    SCOPED_TRACE(std::string(quant_name(type)));
    const fs::path out = temp_file("k");
    const QuantizeReport r =
        quantize_model({kData + "/models/flux2-klein-tiny-bfl.safetensors", type, out.string()});
    EXPECT_EQ(r.quantized, 2u);
    EXPECT_EQ(r.fallback, 16u);  // the other 2-D weights but txt_in
    EXPECT_EQ(r.fallback_type, k_quant_fallback(type));
    const auto file = io::GgufFile::open(out.string());
    const io::GgufTensorInfo& linear2 = file->info("single_blocks.0.linear2.weight");
    EXPECT_EQ(linear2.type, type);
    EXPECT_EQ(file->info("single_blocks.0.linear1.weight").type, k_quant_fallback(type));  // 128 columns
    EXPECT_EQ(file->info("txt_in.weight").type, QuantType::F16);                           // 24 columns
    // The bytes are the reference quantizer's on the checkpoint's values.
    const auto source = io::Checkpoint::open(kData + "/models/flux2-klein-tiny-bfl.safetensors");
    const Tensor w = source.tensor("single_blocks.0.linear2.weight").to(DType::F32);  // [128, 512]
    const QuantizedMatrix q = file->matrix("single_blocks.0.linear2.weight");
    std::vector<uint8_t> row(q.row_bytes());
    for (int64_t i = 0; i < q.rows; ++i) {
      quantize_row_ref(type, w.data<float>() + i * q.cols, row.data(), q.cols);
      ASSERT_EQ(std::memcmp(row.data(), q.row(i), row.size()), 0) << "row " << i;
    }
    EXPECT_GT(r.rel_l2_max, 0.0);
    EXPECT_LT(r.rel_l2_max, 0.35);  // Q2_K's error is about 0.3
    fs::remove(out);
  }
}

TEST(QuantizeModel, TypesWithoutAGgmlIdAreRefusedByName) {
  try {
    quantize_model({kData + "/models/flux2-klein-tiny", QuantType::F8E4M3, temp_file("fp8").string()});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("F8_E4M3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fluxrt::runtime
