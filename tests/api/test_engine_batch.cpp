// fluxrt::Engine::generate_batch: several requests as one pipeline call give each request the
// images it gets alone (its own seed's noise, its own prompts and counts), with its own metadata;
// batch_key says which requests may share a batch, and a mismatched batch is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <iterator>
#include <string>
#include <variant>
#include <vector>

#include "fluxrt/engine.h"

namespace fs = std::filesystem;

namespace {

const fs::path kData = FLUXRT_TEST_DATA_DIR;
const fs::path kKlein = kData / "models" / "flux2-klein-tiny";
const fs::path kKleinBase = kData / "models" / "flux2-klein-base-tiny";
const fs::path kDev = kData / "models" / "flux1-dev-tiny";

fluxrt::GenerateRequest request(std::vector<std::string> prompts, uint64_t seed, int images_per_prompt = 1) {
  fluxrt::GenerateRequest r;
  r.prompts = std::move(prompts);
  r.images_per_prompt = images_per_prompt;
  r.width = 64;
  r.height = 64;
  r.steps = 2;
  r.seed = seed;
  return r;
}

// Three requests of different prompt and image counts, seeds and prompts.
std::vector<fluxrt::GenerateRequest> mixed_requests() {
  return {request({"a red circle"}, 3, 2), request({"a blue square", ""}, 9), request({"a green line"}, 3)};
}

void expect_batch_equals_alone(fluxrt::Engine& engine, const std::vector<fluxrt::GenerateRequest>& requests) {
  const std::vector<fluxrt::GenerateResult> batch = engine.generate_batch(requests);
  ASSERT_EQ(batch.size(), requests.size());
  for (size_t q = 0; q < requests.size(); ++q) {
    const fluxrt::GenerateResult alone = engine.generate(requests[q]);
    ASSERT_EQ(batch[q].images.size(), alone.images.size()) << "request " << q;
    for (size_t i = 0; i < alone.images.size(); ++i) {
      const fluxrt::GeneratedImage& b = batch[q].images[i];
      const fluxrt::GeneratedImage& a = alone.images[i];
      EXPECT_TRUE(b.image.rgb == a.image.rgb)
          << "request " << q << " image " << i << " differs from it alone";
      EXPECT_EQ(b.metadata.seed, requests[q].seed);
      EXPECT_EQ(b.metadata.prompt, a.metadata.prompt);
      EXPECT_EQ(b.metadata.index, static_cast<int>(i));
      EXPECT_EQ(b.metadata.count, static_cast<int>(alone.images.size()));
      EXPECT_EQ(b.metadata.prompt_index, a.metadata.prompt_index);
      EXPECT_EQ(b.metadata.image_index, a.metadata.image_index);
    }
    EXPECT_EQ(batch[q].timing.images, static_cast<int>(alone.images.size()));
  }
  // Not a tautology: the batch's images differ from one another (different seeds and prompts).
  EXPECT_FALSE(batch[0].images[0].image.rgb == batch[2].images[0].image.rgb);
  EXPECT_FALSE(batch[0].images[0].image.rgb == batch[0].images[1].image.rgb);
}

}  // namespace

TEST(EngineBatch, KleinBatchGivesEachRequestItsImagesAlone) {
  fluxrt::Engine engine(kKlein.string());
  expect_batch_equals_alone(engine, mixed_requests());
}

TEST(EngineBatch, KleinBaseWithGuidanceBatchesTheNegativeBranchToo) {
  fluxrt::Engine engine(kKleinBase.string());
  std::vector<fluxrt::GenerateRequest> requests = mixed_requests();
  for (fluxrt::GenerateRequest& r : requests) {
    r.guidance = 3.0f;
    r.negative_prompt = "blurry";
  }
  expect_batch_equals_alone(engine, requests);
}

TEST(EngineBatch, Flux1BatchGivesEachRequestItsImagesAlone) {
  fluxrt::Engine engine(kDev.string());
  expect_batch_equals_alone(engine, mixed_requests());
}

TEST(EngineBatch, Flux1TrueCfgBatch) {
  fluxrt::Engine engine(kDev.string());
  std::vector<fluxrt::GenerateRequest> requests = mixed_requests();
  for (fluxrt::GenerateRequest& r : requests) {
    r.true_cfg = 2.0f;
    r.negative_prompt = "blurry";
  }
  expect_batch_equals_alone(engine, requests);
}

// TaylorSeer and MagCache decide from the step alone and keep their state per row: requests with
// the same settings share a call and still get the images they get alone (8 steps: some cached).
TEST(EngineBatch, StepCachedRequestsOfOneSettingBatch) {
  fluxrt::Engine engine(kKleinBase.string());
  for (const fluxrt::CacheConfig& cache :
       {fluxrt::CacheConfig(fluxrt::TaylorSeerCacheConfig{2, 2}),
        fluxrt::CacheConfig(
            fluxrt::MagCacheConfig{0.2f, 2, 0.2f, {}, {1.0f, 1.05f, 1.02f, 1.0f, 0.99f, 0.98f}})}) {
    std::vector<fluxrt::GenerateRequest> requests = mixed_requests();
    for (fluxrt::GenerateRequest& r : requests) {
      r.steps = 8;
      r.guidance = 3.0f;
      r.cache = cache;
    }
    expect_batch_equals_alone(engine, requests);
    EXPECT_NE(engine.generate(requests[0]).cache_steps.find('C'), std::string::npos);
  }
}

// First-Block Cache decides from one mean over the call's residual: its requests run alone, and
// the cache settings are part of every key.
TEST(EngineBatch, StepCacheSettingsAreInTheKey) {
  fluxrt::Engine engine(kKleinBase.string());
  fluxrt::GenerateRequest base = request({"a red circle"}, 3);
  fluxrt::GenerateRequest fbc = base, taylor = base, taylor2 = base, mag = base, mag2 = base;
  fbc.cache = fluxrt::FirstBlockCacheConfig{0.2f};
  taylor.cache = taylor2.cache = fluxrt::TaylorSeerCacheConfig{};
  std::get<fluxrt::TaylorSeerCacheConfig>(*taylor2.cache).max_order = 2;
  mag.cache = mag2.cache = fluxrt::MagCacheConfig{0.06f, 3, 0.2f, {}, {1.0f, 1.1f}};
  std::get<fluxrt::MagCacheConfig>(*mag2.cache).mag_ratios = {1.0f, 1.2f};
  EXPECT_EQ(engine.batch_key(fbc), "");
  EXPECT_EQ(engine.batch_key(taylor), engine.batch_key(fluxrt::GenerateRequest(taylor)));
  const std::string keys[] = {engine.batch_key(base), engine.batch_key(taylor), engine.batch_key(taylor2),
                              engine.batch_key(mag), engine.batch_key(mag2)};
  for (size_t i = 0; i < std::size(keys); ++i)
    for (size_t j = i + 1; j < std::size(keys); ++j) EXPECT_NE(keys[i], keys[j]) << i << " " << j;
}

TEST(EngineBatch, KeysSayWhatMayShareABatch) {
  fluxrt::Engine engine(kKlein.string());
  const fluxrt::GenerateRequest base = request({"a"}, 1);
  fluxrt::GenerateRequest other_prompt_and_seed = request({"b", "c"}, 2, 3);
  EXPECT_FALSE(engine.batch_key(base).empty());
  EXPECT_EQ(engine.batch_key(base), engine.batch_key(other_prompt_and_seed));
  // The model's defaults are filled in first: an unset field equals the default given explicitly.
  fluxrt::GenerateRequest unset = base, explicit_default = base;
  unset.max_sequence_length.reset();
  explicit_default.max_sequence_length = engine.defaults().max_sequence_length;
  EXPECT_EQ(engine.batch_key(unset), engine.batch_key(explicit_default));

  std::vector<fluxrt::GenerateRequest> differ(4, base);
  differ[0].width = 128;
  differ[1].steps = 3;
  differ[2].guidance = 2.5f;
  differ[3].max_sequence_length = 16;
  for (size_t i = 0; i < differ.size(); ++i)
    EXPECT_NE(engine.batch_key(differ[i]), engine.batch_key(base)) << "field " << i;
  // A negative prompt without CFG (distilled klein) changes nothing, so it does not split a batch.
  fluxrt::GenerateRequest unused_negative = base;
  unused_negative.negative_prompt = "x";
  EXPECT_EQ(engine.batch_key(unused_negative), engine.batch_key(base));
  // A request the model refuses has no key: the plan's error, naming the field.
  fluxrt::GenerateRequest refused = base;
  refused.true_cfg = 2.0f;  // FLUX.1 only
  try {
    (void)engine.batch_key(refused);
    ADD_FAILURE() << "a key for a request klein refuses";
  } catch (const fluxrt::Error& e) {
    EXPECT_EQ(e.code(), fluxrt::ErrorCode::InvalidArgument);
    EXPECT_EQ(e.field(), "true_cfg");
  }

  fluxrt::GenerateRequest with_reference = base;
  with_reference.reference_images.push_back(fluxrt::Image{16, 16, std::vector<uint8_t>(16 * 16 * 3, 128)});
  EXPECT_EQ(engine.batch_key(with_reference), "");

  // Where CFG runs (klein base at its default guidance 4), the negative prompt is part of the key.
  fluxrt::Engine base_engine(kKleinBase.string());
  fluxrt::GenerateRequest negative = base;
  negative.negative_prompt = "x";
  EXPECT_NE(base_engine.batch_key(negative), base_engine.batch_key(base));
  // "" is the negative prompt CFG uses when none is given: the same key.
  fluxrt::GenerateRequest empty_negative = base;
  empty_negative.negative_prompt = "";
  EXPECT_EQ(base_engine.batch_key(empty_negative), base_engine.batch_key(base));
  // A negative prompt cannot forge another key by carrying a separator.
  fluxrt::GenerateRequest a = base, b = base;
  a.negative_prompt = "1:x";
  b.negative_prompt = "x";
  EXPECT_NE(base_engine.batch_key(a), base_engine.batch_key(b));

  // FLUX.1 true CFG runs with true_cfg > 1 and a negative prompt: only then is it in the key.
  fluxrt::Engine dev(kDev.string());
  fluxrt::GenerateRequest true_cfg_alone = base, true_cfg = base, other_negative = base;
  true_cfg_alone.true_cfg = 2.0f;
  true_cfg.true_cfg = 2.0f;
  true_cfg.negative_prompt = "";
  other_negative.true_cfg = 2.0f;
  other_negative.negative_prompt = "x";
  EXPECT_EQ(dev.batch_key(true_cfg_alone), dev.batch_key(base));
  EXPECT_NE(dev.batch_key(true_cfg), dev.batch_key(base));
  EXPECT_NE(dev.batch_key(other_negative), dev.batch_key(true_cfg));
}

TEST(EngineBatch, RefusesRequestsThatDoNotAgree) {
  fluxrt::Engine engine(kKlein.string());
  std::vector<fluxrt::GenerateRequest> requests{request({"a"}, 1), request({"b"}, 2)};
  requests[1].steps = 3;
  try {
    engine.generate_batch(requests);
    FAIL() << "a mismatched batch ran";
  } catch (const fluxrt::Error& e) {
    EXPECT_EQ(e.code(), fluxrt::ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("request 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(engine.generate_batch({}), fluxrt::Error);
  // One request alone needs no key: a reference-image request runs through generate_batch.
  fluxrt::GenerateRequest with_reference = request({"a"}, 1);
  with_reference.reference_images.push_back(fluxrt::Image{64, 64, std::vector<uint8_t>(64 * 64 * 3, 90)});
  EXPECT_EQ(engine.generate_batch({with_reference}).at(0).images.size(), 1u);
}

// Per-request LoRAs: only requests with the same LoRA set share a batch, a batch of them gives
// each request its images alone, and the metadata records each LoRA (name, strength, SHA-256).
// Plain LoRA sets batch whatever their strengths and order (each request's apply to its own images:
// test_engine_batch_loras.cpp); never with requests that carry none.
TEST(EngineBatch, PlainLoraSetsBatchTogether) {
  fluxrt::Engine engine(kKlein.string());
  const std::string peft = (kData / "lora" / "klein" / "peft.safetensors").string();
  const std::string second = (kData / "lora" / "klein" / "second.safetensors").string();
  std::vector<fluxrt::GenerateRequest> requests = mixed_requests();
  for (auto& r : requests) r.loras = {{peft, 0.5f}, {second, 1.0f}};
  EXPECT_EQ(engine.batch_key(requests[0]), engine.batch_key(requests[1]));
  expect_batch_equals_alone(engine, requests);

  fluxrt::GenerateRequest other = requests[0];
  other.loras[0].strength = 0.6f;
  EXPECT_EQ(engine.batch_key(other), engine.batch_key(requests[0]));
  other.loras = {{second, 1.0f}, {peft, 0.5f}};
  EXPECT_EQ(engine.batch_key(other), engine.batch_key(requests[0]));
  other.loras.clear();
  EXPECT_NE(engine.batch_key(other), engine.batch_key(requests[0]));
  EXPECT_THROW(engine.generate_batch({requests[0], other}), fluxrt::Error);

  const fluxrt::GenerateResult with = engine.generate(requests[2]);
  const fluxrt::ImageMetadata& m = with.images.at(0).metadata;
  ASSERT_EQ(m.loras.size(), 2u);
  EXPECT_EQ(m.loras[0].name, "peft.safetensors");
  EXPECT_FLOAT_EQ(m.loras[0].strength, 0.5f);
  EXPECT_EQ(m.loras[0].sha256.size(), 64u);
  const auto text = fluxrt::metadata_text(m);
  bool found = false;
  for (const auto& [k, v] : text)
    if (k == "loras") {
      found = true;
      EXPECT_EQ(v, "peft.safetensors:0.5:" + m.loras[0].sha256.substr(0, 12) +
                       ", second.safetensors:1:" + m.loras[1].sha256.substr(0, 12));
    }
  EXPECT_TRUE(found);
  // The request's LoRAs change the image, and are gone for the next request.
  fluxrt::GenerateRequest plain = requests[2];
  plain.loras.clear();
  const fluxrt::GenerateResult without = engine.generate(plain);
  EXPECT_FALSE(without.images.at(0).image.rgb == with.images.at(0).image.rgb);
  EXPECT_TRUE(without.images.at(0).metadata.loras.empty());
}
