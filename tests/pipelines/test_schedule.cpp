// Sigma schedules, mu, model timesteps and the Euler step against diffusers' own classes
// (tools/reference/dump_schedules.py): float32 results must match bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "pipelines/schedule.h"

namespace fluxrt::pipelines {
namespace {

using nlohmann::json;

json load(const std::string& name) {
  const std::string path = std::string(FLUXRT_TEST_DATA_DIR) + "/schedules/" + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return json::parse(in);
}

DType parse_dtype(const std::string& name) {
  if (name == "f32") return DType::F32;
  if (name == "bf16") return DType::BF16;
  if (name == "f16") return DType::F16;
  throw std::runtime_error("unknown dtype " + name);
}

uint32_t bits(float v) { return std::bit_cast<uint32_t>(v); }

// A tensor from stored bit patterns.
Tensor from_bits(const json& values, DType dtype) {
  const int64_t n = static_cast<int64_t>(values.size());
  Tensor t = Tensor::empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::F32) {
      t.data<uint32_t>()[i] = values[i].get<uint32_t>();
    } else {
      t.data<uint16_t>()[i] = values[i].get<uint16_t>();
    }
  }
  return t;
}

uint32_t bits_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::F32 ? t.data<uint32_t>()[i] : t.data<uint16_t>()[i];
}

TEST(Schedule, MatchesDiffusers) {
  const json doc = load("schedules.json");
  int checked = 0;
  for (const auto& c : doc["cases"]) {
    const FlowMatchSchedulerConfig config = parse_flow_match_scheduler_config(c["config"].dump());
    const int steps = c["steps"];
    const int64_t seq = c["image_seq_len"];
    const std::string family = c["family"];
    const Schedule s = family == "flux2" ? flux2_schedule(config, steps, seq) : flux1_schedule(config, steps, seq);
    const std::string where = family + " N=" + std::to_string(steps) + " seq=" + std::to_string(seq) +
                              (config.use_dynamic_shifting ? "" : " static shift") +
                              (config.time_shift_type == TimeShiftType::Linear ? " linear" : "");
    // mu must be the same float64 (repr round-trips exactly).
    ASSERT_TRUE(s.mu.has_value()) << where;
    EXPECT_EQ(*s.mu, std::stod(c["mu"].get<std::string>())) << where;
    ASSERT_EQ(s.sigmas.size(), c["sigmas"].size()) << where;
    ASSERT_EQ(s.timesteps.size(), c["timesteps"].size()) << where;
    for (size_t i = 0; i < s.sigmas.size(); ++i) {
      EXPECT_EQ(bits(s.sigmas[i]), c["sigmas"][i].get<uint32_t>()) << where << " sigma " << i << " = " << s.sigmas[i];
    }
    for (size_t i = 0; i < s.timesteps.size(); ++i) {
      EXPECT_EQ(bits(s.timesteps[i]), c["timesteps"][i].get<uint32_t>()) << where << " timestep " << i;
      for (const char* dt : {"f32", "bf16", "f16"}) {
        const DType dtype = parse_dtype(dt);
        const float got = model_timestep(s.timesteps[i], dtype);
        const uint32_t want = c["model_timestep"][dt][i].get<uint32_t>();
        const uint32_t have = dtype == DType::F32 ? bits(got) : dtype == DType::BF16 ? f32_to_bf16(got) : f32_to_f16(got);
        EXPECT_EQ(have, want) << where << " model timestep " << i << " " << dt;
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 25);
}

TEST(Schedule, ReferenceDocumentVectors) {
  // flux-reference.md 5.3 (float64 formulas; the float32 schedule agrees to ~1e-6).
  const Schedule klein = flux2_schedule(FlowMatchSchedulerConfig::flux2_klein(), 4, packed_image_seq_len(1024, 1024));
  const double want_klein[] = {1.0, 0.967384, 0.908144, 0.767200, 0.0};
  ASSERT_EQ(klein.sigmas.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(klein.sigmas[i], want_klein[i], 2e-6);
  EXPECT_NEAR(*klein.mu, 2.291180, 1e-6);
  EXPECT_NEAR(compute_empirical_mu(4096, 50), 2.023351, 1e-6);
  EXPECT_NEAR(compute_empirical_mu(1024, 4), 2.030690, 1e-6);

  const Schedule dev = flux1_schedule(FlowMatchSchedulerConfig::flux1_dev(), 28, packed_image_seq_len(1024, 1024));
  EXPECT_NEAR(*dev.mu, 1.15, 1e-12);
  EXPECT_NEAR(dev.sigmas[1], 0.988409, 2e-6);
  EXPECT_NEAR(dev.sigmas[27], 0.104721, 2e-6);
  EXPECT_EQ(dev.sigmas[28], 0.0f);

  const Schedule schnell = flux1_schedule(FlowMatchSchedulerConfig::flux1_schnell(), 4, 4096);
  const float want_schnell[] = {1.0f, 0.75f, 0.5f, 0.25f, 0.0f};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(schnell.sigmas[i], want_schnell[i]);
  EXPECT_EQ(schnell.timesteps[1], 750.0f);
}

TEST(Schedule, BaseSigmasAreNumpyLinspace) {
  const std::vector<double> one = pipeline_base_sigmas(1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0], 1.0);
  const std::vector<double> four = pipeline_base_sigmas(4);
  EXPECT_EQ(four.front(), 1.0);
  EXPECT_EQ(four.back(), 0.25);
  EXPECT_THROW(pipeline_base_sigmas(0), Error);
}

TEST(Euler, MatchesDiffusersStep) {
  const json doc = load("euler.json");
  int checked = 0;
  for (const auto& c : doc["cases"]) {
    const DType sample_dtype = parse_dtype(c["sample_dtype"]);
    const DType output_dtype = parse_dtype(c["model_output_dtype"]);
    Schedule schedule;
    for (const auto& b : c["sigmas"]) schedule.sigmas.push_back(std::bit_cast<float>(b.get<uint32_t>()));
    schedule.timesteps.resize(schedule.sigmas.size() - 1);
    int index = 0;
    for (const auto& st : c["steps"]) {
      const Tensor x = from_bits(st["sample"], sample_dtype);
      const Tensor v = from_bits(st["model_output"], output_dtype);
      const Tensor got = euler_step(x, v, schedule, index);
      ASSERT_EQ(got.dtype(), parse_dtype(st["result_dtype"]));
      const json& want = st["result"];
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(bits_at(got, static_cast<int64_t>(i)), want[i].get<uint32_t>())
            << c["sample_dtype"] << "/" << c["model_output_dtype"] << " step " << index << " element " << i;
      }
      ++index;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 20);
}

TEST(Euler, RejectsMismatchedInputs) {
  const Tensor x = Tensor::zeros({4}, DType::BF16);
  EXPECT_THROW(euler_step(x, Tensor::zeros({5}, DType::BF16), 1.0f, 0.5f), Error);
  EXPECT_THROW(euler_step(x, Tensor::zeros({4}, DType::F64), 1.0f, 0.5f), Error);
  Schedule s = flux2_schedule(FlowMatchSchedulerConfig::flux2_klein(), 4, 4096);
  EXPECT_THROW(euler_step(x, x, s, 4), Error);
}

TEST(SchedulerConfig, ParsesAndValidates) {
  const FlowMatchSchedulerConfig c = parse_flow_match_scheduler_config(
      R"({"_class_name": "FlowMatchEulerDiscreteScheduler", "base_image_seq_len": 256, "base_shift": 0.5,
          "max_image_seq_len": 4096, "max_shift": 1.15, "num_train_timesteps": 1000, "shift": 3.0,
          "shift_terminal": null, "time_shift_type": "exponential", "use_dynamic_shifting": true})");
  EXPECT_TRUE(c.use_dynamic_shifting);
  EXPECT_EQ(c.shift, 3.0);
  EXPECT_EQ(c.max_image_seq_len, 4096);
  const FlowMatchSchedulerConfig defaults = parse_flow_match_scheduler_config("{}");
  EXPECT_FALSE(defaults.use_dynamic_shifting);
  EXPECT_EQ(defaults.shift, 1.0);

  auto code_of = [](const char* text) {
    try {
      parse_flow_match_scheduler_config(text).validate();
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::Internal;  // no error
  };
  EXPECT_EQ(code_of("{"), ErrorCode::Format);
  EXPECT_EQ(code_of(R"({"shift": "3"})"), ErrorCode::Format);
  EXPECT_EQ(code_of(R"({"time_shift_type": "cosine"})"), ErrorCode::Format);
  EXPECT_EQ(code_of(R"({"_class_name": "EulerDiscreteScheduler"})"), ErrorCode::Unsupported);
  EXPECT_EQ(code_of(R"({"use_karras_sigmas": true})"), ErrorCode::Unsupported);
  EXPECT_EQ(code_of(R"({"shift_terminal": 0.1})"), ErrorCode::Unsupported);
  EXPECT_EQ(code_of(R"({"stochastic_sampling": true})"), ErrorCode::Unsupported);

  // Dynamic shifting without mu is an error, as in diffusers.
  const std::vector<double> base = pipeline_base_sigmas(4);
  EXPECT_THROW(flow_match_set_timesteps(c, base, std::nullopt), Error);
}

TEST(SchedulerConfig, LoadsTheTinyKleinModelFolder) {
  const std::filesystem::path dir = std::filesystem::path(FLUXRT_TEST_DATA_DIR) / "models" / "flux2-klein-tiny";
  if (!std::filesystem::exists(dir / "scheduler" / "scheduler_config.json")) GTEST_SKIP() << "no tiny klein model";
  const FlowMatchSchedulerConfig c = load_flow_match_scheduler_config(dir);
  EXPECT_TRUE(c.use_dynamic_shifting);
  EXPECT_EQ(c.base_image_seq_len, 256);
  EXPECT_THROW(load_flow_match_scheduler_config(dir / "missing.json"), Error);
}

}  // namespace
}  // namespace fluxrt::pipelines
