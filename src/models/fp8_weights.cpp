#include "models/fp8_weights.h"

#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/quant.h"

namespace fluxrt::models {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_fp8(DType t) { return t == DType::F8E4M3 || t == DType::F8E5M2; }

bool is_weight_scale(const std::string& n) {
  return ends_with(n, ".scale_weight") || ends_with(n, ".weight_scale");
}

bool is_dropped(const std::string& n) {
  return ends_with(n, ".scale_input") || ends_with(n, ".input_scale") || n == "scaled_fp8" ||
         ends_with(n, ".scaled_fp8");
}

// bf16(f32(w) * scale[row]) for an fp8 tensor that is not a 2-D weight; `scale` 1 or rows values.
Tensor dequantize_dense(const Tensor& w, const Tensor& scale) {
  std::array<float, 256> table{};
  for (int i = 0; i < 256; ++i)
    table[static_cast<size_t>(i)] = w.dtype() == DType::F8E4M3 ? f8e4m3_to_f32(static_cast<uint8_t>(i))
                                                               : f8e5m2_to_f32(static_cast<uint8_t>(i));
  const Tensor src = w.contiguous();
  Tensor out = Tensor::empty(src.shape(), DType::BF16);
  const auto* in = src.data<uint8_t>();
  auto* dst = out.data<uint16_t>();
  const int64_t n = src.numel();
  const int64_t rows = src.dim() >= 1 && src.size(0) > 0 ? src.size(0) : 1;
  const int64_t cols = n / rows;
  for (int64_t r = 0; r < rows; ++r) {
    const float s = !scale.defined() ? 1.0f : scale.data<float>()[scale.numel() == 1 ? 0 : r];
    for (int64_t j = r * cols; j < (r + 1) * cols; ++j) dst[j] = f32_to_bf16(table[in[j]] * s);
  }
  return out;
}

}  // namespace

TensorStore fp8_weights_quantized(const TensorStore& raw) {
  const std::vector<std::string> names = raw.names();
  // A quantized (GGUF) entry is not fp8, and is not dequantized to find that out.
  auto fp8 = [&](const std::string& n) { return raw.quantized(n) == nullptr && is_fp8(raw.get(n).dtype()); };
  if (std::none_of(names.begin(), names.end(), fp8)) return raw;
  TensorStore out;
  out.set_description(raw.description());
  std::vector<std::string> consumed;
  for (const std::string& name : names) {
    if (is_weight_scale(name) || is_dropped(name)) continue;
    if (!fp8(name)) {
      out.add_entry(name, raw, name);
      continue;
    }
    const Tensor& t = raw.get(name);
    const int64_t rows = t.dim() >= 1 ? t.size(0) : 1;
    Tensor scale;
    if (ends_with(name, ".weight")) {
      const std::string base = name.substr(0, name.size() - std::string("weight").size());
      for (const char* key : {"scale_weight", "weight_scale"}) {
        if (!raw.contains(base + key)) continue;
        scale = raw.get(base + key).to(DType::F32).contiguous().reshape({-1});
        FLUXRT_CHECK(
            scale.numel() == 1 || (scale.numel() == rows && t.dim() == 2), ErrorCode::Unsupported,
            "{}: fp8 scale '{}' has shape {} for weight {}: only per-tensor and per-row scales are supported",
            raw.description(), base + key, raw.shape(base + key).str(), t.shape().str());
        consumed.push_back(base + key);
        break;
      }
    }
    if (t.dim() != 2) {
      out.add(name, dequantize_dense(t, scale), raw.origin(name));
      continue;
    }
    QuantizedMatrix q;
    q.type = t.dtype() == DType::F8E4M3 ? QuantType::F8E4M3 : QuantType::F8E5M2;
    q.rows = t.size(0);
    q.cols = t.size(1);
    const Tensor bytes = t.contiguous();  // a view of the mapping when the file's tensor is (it is)
    q.bytes = Tensor::from_blob(bytes.raw_data(), {static_cast<int64_t>(bytes.nbytes())}, DType::U8,
                                std::make_shared<Tensor>(bytes));
    q.scale = scale;
    out.add_quantized(name, std::move(q), raw.origin(name));
  }
  for (const std::string& name : names)
    if (is_weight_scale(name) && std::find(consumed.begin(), consumed.end(), name) == consumed.end())
      out.add(name, raw.get(name), raw.origin(name));
  return out;
}

}  // namespace fluxrt::models
