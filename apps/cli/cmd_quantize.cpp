// `fluxrt quantize --model M --type q8_0 --out file.gguf`: a FLUX transformer as a GGUF file
// (src/runtime/quantize_model.h says which layout and types).
#include <fmt/format.h>

#include <cstdio>

#include "commands.h"
#include "core/error.h"
#include "runtime/quantize_model.h"

namespace fluxrt::cli {

CLI::App* add_quantize_command(CLI::App& app, QuantizeOptions& options) {
  CLI::App* cmd = app.add_subcommand("quantize", "write a FLUX transformer as a GGUF file (q8_0, q4_0, ...)");
  cmd->add_option("--model", options.model,
                  "a transformer checkpoint: diffusers folder, pipeline folder or single file")
      ->required();
  cmd->add_option("--type", options.type,
                  "q8_0, q6_K, q5_K, q5_1, q5_0, q4_K, q4_1, q4_0, q3_K, q2_K, bf16 or f16")
      ->capture_default_str();
  cmd->add_option("--out", options.out, "the GGUF file to write")->required();
  return cmd;
}

int run_quantize(const QuantizeOptions& options) {
  runtime::QuantizeRequest request;
  request.model = options.model;
  request.out = options.out;
  FLUXRT_CHECK(
      quant_type_from_name(options.type, &request.type), ErrorCode::InvalidArgument,
      "--type {}: not a GGUF type (q8_0, q6_K, q5_K, q5_1, q5_0, q4_K, q4_1, q4_0, q3_K, q2_K, bf16, f16)",
      options.type);
  const runtime::QuantizeReport r = runtime::quantize_model(request);
  fmt::print("{}: {} transformer, {} tensors ({} in {}, the rest F16/F32), {} parameters, {:.1f} MB\n",
             options.out, r.family, r.tensors, r.quantized, quant_name(request.type), r.parameters,
             r.bytes_out / 1e6);
  if (r.fallback > 0)
    fmt::print("{} tensors in {}: their rows are not whole 256-value super-blocks\n", r.fallback,
               quant_name(r.fallback_type));
  if (r.quantized > 0)
    fmt::print("weight rel-L2 per tensor: mean {:.3g}, max {:.3g} ({})\n", r.rel_l2_mean, r.rel_l2_max,
               r.rel_l2_max_tensor);
  std::fflush(stdout);
  return 0;
}

}  // namespace fluxrt::cli
