// Model resolution (runtime/model_resolution.h) through the settings resolver: a diffusers folder
// checked for its components, and `--model FILE`, a single transformer checkpoint (BFL / ComfyUI /
// diffusers names, or a GGUF) with the other components from a pipeline folder of the same family,
// given with --components or found next to the file. The model is resolved once (Run::resolved,
// which Engine(run) takes as it is); the image must equal the one the folder renders with its own
// transformer/ (the tiny klein BFL file holds the same weights as the tiny klein folder).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "fluxrt/engine.h"
#include "fluxrt/run.h"
#include "io/model_discovery.h"
#include "pipelines/flux1/flux1_pipeline.h"
#include "pipelines/klein/flux2_klein_pipeline.h"
#include "run_settings_fixture.h"
#include "runtime/model_resolution.h"
#include "runtime/quantize_model.h"
#include "runtime/resolved_model.h"
#include "support/image_compare.h"

namespace fs = std::filesystem;
namespace rt = fluxrt::runtime;
namespace pl = fluxrt::pipelines;
using fluxrt::DType;
using fluxrt::Error;
using fluxrt::ErrorCode;
using fluxrt::RunSettings;

namespace {

const fs::path kModels = fs::path(FLUXRT_TEST_DATA_DIR) / "models";
const fs::path kKleinFolder = kModels / "flux2-klein-tiny";
const fs::path kKleinBflFile = kModels / "flux2-klein-tiny-bfl.safetensors";  // same weights, BFL names
const fs::path kSchnellFolder = kModels / "flux1-schnell-tiny";
// Another tiny schnell transformer (other widths): a FLUX.1 file that does not fit the folder.
const fs::path kOtherSchnellBflFile = kModels / "flux1-schnell-tiny-bfl.safetensors";

class ModelResolution : public fluxrt::test::RunSettingsTest {
 protected:
  ModelResolution() : RunSettingsTest("fluxrt_resolve_") {}
  RunSettings settings(const fs::path& model) const {
    RunSettings s = small_settings(model);
    s.dtype = "f32";
    s.fields.push_back({"max_sequence_length", "16"});
    return s;
  }
  // A hub-style repo root: the pipeline's components (links) next to a single transformer file.
  fs::path repo_with_file(const fs::path& folder, const fs::path& file) const {
    const fs::path repo = tmp_ / "repo";
    fs::create_directories(repo);
    for (const auto& entry : fs::directory_iterator(folder)) {
      if (entry.path().filename() == "transformer") continue;  // only the single file holds it
      fs::create_symlink(fs::absolute(entry.path()), repo / entry.path().filename());
    }
    fs::create_symlink(fs::absolute(file), repo / file.filename());
    return repo / file.filename();
  }
};

// The model as resolved by resolve_run (what Engine(run) loads).
const rt::ResolvedPipeline& resolved(const fluxrt::Run& run) { return run.resolved->pipeline; }

pl::PipelineOptions f32_options(const std::string& transformer_file = "") {
  pl::PipelineOptions o;
  o.dtype = DType::F32;
  o.transformer_file = transformer_file;
  return o;
}

void expect_same_images(const pl::GenerateResult& a, const pl::GenerateResult& b) {
  ASSERT_EQ(a.images.size(), b.images.size());
  for (size_t i = 0; i < a.images.size(); ++i) {
    EXPECT_EQ(a.images[i].width, b.images[i].width);
    EXPECT_EQ(a.images[i].height, b.images[i].height);
    EXPECT_TRUE(a.images[i].pixels == b.images[i].pixels) << "image " << i << " differs";
  }
}

}  // namespace

TEST_F(ModelResolution, ModelFolderChecks) {
  EXPECT_EQ(&fluxrt::pipelines::check_pipeline_folder(fluxrt::io::resolve_model(kKleinFolder.string())),
            &pl::flux2_klein_kind());
  EXPECT_EQ(&fluxrt::pipelines::check_pipeline_folder(fluxrt::io::resolve_model(kSchnellFolder.string())),
            &pl::flux1_kind());
  // A lone transformer file is not enough to generate.
  try {
    fluxrt::pipelines::check_pipeline_folder(fluxrt::io::resolve_model(kKleinBflFile.string()));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
  }
  // A copy without its tokenizer.
  fs::copy(kKleinFolder, tmp_ / "m", fs::copy_options::recursive);
  fs::remove_all(tmp_ / "m" / "tokenizer");
  try {
    fluxrt::pipelines::check_pipeline_folder(fluxrt::io::resolve_model((tmp_ / "m").string()));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotFound);
    EXPECT_NE(std::string(e.what()).find("tokenizer"), std::string::npos) << e.what();
  }
  // Without its transformer/: fine only when a single file replaces it.
  fs::remove_all(tmp_ / "m");
  fs::copy(kKleinFolder, tmp_ / "m", fs::copy_options::recursive);
  fs::remove_all(tmp_ / "m" / "transformer");
  const fluxrt::io::ResolvedModel no_transformer = fluxrt::io::resolve_model((tmp_ / "m").string());
  EXPECT_THROW(fluxrt::pipelines::check_pipeline_folder(no_transformer), Error);
  EXPECT_NO_THROW(fluxrt::pipelines::check_pipeline_folder(no_transformer, /*transformer_from_file=*/true));
  // The same through the resolver: one line naming what is missing.
  const std::string e = error_of(small_settings(tmp_ / "m"));
  EXPECT_NE(e.find("transformer"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST_F(ModelResolution, KleinBflFileRendersTheFolderImage) {
  RunSettings s = settings(kKleinBflFile);
  s.components = kKleinFolder.string();
  const fluxrt::Run run = fluxrt::resolve_run(s);
  EXPECT_EQ(resolved(run).transformer_file, kKleinBflFile.string());
  EXPECT_EQ(fs::path(resolved(run).model.path), kKleinFolder);
  EXPECT_EQ(resolved(run).model.pipeline_class, "Flux2KleinPipeline");
  EXPECT_EQ(resolved(run).kind, &pl::flux2_klein_kind());
  EXPECT_EQ(run.model, kKleinBflFile.string());
  EXPECT_EQ(run.engine.components, kKleinFolder.string());

  for (bool low_memory : {false, true}) {
    SCOPED_TRACE(low_memory ? "low memory" : "resident");
    pl::PipelineOptions file_options = f32_options(resolved(run).transformer_file);
    file_options.low_memory = low_memory;
    const auto from_file = pl::Flux2KleinPipeline::load(resolved(run).model.path, file_options);
    const auto from_folder = pl::Flux2KleinPipeline::load(kKleinFolder, f32_options());
    EXPECT_EQ(from_file->transformer_config().hidden, from_folder->transformer_config().hidden);
    expect_same_images(from_file->generate(run.request), from_folder->generate(run.request));
  }

  // Engine(run) opens what the resolver resolved, and renders the folder's image.
  fluxrt::Engine engine(run);
  EXPECT_EQ(engine.model(), kKleinBflFile.string());
  const fluxrt::GenerateResult got = engine.generate(run.request);
  const pl::GenerateResult folder =
      pl::Flux2KleinPipeline::load(kKleinFolder, f32_options())->generate(run.request);
  ASSERT_EQ(got.images.size(), folder.images.size());
  EXPECT_TRUE(got.images[0].image.rgb == folder.images[0].pixels);
}

TEST_F(ModelResolution, FileNextToModelIndexFindsItsComponents) {
  const fs::path file = repo_with_file(kKleinFolder, kKleinBflFile);
  const fluxrt::Run run = fluxrt::resolve_run(settings(file));  // no --components
  EXPECT_EQ(resolved(run).transformer_file, file.string());
  EXPECT_EQ(fs::path(resolved(run).model.path), file.parent_path());
  const auto from_file =
      pl::Flux2KleinPipeline::load(resolved(run).model.path, f32_options(resolved(run).transformer_file));
  const auto from_folder = pl::Flux2KleinPipeline::load(kKleinFolder, f32_options());
  expect_same_images(from_file->generate(run.request), from_folder->generate(run.request));
  // The same through runtime::resolve_pipeline, as the Engine resolves a model it is given.
  const rt::ResolvedPipeline direct = rt::resolve_pipeline(file.string(), std::nullopt);
  EXPECT_EQ(direct.transformer_file, file.string());
  EXPECT_EQ(fs::path(direct.model.path), file.parent_path());
}

TEST_F(ModelResolution, Flux1FileRendersTheFolderImage) {
  // The folder's own weights as a lone diffusers-named file (no config.json beside it): the
  // config is detected from the tensors.
  const fs::path file = tmp_ / "flux1-schnell-tiny.safetensors";
  fs::copy_file(kSchnellFolder / "transformer" / "diffusion_pytorch_model.safetensors", file);
  RunSettings s = settings(file);
  s.components = kSchnellFolder.string();
  const fluxrt::Run run = fluxrt::resolve_run(s);
  EXPECT_EQ(resolved(run).model.pipeline_class, "FluxPipeline");
  EXPECT_EQ(resolved(run).transformer_file, file.string());
  EXPECT_EQ(run.limits.max_sequence_length, 512);  // FLUX.1's limits, from the folder
  const auto from_file =
      pl::Flux1Pipeline::load(resolved(run).model.path, f32_options(resolved(run).transformer_file));
  const auto from_folder = pl::Flux1Pipeline::load(kSchnellFolder, f32_options());
  EXPECT_FALSE(from_file->transformer_config().guidance);
  expect_same_images(from_file->generate(run.request), from_folder->generate(run.request));
}

// A FLUX.1 GGUF transformer (the folder's weights written as Q8_0 by `fluxrt quantize`, city96's
// layout) with the folder's other components: it keeps its weights quantized and renders the
// folder's image within the quantization error.
TEST_F(ModelResolution, Flux1GgufFileRendersTheFolderImageWithinQ8Error) {
  const fs::path file = tmp_ / "flux1-schnell-tiny-q8_0.gguf";
  const rt::QuantizeReport q =
      rt::quantize_model({kSchnellFolder.string(), fluxrt::QuantType::Q8_0, file.string()});
  EXPECT_EQ(q.family, "flux.1");
  EXPECT_GT(q.quantized, 10u);
  RunSettings s = settings(file);
  s.components = kSchnellFolder.string();
  const fluxrt::Run run = fluxrt::resolve_run(s);
  EXPECT_EQ(resolved(run).model.pipeline_class, "FluxPipeline");
  EXPECT_EQ(resolved(run).transformer_file, file.string());
  const auto from_file =
      pl::Flux1Pipeline::load(resolved(run).model.path, f32_options(resolved(run).transformer_file));
  const auto from_folder = pl::Flux1Pipeline::load(kSchnellFolder, f32_options());
  EXPECT_FALSE(from_file->transformer_config().guidance);
  const pl::GenerateResult a = from_file->generate(run.request), b = from_folder->generate(run.request);
  ASSERT_EQ(a.images.size(), b.images.size());
  const fluxrt::test::ImageDiff d = fluxrt::test::compare_images(a.images[0], b.images[0]);
  std::printf("FLUX.1 Q8_0 GGUF vs the folder: %s\n", d.str().c_str());
  EXPECT_GE(d.ssim, 0.97) << d.str();
  EXPECT_GT(d.max_abs, 0) << "the quantized weights were widened back to the checkpoint's";
}

TEST_F(ModelResolution, OneLineErrors) {
  // A lone file with nothing beside it: say what to pass.
  const fs::path lone = tmp_ / "lone" / kKleinBflFile.filename();
  fs::create_directories(lone.parent_path());
  fs::create_symlink(fs::absolute(kKleinBflFile), lone);
  std::string e = error_of(settings(lone));
  EXPECT_NE(e.find("--components"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;

  // The wrong family: a FLUX.2 klein file with FLUX.1 components, and the reverse.
  RunSettings s = settings(kKleinBflFile);
  s.components = kSchnellFolder.string();
  e = error_of(s);
  EXPECT_NE(e.find("FluxPipeline"), std::string::npos) << e;
  s = settings(kOtherSchnellBflFile);
  s.components = kKleinFolder.string();
  e = error_of(s);
  EXPECT_NE(e.find("Flux2KleinPipeline"), std::string::npos) << e;

  // --components that is not a pipeline folder.
  s = settings(kKleinBflFile);
  s.components = (tmp_ / "nowhere").string();
  e = error_of(s);
  EXPECT_NE(e.find("nowhere"), std::string::npos) << e;

  // --components with a folder --model: nothing to combine.
  s = settings(kKleinFolder);
  s.components = kKleinFolder.string();
  e = error_of(s);
  EXPECT_NE(e.find("--components"), std::string::npos) << e;

  // --text-encoder that is not a file.
  s = settings(kKleinFolder);
  s.text_encoder = (tmp_ / "none.gguf").string();
  e = error_of(s);
  EXPECT_NE(e.find("--text-encoder"), std::string::npos) << e;

  // Same family, other widths: refused when the pipeline reads the folder, before any weight.
  try {
    pl::Flux1Pipeline::load(kSchnellFolder, f32_options(kOtherSchnellBflFile.string()));
    ADD_FAILURE() << "a transformer of other widths was accepted";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::Unsupported) << err.what();
    EXPECT_EQ(std::string(err.what()).find('\n'), std::string::npos);
  }
}
