// The step cache's pieces that need no model (pipelines/step_cache.h): MagCache's ratio
// interpolation and its decisions over a whole run, TaylorSeer's step windows and its Taylor
// extrapolation, First-Block Cache's relative L1 test, the config checks, and that a call outside
// a step (the kernels' planning pass) sees no hooks. The expected values are diffusers 0.42.1's
// (nearest_interp and MagCacheHeadHook evaluated in torch, f32 like the hooks' tensors).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "ops/elementwise.h"
#include "pipelines/step_cache.h"

namespace fluxrt::pipelines {
namespace {

Tensor filled(const Shape& shape, float value) {
  Tensor t = Tensor::zeros(shape, DType::F32);
  t.fill(value);
  return t;
}

TEST(StepCache, MagRatiosInterpolateAsDiffusersNearestInterp) {
  const std::vector<float>& r = flux1_dev_mag_ratios();
  ASSERT_EQ(r.size(), 28u);
  auto picked = [&](const std::vector<int>& indices) {
    std::vector<float> out;
    for (int i : indices) out.push_back(r[static_cast<size_t>(i)]);
    return out;
  };
  EXPECT_EQ(interpolate_mag_ratios(r, 12), picked({0, 2, 5, 7, 10, 12, 15, 17, 20, 22, 25, 27}));
  EXPECT_EQ(interpolate_mag_ratios(r, 5), picked({0, 7, 14, 20, 27}));
  EXPECT_EQ(interpolate_mag_ratios(r, 20),
            picked({0, 1, 3, 4, 6, 7, 9, 10, 11, 13, 14, 16, 17, 18, 20, 21, 23, 24, 26, 27}));
  EXPECT_EQ(interpolate_mag_ratios(r, 1), std::vector<float>{r.back()});
  EXPECT_EQ(interpolate_mag_ratios(r, 28), r);
}

// Drives one branch's MagCache hooks through a run on tiny tensors; returns the decisions.
std::string mag_run(fluxrt::MagCacheConfig config, int steps) {
  StepCache cache(resolve_cache_config(config, steps, flux1_dev_mag_ratios(), "FLUX.1"), 1, DType::F32);
  for (int i = 0; i < steps; ++i) {
    cache.begin_step();
    models::FluxForwardHooks* hooks = cache.hooks(0);
    Tensor img = filled({1, 3, 4}, 1.0f + i), txt = filled({1, 2, 4}, -1.0f);
    if (!hooks->blocks_cached(img, txt)) {
      const Tensor h = ops::concat({txt, filled({1, 3, 4}, 2.0f + 2 * i)}, 1);
      hooks->blocks_computed(h, 2);
    } else {
      // Skipped: the image stream is its input plus the last residual (here 1 + i + (1 + i')).
      EXPECT_GT(img.item({0, 0, 0}), 1.0f + i);
    }
    cache.end_step();
  }
  return cache.decisions();
}

TEST(StepCache, MagCacheDecidesAsDiffusersOverAWholeRun) {
  EXPECT_EQ(mag_run({}, 28), "FFFFFFCFCFCCCFCCCFCCCFCCFCFF");  // the defaults on FLUX.1 dev's ratios
  EXPECT_EQ(mag_run({}, 50), "FFFFFFFFFFCFCFCFCFCFCCCFCCCFCCCFCCCFCCCFCCFCFCFFFF");  // interpolated
  fluxrt::MagCacheConfig c;
  c.threshold = 0.1f;
  c.max_skip_steps = 2;
  c.retention_ratio = 0.1f;
  EXPECT_EQ(mag_run(c, 28), "FFFCFCFCFCCFCCFCCFCCFCCFCFCF");
  c.calibrate = true;
  EXPECT_EQ(mag_run(c, 28), std::string(28, 'F'));
}

TEST(StepCache, TaylorSeerWindowsAndExtrapolation) {
  fluxrt::TaylorSeerCacheConfig c;
  c.cache_interval = 3;
  c.disable_cache_before_step = 2;
  c.disable_cache_after_step = 9;
  c.use_lite_mode = true;  // the whole output: one module
  c.taylor_factors_dtype = "float32";
  StepCache cache(resolve_cache_config(c, 11, {}, "m"), 1, DType::F32);
  std::vector<float> outputs;
  for (int i = 0; i < 11; ++i) {
    cache.begin_step();
    models::FluxForwardHooks* hooks = cache.hooks(0);
    Tensor out = hooks->cached_output();
    if (!out.defined()) {
      out = filled({1, 2, 2}, 3.0f * i + 1.0f);  // linear in the step: order 1 extrapolates exactly
      hooks->output_computed(out);
    }
    outputs.push_back(out.item({0, 1, 1}));
    cache.end_step();
  }
  // Full before step 2, at 3, 6 (since (step - 2 - 1) % 3 == 0) and from step 9; step 2 predicts.
  EXPECT_EQ(cache.decisions(), "FFCFCCFCCFF");
  for (int i = 2; i < 11; ++i) EXPECT_FLOAT_EQ(outputs[i], 3.0f * i + 1.0f) << i;
}

TEST(StepCache, FirstBlockSkipsTheRestWhileTheHeadResidualBarelyChanges) {
  fluxrt::FirstBlockCacheConfig c;
  c.threshold = 0.2f;
  StepCache cache(c, 1, DType::F32);
  // Head residuals 1.0, 1.1 (change 0.1: cached), 1.5 (change 0.5 from the last full: full).
  const float residuals[] = {1.0f, 1.1f, 1.5f};
  for (float r : residuals) {
    cache.begin_step();
    models::FluxForwardHooks* hooks = cache.hooks(0);
    const Tensor in = filled({1, 3, 4}, 0.0f);
    Tensor img = filled({1, 3, 4}, r), txt = filled({1, 2, 4}, 0.5f);
    if (!hooks->rest_cached(in, img, txt)) {
      hooks->blocks_computed(ops::concat({filled({1, 2, 4}, 0.75f), filled({1, 3, 4}, r + 2.0f)}, 1), 2);
    } else {
      EXPECT_FLOAT_EQ(img.item({0, 0, 0}), r + 2.0f);  // the tail residual 2 on the head's output
      EXPECT_FLOAT_EQ(txt.item({0, 0, 0}), 0.75f);
    }
    cache.end_step();
  }
  EXPECT_EQ(cache.decisions(), "FCF");
}

TEST(StepCache, NoHooksOutsideAStepAndBranchesCombine) {
  StepCache cache(fluxrt::FirstBlockCacheConfig{}, 2, DType::F32);
  EXPECT_EQ(cache.hooks(0), nullptr);  // the kernels' planning pass changes no state
  cache.begin_step();
  EXPECT_NE(cache.hooks(1), nullptr);
  cache.end_step();
  EXPECT_EQ(cache.decisions(), "F");
}

TEST(StepCache, ConfigChecksNameTheCacheField) {
  auto field_of = [](const fluxrt::CacheConfig& c, const std::vector<float>& shipped) {
    try {
      resolve_cache_config(c, 20, shipped, "FLUX.2 klein");
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      return e.field() + ": " + e.what();
    }
    return std::string();
  };
  EXPECT_NE(
      field_of(fluxrt::MagCacheConfig{}, {}).find("cache: cache: mag needs mag_ratios for FLUX.2 klein"),
      std::string::npos);
  EXPECT_EQ(field_of(fluxrt::MagCacheConfig{}, {1.0f, 1.1f}), "");
  fluxrt::TaylorSeerCacheConfig ts;
  ts.cache_interval = 0;
  EXPECT_NE(field_of(ts, {}).find("cache_interval 0 must be >= 1"), std::string::npos);
  ts.cache_interval = 1;
  ts.taylor_factors_dtype = "int8";
  EXPECT_NE(field_of(ts, {}).find("taylor_factors_dtype"), std::string::npos);
  fluxrt::FirstBlockCacheConfig fbc;
  fbc.threshold = -1;
  EXPECT_NE(field_of(fbc, {}).find("threshold -1 must be a number >= 0"), std::string::npos);
  // MagCache's resolved config: the request's steps and the shipped ratios, interpolated.
  const auto mag = std::get<fluxrt::MagCacheConfig>(
      resolve_cache_config(fluxrt::MagCacheConfig{}, 12, flux1_dev_mag_ratios(), "FLUX.1"));
  EXPECT_EQ(mag.num_inference_steps, std::optional<int>(12));
  EXPECT_EQ(mag.mag_ratios.size(), 12u);
}

}  // namespace
}  // namespace fluxrt::pipelines
