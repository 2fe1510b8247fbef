#pragma once
// `fluxrt quantize`: a FLUX transformer checkpoint (a diffusers folder, a pipeline folder's
// transformer/, a single file in BFL or diffusers names, fp8 included) written as a GGUF file the
// way city96's FLUX GGUFs are: general.architecture "flux", BFL tensor names, 2-D weights whose
// rows are whole blocks in the chosen type (for a K type, rows of whole 32-value blocks in its
// k_quant_fallback type), other 2-D tensors F16, 1-D tensors (norm scales, biases) F32. The `gguf` package
// and stable-diffusion.cpp / ComfyUI-GGUF read such files.
#include <cstdint>
#include <string>

#include "core/quant.h"

namespace fluxrt::runtime {

struct QuantizeRequest {
  std::string model;
  QuantType type = QuantType::Q8_0;
  std::string out;
};

struct QuantizeReport {
  std::string family;    // "flux.1" or "flux.2"
  size_t tensors = 0;    // written
  size_t quantized = 0;  // in `type`
  // K types: 2-D weights whose rows are not whole 256-value super-blocks but whole 32-value blocks,
  // written in k_quant_fallback(type) instead (the rest F16).
  size_t fallback = 0;
  QuantType fallback_type = QuantType::F16;
  uint64_t parameters = 0;
  uint64_t bytes_out = 0;  // tensor data written
  // Per-tensor quantization error of the tensors written in `type`: rel-L2 = ||W - dequant(W)|| /
  // ||W|| (the weights as the checkpoint holds them, in f32).
  double rel_l2_mean = 0, rel_l2_max = 0;
  std::string rel_l2_max_tensor;
};

// The 32-value block type a K type falls back to where a row is not whole super-blocks, as
// llama.cpp's quantizer does: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K / Q3_K -> Q4_0 (llama.cpp:
// IQ4_NL). Other types return themselves.
QuantType k_quant_fallback(QuantType type);

QuantizeReport quantize_model(const QuantizeRequest& request);

}  // namespace fluxrt::runtime
