// EngineOptions::free_text_encoder (what `fluxrt generate` runs with): the same images as an engine
// keeping every component resident, the text encoder and the transformer never in memory
// together, the loads inside the requests, and a request repeating the last prompts needing
// neither the encoder nor a second load of the transformer.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "core/allocator.h"
#include "fluxrt/engine.h"
#include "pipelines/klein/flux2_klein_pipeline.h"
#include "pipelines/memory_estimate.h"

namespace fs = std::filesystem;

namespace {

const fs::path kData = FLUXRT_TEST_DATA_DIR;
const fs::path kKlein = kData / "models" / "flux2-klein-tiny";
const fs::path kKleinBase = kData / "models" / "flux2-klein-base-tiny";
const fs::path kDev = kData / "models" / "flux1-dev-tiny";

fluxrt::GenerateRequest small_request(const std::string& prompt, uint64_t seed = 7) {
  fluxrt::GenerateRequest r;
  r.prompts = {prompt};
  r.width = 64;
  r.height = 64;
  r.steps = 2;
  r.seed = seed;
  return r;
}

fluxrt::EngineOptions apart() {
  fluxrt::EngineOptions o;
  o.free_text_encoder = true;
  return o;
}

void expect_same_pixels(const fluxrt::GenerateResult& a, const fluxrt::GenerateResult& b) {
  ASSERT_EQ(a.images.size(), b.images.size());
  for (size_t i = 0; i < a.images.size(); ++i)
    EXPECT_TRUE(a.images[i].image.rgb == b.images[i].image.rgb) << "image " << i;
}

}  // namespace

TEST(EngineFreeTextEncoder, KleinSameImagesLoadsInTheRequestsAndKeepsTheLastPrompts) {
  fluxrt::Engine resident(kKlein.string());
  fluxrt::Engine engine(kKlein.string(), apart());
  EXPECT_FALSE(engine.load_timings().has_value());  // nothing loads at open
  EXPECT_TRUE(engine.options().free_text_encoder);

  fluxrt::GenerateRequest first = small_request("a red circle");
  first.images_per_prompt = 2;
  const fluxrt::GenerateResult a = engine.generate(first);
  expect_same_pixels(a, resident.generate(first));
  const fluxrt::LoadTimings& loads = a.timing.run.loads;
  EXPECT_GT(a.timing.run.load_s, 0);
  EXPECT_GT(loads.text_encoder_s, 0);
  EXPECT_GT(loads.transformer_s, 0);
  EXPECT_GT(loads.vae_s, 0);
  EXPECT_GT(a.timing.run.text_encoding_s, 0);

  // The same prompts again, another seed: the kept embeddings, nothing loaded.
  const fluxrt::GenerateRequest again = [&] {
    fluxrt::GenerateRequest r = first;
    r.seed = 8;
    return r;
  }();
  const fluxrt::GenerateResult b = engine.generate(again);
  expect_same_pixels(b, resident.generate(again));
  EXPECT_EQ(b.timing.run.load_s, 0);
  EXPECT_EQ(b.timing.run.text_encoding_s, 0);

  // Another prompt: the encoder loads again and the transformer after it.
  const fluxrt::GenerateRequest other = small_request("a blue square", 9);
  const fluxrt::GenerateResult c = engine.generate(other);
  expect_same_pixels(c, resident.generate(other));
  EXPECT_GT(c.timing.run.loads.text_encoder_s, 0);
  EXPECT_GT(c.timing.run.loads.transformer_s, 0);
  EXPECT_EQ(c.timing.run.loads.vae_s, 0);  // the VAE stayed
}

// The high-water mark of the bytes the tensors hold, on synthetic weights (made in memory, so
// every byte is counted; a folder's bf16 weights are used in place from the mapped file). With the
// text encoder apart the request's peak is below the resident pipeline's by at least most of the
// smaller of the text encoder and the rest, which it could not be had the two overlapped.
TEST(EngineFreeTextEncoder, TheTextEncoderAndTheTransformerAreNeverResidentTogether) {
  namespace pl = fluxrt::pipelines;
  const fs::path tokenizer = kKlein / "tokenizer";
  struct Bytes {
    size_t at_open = 0, peak = 0, after = 0;
  };
  auto measure = [&](bool free_text_encoder) {
    fluxrt::release_cached_host_blocks();
    fluxrt::reset_host_bytes_peak();
    const size_t before = fluxrt::host_bytes_in_use();
    pl::PipelineOptions options;
    options.free_text_encoder = free_text_encoder;
    auto pipeline = pl::Flux2KleinPipeline::synthetic(pl::kKleinTinySyntheticVariant, tokenizer, options, 42);
    Bytes b;
    b.at_open = fluxrt::host_bytes_in_use() - before;
    pipeline->generate(small_request("a red circle"));
    b.peak = fluxrt::host_bytes_peak() - before;
    b.after = fluxrt::host_bytes_in_use() - before;
    return b;
  };
  const Bytes resident = measure(false);
  const Bytes apart = measure(true);
  EXPECT_EQ(apart.at_open, 0u);  // nothing made at open
  // Resident: all three components from the open on; apart: the transformer and the VAE stay
  // after the request (with the kept prompt embeddings), the text encoder does not.
  ASSERT_GT(resident.at_open, apart.after);
  const size_t text_encoder = resident.at_open - apart.after;
  const size_t rest = apart.after;
  // Most of the tiny Qwen3's embedding table (151936 x 8 bf16) left with it (the kept prompt
  // embeddings stayed).
  EXPECT_GE(text_encoder, size_t{151936} * 8 * 2 * 9 / 10);
  EXPECT_GE(resident.peak, apart.peak + std::min(text_encoder, rest) * 8 / 10)
      << "resident peak " << resident.peak << ", apart " << apart.peak << "; text encoder " << text_encoder
      << ", transformer and VAE " << rest;
}

TEST(EngineFreeTextEncoder, WeightPeakCountsTheLargerOfTheTwo) {
  const fluxrt::pipelines::ResidentWeights w{.transformer = 7, .text_encoders = 5, .vae = 1};
  EXPECT_EQ(w.peak(false), 13u);
  EXPECT_EQ(w.peak(false, true), 8u);
  EXPECT_EQ(w.peak(true), 7u);
  EXPECT_EQ(w.peak(true, true), 7u);
  const fluxrt::pipelines::ResidentWeights big_encoder{.transformer = 3, .text_encoders = 9, .vae = 1};
  EXPECT_EQ(big_encoder.peak(false, true), 9u);
}

// CFG (klein base: the negative prompt's embeddings kept with the prompt's) and FLUX.1 (CLIP's
// pooled output and T5's, true CFG, img2img's VAE encoder loaded by the request).
TEST(EngineFreeTextEncoder, KleinBaseCfgAndFlux1SameImages) {
  {
    fluxrt::Engine resident(kKleinBase.string());
    fluxrt::Engine engine(kKleinBase.string(), apart());
    fluxrt::GenerateRequest r = small_request("a red circle", 3);
    r.negative_prompt = "blurry";
    for (int i = 0; i < 2; ++i) expect_same_pixels(engine.generate(r), resident.generate(r));
    r.negative_prompt = "dark";  // another negative: encoded again
    const fluxrt::GenerateResult got = engine.generate(r);
    EXPECT_GT(got.timing.run.text_encoding_s, 0);
    expect_same_pixels(got, resident.generate(r));
  }
  fluxrt::Engine resident(kDev.string());
  fluxrt::Engine engine(kDev.string(), apart());
  fluxrt::GenerateRequest r = small_request("a red circle", 5);
  r.negative_prompt = "blurry";
  r.true_cfg = 2.0f;
  for (int i = 0; i < 2; ++i) expect_same_pixels(engine.generate(r), resident.generate(r));
  fluxrt::GenerateRequest img2img = small_request("a green field", 6);
  img2img.init_image = fluxrt::Image{64, 64, std::vector<uint8_t>(64 * 64 * 3, 90)};
  img2img.strength = 0.75f;
  expect_same_pixels(engine.generate(img2img), resident.generate(img2img));
}

// Low-memory mode overrides it: every request makes every component, encodes its prompts even when
// they repeat, and keeps nothing.
TEST(EngineFreeTextEncoder, NoEffectInLowMemoryMode) {
  fluxrt::EngineOptions options = apart();
  options.low_memory = true;
  fluxrt::Engine engine(kKlein.string(), options);
  const fluxrt::GenerateRequest r = small_request("a red circle");
  for (int i = 0; i < 2; ++i) {
    const fluxrt::GenerateResult got = engine.generate(r);
    EXPECT_GT(got.timing.run.text_encoding_s, 0) << "request " << i;
    EXPECT_GT(got.timing.run.loads.transformer_s, 0) << "request " << i;
  }
}
