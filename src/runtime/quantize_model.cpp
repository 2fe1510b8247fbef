#include "runtime/quantize_model.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "io/gguf.h"
#include "io/model_discovery.h"
#include "models/weight_binder.h"
#include "pipelines/pipeline.h"

namespace fluxrt::runtime {
namespace {

// The bytes of `t` (any float dtype, [rows, cols] or 1-D) in `type`, row by row through f32, and
// the rel-L2 error of their dequantization into *rel_l2.
std::vector<uint8_t> encode(const Tensor& t, QuantType type, double* rel_l2) {
  const Tensor f = t.to(DType::F32).contiguous();
  const int64_t cols = f.size(-1), rows = f.numel() / cols;
  const size_t row_bytes = quant_row_bytes(type, cols);
  std::vector<uint8_t> out(static_cast<size_t>(rows) * row_bytes);
  const float* src = f.data<float>();
  double err = 0, ref = 0;
#pragma omp parallel reduction(+ : err, ref)
  {
    std::vector<float> back(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      quantize_row_ref(type, src + r * cols, out.data() + r * row_bytes, cols);
      dequantize_row_ref(type, out.data() + r * row_bytes, back.data(), cols);
      for (int64_t j = 0; j < cols; ++j) {
        const double w = src[r * cols + j], d = back[static_cast<size_t>(j)] - w;
        err += d * d;
        ref += w * w;
      }
    }
  }
  *rel_l2 = ref > 0 ? std::sqrt(err / ref) : 0.0;
  return out;
}

}  // namespace

QuantType k_quant_fallback(QuantType type) {
  // llama.cpp's quantizer does the same for rows that are not whole super-blocks; for Q2_K / Q3_K
  // it takes IQ4_NL, which this engine does not read, so Q4_0 (the same 4.5 bits) stands in.
  switch (type) {
    case QuantType::Q2_K:
    case QuantType::Q3_K:
      return QuantType::Q4_0;
    case QuantType::Q4_K:
      return QuantType::Q5_0;
    case QuantType::Q5_K:
      return QuantType::Q5_1;
    case QuantType::Q6_K:
      return QuantType::Q8_0;
    default:
      return type;
  }
}

QuantizeReport quantize_model(const QuantizeRequest& request) {
  FLUXRT_CHECK(quant_can_quantize(request.type) && quant_traits(request.type).ggml_id >= 0,
               ErrorCode::Unsupported,
               "fluxrt quantize: type {} cannot be written (q8_0, q6_K, q5_K, q5_1, q5_0, q4_K, q4_1, q4_0, "
               "q3_K, q2_K, bf16, f16 can)",
               quant_name(request.type));
  const io::ResolvedModel model = io::resolve_model(request.model);
  const io::ModelComponent* tc = model.transformer();
  FLUXRT_CHECK(tc != nullptr && tc->present && !tc->weights.empty(), ErrorCode::NotFound,
               "{}: no transformer weights to quantize", request.model);
  const pipelines::VariantInfo variant = pipelines::detect_variant(model);
  FLUXRT_CHECK(variant.kind != nullptr, ErrorCode::Unsupported, "{}: not a FLUX transformer ({})",
               tc->weights, variant.description);
  models::TensorStore raw = models::TensorStore::open(tc->weights);
  raw.set_description(tc->weights);
  // Canonical names first (strips prefixes, splits fused tensors, widens fp8 with its scale),
  // then BFL's, which is what the GGUF loaders in the wild expect.
  const models::TensorStore bfl = variant.kind->bfl_checkpoint(raw);

  QuantizeReport report;
  report.family = variant.family;
  report.fallback_type = k_quant_fallback(request.type);
  std::vector<io::GgufTensorToWrite> tensors;
  for (const std::string& name : bfl.names()) {
    const Tensor& t = bfl.get(name);
    io::GgufTensorToWrite w;
    w.name = name;
    w.shape = t.shape();
    const int64_t cols = t.dim() == 2 ? t.size(1) : 0;
    if (t.dim() == 2 && cols % quant_traits(request.type).block == 0) {
      w.type = request.type;
      ++report.quantized;
    } else if (t.dim() == 2 && report.fallback_type != request.type &&
               cols % quant_traits(report.fallback_type).block == 0) {
      w.type = report.fallback_type;
      ++report.fallback;
    } else {
      w.type = t.dim() == 2 ? QuantType::F16 : QuantType::F32;
    }
    double rel_l2 = 0;
    w.bytes = encode(t, w.type, &rel_l2);
    if (w.type == request.type) {
      report.rel_l2_mean += rel_l2;
      if (rel_l2 >= report.rel_l2_max) {
        report.rel_l2_max = rel_l2;
        report.rel_l2_max_tensor = name;
      }
    }
    report.parameters += static_cast<uint64_t>(t.numel());
    report.bytes_out += w.bytes.size();
    tensors.push_back(std::move(w));
  }
  report.tensors = tensors.size();
  if (report.quantized > 0) report.rel_l2_mean /= static_cast<double>(report.quantized);
  auto str = [](const std::string& s) {
    io::GgufValue v;
    v.type = io::GgufValueType::String;
    v.s = s;
    return v;
  };
  io::GgufValue quant_version;
  quant_version.type = io::GgufValueType::U32;
  quant_version.u = 2;  // GGML_QNT_VERSION of the block layouts written
  io::write_gguf(request.out, tensors,
                 {{"general.architecture", str("flux")},
                  {"general.quantization_version", quant_version},
                  {"general.name", str(variant.description)}});
  return report;
}

}  // namespace fluxrt::runtime
