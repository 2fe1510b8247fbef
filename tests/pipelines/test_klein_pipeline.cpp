// Flux2KleinPipeline on the tiny random diffusers folder: packing and ids, batch layout, loading
// modes, errors, cancellation, reference images, and PIL's Lanczos resize. The numerical match of
// whole runs against diffusers is test_klein_pipeline_golden.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "io/image.h"
#include "io/public_image.h"
#include "pipelines/klein/flux2_klein_pipeline.h"
#include "pipelines/klein/klein_components.h"
#include "pipelines/memory_estimate.h"
#include "pipelines/noise.h"
#include "pipelines/reference_image.h"
#include "pipelines/spans.h"
#include "support/compare.h"

namespace fluxrt::pipelines {
namespace {

namespace fs = std::filesystem;

// The tiny models gain nothing from threads, and on a shared machine every OpenMP barrier of a
// descheduled worker costs a time slice: one thread keeps this test fast and its timing stable.
const bool kSingleThreaded = [] {
  set_num_threads(1);
  return true;
}();

const fs::path kTinyModel = fs::path(FLUXRT_TEST_DATA_DIR) / "models" / "flux2-klein-tiny";
const fs::path kResizeData = fs::path(FLUXRT_TEST_DATA_DIR) / "klein_pipeline_resize";

PipelineOptions f32_options() {
  PipelineOptions o;
  o.dtype = DType::F32;
  return o;
}

GenerateRequest tiny_request(std::vector<std::string> prompts, uint64_t seed) {
  GenerateRequest r;
  r.prompts = std::move(prompts);
  r.seed = seed;
  r.width = 64;
  r.height = 64;
  r.steps = 2;
  r.max_sequence_length = 32;
  return r;
}

// One pipeline for the tests that only generate (loading is the slow part).
Flux2KleinPipeline& shared_pipeline() {
  static std::unique_ptr<Flux2KleinPipeline> pipe = Flux2KleinPipeline::load(kTinyModel, f32_options());
  return *pipe;
}

// Runs `fn`, expects a fluxrt::Error of `code` whose message is one line.
template <typename Fn>
void expect_one_line_error(Fn&& fn, ErrorCode code) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    const std::string msg = e.what();
    EXPECT_FALSE(msg.empty());
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// A pipeline folder made of symlinks to the tiny model's parts, with a rewritten model_index.json.
class LinkedModel {
 public:
  LinkedModel(const std::string& name, bool distilled, bool with_tokenizer) {
    dir_ = fs::temp_directory_path() / ("fluxrt_klein_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const char* part : {"transformer", "text_encoder", "vae", "scheduler", "tokenizer"}) {
      if (!with_tokenizer && std::string(part) == "tokenizer") continue;
      fs::create_directory_symlink(fs::absolute(kTinyModel / part), dir_ / part);
    }
    std::ifstream in(kTinyModel / "model_index.json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string from = "\"is_distilled\": true";
    const size_t at = text.find(from);
    if (at != std::string::npos && !distilled) text.replace(at, from.size(), "\"is_distilled\": false");
    std::ofstream(dir_ / "model_index.json") << text;
  }
  ~LinkedModel() { fs::remove_all(dir_); }
  const fs::path& path() const { return dir_; }

 private:
  fs::path dir_;
};

bool same_pixels(const io::Image& a, const io::Image& b) {
  return a.width == b.width && a.height == b.height && a.channels == b.channels && a.pixels == b.pixels;
}

int max_pixel_diff(const io::Image& a, const io::Image& b) {
  int worst = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) worst = std::max(worst, std::abs(int(a.pixels[i]) - int(b.pixels[i])));
  return worst;
}

// ------------------------------------------------------------------------------------------------
// Packing and ids

TEST(KleinPacking, PackIsTheRasterFlattenAndUnpackInvertsIt) {
  const int64_t b = 2, c = 5, h = 3, w = 4;
  std::vector<float> values(b * c * h * w);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f - 7.0f;
  const Tensor latents = Tensor::from_vector(values, {b, c, h, w});
  const Tensor tokens = pack_latents(latents);
  ASSERT_EQ(tokens.shape(), Shape({b, h * w, c}));
  for (int64_t n = 0; n < b; ++n)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < w; ++j)
          ASSERT_EQ(tokens.item({n, i * w + j, ch}), latents.item({n, ch, i, j}));
  const Tensor back = unpack_latents(tokens, h, w);
  ASSERT_EQ(back.shape(), latents.shape());
  EXPECT_EQ(back.to_vector(), latents.to_vector());
  EXPECT_THROW(unpack_latents(tokens, h + 1, w), Error);
}

TEST(KleinPacking, ImageAndTextIds) {
  const Tensor ids = klein_image_ids(2, 3, 10);
  ASSERT_EQ(ids.shape(), Shape({6, 4}));
  ASSERT_EQ(ids.dtype(), DType::I64);
  const int64_t expected[6][4] = {{10, 0, 0, 0}, {10, 0, 1, 0}, {10, 0, 2, 0},
                                  {10, 1, 0, 0}, {10, 1, 1, 0}, {10, 1, 2, 0}};
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(ids.item({r, k}), expected[r][k]) << r << "," << k;
  EXPECT_EQ(klein_image_ids(1, 1).item({0, 0}), 0);
  const Tensor text = klein_text_ids(5);
  ASSERT_EQ(text.shape(), Shape({5, 4}));
  for (int64_t l = 0; l < 5; ++l) {
    EXPECT_EQ(text.item({l, 0}), 0);
    EXPECT_EQ(text.item({l, 1}), 0);
    EXPECT_EQ(text.item({l, 2}), 0);
    EXPECT_EQ(text.item({l, 3}), l);
  }
}

// ------------------------------------------------------------------------------------------------
// Defaults, sizes, errors

TEST(KleinPipeline, DefaultsComeFromTheFolder) {
  const Flux2KleinPipeline& pipe = shared_pipeline();
  EXPECT_TRUE(pipe.defaults().is_distilled);
  EXPECT_EQ(pipe.defaults().num_steps, 4);
  EXPECT_EQ(pipe.defaults().guidance_scale, 1.0f);
  EXPECT_EQ(pipe.defaults().width, 1024);
  EXPECT_EQ(pipe.transformer_config().in_channels, 128);
  EXPECT_EQ(pipe.transformer_config().context_dim, 24);

  LinkedModel base("base_defaults", /*distilled=*/false, /*with_tokenizer=*/true);
  PipelineOptions o = f32_options();
  o.low_memory = true;  // configs only, nothing heavy
  auto base_pipe = Flux2KleinPipeline::load(base.path(), o);
  EXPECT_FALSE(base_pipe->defaults().is_distilled);
  EXPECT_EQ(base_pipe->defaults().num_steps, 50);
  EXPECT_EQ(base_pipe->defaults().guidance_scale, 4.0f);
}

TEST(KleinPipeline, InvalidSizesAreOneLineErrors) {
  expect_one_line_error([] { Flux2KleinPipeline::validate_size(63, 64, 1); }, ErrorCode::InvalidArgument);
  expect_one_line_error([] { Flux2KleinPipeline::validate_size(64, 0, 1); }, ErrorCode::InvalidArgument);
  expect_one_line_error([] { Flux2KleinPipeline::validate_size(-16, 64, 1); }, ErrorCode::InvalidArgument);
  expect_one_line_error([] { Flux2KleinPipeline::validate_size(64, 64, 0); }, ErrorCode::InvalidArgument);
  expect_one_line_error([] { Flux2KleinPipeline::validate_size(32768, 64, 1); }, ErrorCode::InvalidArgument);
  // Far more activation memory than any machine has.
  expect_one_line_error([] { Flux2KleinPipeline::validate_size(16384, 16384, 4096); }, ErrorCode::OutOfMemory);
  EXPECT_NO_THROW(Flux2KleinPipeline::validate_size(1024, 1024, 1));

  GenerateRequest r = tiny_request({"x"}, 1);
  r.width = 72;
  expect_one_line_error([&] { shared_pipeline().generate(r); }, ErrorCode::InvalidArgument);
  r = tiny_request({"x"}, 1);
  r.images_per_prompt = 0;
  expect_one_line_error([&] { shared_pipeline().generate(r); }, ErrorCode::InvalidArgument);
  r = tiny_request({}, 1);
  expect_one_line_error([&] { shared_pipeline().generate(r); }, ErrorCode::InvalidArgument);
  r = tiny_request({"x"}, 1);
  CallContext call;
  call.initial_latents = Tensor::zeros({1, 128, 3, 4}, DType::F32);
  expect_one_line_error([&] { shared_pipeline().generate(r, call); }, ErrorCode::InvalidArgument);
}

// FLUX.1-only request fields are refused by name, never silently ignored.
TEST(KleinPipeline, Flux1OnlyFieldsAreOneLineErrors) {
  auto expect_named = [](const GenerateRequest& r, const char* field) {
    try {
      shared_pipeline().generate(r);
      ADD_FAILURE() << field << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_EQ(e.field(), field) << e.what();
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  };
  GenerateRequest r = tiny_request({"x"}, 1);
  r.init_image = fluxrt::Image{64, 64, std::vector<uint8_t>(64 * 64 * 3, 0)};
  expect_named(r, "init_image");
  r = tiny_request({"x"}, 1);
  r.strength = 0.6f;
  expect_named(r, "strength");
  r = tiny_request({"x"}, 1);
  r.true_cfg = 1.0f;  // even the "off" value: the field itself is FLUX.1's
  expect_named(r, "true_cfg");
  r = tiny_request({"x"}, 1);
  r.true_cfg = 4.0f;
  r.negative_prompt = "";
  expect_named(r, "true_cfg");
  // The plan refuses them before anything runs, with the same error.
  EXPECT_THROW(shared_pipeline().plan(r), Error);
}

// The size check counts the weights resident next to the activations: all components normally,
// the largest one in low-memory mode; a small RAM limit makes an otherwise fine size fail up front.
TEST(KleinPipeline, MemoryCheckCountsResidentWeights) {
  const ResidentWeights bf16 = pipeline_weight_bytes(kTinyModel, DType::BF16);
  const ResidentWeights f32 = pipeline_weight_bytes(kTinyModel, DType::F32);
  EXPECT_GT(bf16.transformer, 0u);
  EXPECT_GT(bf16.text_encoders, 0u);
  EXPECT_GT(bf16.vae, 0u);
  EXPECT_EQ(f32.transformer, 2 * bf16.transformer);
  EXPECT_EQ(bf16.peak(false), bf16.transformer + bf16.text_encoders + bf16.vae);
  EXPECT_EQ(bf16.peak(true), std::max({bf16.transformer, bf16.text_encoders, bf16.vae}));
  EXPECT_EQ(shared_pipeline().resident_weights().transformer, f32.transformer);
  // The tiny transformer file alone counts the same as the folder's (same tensors).
  EXPECT_EQ(pipeline_weight_bytes(kTinyModel, DType::F32, kTinyModel.parent_path() / "flux2-klein-tiny-bfl.safetensors")
                .transformer,
            f32.transformer);

  const size_t gib = size_t{1} << 30;
  EXPECT_NO_THROW(Flux2KleinPipeline::validate_size(64, 64, 1, 8, MemoryCheck{gib, 2 * gib}));
  try {
    Flux2KleinPipeline::validate_size(64, 64, 1, 8, MemoryCheck{3 * gib, 2 * gib, true});  // weights alone too big
    ADD_FAILURE() << "3 GiB of weights fit in 2 GiB";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::OutOfMemory);
    const std::string m = e.what();
    EXPECT_NE(m.find("3.00 GiB of resident weights"), std::string::npos) << m;
    EXPECT_NE(m.find("2.00 GiB of RAM"), std::string::npos) << m;
    EXPECT_NE(m.find("--low-memory"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  // Activations that fit alone but not next to the weights.
  const size_t activations_1024 = estimate_generate_bytes(1024, 1024, 1, models::flux2_preset("flux.2-klein-4b"), 8);
  EXPECT_NO_THROW(Flux2KleinPipeline::validate_size(1024, 1024, 1, 8, MemoryCheck{0, activations_1024 + 1}));
  expect_one_line_error(
      [&] { Flux2KleinPipeline::validate_size(1024, 1024, 1, 8, MemoryCheck{2, activations_1024 + 1}); },
      ErrorCode::OutOfMemory);
}

TEST(KleinPipeline, MissingFolderOrTokenizerIsOneLineError) {
  expect_one_line_error([] { Flux2KleinPipeline::load("/nonexistent/fluxrt/klein", {}); }, ErrorCode::NotFound);
  expect_one_line_error([] { Flux2KleinPipeline::load(kTinyModel / "transformer", {}); }, ErrorCode::NotFound);
  LinkedModel no_tok("no_tokenizer", true, /*with_tokenizer=*/false);
  expect_one_line_error([&] { Flux2KleinPipeline::load(no_tok.path(), f32_options()); }, ErrorCode::NotFound);
  expect_one_line_error([] { Flux2KleinPipeline::synthetic("flux.2-klein-4b", "/nonexistent/tok", {}); },
                        ErrorCode::NotFound);
  expect_one_line_error([] { Flux2KleinPipeline::synthetic("flux.2-klein-7b", kTinyModel / "tokenizer", {}); },
                        ErrorCode::InvalidArgument);
}

// ------------------------------------------------------------------------------------------------
// Generation

TEST(KleinPipeline, GeneratesDeterministicImagesAndReportsSteps) {
  Profiler profiler;
  PipelineOptions o = f32_options();
  o.profiler = &profiler;
  auto pipe = Flux2KleinPipeline::load(kTinyModel, o);
  for (const char* span : {kSpanLoadTransformer, kSpanLoadTextEncoder, kSpanLoadVae, kSpanLoadTotal})
    EXPECT_NE(profiler.find(span), nullptr) << span;

  GenerateRequest r = tiny_request({"a red circle"}, 7);
  std::vector<int> seen;
  CallContext call;
  call.on_step = [&](int step, int total, double seconds, float) {
    EXPECT_EQ(total, 2);
    EXPECT_GE(seconds, 0.0);
    seen.push_back(step);
  };
  const GenerateResult a = pipe->generate(r, call);
  EXPECT_EQ(seen, (std::vector<int>{1, 2}));
  ASSERT_EQ(a.images.size(), 1u);
  EXPECT_EQ(a.images[0].width, 64);
  EXPECT_EQ(a.images[0].height, 64);
  EXPECT_EQ(a.images[0].channels, 3);
  EXPECT_EQ(a.num_steps, 2);
  EXPECT_FALSE(a.used_cfg);
  EXPECT_EQ(a.final_latents.shape(), Shape({1, 128, 4, 4}));
  EXPECT_EQ(a.schedule.sigmas.size(), 3u);
  ASSERT_NE(profiler.find(kSpanDenoiseStep), nullptr);
  EXPECT_EQ(profiler.find(kSpanDenoiseStep)->count, 2);
  for (const char* span : {kSpanTextEncoding, kSpanDenoiseTotal, kSpanVaeDecode})
    EXPECT_NE(profiler.find(span), nullptr) << span;
  EXPECT_EQ(profiler.find(kSpanReferenceEncode), nullptr);
  std::printf("%s", profiler.table().c_str());  // where the time of a tiny run goes, for the log

  const GenerateResult again = pipe->generate(r);
  EXPECT_TRUE(same_pixels(a.images[0], again.images[0]));
  r.seed = 8;
  const GenerateResult other = pipe->generate(r);
  EXPECT_GT(test::compare(other.final_latents, a.final_latents).rel_l2, 1e-2);

  // The noise is diffusers' randn_tensor on one CPU generator: injecting it gives the same run.
  GenerateRequest injected = tiny_request({"a red circle"}, 12345);
  TorchGenerator gen(7);
  CallContext with_noise;
  with_noise.initial_latents = randn_tensor(flux2_noise_shape(1, 64, 64), DType::F32, gen);
  const GenerateResult c = pipe->generate(injected, with_noise);
  EXPECT_TRUE(same_pixels(a.images[0], c.images[0]));
}

TEST(KleinPipeline, BatchIsPromptsTimesImagesPerPromptInOrder) {
  Flux2KleinPipeline& pipe = shared_pipeline();
  GenerateRequest batch = tiny_request({"a cat", "a dog"}, 99);
  batch.images_per_prompt = 2;
  const GenerateResult all = pipe.generate(batch);
  ASSERT_EQ(all.images.size(), 4u);
  ASSERT_EQ(all.final_latents.shape(), Shape({4, 128, 4, 4}));

  TorchGenerator gen(99);
  const Tensor noise = randn_tensor(flux2_noise_shape(4, 64, 64), DType::F32, gen);
  const std::vector<std::string> prompt_of = {"a cat", "a cat", "a dog", "a dog"};
  for (int64_t i = 0; i < 4; ++i) {
    GenerateRequest one = tiny_request({prompt_of[i]}, 0);
    CallContext call;
    call.initial_latents = noise.narrow(0, i, 1).contiguous();
    const GenerateResult single = pipe.generate(one, call);
    // Batched GEMMs may round differently from single ones: the module-golden bound, and pixels
    // within the image tolerance.
    EXPECT_TRUE(test::all_close(all.final_latents.narrow(0, i, 1).contiguous(), single.final_latents,
                                test::TolClass::ModuleGolden))
        << "image " << i;
    EXPECT_LE(max_pixel_diff(all.images[i], single.images[0]), 2) << "image " << i;
  }
  // Different prompts do differ (the ordering check above means something).
  EXPECT_GT(test::compare(all.final_latents.narrow(0, 0, 1).contiguous(),
                          all.final_latents.narrow(0, 2, 1).contiguous()).rel_l2, 1e-3);
}

TEST(KleinPipeline, LowMemoryAndSequentialLoadGiveIdenticalImages) {
  GenerateRequest r = tiny_request({"a house", "tree"}, 3);
  const GenerateResult reference = shared_pipeline().generate(r);

  PipelineOptions sequential = f32_options();
  sequential.parallel_load = false;
  const GenerateResult seq = Flux2KleinPipeline::load(kTinyModel, sequential)->generate(r);

  Profiler profiler;
  PipelineOptions low = f32_options();
  low.low_memory = true;
  low.profiler = &profiler;
  auto low_pipe = Flux2KleinPipeline::load(kTinyModel, low);
  EXPECT_EQ(profiler.find(kSpanLoadTransformer), nullptr);  // nothing heavy before generate
  const GenerateResult lm = low_pipe->generate(r);
  EXPECT_NE(profiler.find(kSpanLoadTransformer), nullptr);

  for (size_t i = 0; i < reference.images.size(); ++i) {
    EXPECT_TRUE(same_pixels(reference.images[i], seq.images[i])) << i;
    EXPECT_TRUE(same_pixels(reference.images[i], lm.images[i])) << i;
  }
  EXPECT_EQ(reference.final_latents.to_vector(), lm.final_latents.to_vector());
}

TEST(KleinPipeline, CancellationStopsBetweenSteps) {
  std::atomic<bool> cancel{false};
  GenerateRequest r = tiny_request({"x"}, 1);
  r.steps = 3;
  CallContext call;
  call.cancel = &cancel;
  int steps_run = 0;
  call.on_step = [&](int step, int, double, float) {
    steps_run = step;
    if (step == 1) cancel = true;
  };
  expect_one_line_error([&] { shared_pipeline().generate(r, call); }, ErrorCode::Cancelled);
  EXPECT_EQ(steps_run, 1);

  call.on_step = nullptr;
  expect_one_line_error([&] { shared_pipeline().generate(r, call); }, ErrorCode::Cancelled);  // already set
  cancel = false;
  EXPECT_NO_THROW(shared_pipeline().generate(r, call));
}

TEST(KleinPipeline, BaseVariantRunsClassifierFreeGuidance) {
  LinkedModel base("base_cfg", /*distilled=*/false, /*with_tokenizer=*/true);
  auto pipe = Flux2KleinPipeline::load(base.path(), f32_options());
  GenerateRequest r = tiny_request({"a boat"}, 5);
  r.guidance = 1.0f;  // guidance <= 1: one forward, the distilled computation
  const GenerateResult plain = pipe->generate(r);
  EXPECT_FALSE(plain.used_cfg);
  const GenerateResult distilled = shared_pipeline().generate(r);
  EXPECT_TRUE(same_pixels(plain.images[0], distilled.images[0]));

  r.guidance = 4.0f;
  const GenerateResult guided = pipe->generate(r);
  EXPECT_TRUE(guided.used_cfg);
  EXPECT_GT(test::compare(guided.final_latents, plain.final_latents).rel_l2, 1e-4);
  // The distilled folder ignores the scale, as diffusers does.
  const GenerateResult ignored = shared_pipeline().generate(r);
  EXPECT_FALSE(ignored.used_cfg);
  EXPECT_TRUE(same_pixels(ignored.images[0], distilled.images[0]));
}

TEST(KleinPipeline, SyntheticTinyVariantGeneratesInEveryLoadingMode) {
  PipelineOptions o;  // bf16, the benchmark setting
  auto pipe = Flux2KleinPipeline::synthetic(kKleinTinySyntheticVariant, kTinyModel / "tokenizer", o, 5);
  EXPECT_TRUE(pipe->defaults().is_distilled);
  EXPECT_EQ(pipe->transformer_config().context_dim, 24);
  GenerateRequest r = tiny_request({"bench"}, 1);
  r.steps = 1;
  const GenerateResult a = pipe->generate(r);
  ASSERT_EQ(a.images.size(), 1u);
  EXPECT_EQ(a.final_latents.dtype(), DType::BF16);
  o.low_memory = true;
  const GenerateResult low = Flux2KleinPipeline::synthetic(kKleinTinySyntheticVariant, kTinyModel / "tokenizer", o, 5)
                                 ->generate(r);
  EXPECT_TRUE(same_pixels(a.images[0], low.images[0]));
}

// ------------------------------------------------------------------------------------------------
// Reference images

io::Image gradient_image(int width, int height, int channels) {
  io::Image im{width, height, channels, std::vector<uint8_t>(static_cast<size_t>(width) * height * channels)};
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < channels; ++c)
        im.pixels[(static_cast<size_t>(y) * width + x) * channels + c] = static_cast<uint8_t>((x * 3 + y * 5 + c * 70) % 256);
  return im;
}

TEST(KleinReferenceImage, PreprocessCropsToMultiplesOf16AndScales) {
  const io::Image im = gradient_image(70, 66, 4);  // RGBA: alpha dropped, no resize (small)
  const Tensor t = preprocess_reference_image(im);
  ASSERT_EQ(t.shape(), Shape({1, 3, 64, 64}));
  // Centred crop: left (70 - 64) / 2 = 3, top (66 - 64) / 2 = 1.
  for (int c = 0; c < 3; ++c)
    for (int y : {0, 17, 63})
      for (int x : {0, 40, 63}) {
        const uint8_t u = im.pixels[(static_cast<size_t>(y + 1) * 70 + (x + 3)) * 4 + c];
        EXPECT_EQ(t.item({0, c, y, x}), 2.0f * (static_cast<float>(u) / 255.0f) - 1.0f);
      }
  expect_one_line_error([] { preprocess_reference_image(gradient_image(63, 200, 3)); }, ErrorCode::InvalidArgument);
  expect_one_line_error([] { preprocess_reference_image(gradient_image(600, 64, 3)); }, ErrorCode::InvalidArgument);
}

TEST(KleinReferenceImage, LanczosMatchesPil) {
  for (const char* name : {"rgb_mixed", "rgb_shrink", "rgb_enlarge", "rgba_alpha", "gray_only_x",
                           "rgb_rows_first", "rgb_tall_rows_first"}) {
    SCOPED_TRACE(name);
    const io::Image in = io::read_png((kResizeData / (std::string(name) + "_in.png")).string());
    const io::Image expected = io::read_png((kResizeData / (std::string(name) + "_out.png")).string());
    const io::Image out = resize_lanczos_like_pil(in, expected.width, expected.height);
    ASSERT_EQ(out.channels, expected.channels);
    ASSERT_EQ(out.pixels.size(), expected.pixels.size());
    int differing = 0;
    for (size_t i = 0; i < out.pixels.size(); ++i) differing += out.pixels[i] != expected.pixels[i];
    // Same fixed-point arithmetic as PIL: exact but for a rare coefficient rounding tie.
    EXPECT_LE(max_pixel_diff(out, expected), 1);
    EXPECT_LE(differing, static_cast<int>(out.pixels.size() / 1000));
  }
}

TEST(KleinReferenceImage, LargeImagePreprocessMatchesDiffusers) {
  const io::Image in = io::read_png((kResizeData / "preprocess_in.png").string());
  const io::Image expected = io::read_png((kResizeData / "preprocess_out.png").string());
  const Tensor t = preprocess_reference_image(in);
  ASSERT_EQ(t.shape(), Shape({1, 3, expected.height, expected.width}));
  int worst = 0;
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < expected.height; ++y)
      for (int x = 0; x < expected.width; ++x) {
        const float want =
            2.0f * (static_cast<float>(expected.pixels[(static_cast<size_t>(y) * expected.width + x) * 3 + c]) / 255.0f) - 1.0f;
        worst = std::max(worst, static_cast<int>(std::lround(std::abs(t.item({0, c, y, x}) - want) * 127.5)));
      }
  EXPECT_LE(worst, 1);
}

TEST(KleinPipeline, ReferenceImagesSetTheSizeAndCondition) {
  Profiler profiler;
  PipelineOptions o = f32_options();
  o.profiler = &profiler;
  auto pipe = Flux2KleinPipeline::load(kTinyModel, o);
  GenerateRequest r = tiny_request({"edit"}, 11);
  r.width.reset();
  r.height.reset();
  r.reference_images = {io::to_public(gradient_image(80, 64, 3))};
  const GenerateResult edited = pipe->generate(r);
  EXPECT_EQ(edited.width, 80);
  EXPECT_EQ(edited.height, 64);
  EXPECT_EQ(edited.images[0].width, 80);
  EXPECT_NE(profiler.find(kSpanReferenceEncode), nullptr);

  // Same noise without the reference: the reference tokens change the prediction.
  GenerateRequest plain = r;
  plain.reference_images.clear();
  plain.width = 80;
  plain.height = 64;
  const GenerateResult unconditioned = pipe->generate(plain);
  EXPECT_GT(test::compare(edited.final_latents, unconditioned.final_latents).rel_l2, 1e-4);

  // Two references, explicit size, batch of 2.
  r.reference_images.push_back(io::to_public(gradient_image(64, 96, 1)));
  r.width = 64;
  r.height = 64;
  r.images_per_prompt = 2;
  const GenerateResult two = pipe->generate(r);
  EXPECT_EQ(two.images.size(), 2u);

  // Low-memory mode loads the VAE with its encoder for the references, then without it to decode.
  PipelineOptions low = f32_options();
  low.low_memory = true;
  const GenerateResult two_low = Flux2KleinPipeline::load(kTinyModel, low)->generate(r);
  for (size_t i = 0; i < two.images.size(); ++i) EXPECT_TRUE(same_pixels(two.images[i], two_low.images[i])) << i;

  PipelineOptions no_encoder = f32_options();
  no_encoder.load_vae_encoder = false;
  expect_one_line_error([&] { Flux2KleinPipeline::load(kTinyModel, no_encoder)->generate(r); },
                        ErrorCode::InvalidArgument);

  // At most four reference images (BFL's limit for klein): a fifth is refused by the plan.
  while (r.reference_images.size() < 4)
    r.reference_images.push_back(io::to_public(gradient_image(64, 64, 3)));
  EXPECT_NO_THROW(pipe->plan(r));
  r.reference_images.push_back(io::to_public(gradient_image(64, 64, 3)));
  try {
    pipe->plan(r);
    ADD_FAILURE() << "5 reference images accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    EXPECT_EQ(e.field(), "reference_images") << e.what();
  }
}

}  // namespace
}  // namespace fluxrt::pipelines
