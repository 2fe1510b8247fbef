// Requests with different LoRAs in one batch (issue 46 item 5): requests whose LoRAs are all plain
// low-rank modules of the transformer share a batch key whatever their files and strengths, run as
// one pipeline call with each request's branches on its own images, and each gets bit for bit the
// images it gets alone. LoKr / LoHa / DoRA files and text-encoder LoRAs keep the exact list in the
// key (they change the whole call: merged weights, the batch's prompt encoding).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "fluxrt/engine.h"

namespace fs = std::filesystem;

namespace {

const fs::path kData = FLUXRT_TEST_DATA_DIR;
const fs::path kModels = kData / "models";

fluxrt::GenerateRequest request(std::vector<std::string> prompts, uint64_t seed,
                                std::vector<fluxrt::Lora> loras, int images_per_prompt = 1) {
  fluxrt::GenerateRequest r;
  r.prompts = std::move(prompts);
  r.images_per_prompt = images_per_prompt;
  r.width = 64;
  r.height = 64;
  r.steps = 2;
  r.seed = seed;
  r.loras = std::move(loras);
  return r;
}

fluxrt::Lora lora(const fs::path& file, float strength) { return {file.string(), strength}; }

// Three requests with three different LoRA sets (one file, another at another strength, both),
// different prompts, seeds and image counts.
std::vector<fluxrt::GenerateRequest> requests_with_own_loras(const fs::path& lora_dir) {
  return {request({"a red circle"}, 3, {lora(lora_dir / "peft.safetensors", 1.0f)}, 2),
          request({"a blue square", ""}, 9, {lora(lora_dir / "second.safetensors", 0.7f)}),
          request({"a green line"}, 4,
                  {lora(lora_dir / "kohya.safetensors", 0.5f), lora(lora_dir / "second.safetensors", 1.0f)})};
}

void expect_one_call_gives_each_its_images_alone(fluxrt::Engine& engine,
                                                 const std::vector<fluxrt::GenerateRequest>& requests) {
  for (const fluxrt::GenerateRequest& r : requests)
    EXPECT_EQ(engine.batch_key(r), engine.batch_key(requests[0]));
  const std::vector<fluxrt::GenerateResult> batch = engine.generate_batch(requests);
  ASSERT_EQ(batch.size(), requests.size());
  for (size_t q = 0; q < requests.size(); ++q) {
    const fluxrt::GenerateResult alone = engine.generate(requests[q]);
    ASSERT_EQ(batch[q].images.size(), alone.images.size()) << "request " << q;
    for (size_t i = 0; i < alone.images.size(); ++i) {
      EXPECT_TRUE(batch[q].images[i].image.rgb == alone.images[i].image.rgb)
          << "request " << q << " image " << i << " differs from it alone";
      ASSERT_EQ(batch[q].images[i].metadata.loras.size(), requests[q].loras.size()) << "request " << q;
    }
    // Not vacuous: the request's LoRAs change its image.
    fluxrt::GenerateRequest without = requests[q];
    without.loras.clear();
    EXPECT_FALSE(engine.generate(without).images[0].image.rgb == alone.images[0].image.rgb)
        << "request " << q;
  }
}

}  // namespace

TEST(EngineBatchLoras, KleinRequestsWithTheirOwnLorasShareOneCall) {
  fluxrt::Engine engine((kModels / "flux2-klein-tiny").string());
  expect_one_call_gives_each_its_images_alone(engine, requests_with_own_loras(kData / "lora" / "klein"));
}

TEST(EngineBatchLoras, KleinBaseCfgBranchesCarryEachRequestsLoras) {
  fluxrt::Engine engine((kModels / "flux2-klein-base-tiny").string());
  std::vector<fluxrt::GenerateRequest> requests = requests_with_own_loras(kData / "lora" / "klein");
  for (fluxrt::GenerateRequest& r : requests) {
    r.guidance = 3.0f;
    r.negative_prompt = "blurry";
  }
  expect_one_call_gives_each_its_images_alone(engine, requests);
}

TEST(EngineBatchLoras, Flux1RequestsWithTheirOwnLorasShareOneCall) {
  fluxrt::Engine engine((kModels / "flux1-dev-tiny").string());
  std::vector<fluxrt::GenerateRequest> requests = requests_with_own_loras(kData / "lora" / "flux1");
  for (fluxrt::GenerateRequest& r : requests) {
    r.true_cfg = 2.0f;
    r.negative_prompt = "blurry";
  }
  expect_one_call_gives_each_its_images_alone(engine, requests);
}

TEST(EngineBatchLoras, KeysKeepWholeCallLorasToTheirOwnList) {
  fluxrt::Engine klein((kModels / "flux2-klein-tiny").string());
  const fs::path plain = kData / "lora" / "klein";
  const fs::path lycoris = kData / "lora_lycoris" / "klein";
  const fluxrt::GenerateRequest none = request({"a"}, 1, {});
  const fluxrt::GenerateRequest one = request({"a"}, 1, {lora(plain / "peft.safetensors", 1.0f)});
  const fluxrt::GenerateRequest other = request({"b"}, 2, {lora(plain / "second.safetensors", 0.3f)});
  // Plain LoRAs: any sets together, never with requests that carry none (those keep the fused path).
  EXPECT_EQ(klein.batch_key(one), klein.batch_key(other));
  EXPECT_NE(klein.batch_key(one), klein.batch_key(none));
  // LoKr / LoHa / DoRA (a merged copy of the weights for the call): only the same list.
  const fluxrt::GenerateRequest mixed = request({"a"}, 1, {lora(lycoris / "kohya_mixed.safetensors", 1.0f)});
  fluxrt::GenerateRequest mixed_weaker = mixed, mixed_other_prompt = mixed;
  mixed_weaker.loras[0].strength = 0.7f;
  mixed_other_prompt.prompts = {"b"};
  EXPECT_NE(klein.batch_key(mixed), klein.batch_key(one));
  EXPECT_NE(klein.batch_key(mixed), klein.batch_key(mixed_weaker));
  EXPECT_EQ(klein.batch_key(mixed), klein.batch_key(mixed_other_prompt));
  // A plain file with a LoKr one: the list decides.
  fluxrt::GenerateRequest plain_and_mixed = one;
  plain_and_mixed.loras.push_back(lora(lycoris / "kohya_mixed.safetensors", 1.0f));
  EXPECT_NE(klein.batch_key(plain_and_mixed), klein.batch_key(one));
  // A missing file is not guessed at: its own list, and generate reports it.
  const fluxrt::GenerateRequest missing = request({"a"}, 1, {lora(plain / "no_such.safetensors", 1.0f)});
  EXPECT_NE(klein.batch_key(missing), klein.batch_key(one));

  // FLUX.1 text-encoder LoRAs change the batch's prompt encoding: only the same list.
  fluxrt::Engine dev((kModels / "flux1-dev-tiny").string());
  const fs::path te = kData / "lora_text_encoder";
  const fluxrt::GenerateRequest te_a = request({"a"}, 1, {lora(te / "kohya_te.safetensors", 1.0f)});
  const fluxrt::GenerateRequest te_b = request({"a"}, 1, {lora(te / "kohya_t5.safetensors", 1.0f)});
  const fluxrt::GenerateRequest dev_plain =
      request({"a"}, 1, {lora(kData / "lora" / "flux1" / "peft.safetensors", 1.0f)});
  EXPECT_NE(dev.batch_key(te_a), dev.batch_key(te_b));
  EXPECT_NE(dev.batch_key(te_a), dev.batch_key(dev_plain));
}

TEST(EngineBatchLoras, ABatchOfLoraAndPlainRequestsIsRefused) {
  fluxrt::Engine engine((kModels / "flux2-klein-tiny").string());
  const std::vector<fluxrt::GenerateRequest> requests{
      request({"a"}, 1, {lora(kData / "lora" / "klein" / "peft.safetensors", 1.0f)}), request({"b"}, 2, {})};
  try {
    (void)engine.generate_batch(requests);
    FAIL() << "a batch of requests with and without LoRAs ran";
  } catch (const fluxrt::Error& e) {
    EXPECT_EQ(e.code(), fluxrt::ErrorCode::InvalidArgument);
  }
}
