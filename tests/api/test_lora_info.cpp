// fluxrt::inspect_lora (include/fluxrt/lora.h): which family a LoRA file is for and which models
// it can be applied to, as the pipeline registry tells them (each kind's LoRA name scheme).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "fluxrt/error.h"
#include "fluxrt/lora.h"
#include "io/safetensors.h"

namespace {

namespace fs = std::filesystem;
using Families = std::vector<std::string>;

const fs::path kLora = fs::path(FLUXRT_TEST_DATA_DIR) / "lora";

// A LoRA file adapting the given modules (A [2, 6], B [8, 2]).
fs::path write_lora(const std::string& name, const std::vector<std::string>& modules) {
  const fs::path path =
      fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()) + ".safetensors");
  std::vector<std::pair<std::string, fluxrt::Tensor>> tensors;
  for (const std::string& m : modules) {
    tensors.emplace_back(m + ".lora_A.weight", fluxrt::Tensor::full({2, 6}, fluxrt::DType::F32, 0.5f));
    tensors.emplace_back(m + ".lora_B.weight", fluxrt::Tensor::full({8, 2}, fluxrt::DType::F32, 0.25f));
  }
  fluxrt::io::write_safetensors(path.string(), tensors);
  return path;
}

TEST(LoraInfo, FamilyAndTheModelsItFits) {
  fluxrt::LoraInfo klein = fluxrt::inspect_lora((kLora / "klein" / "bfl.safetensors").string());
  EXPECT_EQ(klein.family, "FLUX.2");
  EXPECT_EQ(klein.model_families, Families{"flux.2"});
  fluxrt::LoraInfo xlabs = fluxrt::inspect_lora((kLora / "flux1" / "xlabs.safetensors").string());
  EXPECT_EQ(xlabs.family, "FLUX.1");
  EXPECT_EQ(xlabs.model_families, Families{"flux.1"});

  const fs::path shared = write_lora("shared", {"double_blocks.0.img_attn.qkv", "img_in"});
  const fluxrt::LoraInfo either = fluxrt::inspect_lora(shared.string());
  EXPECT_EQ(either.family, "FLUX.1 or FLUX.2 (only shared layers)");
  EXPECT_EQ(either.model_families, (Families{"flux.1", "flux.2"}));
  fs::remove(shared);
}

TEST(LoraInfo, MixedFamiliesAreRefused) {
  const fs::path mixed = write_lora("mixed", {"single_stream_modulation.lin", "double_blocks.0.img_mod.lin"});
  try {
    fluxrt::inspect_lora(mixed.string());
    ADD_FAILURE() << "accepted";
  } catch (const fluxrt::Error& e) {
    EXPECT_EQ(e.code(), fluxrt::ErrorCode::Format);
    EXPECT_NE(std::string(e.what()).find("mixes FLUX.1-only and FLUX.2-only layer names"), std::string::npos)
        << e.what();
  }
  fs::remove(mixed);
}

}  // namespace
