// `fluxrt info`'s data (runtime/model_info.h): discovery, the kinds' variant detection and the
// header statistics of every component, on the checked-in tiny models, in a Hugging Face cache,
// and on a corrupt file.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "io/gguf.h"
#include "runtime/model_info.h"
#include "support/model_files.h"

namespace fluxrt::runtime {
namespace {

namespace fs = std::filesystem;
using test::message_of;
using test::TempDir;
using test::write_text;

const fs::path kModels = fs::path(FLUXRT_TEST_DATA_DIR) / "models";
const fs::path kKleinFolder = kModels / "flux2-klein-tiny";
const fs::path kKleinBfl = kModels / "flux2-klein-tiny-bfl.safetensors";
const std::string kKleinQ8 = std::string(FLUXRT_TEST_DATA_DIR) + "/gguf/flux2-klein-tiny-q8_0.gguf";

void expect_one_line(const std::string& message) {
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(ModelInfo, TinyKleinFolderStatistics) {
  const ModelReport r = inspect_model(kKleinFolder.string(), "/nonexistent-hub");
  ASSERT_EQ(r.components.size(), 5u);
  uint64_t total_bytes = 0;
  for (const ComponentReport& c : r.components) {
    SCOPED_TRACE(c.name);
    total_bytes += c.bytes;
    if (c.name == "transformer") {
      EXPECT_EQ(c.tensors, 29u);  // diffusers layout of 1 double + 1 single FLUX.2 block
      EXPECT_EQ(c.dtypes.size(), 1u);
      EXPECT_EQ(c.dtypes.at("bf16"), 29u);
      EXPECT_EQ(c.bytes, 2 * c.parameters);
      EXPECT_EQ(c.files, 1u);
    } else if (c.name == "text_encoder") {
      EXPECT_EQ(c.tensors, 398u);  // embedding + final norm + 36 layers x 11 (lm_head is tied)
      EXPECT_EQ(c.dtypes.at("bf16"), 398u);
      EXPECT_GE(c.parameters, 151936u * 8u);
    } else if (c.name == "vae") {
      // f32 weights plus BatchNorm's int64 num_batches_tracked scalar, which diffusers saves.
      EXPECT_EQ(c.dtypes.at("i64"), 1u);
      EXPECT_EQ(c.dtypes.at("f32"), c.tensors - 1);
      EXPECT_EQ(c.bytes, 4 * (c.parameters - 1) + 8);
    } else {
      EXPECT_EQ(c.tensors, 0u);
      EXPECT_TRUE(c.weights.empty());
    }
  }
  EXPECT_GT(total_bytes, 0u);

  const nlohmann::json j = nlohmann::json::parse(model_report_json(r));
  EXPECT_EQ(j["source"], "diffusers-folder");
  EXPECT_EQ(j["pipeline_class"], "Flux2KleinPipeline");
  EXPECT_EQ(j["variant"]["family"], "flux.2");
  EXPECT_EQ(j["variant"]["variant"], "custom");
  EXPECT_EQ(j["variant"]["layout"], "diffusers");
  EXPECT_EQ(j["variant"]["distilled"], true);
  EXPECT_EQ(j["variant"]["hidden_size"], 128);
  ASSERT_EQ(j["components"].size(), 5u);
}

TEST(ModelInfo, BflFileStatistics) {
  const ModelReport r = inspect_model(kKleinBfl.string(), "/nonexistent-hub");
  ASSERT_EQ(r.components.size(), 1u);
  EXPECT_EQ(r.components[0].tensors, 25u);  // qkv fused in the BFL layout: 29 - 2 x 2
  const ModelReport folder = inspect_model(kKleinFolder.string(), "/nonexistent-hub");
  EXPECT_EQ(r.components[0].parameters, folder.components[3].parameters);  // same weights, other names
}

TEST(ModelInfo, WeightFilesCounted) {
  // A variant copy beside the main file is left out.
  TempDir tmp;
  const fs::path folder = tmp.path() / "transformer";
  fs::create_directories(folder);
  const fs::path src = kModels / "flux1-dev-tiny-transformer";
  fs::copy_file(src / "config.json", folder / "config.json");
  fs::copy_file(src / "diffusion_pytorch_model.safetensors", folder / "diffusion_pytorch_model.safetensors");
  fs::copy_file(src / "diffusion_pytorch_model.safetensors",
                folder / "diffusion_pytorch_model.fp16.safetensors");
  EXPECT_EQ(inspect_model(folder.string(), "/nonexistent-hub").components[0].files, 1u);

  // Shards: every file behind the index.
  const fs::path sharded = fs::path(FLUXRT_TEST_DATA_DIR) / "safetensors" / "good" / "sharded";
  if (fs::is_directory(sharded)) {
    const ModelReport r = inspect_model(sharded.string(), "/nonexistent-hub");
    EXPECT_EQ(r.components[0].files, 2u);
    EXPECT_EQ(r.variant.kind, nullptr);  // not a transformer: listed, not classified
    EXPECT_EQ(to_public(r).family, "unknown");
  }
}

TEST(ModelInfo, GgufListsTypesAndSizes) {
  const ModelReport r = inspect_model(kKleinQ8);
  EXPECT_EQ(r.variant.family, "flux.2");
  ASSERT_EQ(r.components.size(), 1u);
  const ComponentReport& c = r.components[0];
  EXPECT_EQ(c.name, "transformer");
  EXPECT_EQ(c.class_name, "gguf:flux");
  const auto file = io::GgufFile::open(kKleinQ8);
  EXPECT_EQ(c.tensors, file->tensors().size());
  uint64_t bytes = 0;
  for (const io::GgufTensorInfo& t : file->tensors()) bytes += t.nbytes;
  EXPECT_EQ(c.bytes, bytes);
  EXPECT_EQ(c.dtypes.at("q8_0"), 18u);
  EXPECT_EQ(c.dtypes.at("f16"), 1u);  // txt_in: rows of 24 are not whole Q8_0 blocks
  EXPECT_GT(c.dtypes.at("f32"), 0u);  // norm scales
}

// The tiny model is in the cache under the real repo's name; it is still detected by its size.
TEST(ModelInfo, HubCacheModelDetectedByItsSize) {
  TempDir tmp;
  const fs::path hub = tmp.path() / "hub";
  test::make_hub_repo(hub, "models--black-forest-labs--FLUX.2-klein-4B", kKleinFolder, "0123abcd", true);
  const ModelReport report = inspect_model("black-forest-labs/FLUX.2-klein-4B", hub.string());
  EXPECT_EQ(report.variant.variant, "custom");
  EXPECT_EQ(report.variant.description, "flux.2-klein (custom: hidden 128, 1+1 blocks, distilled)");
  EXPECT_EQ(to_public(report).repo_id, "black-forest-labs/FLUX.2-klein-4B");
}

TEST(ModelInfo, CorruptWeightsFailInspection) {
  TempDir tmp;
  const fs::path file = tmp.path() / "corrupt.safetensors";
  write_text(file, std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{not json", 17));
  ErrorCode code{};
  const std::string msg = message_of([&] { inspect_model(file.string(), "/nonexistent-hub"); }, &code);
  EXPECT_EQ(code, ErrorCode::Format) << msg;
  EXPECT_NE(msg.find("corrupt.safetensors"), std::string::npos) << msg;
  expect_one_line(msg);
}

}  // namespace
}  // namespace fluxrt::runtime
