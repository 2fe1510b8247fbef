// The public Engine on a single klein transformer file with another folder's components
// (`fluxrt generate --model FILE --components FOLDER`): the folder's model_index.json says
// distilled or base (issue 43: a GGUF named like a distilled klein on a base folder ran as
// distilled, ignoring --guidance 4 without a word).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "fluxrt/engine.h"

namespace {

namespace fs = std::filesystem;

const fs::path kData = FLUXRT_TEST_DATA_DIR;

TEST(EngineTransformerFile, KleinGgufOnABaseFolderRunsAsBase) {
  fluxrt::EngineOptions options;
  options.components = (kData / "models" / "flux2-klein-base-tiny").string();
  fluxrt::Engine engine((kData / "gguf" / "flux2-klein-tiny-q8_0.gguf").string(), options);
  const fluxrt::ModelDefaults d = engine.defaults();
  EXPECT_EQ(d.steps, 50);
  EXPECT_FLOAT_EQ(d.guidance, 4.0f);

  fluxrt::GenerateRequest r;
  r.prompts = {"a red fox"};
  r.width = r.height = 64;
  r.steps = 1;
  r.guidance = 4.0f;
  r.seed = 1;
  const fluxrt::GenerateResult result = engine.generate(r);
  EXPECT_TRUE(result.used_cfg);
  // The file name said distilled, the folder base: said, never silent.
  ASSERT_FALSE(result.notes.empty());
  EXPECT_NE(result.notes.back().find("is_distilled false"), std::string::npos) << result.notes.back();
  ASSERT_EQ(result.images.size(), 1u);
  EXPECT_FLOAT_EQ(result.images[0].metadata.guidance, 4.0f);
}

}  // namespace
