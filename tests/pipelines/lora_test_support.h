#pragma once
// Shared by the LoRA golden tests (test_lora_golden.cpp, test_lora_text_encoder.cpp): the run the
// reference scripts render (tools/reference/dump_lora.py's prompt, seed and size), the pipeline
// tolerance check, and the one-line error of a call.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "io/image.h"
#include "io/safetensors.h"
#include "pipelines/pipeline.h"
#include "support/image_compare.h"

namespace fluxrt::test {

inline const std::filesystem::path kLoraData = std::filesystem::path(FLUXRT_TEST_DATA_DIR) / "lora";

inline nlohmann::json lora_manifest() {
  std::ifstream in(kLoraData / "manifest.json");
  return nlohmann::json::parse(in);
}

// The reference images' folder suffix for a dtype.
inline const char* lora_dtype_dir(DType d) { return d == DType::F32 ? "f32" : "bf16"; }

// dump_lora.py's prompt and seed, 64x64, 2 steps, 32 text tokens (dump_lora_text_encoder.py reuses them).
inline fluxrt::GenerateRequest lora_request(std::vector<models::LoraSpec> loras = {}) {
  const nlohmann::json m = lora_manifest();
  fluxrt::GenerateRequest r;
  r.prompts = {m["prompt"].get<std::string>()};
  r.seed = m["seed"].get<uint64_t>();
  r.width = r.height = 64;
  r.steps = 2;
  r.max_sequence_length = 32;
  r.loras = std::move(loras);
  return r;
}

// The pipeline tolerances (docs/numerics.md): f32 every sample within 2/255, bf16 SSIM >= 0.98.
inline void expect_lora_image_matches(const io::Image& actual, const io::Image& expected, DType dtype,
                                      const std::string& what) {
  ASSERT_EQ(actual.width, expected.width) << what;
  ASSERT_EQ(actual.height, expected.height) << what;
  const ImageDiff d = compare_images(io::to_rgb(actual), expected);
  if (dtype == DType::F32) {
    EXPECT_LE(d.max_abs, 2) << what << ": " << d.str();
  } else {
    EXPECT_GE(d.ssim, 0.98) << what << ": " << d.str();
  }
  std::printf("%s: %s\n", what.c_str(), d.str().c_str());
}

// A LoRA file of `tensors` in the temp directory (fluxrt_lora_<name>.safetensors); callers remove it.
inline std::filesystem::path temp_lora(const std::string& name,
                                       const std::vector<std::pair<std::string, Tensor>>& tensors) {
  const std::filesystem::path p =
      std::filesystem::temp_directory_path() / ("fluxrt_lora_" + name + ".safetensors");
  io::write_safetensors(p.string(), tensors);
  return p;
}

// The message of the fluxrt::Error `fn` throws ("" when it throws none); its code in *code.
inline std::string error_of(const std::function<void()>& fn, ErrorCode* code = nullptr) {
  try {
    fn();
  } catch (const Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "";
}

}  // namespace fluxrt::test
