// pipelines/pipeline.h's registry: which diffusers classes and transformer checkpoints each family
// runs, what its requests may carry, and that the loaded pipelines report their own kind.
#include <gtest/gtest.h>

#include <filesystem>

#include "pipelines/flux1_pipeline.h"
#include "pipelines/flux2_klein_pipeline.h"
#include "pipelines/pipeline.h"

namespace fluxrt::pipelines {
namespace {

const std::filesystem::path kData = FLUXRT_TEST_DATA_DIR;

TEST(PipelineRegistry, FindsEachFamilyByItsClasses) {
  EXPECT_EQ(find_pipeline_kind("Flux2KleinPipeline"), &flux2_klein_kind());
  EXPECT_EQ(find_pipeline_kind("FluxPipeline"), &flux1_kind());
  // img2img folders have the FluxPipeline layout: the same family.
  EXPECT_EQ(find_pipeline_kind("FluxImg2ImgPipeline"), &flux1_kind());
  EXPECT_EQ(find_pipeline_kind("Flux2Pipeline"), nullptr);  // FLUX.2 dev: not run here
  EXPECT_EQ(find_pipeline_kind(""), nullptr);
  EXPECT_EQ(find_pipeline_kind("fluxpipeline"), nullptr);  // class names are exact
  EXPECT_EQ(pipeline_kinds().size(), 2u);
  EXPECT_EQ(supported_pipelines_text(), "Flux2KleinPipeline (FLUX.2 klein) and FluxPipeline (FLUX.1)");
}

TEST(PipelineRegistry, MapsTransformerCheckpointsToTheirFamily) {
  io::VariantInfo info;
  info.family = io::ModelFamily::Flux1;
  EXPECT_EQ(pipeline_kind_for_transformer(info), &flux1_kind());
  info.family = io::ModelFamily::Flux2;
  info.variant = io::ModelVariant::Flux2Klein4B;
  EXPECT_EQ(pipeline_kind_for_transformer(info), &flux2_klein_kind());
  info.variant = io::ModelVariant::Flux2Dev;
  EXPECT_EQ(pipeline_kind_for_transformer(info), nullptr);
  info.family = io::ModelFamily::Unknown;
  info.variant = io::ModelVariant::Unknown;
  EXPECT_EQ(pipeline_kind_for_transformer(info), nullptr);
}

TEST(PipelineRegistry, KindsSayWhatTheirRequestsMayCarry) {
  // What a family takes besides a prompt is in the limits its kind describes before any load.
  const ModelFacts klein = flux2_klein_kind().describe(kData / "models" / "flux2-klein-tiny", {});
  EXPECT_GT(klein.limits.max_reference_images, 0);
  EXPECT_FALSE(klein.limits.init_image);
  EXPECT_FALSE(klein.limits.true_cfg);
  const ModelFacts flux1 = flux1_kind().describe(kData / "models" / "flux1-dev-tiny", {});
  EXPECT_EQ(flux1.limits.max_reference_images, 0);
  EXPECT_TRUE(flux1.limits.init_image);
  EXPECT_TRUE(flux1.limits.true_cfg);
  EXPECT_EQ(flux1_kind().weight_components.size(), 4u);  // two text encoders
}

TEST(PipelineRegistry, LoadsThroughTheFactoryAndReportsItsKind) {
  const std::unique_ptr<Pipeline> klein = flux2_klein_kind().load(kData / "models" / "flux2-klein-tiny", {});
  EXPECT_EQ(&klein->kind(), &flux2_klein_kind());
  EXPECT_NE(dynamic_cast<Flux2KleinPipeline*>(klein.get()), nullptr);
  const std::unique_ptr<Pipeline> flux1 = flux1_kind().load(kData / "models" / "flux1-dev-tiny", {});
  EXPECT_EQ(&flux1->kind(), &flux1_kind());
  const fluxrt::ModelDefaults& d = flux1->facts().defaults;
  EXPECT_EQ(d.steps, 28);
  ASSERT_TRUE(d.img2img_strength.has_value());
  EXPECT_FALSE(klein->facts().defaults.img2img_strength.has_value());
  // The facts a loaded pipeline reports are the ones its kind describes from the folder.
  const ModelFacts described = flux1_kind().describe(kData / "models" / "flux1-dev-tiny", {});
  EXPECT_EQ(described.defaults.steps, d.steps);
  EXPECT_EQ(described.limits.max_sequence_length, flux1->facts().limits.max_sequence_length);
  EXPECT_EQ(described.vae_scale_factor, flux1->facts().vae_scale_factor);
}

}  // namespace
}  // namespace fluxrt::pipelines
