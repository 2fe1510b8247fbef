// pipelines/pipeline.h's registry: which diffusers classes and transformer checkpoints each family
// runs, what its requests may carry, and that the loaded pipelines report their own kind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"
#include "io/model_discovery.h"
#include "models/lora/lora_file.h"
#include "pipelines/flux1/flux1_pipeline.h"
#include "pipelines/klein/flux2_klein_pipeline.h"
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
  // FLUX.1 Fill's folders run their own transformer, Kontext's take an image: kinds of their own.
  EXPECT_EQ(find_pipeline_kind("FluxFillPipeline"), &flux1_fill_kind());
  EXPECT_EQ(find_pipeline_kind("FluxKontextPipeline"), &flux1_kontext_kind());
  EXPECT_EQ(pipeline_kinds().size(), 4u);
  EXPECT_EQ(supported_pipelines_text(),
            "Flux2KleinPipeline (FLUX.2 klein), FluxPipeline (FLUX.1), FluxFillPipeline (FLUX.1 Fill) and "
            "FluxKontextPipeline (FLUX.1 Kontext)");
}

TEST(PipelineRegistry, MapsTransformerCheckpointsToTheirFamily) {
  VariantInfo info;
  info.kind = &flux1_kind();
  info.runs = true;
  EXPECT_EQ(pipeline_kind_for_transformer(info), &flux1_kind());
  info.kind = &flux2_klein_kind();
  EXPECT_EQ(pipeline_kind_for_transformer(info), &flux2_klein_kind());
  info.runs = false;  // recognised to be refused (FLUX.2 dev)
  EXPECT_EQ(pipeline_kind_for_transformer(info), nullptr);
  info.kind = nullptr;
  EXPECT_EQ(pipeline_kind_for_transformer(info), nullptr);
}

// A LoRA file's family is told by the kinds' name schemes: the layers only one family has.
TEST(PipelineRegistry, TellsWhichKindsALoraFileFits) {
  const models::LoraFile klein =
      models::read_lora_file((kData / "lora" / "klein" / "peft.safetensors").string());
  EXPECT_EQ(kinds_taking_lora(klein), std::vector<const PipelineKind*>{&flux2_klein_kind()});
  EXPECT_EQ(lora_family_name(klein), "FLUX.2");
  const models::LoraFile flux1 =
      models::read_lora_file((kData / "lora" / "flux1" / "kohya.safetensors").string());
  // FLUX.1's three kinds share the transformer's layer names.
  EXPECT_EQ(kinds_taking_lora(flux1),
            (std::vector<const PipelineKind*>{&flux1_kind(), &flux1_fill_kind(), &flux1_kontext_kind()}));
  EXPECT_EQ(lora_family_name(flux1), "FLUX.1");
  models::LoraFile shared = klein;  // only the layers both have left
  std::erase_if(shared.modules, [](const models::LoraModule& m) {
    return flux2_klein_kind().lora_scheme->only_here(m.module);
  });
  ASSERT_FALSE(shared.modules.empty());
  EXPECT_EQ(kinds_taking_lora(shared), pipeline_kinds());
  EXPECT_EQ(lora_family_name(shared), "FLUX.1 or FLUX.2 (only shared layers)");
  EXPECT_EQ(flux1_kind().lora_scheme->family, std::string("FLUX.1"));
}

// A folder is checked by the registry (its weight components) and then by its kind: klein's
// needs its Qwen3 tokenizer files and scheduler config before anything loads.
TEST(PipelineRegistry, ChecksAFolderThroughItsKind) {
  auto resolved = [](const std::filesystem::path& p) {
    return io::resolve_model(p.string(), "/nonexistent-hub");
  };
  const std::filesystem::path models = kData / "models";
  EXPECT_EQ(&check_pipeline_folder(resolved(models / "flux2-klein-tiny")), &flux2_klein_kind());
  EXPECT_EQ(&check_pipeline_folder(resolved(models / "flux1-dev-tiny")), &flux1_kind());
  auto error_of = [](const std::function<void()>& fn) -> std::pair<ErrorCode, std::string> {
    try {
      fn();
    } catch (const Error& e) {
      return {e.code(), e.what()};
    }
    return {ErrorCode::Internal, "(no error)"};
  };
  auto [code, what] =
      error_of([&] { check_pipeline_folder(resolved(models / "flux1-dev-tiny-transformer")); });
  EXPECT_EQ(code, ErrorCode::Unsupported);
  EXPECT_NE(what.find("is a single component folder"), std::string::npos) << what;

  const std::filesystem::path tmp =
      std::filesystem::temp_directory_path() / ("fluxrt_registry_" + std::to_string(::getpid()));
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);
  std::filesystem::copy(models / "flux2-klein-tiny", tmp / "klein", std::filesystem::copy_options::recursive);
  std::filesystem::remove_all(tmp / "klein" / "tokenizer");
  std::tie(code, what) = error_of([&] { check_pipeline_folder(resolved(tmp / "klein")); });
  EXPECT_EQ(code, ErrorCode::NotFound);
  EXPECT_NE(what.find("tokenizer not found"), std::string::npos) << what;
  std::filesystem::copy(models / "flux2-klein-tiny" / "tokenizer", tmp / "klein" / "tokenizer");
  std::filesystem::remove(tmp / "klein" / "scheduler" / "scheduler_config.json");
  std::tie(code, what) = error_of([&] { check_pipeline_folder(resolved(tmp / "klein")); });
  EXPECT_EQ(code, ErrorCode::NotFound);
  EXPECT_NE(what.find("scheduler_config.json not found"), std::string::npos) << what;

  // The registry's part: a weight component missing, unless a file stands in for it.
  std::filesystem::copy(models / "flux1-dev-tiny", tmp / "flux1", std::filesystem::copy_options::recursive);
  std::filesystem::remove_all(tmp / "flux1" / "text_encoder_2");
  std::tie(code, what) = error_of([&] { check_pipeline_folder(resolved(tmp / "flux1")); });
  EXPECT_EQ(code, ErrorCode::NotFound);
  EXPECT_NE(what.find("component text_encoder_2 is missing"), std::string::npos) << what;
  EXPECT_EQ(&check_pipeline_folder(resolved(tmp / "flux1"), false, /*text_encoder_from_file=*/true),
            &flux1_kind());
  std::filesystem::remove_all(tmp);
}

// `fluxrt bench pipeline --synthetic` reaches every family through its kind: the variants it
// offers, and a pipeline of random weights made by it.
TEST(PipelineRegistry, KindsMakeTheirSyntheticPipelines) {
  const std::filesystem::path source_dir = kData.parent_path().parent_path();  // tests/data -> the tree
  for (const auto& [kind, variant] : {std::pair{&flux2_klein_kind(), std::string(kKleinTinySyntheticVariant)},
                                      std::pair{&flux1_kind(), std::string("flux.1-tiny")}}) {
    SCOPED_TRACE(variant);
    EXPECT_NE(std::find(kind->bench_variants.begin(), kind->bench_variants.end(), variant),
              kind->bench_variants.end());
    SyntheticRequest request;
    request.variant = variant;
    request.weights_name = "bf16";
    request.source_dir = source_dir;
    const SyntheticPipeline synthetic = kind->synthetic(request);
    PipelineOptions options;
    options.low_memory = true;  // nothing made before a request
    const std::unique_ptr<Pipeline> pipe = synthetic.make(options);
    EXPECT_EQ(&pipe->kind(), kind);
    EXPECT_GT(synthetic.flops_per_forward(*pipe, 16, 8), 0.0);
    EXPECT_EQ(synthetic.variant, variant);
  }
  EXPECT_FALSE(
      flux2_klein_kind().synthetic({"flux.2-klein-tiny", {}, "bf16", source_dir, {}}).always_low_memory);
  EXPECT_TRUE(flux1_kind().synthetic({"flux.1-tiny", {}, "bf16", source_dir, {}}).always_low_memory);
  // FLUX.1's synthetic weights are dense: a quantized type is refused by name.
  try {
    flux1_kind().synthetic({"flux.1-tiny", QuantType::Q8_0, "q8_0", source_dir, {}});
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("--weights q8_0"), std::string::npos) << e.what();
  }
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
