// A single klein transformer file run with another folder's components (--model FILE
// --components FOLDER): the folder's model_index.json says distilled or base, not the file's name.
// Issue 43: a GGUF named like a distilled klein on a base folder ran as distilled, so a
// --guidance 4 ran no CFG and nothing said so.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "io/model_discovery.h"
#include "pipelines/klein/flux2_klein_pipeline.h"
#include "pipelines/variant.h"

namespace fluxrt::pipelines {
namespace {

namespace fs = std::filesystem;

const fs::path kData = FLUXRT_TEST_DATA_DIR;
// The tiny klein quantized: its name says klein and not base, so distilled.
const fs::path kKleinGguf = kData / "gguf" / "flux2-klein-tiny-q8_0.gguf";
const fs::path kBaseFolder = kData / "models" / "flux2-klein-base-tiny";  // is_distilled false
const fs::path kDistilledFolder = kData / "models" / "flux2-klein-tiny";  // is_distilled true

io::ResolvedModel resolved(const fs::path& path) {
  return io::resolve_model(path.string(), "/nonexistent-hub");
}

TEST(KleinTransformerFile, TheFoldersModelIndexIsTakenOverTheFileName) {
  const io::ResolvedModel file = resolved(kKleinGguf);
  // Alone, the file's name is all there is.
  const VariantInfo alone = detect_variant(file);
  ASSERT_TRUE(alone.distilled.has_value());
  EXPECT_TRUE(*alone.distilled);
  EXPECT_EQ(alone.distilled_from, "file name");
  EXPECT_TRUE(alone.notes.empty());

  const io::ResolvedModel base = resolved(kBaseFolder);
  const VariantInfo on_base = detect_variant(file, &base);
  ASSERT_TRUE(on_base.distilled.has_value());
  EXPECT_FALSE(*on_base.distilled);
  EXPECT_EQ(on_base.distilled_from, "model_index.json");
  EXPECT_NE(on_base.description.find("base"), std::string::npos) << on_base.description;
  ASSERT_EQ(on_base.notes.size(), 1u);
  const std::string& note = on_base.notes[0];
  EXPECT_NE(note.find(kKleinGguf.string()), std::string::npos) << note;
  EXPECT_NE(note.find(kBaseFolder.string() + "/model_index.json says is_distilled false"), std::string::npos)
      << note;
  EXPECT_NE(note.find("running it as base"), std::string::npos) << note;

  // A folder that agrees with the name: nothing to note.
  const io::ResolvedModel distilled = resolved(kDistilledFolder);
  const VariantInfo on_distilled = detect_variant(file, &distilled);
  ASSERT_TRUE(on_distilled.distilled.has_value());
  EXPECT_TRUE(*on_distilled.distilled);
  EXPECT_TRUE(on_distilled.notes.empty());
}

TEST(KleinTransformerFile, RunsAsBaseOnABaseFolderAndSaysSo) {
  PipelineOptions options;
  options.transformer_file = kKleinGguf;
  const std::unique_ptr<Flux2KleinPipeline> pipe = Flux2KleinPipeline::load(kBaseFolder, options);
  EXPECT_FALSE(pipe->defaults().is_distilled);
  const ModelFacts& facts = pipe->facts();
  EXPECT_EQ(facts.defaults.steps, 50);
  EXPECT_FLOAT_EQ(facts.defaults.guidance, 4.0f);
  ASSERT_EQ(facts.notes.size(), 1u);
  EXPECT_NE(facts.notes[0].find("is_distilled false"), std::string::npos) << facts.notes[0];

  fluxrt::GenerateRequest r;
  r.prompts = {"a red fox"};
  r.width = r.height = 64;
  r.steps = 1;
  r.guidance = 4.0f;
  const fluxrt::RequestPlan plan = pipe->plan(r);
  EXPECT_TRUE(plan.cfg);
  ASSERT_FALSE(plan.notes.empty());  // the disagreement reaches every request's plan
  EXPECT_NE(plan.notes.back().find("is_distilled false"), std::string::npos) << plan.notes.back();
  EXPECT_TRUE(pipe->generate(r).used_cfg);  // the guidance asked for is honoured: CFG runs

  // On the distilled folder the same file runs distilled, with no note.
  const std::unique_ptr<Flux2KleinPipeline> distilled = Flux2KleinPipeline::load(kDistilledFolder, options);
  EXPECT_TRUE(distilled->defaults().is_distilled);
  EXPECT_TRUE(distilled->facts().notes.empty());
}

}  // namespace
}  // namespace fluxrt::pipelines
