// `fluxrt quantize` (runtime/quantize_model): the tiny klein and FLUX.1-dev transformers written as
// Q8_0 GGUF must be, tensor for tensor, what the gguf package writes from the same weights in
// city96's layout (tests/data/gguf/*-q8_0.gguf, tools/reference/make_tiny_gguf.py): the same names,
// types, shapes and bytes; from the diffusers-named folder too (names mapped back to BFL).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "backend/cpu/linear_int8_cpu.h"
#include "core/error.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "pipelines/klein/flux2_klein_pipeline.h"
#include "runtime/quantize_model.h"
#include "support/image_compare.h"

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

// The bundled demo model at 64x64, CFG 4, seed 3 (12 of its 50 default steps), and its image
// from the folder's bf16 weights: what the quantized runs below are compared with.
struct DemoDefaults {
  fs::path folder = fs::path(kData) / ".." / ".." / "models" / "demo";
  pipelines::PipelineOptions options;
  fluxrt::GenerateRequest request;
  io::Image bf16;
  DemoDefaults() {
    options.load_vae_encoder = false;
    request.prompts = {"a red circle on a blue background"};
    request.seed = 3;
    request.width = request.height = 64;
    // 12 of the demo's 50 steps (with CFG, two transformer calls each): the quantization error
    // shows as well, in a quarter of the time, so the test holds on a loaded 2-core machine.
    // The 50-step figures are in docs/quantization.md.
    request.steps = 12;
    request.guidance = 4.0f;
    bf16 = pipelines::Flux2KleinPipeline::load(folder, options)->generate(request).images.at(0);
  }
};

// The bundled demo model's transformer quantized by `fluxrt quantize` and run from the GGUF with
// the demo folder's other components (whose transformer/config.json gives the file its RoPE axes):
// the image of its 64x64 size at 12 steps against the folder's bf16 image, same seed. The
// target is q8_0 SSIM >= 0.97 (issue 26); the other types are reported. The demo's widths (192,
// 576) are not whole 256-value super-blocks, so the K types quantize only single_blocks.*.linear2
// (768 columns) and time_in (256) and the rest in their fallback type, as llama.cpp would.
TEST(QuantizeModel, DemoModelImagesAgainstBf16) {
  const DemoDefaults demo_defaults;
  const fs::path& demo = demo_defaults.folder;
  const pipelines::PipelineOptions& options = demo_defaults.options;
  const fluxrt::GenerateRequest& request = demo_defaults.request;
  const io::Image& bf16 = demo_defaults.bf16;
  for (QuantType type :
       {QuantType::Q8_0, QuantType::Q6_K, QuantType::Q5_K, QuantType::Q4_K, QuantType::Q4_0}) {
    SCOPED_TRACE(std::string(quant_name(type)));
    const fs::path file = temp_file("demo");
    const QuantizeReport r = quantize_model({demo.string(), type, file.string()});
    pipelines::PipelineOptions from_file = options;
    from_file.transformer_file = file;
    auto pipe = pipelines::Flux2KleinPipeline::load(demo, from_file);
    EXPECT_EQ(pipe->transformer_config().axes_dim, (std::vector<int64_t>{8, 8, 8, 8}))
        << "the folder's RoPE axes";
    const test::ImageDiff d = test::compare_images(pipe->generate(request).images.at(0), bf16);
    std::printf(
        "demo %-4s: %zu of %zu tensors in it, %zu in %s, weight rel-L2 mean %.4f max %.4f; image vs bf16 "
        "%s\n",
        std::string(quant_name(type)).c_str(), r.quantized, r.tensors, r.fallback,
        std::string(quant_name(r.fallback_type)).c_str(), r.rel_l2_mean, r.rel_l2_max, d.str().c_str());
    if (type == QuantType::Q8_0) {
      EXPECT_GE(d.ssim, 0.97) << d.str();
    }
    EXPECT_GT(d.max_abs, 0) << "the quantized weights were widened back";
    fs::remove(file);
  }
}

// W8A8 (FLUXRT_LINEAR_IMPL=w8a8: every linear in int8 with per-token activations, off by default)
// on the demo (12 steps), against the folder's bf16 image: from the bf16 folder and from its
// Q8_0 GGUF, held to the q8_0 target SSIM >= 0.97 (measured 0.996 on an AVX2 CPU, where the
// weights keep 7 bits: linear_int8_cpu.h).
TEST(QuantizeModel, DemoModelW8A8AgainstBf16) {
  const DemoDefaults demo_defaults;
  const fs::path& demo = demo_defaults.folder;
  const pipelines::PipelineOptions& options = demo_defaults.options;
  const fluxrt::GenerateRequest& request = demo_defaults.request;
  const io::Image& bf16 = demo_defaults.bf16;
  const fs::path file = temp_file("demo");
  quantize_model({demo.string(), QuantType::Q8_0, file.string()});
  setenv("FLUXRT_LINEAR_IMPL", "w8a8", 1);
  pipelines::PipelineOptions from_file = options;
  from_file.transformer_file = file;
  for (const auto& [name, opts] : {std::pair{"bf16 folder", options}, std::pair{"q8_0 gguf", from_file}}) {
    const test::ImageDiff d = test::compare_images(
        pipelines::Flux2KleinPipeline::load(demo, opts)->generate(request).images.at(0), bf16);
    std::printf("demo w8a8 from the %s, weights %d levels: image vs bf16 %s\n", name,
                backend::int8_weight_levels(), d.str().c_str());
    EXPECT_GE(d.ssim, 0.97) << name << ": " << d.str();  // the q8_0 target of issue 26
    EXPECT_GT(d.max_abs, 0) << name << ": the int8 path did not run";
  }
  unsetenv("FLUXRT_LINEAR_IMPL");
  fs::remove(file);
}

// A single file carries no config: with a components folder whose transformer has the file's
// shapes, the folder's config.json gives what shapes cannot (here a RoPE theta of 500 instead of
// FLUX.2's 2000), both when the pipeline opens and in the transformer it loads.
TEST(QuantizeModel, GgufTakesTheFoldersConfigForItsShapes) {
  const fs::path demo = fs::path(kData) / ".." / ".." / "models" / "demo";
  const fs::path folder = fs::temp_directory_path() / fmt::format("fluxrt_theta_{}", std::random_device{}());
  fs::create_directories(folder / "transformer");
  for (const auto& entry : fs::directory_iterator(demo))
    if (entry.path().filename() != "transformer")
      fs::create_symlink(fs::absolute(entry.path()), folder / entry.path().filename());
  for (const auto& entry : fs::directory_iterator(demo / "transformer"))
    if (entry.path().filename() != "config.json")
      fs::create_symlink(fs::absolute(entry.path()), folder / "transformer" / entry.path().filename());
  std::ifstream in(demo / "transformer" / "config.json");
  std::stringstream text;
  text << in.rdbuf();
  std::string config = text.str();
  const size_t at = config.find("\"rope_theta\": 2000");
  ASSERT_NE(at, std::string::npos) << config;
  config.replace(at, std::string("\"rope_theta\": 2000").size(), "\"rope_theta\": 500");
  std::ofstream(folder / "transformer" / "config.json") << config;

  const fs::path file = folder / "demo-q8_0.gguf";
  quantize_model({folder.string(), QuantType::Q8_0, file.string()});
  pipelines::PipelineOptions options;
  options.load_vae_encoder = false;
  options.transformer_file = file;
  auto pipe = pipelines::Flux2KleinPipeline::load(folder, options);  // resident: the transformer is loaded
  EXPECT_EQ(pipe->transformer_config().rope_theta, 500.0);
  EXPECT_EQ(pipe->transformer_config().axes_dim, (std::vector<int64_t>{8, 8, 8, 8}));
  fs::remove_all(folder);
}

}  // namespace
}  // namespace fluxrt::runtime
