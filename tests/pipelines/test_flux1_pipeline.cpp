// Flux1Pipeline pieces that do not need a reference run: 2x2 packing and its inverse, position
// ids, img2img timestep trimming (diffusers' get_timesteps arithmetic), scale_noise and posterior
// sampling rounding, init-image preprocessing, folder checks, loading modes (parallel, sequential,
// low-memory give the same image), request errors and cancellation, on the tiny dev/schnell
// folders of tests/data/models (tools/reference/dump_flux1_pipeline.py).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "core/timer.h"
#include "pipelines/flux1/flux1_pipeline.h"
#include "pipelines/noise.h"
#include "pipelines/spans.h"

namespace fluxrt::pipelines {
namespace {

namespace fs = std::filesystem;
const fs::path kData = FLUXRT_TEST_DATA_DIR;
const fs::path kDev = kData / "models" / "flux1-dev-tiny";
const fs::path kSchnell = kData / "models" / "flux1-schnell-tiny";

Tensor iota(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::F32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(i);
  return t;
}

TEST(Flux1Packing, TokenHoldsThe2x2PatchInChannelRowColumnOrder) {
  const int64_t b = 2, c = 3, h = 4, w = 6;
  const Tensor x = iota({b, c, h, w});
  const Tensor packed = flux1_pack_latents(x);
  ASSERT_EQ(packed.shape(), Shape({b, (h / 2) * (w / 2), c * 4}));
  const float* p = packed.data<float>();
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t i = 0; i < h / 2; ++i)
      for (int64_t j = 0; j < w / 2; ++j)
        for (int64_t ci = 0; ci < c; ++ci)
          for (int64_t dy = 0; dy < 2; ++dy)
            for (int64_t dx = 0; dx < 2; ++dx) {
              const int64_t token = i * (w / 2) + j, ch = ci * 4 + dy * 2 + dx;
              const float want = static_cast<float>(((bi * c + ci) * h + 2 * i + dy) * w + 2 * j + dx);
              ASSERT_EQ(p[(bi * (h / 2) * (w / 2) + token) * c * 4 + ch], want) << bi << " " << i << " " << j;
            }
  const Tensor back = flux1_unpack_latents(packed, h, w);
  ASSERT_EQ(back.shape(), x.shape());
  EXPECT_EQ(0, std::memcmp(back.contiguous().data<float>(), x.data<float>(), x.numel() * sizeof(float)));
}

TEST(Flux1Packing, RejectsOddOrMismatchedShapes) {
  EXPECT_THROW(flux1_pack_latents(iota({1, 16, 3, 4})), Error);
  EXPECT_THROW(flux1_pack_latents(iota({16, 4, 4})), Error);
  EXPECT_THROW(flux1_unpack_latents(iota({1, 5, 64}), 4, 4), Error);
  EXPECT_THROW(flux1_unpack_latents(iota({1, 4, 64}), 3, 4), Error);
}

TEST(Flux1Ids, ImageIdsAreZeroRowColumnInRasterOrderTextIdsZero) {
  const Tensor ids = flux1_image_ids(6, 4);  // 3 x 2 tokens
  ASSERT_EQ(ids.shape(), Shape({6, 3}));
  const int64_t* p = ids.data<int64_t>();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j) {
      const int64_t* row = p + (i * 2 + j) * 3;
      EXPECT_EQ(row[0], 0);
      EXPECT_EQ(row[1], i);
      EXPECT_EQ(row[2], j);
    }
  const Tensor t = flux1_text_ids(5);
  ASSERT_EQ(t.shape(), Shape({5, 3}));
  for (int64_t k = 0; k < 15; ++k) EXPECT_EQ(t.data<int64_t>()[k], 0);
  EXPECT_THROW(flux1_image_ids(3, 4), Error);
  EXPECT_THROW(flux1_text_ids(0), Error);
}

TEST(Flux1Img2Img, StartIndexFollowsGetTimesteps) {
  // t_start = int(max(N - min(N * strength, N), 0)) with strength as Python's double
  EXPECT_EQ(flux1_img2img_start_index(5, 0.6f), 2);    // 5 * 0.6 == 3.0 exactly in double
  EXPECT_EQ(flux1_img2img_start_index(28, 0.6f), 11);  // 16.8 -> int(11.2)
  EXPECT_EQ(flux1_img2img_start_index(4, 1.0f), 0);
  EXPECT_EQ(flux1_img2img_start_index(10, 0.05f), 9);  // int(9.5): one step left
  EXPECT_EQ(flux1_img2img_start_index(50, 0.95f), 2);  // 47.5 -> int(2.5)
  EXPECT_EQ(flux1_img2img_start_index(3, 0.7f), 0);    // 2.1 -> int(0.9)
  EXPECT_THROW(flux1_img2img_start_index(4, 0.0f), Error);   // no step left
  EXPECT_THROW(flux1_img2img_start_index(4, 1.5f), Error);
  EXPECT_THROW(flux1_img2img_start_index(4, -0.1f), Error);
  EXPECT_THROW(flux1_img2img_start_index(4, NAN), Error);
}

TEST(Flux1Img2Img, ScaleNoiseRoundsEachOpToTheSampleDtype) {
  const Tensor sample = Tensor::full({1, 1, 1, 2}, DType::F32, 0.3f);
  Tensor noise = Tensor::full({1, 1, 1, 2}, DType::F32, -1.7f);
  const float sigma = 0.7346f;
  const Tensor f32 = flux1_scale_noise(sample, noise, sigma);
  EXPECT_EQ(f32.data<float>()[0], sigma * -1.7f + (1.0f - sigma) * 0.3f);
  // bf16: sigma, 1 - sigma, both products and the sum rounded to bf16 (torch's bf16 tensor ops)
  auto r = [](float v) { return bf16_to_f32(f32_to_bf16(v)); };
  const Tensor b = flux1_scale_noise(sample.to(DType::BF16), noise.to(DType::BF16), sigma);
  ASSERT_EQ(b.dtype(), DType::BF16);
  const float s = r(sigma), x = r(0.3f), n = r(-1.7f);
  EXPECT_EQ(b.to(DType::F32).data<float>()[0], r(r(s * n) + r(r(1.0f - s) * x)));
  EXPECT_THROW(flux1_scale_noise(sample, Tensor::full({1, 1, 1, 3}, DType::F32, 0.0f), sigma), Error);
}

TEST(Flux1Img2Img, PosteriorSampleIsMeanPlusClampedStdTimesTorchRandn) {
  Tensor moments = Tensor::empty({1, 4, 2, 2}, DType::F32);  // 2 latent channels
  float* m = moments.data<float>();
  for (int i = 0; i < 8; ++i) m[i] = 0.1f * i - 0.3f;  // means
  const float logvars[8] = {-40.0f, -1.0f, 0.0f, 0.5f, 25.0f, -2.0f, 1.0f, -30.0f};
  for (int i = 0; i < 8; ++i) m[8 + i] = logvars[i];
  TorchGenerator g(123), ref(123);
  const Tensor out = flux1_sample_posterior(moments, g);
  const Tensor eps = ref.randn({1, 2, 2, 2}, DType::F32);
  ASSERT_EQ(out.shape(), Shape({1, 2, 2, 2}));
  for (int i = 0; i < 8; ++i) {
    const float lv = std::fmin(std::fmax(logvars[i], -30.0f), 20.0f);
    EXPECT_FLOAT_EQ(out.data<float>()[i], m[i] + std::exp(0.5f * lv) * eps.data<float>()[i]) << i;
  }
  EXPECT_EQ(g.random(), ref.random());  // the generator advanced by exactly one draw of the shape
  EXPECT_THROW(flux1_sample_posterior(Tensor::empty({1, 3, 2, 2}, DType::F32), g), Error);
}

TEST(Flux1Img2Img, PreprocessScalesToMinusOneOneAndResizes) {
  io::Image im{2, 1, 3, {0, 255, 51, 102, 153, 204}};
  const Tensor t = flux1_preprocess_init_image(im, 2, 1);
  ASSERT_EQ(t.shape(), Shape({1, 3, 1, 2}));
  const float* p = t.data<float>();
  EXPECT_EQ(p[0], -1.0f);                              // R of pixel 0
  EXPECT_EQ(p[1], 2.0f * (102 / 255.0f) - 1.0f);       // R of pixel 1
  EXPECT_EQ(p[2], 1.0f);                               // G of pixel 0
  const Tensor resized = flux1_preprocess_init_image(im, 4, 2);
  EXPECT_EQ(resized.shape(), Shape({1, 3, 2, 4}));
  io::Image gray{2, 2, 1, {0, 0, 0, 0}};
  EXPECT_THROW(flux1_preprocess_init_image(gray, 2, 2), Error);
}

// ------------------------------------------------------------------------------------------------
// On the tiny folders

PipelineOptions f32_options() {
  PipelineOptions o;
  o.dtype = DType::F32;
  return o;
}

GenerateRequest small_request() {
  GenerateRequest r;
  r.prompts = {"a small test"};
  r.width = 32;
  r.height = 48;
  r.steps = 2;
  r.max_sequence_length = 16;
  r.seed = 3;
  return r;
}

TEST(Flux1PipelineTiny, DefaultsPerVariant) {
  auto dev = Flux1Pipeline::load(kDev, f32_options());
  EXPECT_TRUE(dev->defaults().guidance_distilled);
  EXPECT_EQ(dev->defaults().num_steps, 28);
  EXPECT_EQ(dev->defaults().max_sequence_length, 512);
  EXPECT_FLOAT_EQ(dev->defaults().guidance_scale, 3.5f);
  auto schnell = Flux1Pipeline::load(kSchnell, f32_options());
  EXPECT_FALSE(schnell->defaults().guidance_distilled);
  EXPECT_EQ(schnell->defaults().num_steps, 4);
  EXPECT_EQ(schnell->defaults().max_sequence_length, 256);
  EXPECT_FALSE(schnell->transformer_config().guidance);
}

// diffusers' vae_scale_factor = 2 ** (len(block_out_channels) - 1): the released VAE gives 8, a
// 3-level VAE 4; the latent grid, token count, size multiple and default size follow it.
TEST(Flux1PipelineTiny, VaeScaleFactorSetsTheLatentGrid) {
  EXPECT_EQ(Flux1Pipeline::load(kSchnell, f32_options())->vae_scale_factor(), 8);
  EXPECT_EQ(Flux1Pipeline::load(kSchnell, f32_options())->defaults().width, 1024);
  EXPECT_EQ(flux1_noise_shape(1, 64, 72, 16, 4), (Shape{1, 16, 16, 18}));
  EXPECT_EQ(flux1_noise_shape(1, 64, 80), (Shape{1, 16, 8, 10}));
  EXPECT_EQ(packed_image_seq_len(64, 72, 4), 8 * 9);
  EXPECT_EQ(packed_image_seq_len(64, 80), 4 * 5);
  EXPECT_NO_THROW(Flux1Pipeline::validate_size(72, 56, 1, 4));
  try {
    Flux1Pipeline::validate_size(72, 56, 1);
    ADD_FAILURE() << "72x56 accepted with the 8x VAE";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("multiples of 16"), std::string::npos) << e.what();
  }
}

TEST(Flux1PipelineTiny, LoadingModesGiveTheSameImageAndRecordSpans) {
  const GenerateRequest req = small_request();
  Profiler prof_parallel, prof_low;
  PipelineOptions parallel = f32_options();
  parallel.profiler = &prof_parallel;
  PipelineOptions sequential = f32_options();
  sequential.parallel_load = false;
  PipelineOptions low = f32_options();
  low.low_memory = true;
  low.profiler = &prof_low;
  const GenerateResult a = Flux1Pipeline::load(kDev, parallel)->generate(req);
  const GenerateResult b = Flux1Pipeline::load(kDev, sequential)->generate(req);
  const GenerateResult c = Flux1Pipeline::load(kDev, low)->generate(req);
  ASSERT_EQ(a.images.size(), 1u);
  EXPECT_EQ(a.images[0].width, 32);
  EXPECT_EQ(a.images[0].height, 48);
  EXPECT_EQ(a.images[0].pixels, b.images[0].pixels);
  EXPECT_EQ(a.images[0].pixels, c.images[0].pixels);
  EXPECT_EQ(a.num_steps, 2);
  EXPECT_FLOAT_EQ(a.guidance_scale, 3.5f);
  for (const char* span : {kSpanLoadTransformer, kSpanLoadTextEncoder, kSpanLoadVae, kSpanLoadTotal,
                           kSpanTextEncoding, kSpanDenoiseStep, kSpanDenoiseTotal, kSpanVaeDecode})
    EXPECT_NE(prof_parallel.find(span), nullptr) << span;
  // low memory: nothing loaded up front, every component loaded inside generate()
  EXPECT_EQ(prof_low.find(kSpanLoadTotal), nullptr);
  EXPECT_NE(prof_low.find(kSpanLoadTransformer), nullptr);
}

// A folder re-saved by transformers 5 has tokenizer.json + tokenizer_config.json only (no
// vocab.json/merges.txt for CLIP, no spiece.model for T5): flux1-dev-tiny-transformers5 is
// flux1-dev-tiny with such tokenizers (tools/reference/make_transformers5_tokenizers.py) and must
// give the same image, bit for bit, for a prompt with punctuation, digits, case and accents.
TEST(Flux1PipelineTiny, Transformers5TokenizerFolderGivesTheSameImage) {
  GenerateRequest req = small_request();
  req.prompts = {"A Café's 3 \"neon\" signs, at night -- 1024px!"};
  const GenerateResult separate_files = Flux1Pipeline::load(kDev, f32_options())->generate(req);
  const GenerateResult json_only =
      Flux1Pipeline::load(kData / "models" / "flux1-dev-tiny-transformers5", f32_options())->generate(req);
  ASSERT_EQ(json_only.images.size(), 1u);
  EXPECT_EQ(json_only.images[0].pixels, separate_files.images[0].pixels);
}

// CLIP-L and T5-XXL are timed apart inside the text-encoding span: once per encode_prompt call
// (twice with true CFG: prompt and negative), never more than the span that holds them.
TEST(Flux1PipelineTiny, TextEncodingSplitsIntoClipAndT5SubSpans) {
  for (const bool true_cfg : {false, true}) {
    Profiler prof;
    PipelineOptions options = f32_options();
    options.profiler = &prof;
    GenerateRequest req = small_request();
    if (true_cfg) {
      req.negative_prompt = "blurry";
      req.true_cfg = 2.0f;
    }
    Flux1Pipeline::load(kDev, options)->generate(req);
    const std::vector<ProfileEntry> entries = prof.entries();
    auto entry = [&](const char* name) {
      for (const ProfileEntry& e : entries)
        if (e.name == name) return e;
      ADD_FAILURE() << "no span " << name << (true_cfg ? " (true CFG)" : "");
      return ProfileEntry{};
    };
    const ProfileEntry text = entry(kSpanTextEncoding), clip = entry(kSpanTextEncodingClip),
                       t5 = entry(kSpanTextEncodingT5);
    const int encodes = true_cfg ? 2 : 1;
    EXPECT_EQ(text.count, 1);
    EXPECT_EQ(clip.count, encodes);
    EXPECT_EQ(t5.count, encodes);
    EXPECT_GE(clip.min_seconds, 0.0);
    EXPECT_GE(t5.min_seconds, 0.0);
    EXPECT_GT(clip.total_seconds + t5.total_seconds, 0.0);
    EXPECT_LE(clip.total_seconds + t5.total_seconds, text.total_seconds);
  }
}

TEST(Flux1PipelineTiny, SeedAndPromptChangeTheImageGuidanceOnlyMattersForDev) {
  auto dev = Flux1Pipeline::load(kDev, f32_options());
  GenerateRequest req = small_request();
  const auto base = dev->generate(req).images[0].pixels;
  req.seed = 4;
  EXPECT_NE(dev->generate(req).images[0].pixels, base);
  req.seed = 3;
  req.guidance = 9.0f;
  EXPECT_NE(dev->generate(req).images[0].pixels, base);

  auto schnell = Flux1Pipeline::load(kSchnell, f32_options());
  GenerateRequest s = small_request();
  const auto s_base = schnell->generate(s).images[0].pixels;
  s.guidance = 9.0f;  // schnell has no guidance embedding: ignored, as diffusers does
  const GenerateResult s_out = schnell->generate(s);
  EXPECT_EQ(s_out.images[0].pixels, s_base);
  EXPECT_EQ(s_out.guidance_scale, 0.0f);
}

TEST(Flux1PipelineTiny, InitialLatentsReplaceTheNoiseDraw) {
  auto dev = Flux1Pipeline::load(kDev, f32_options());
  GenerateRequest req = small_request();
  const GenerateResult drawn = dev->generate(req);
  TorchGenerator generator(3);
  CallContext call;
  call.initial_latents = randn_tensor(flux1_noise_shape(1, 48, 32), DType::F32, generator);
  EXPECT_EQ(dev->generate(req, call).images[0].pixels, drawn.images[0].pixels);
  call.initial_latents = Tensor::zeros({1, 16, 4, 4}, DType::F32);
  EXPECT_THROW(dev->generate(req, call), Error);
}

TEST(Flux1PipelineTiny, BadRequestsAreOneLineErrors) {
  auto dev = Flux1Pipeline::load(kDev, f32_options());
  // The field at fault (Error::field(): the field-table key or the input's name) where given.
  auto expect_error = [&](GenerateRequest r, ErrorCode code, const std::string& field = "",
                          const CallContext& call = {}) {
    try {
      dev->generate(r, call);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      if (!field.empty()) EXPECT_EQ(e.field(), field) << e.what();
    }
  };
  GenerateRequest r = small_request();
  r.width = 40;
  expect_error(r, ErrorCode::InvalidArgument);
  r = small_request();
  r.prompts = {};
  expect_error(r, ErrorCode::InvalidArgument, "prompts");
  r = small_request();
  r.steps = 0;
  expect_error(r, ErrorCode::InvalidArgument, "steps");
  r = small_request();
  r.max_sequence_length = 513;
  expect_error(r, ErrorCode::InvalidArgument, "max_sequence_length");
  r = small_request();
  r.reference_images.push_back(fluxrt::Image{64, 64, std::vector<uint8_t>(64 * 64 * 3, 0)});
  expect_error(r, ErrorCode::InvalidArgument, "reference_images");
  r = small_request();
  r.init_image = fluxrt::Image{32, 48, std::vector<uint8_t>(32 * 48 * 3, 0)};
  r.strength = 2.0f;
  expect_error(r, ErrorCode::InvalidArgument, "strength");
  r = small_request();
  r.strength = 0.5f;  // img2img's field without an init image: refused, not dropped
  expect_error(r, ErrorCode::InvalidArgument, "strength");
  r = small_request();
  r.guidance = 101.0f;  // guidance and true_cfg are in [0, 100]
  expect_error(r, ErrorCode::InvalidArgument, "guidance");
  r = small_request();
  r.true_cfg = -1.0f;
  r.negative_prompt = "";
  expect_error(r, ErrorCode::InvalidArgument, "true_cfg");
  r = small_request();
  r.prompts = {std::string("\xff\xfe bad utf8")};
  expect_error(r, ErrorCode::InvalidArgument, "prompts");
  r = small_request();
  std::atomic<bool> cancel{true};
  CallContext cancelled;
  cancelled.cancel = &cancel;
  expect_error(r, ErrorCode::Cancelled, "", cancelled);
}

TEST(Flux1PipelineTiny, FolderProblemsAreReported) {
  EXPECT_THROW(Flux1Pipeline::load(kData / "models" / "no-such-model", f32_options()), Error);
  // a klein folder is not a FLUX.1 pipeline
  try {
    Flux1Pipeline::load(kData / "models" / "flux2-klein-tiny", f32_options());
    ADD_FAILURE() << "klein folder accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported) << e.what();
  }
  // a transformer folder alone is not a pipeline folder
  EXPECT_THROW(Flux1Pipeline::load(kDev / "transformer", f32_options()), Error);
}

TEST(Flux1PipelineTiny, StepCallbackCountsTheStepsRunAfterImg2ImgTrimming) {
  auto dev = Flux1Pipeline::load(kDev, f32_options());
  GenerateRequest req = small_request();
  req.steps = 5;
  req.strength = 0.6f;
  req.init_image = fluxrt::Image{32, 48, std::vector<uint8_t>(32 * 48 * 3, 128)};
  int calls = 0, last_total = 0;
  CallContext call;
  call.on_step = [&](int step, int total, double, float) {
    ++calls;
    EXPECT_EQ(step, calls);
    last_total = total;
  };
  EXPECT_EQ(dev->plan(req).steps_run, 3);  // the plan says what the loop runs
  const GenerateResult out = dev->generate(req, call);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(last_total, 3);
  EXPECT_EQ(out.num_steps, 3);
}

TEST(Flux1PipelineSynthetic, TinyVariantGeneratesAndUnknownNamesAreRefused) {
  const fs::path clip_tok = kData / "tokenizers" / "clip", t5_tok = kData / "tokenizers" / "t5";
  auto pipe = Flux1Pipeline::synthetic("flux.1-tiny", clip_tok, t5_tok, f32_options(), 5);
  EXPECT_TRUE(pipe->defaults().guidance_distilled);
  EXPECT_EQ(pipe->transformer_config().hidden, 128);
  const GenerateResult out = pipe->generate(small_request());
  ASSERT_EQ(out.images.size(), 1u);
  EXPECT_EQ(out.images[0].width, 32);
  // same seed, same weights: the same image; another weight seed: another image
  EXPECT_EQ(Flux1Pipeline::synthetic("flux.1-tiny", clip_tok, t5_tok, f32_options(), 5)->generate(small_request()).images[0].pixels,
            out.images[0].pixels);
  EXPECT_NE(Flux1Pipeline::synthetic("flux.1-tiny", clip_tok, t5_tok, f32_options(), 6)->generate(small_request()).images[0].pixels,
            out.images[0].pixels);
  try {
    Flux1Pipeline::synthetic("flux.1-pro", clip_tok, t5_tok, f32_options());
    ADD_FAILURE() << "unknown variant accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
  }
  EXPECT_THROW(Flux1Pipeline::synthetic("flux.1-tiny", kData / "no-such-dir", t5_tok, f32_options()), Error);
}

}  // namespace
}  // namespace fluxrt::pipelines
