// `fluxrt generate --model FILE`: a single transformer checkpoint (BFL / ComfyUI / diffusers names)
// with the other components from a diffusers pipeline folder of the same family, given with
// --components or found next to the file. The image must equal the one the folder renders with its
// own transformer/ (the tiny klein BFL file holds the same weights as the tiny klein folder).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "pipelines/flux1_pipeline.h"
#include "pipelines/flux2_klein_pipeline.h"
#include "runtime/generate_job.h"
#include "runtime/quantize_model.h"
#include "support/generate_job_fixture.h"
#include "support/image_compare.h"

namespace fs = std::filesystem;
namespace rt = fluxrt::runtime;
namespace pl = fluxrt::pipelines;
using fluxrt::DType;
using fluxrt::Error;
using fluxrt::ErrorCode;

namespace {

const fs::path kModels = fs::path(FLUXRT_TEST_DATA_DIR) / "models";
const fs::path kKleinFolder = kModels / "flux2-klein-tiny";
const fs::path kKleinBflFile = kModels / "flux2-klein-tiny-bfl.safetensors";  // same weights, BFL names
const fs::path kSchnellFolder = kModels / "flux1-schnell-tiny";
// Another tiny schnell transformer (other widths): a FLUX.1 file that does not fit the folder.
const fs::path kOtherSchnellBflFile = kModels / "flux1-schnell-tiny-bfl.safetensors";

class SingleFile : public fluxrt::test::GenerateJobTest {
 protected:
  SingleFile() : GenerateJobTest("fluxrt_single_") {}
  rt::GenerateInputs inputs(const fs::path& model) const {
    rt::GenerateInputs in = small_inputs(model);
    in.flags.dtype = "f32";
    in.flags.max_sequence_length = 16;
    return in;
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

TEST_F(SingleFile, KleinBflFileRendersTheFolderImage) {
  rt::GenerateInputs in = inputs(kKleinBflFile);
  in.components = kKleinFolder.string();
  const rt::GenerateJob job = rt::resolve_generate_job(in);
  EXPECT_EQ(job.transformer_file, kKleinBflFile.string());
  EXPECT_EQ(fs::path(job.model.path), kKleinFolder);
  EXPECT_EQ(job.model.pipeline_class, "Flux2KleinPipeline");
  EXPECT_EQ(job.model_label, kKleinBflFile.string());

  const pl::GenerateRequest request = rt::make_generate_request(job);
  for (bool low_memory : {false, true}) {
    SCOPED_TRACE(low_memory ? "low memory" : "resident");
    pl::PipelineOptions file_options = f32_options(job.transformer_file);
    file_options.low_memory = low_memory;
    const auto from_file = pl::Flux2KleinPipeline::load(job.model.path, file_options);
    const auto from_folder = pl::Flux2KleinPipeline::load(kKleinFolder, f32_options());
    EXPECT_EQ(from_file->transformer_config().hidden, from_folder->transformer_config().hidden);
    expect_same_images(from_file->generate(request), from_folder->generate(request));
  }
}

TEST_F(SingleFile, FileNextToModelIndexFindsItsComponents) {
  const fs::path file = repo_with_file(kKleinFolder, kKleinBflFile);
  const rt::GenerateJob job = rt::resolve_generate_job(inputs(file));  // no --components
  EXPECT_EQ(job.transformer_file, file.string());
  EXPECT_EQ(fs::path(job.model.path), file.parent_path());
  const pl::GenerateRequest request = rt::make_generate_request(job);
  const auto from_file = pl::Flux2KleinPipeline::load(job.model.path, f32_options(job.transformer_file));
  const auto from_folder = pl::Flux2KleinPipeline::load(kKleinFolder, f32_options());
  expect_same_images(from_file->generate(request), from_folder->generate(request));
}

TEST_F(SingleFile, Flux1FileRendersTheFolderImage) {
  // The folder's own weights as a lone diffusers-named file (no config.json beside it): the
  // config is detected from the tensors.
  const fs::path file = tmp_ / "flux1-schnell-tiny.safetensors";
  fs::copy_file(kSchnellFolder / "transformer" / "diffusion_pytorch_model.safetensors", file);
  rt::GenerateInputs in = inputs(file);
  in.components = kSchnellFolder.string();
  const rt::GenerateJob job = rt::resolve_generate_job(in);
  EXPECT_EQ(job.model.pipeline_class, "FluxPipeline");
  EXPECT_EQ(job.transformer_file, file.string());
  const pl::GenerateRequest request = rt::make_generate_request(job);
  const auto from_file = pl::Flux1Pipeline::load(job.model.path, f32_options(job.transformer_file));
  const auto from_folder = pl::Flux1Pipeline::load(kSchnellFolder, f32_options());
  EXPECT_FALSE(from_file->transformer_config().guidance);
  expect_same_images(from_file->generate(request), from_folder->generate(request));
}

// A FLUX.1 GGUF transformer (the folder's weights written as Q8_0 by `fluxrt quantize`, city96's
// layout) with the folder's other components: it keeps its weights quantized and renders the
// folder's image within the quantization error.
TEST_F(SingleFile, Flux1GgufFileRendersTheFolderImageWithinQ8Error) {
  const fs::path file = tmp_ / "flux1-schnell-tiny-q8_0.gguf";
  const rt::QuantizeReport q =
      rt::quantize_model({kSchnellFolder.string(), fluxrt::QuantType::Q8_0, file.string()});
  EXPECT_EQ(q.family, "flux.1");
  EXPECT_GT(q.quantized, 10u);
  rt::GenerateInputs in = inputs(file);
  in.components = kSchnellFolder.string();
  const rt::GenerateJob job = rt::resolve_generate_job(in);
  EXPECT_EQ(job.model.pipeline_class, "FluxPipeline");
  EXPECT_EQ(job.transformer_file, file.string());
  const pl::GenerateRequest request = rt::make_generate_request(job);
  const auto from_file = pl::Flux1Pipeline::load(job.model.path, f32_options(job.transformer_file));
  const auto from_folder = pl::Flux1Pipeline::load(kSchnellFolder, f32_options());
  EXPECT_FALSE(from_file->transformer_config().guidance);
  const pl::GenerateResult a = from_file->generate(request), b = from_folder->generate(request);
  ASSERT_EQ(a.images.size(), b.images.size());
  const fluxrt::test::ImageDiff d = fluxrt::test::compare_images(a.images[0], b.images[0]);
  std::printf("FLUX.1 Q8_0 GGUF vs the folder: %s\n", d.str().c_str());
  EXPECT_GE(d.ssim, 0.97) << d.str();
  EXPECT_GT(d.max_abs, 0) << "the quantized weights were widened back to the checkpoint's";
}

TEST_F(SingleFile, OneLineErrors) {
  // A lone file with nothing beside it: say what to pass.
  const fs::path lone = tmp_ / "lone" / kKleinBflFile.filename();
  fs::create_directories(lone.parent_path());
  fs::create_symlink(fs::absolute(kKleinBflFile), lone);
  std::string e = error_of(inputs(lone));
  EXPECT_NE(e.find("--components"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;

  // The wrong family: a FLUX.2 klein file with FLUX.1 components, and the reverse.
  rt::GenerateInputs in = inputs(kKleinBflFile);
  in.components = kSchnellFolder.string();
  e = error_of(in);
  EXPECT_NE(e.find("FluxPipeline"), std::string::npos) << e;
  in = inputs(kOtherSchnellBflFile);
  in.components = kKleinFolder.string();
  e = error_of(in);
  EXPECT_NE(e.find("Flux2KleinPipeline"), std::string::npos) << e;

  // --components that is not a pipeline folder.
  in = inputs(kKleinBflFile);
  in.components = (tmp_ / "nowhere").string();
  e = error_of(in);
  EXPECT_NE(e.find("nowhere"), std::string::npos) << e;

  // --components with a folder --model: nothing to combine.
  in = inputs(kKleinFolder);
  in.components = kKleinFolder.string();
  e = error_of(in);
  EXPECT_NE(e.find("--components"), std::string::npos) << e;

  // Same family, other widths: refused when the pipeline reads the folder, before any weight.
  try {
    pl::Flux1Pipeline::load(kSchnellFolder, f32_options(kOtherSchnellBflFile.string()));
    ADD_FAILURE() << "a transformer of other widths was accepted";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::Unsupported) << err.what();
    EXPECT_EQ(std::string(err.what()).find('\n'), std::string::npos);
  }
}

}  // namespace
