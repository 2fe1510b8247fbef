// Progress previews (Callbacks::preview_steps): none before the engine has finished an image,
// then one per image at the output size at exactly the asked steps, and they show the image: a
// preview is closer to the final image than the image's own mean colour is (measured on the demo
// model: about 7 against 27 of 255 at the last step, 8 at the halfway step).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <vector>

#include "fluxrt/engine.h"

namespace fs = std::filesystem;

namespace {

const fs::path kData = FLUXRT_TEST_DATA_DIR;
const fs::path kDemo = kData / ".." / ".." / "models" / "demo";
const fs::path kDev = kData / "models" / "flux1-dev-tiny";

fluxrt::GenerateRequest request(const std::string& prompt, uint64_t seed) {
  fluxrt::GenerateRequest r;
  r.prompts = {prompt};
  r.width = r.height = 64;
  r.steps = 4;
  r.seed = seed;
  return r;
}

// Mean absolute difference per channel value.
double mean_abs(const fluxrt::Image& a, const fluxrt::Image& b) {
  double sum = 0;
  for (size_t i = 0; i < a.rgb.size(); ++i) sum += std::abs(int(a.rgb[i]) - int(b.rgb[i]));
  return sum / static_cast<double>(a.rgb.size());
}

fluxrt::Image mean_colour(const fluxrt::Image& a) {
  double c[3] = {0, 0, 0};
  for (size_t i = 0; i < a.rgb.size(); ++i) c[i % 3] += a.rgb[i];
  fluxrt::Image m = a;
  for (size_t i = 0; i < m.rgb.size(); ++i)
    m.rgb[i] = static_cast<uint8_t>(std::lround(c[i % 3] / (a.rgb.size() / 3)));
  return m;
}

// The previews of a generate call, by step.
std::map<int, std::vector<fluxrt::Image>> previews_of(fluxrt::Engine& engine,
                                                      const fluxrt::GenerateRequest& r,
                                                      std::vector<int> steps,
                                                      fluxrt::GenerateResult* result) {
  std::map<int, std::vector<fluxrt::Image>> by_step;
  std::vector<int> progress_steps;
  fluxrt::Callbacks callbacks;
  callbacks.preview_steps = std::move(steps);
  callbacks.on_progress = [&](const fluxrt::Progress& p) {
    progress_steps.push_back(p.step);
    if (!p.previews.empty()) by_step[p.step] = p.previews;
  };
  *result = engine.generate(r, callbacks);
  EXPECT_EQ(progress_steps.size(), static_cast<size_t>(result->steps));  // every step still reported
  return by_step;
}

}  // namespace

TEST(EnginePreviews, DemoPreviewsShowTheImageOnceTheEngineHasFinishedOne) {
  fluxrt::Engine engine(kDemo.string());
  fluxrt::GenerateResult first;
  EXPECT_TRUE(previews_of(engine, request("a red circle on a blue background", 1), {1, 4}, &first).empty())
      << "nothing to fit the colours from before the first image";

  // Another finished image refines the fit. The map is fitted from the colours finished images
  // had, so the previewed request keeps the palette (red on blue) with a new shape and new seeds.
  fluxrt::GenerateResult ignored;
  previews_of(engine, request("a red circle on a blue background", 2), {}, &ignored);
  fluxrt::GenerateRequest r = request("a red square on a blue background", 3);
  r.images_per_prompt = 2;
  fluxrt::GenerateResult result;
  const auto previews = previews_of(engine, r, {2, 4}, &result);
  ASSERT_EQ(previews.size(), 2u);  // steps 2 and 4 only
  ASSERT_TRUE(previews.count(2) && previews.count(4));
  for (const auto& [step, images] : previews) {
    ASSERT_EQ(images.size(), 2u) << "one preview per image, step " << step;
    for (const fluxrt::Image& p : images) {
      EXPECT_EQ(p.width, 64);
      EXPECT_EQ(p.height, 64);
      EXPECT_EQ(p.rgb.size(), 64u * 64 * 3);
    }
  }
  for (int i = 0; i < 2; ++i) {
    const fluxrt::Image& final_image = result.images[i].image;
    const double flat_error = mean_abs(mean_colour(final_image), final_image);
    for (int step : {2, 4})
      EXPECT_LT(mean_abs(previews.at(step)[i], final_image), flat_error / 2)
          << "image " << i << ", step " << step << ": the preview says little more than a flat colour";
  }
}

TEST(EnginePreviews, BatchPreviewsCoverEveryRequestsImagesAndFlux1HasThemToo) {
  fluxrt::Engine engine(kDev.string());
  fluxrt::GenerateResult first;
  previews_of(engine, request("one", 1), {}, &first);  // fits the colours
  std::vector<fluxrt::GenerateRequest> batch{request("two", 2), request("three", 3)};
  batch[1].images_per_prompt = 2;
  std::vector<size_t> counts;
  fluxrt::Callbacks callbacks;
  callbacks.preview_steps = {3};
  callbacks.on_progress = [&](const fluxrt::Progress& p) { counts.push_back(p.previews.size()); };
  const std::vector<fluxrt::GenerateResult> results = engine.generate_batch(batch, callbacks);
  ASSERT_EQ(counts.size(), 4u);
  EXPECT_EQ(counts, (std::vector<size_t>{0, 0, 3, 0}));  // three images, at step 3 only
  // Previews change nothing about the images.
  EXPECT_TRUE(results[0].images[0].image.rgb == engine.generate(batch[0]).images[0].image.rgb);
}

// Progress::timestep is the schedule's timestep of each step (sigma x 1000), falling.
TEST(EngineProgress, TimestepsAreTheSchedules) {
  fluxrt::Engine engine(kDemo.string());
  std::vector<float> timesteps;
  fluxrt::Callbacks callbacks;
  callbacks.on_progress = [&](const fluxrt::Progress& p) { timesteps.push_back(p.timestep); };
  engine.generate(request("a red circle on a blue background", 1), callbacks);
  ASSERT_EQ(timesteps.size(), 4u);
  EXPECT_LE(timesteps[0], 1000.0f);
  for (size_t i = 1; i < timesteps.size(); ++i) EXPECT_LT(timesteps[i], timesteps[i - 1]) << i;
  EXPECT_GT(timesteps.back(), 0.0f);
}
