// `fluxrt calibrate-cache --model M --out ratios.json`: MagCache's magnitude ratios for a model,
// measured as diffusers' MagCacheConfig(calibrate=True) measures them (the blocks' residual norm
// of each step over the last step's, the conditional branch's), by one generation that skips
// nothing. The file is what `--cache mag:mag_ratios=FILE` (and Python's MagCacheConfig) reads.
// A client of the public API alone.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "commands.h"
#include "fluxrt/engine.h"
#include "fluxrt/error.h"
#include "fluxrt/request_fields.h"

namespace fluxrt::cli {

CLI::App* add_calibrate_cache_command(CLI::App& app, CalibrateCacheOptions& options) {
  CLI::App* cmd = app.add_subcommand(
      "calibrate-cache",
      "measure a model's MagCache ratios (one uncached generation) and write them as JSON");
  cmd->add_option("--model", options.model, "the model: a diffusers folder, a single file or a hub repo id")
      ->required();
  cmd->add_option("--out", options.out, "the JSON file to write ({\"mag_ratios\": [...], ...})")->required();
  cmd->add_option("--prompt", options.prompt, "the prompt of the calibration run")->capture_default_str();
  cmd->add_option("--steps", options.steps,
                  "denoising steps (default: the model's; the ratios are per step)");
  cmd->add_option("--size", options.size, "image size WxH (default: the model's)");
  cmd->add_option("--max-sequence-length", options.max_sequence_length, "text tokens (default: the model's)");
  cmd->add_option("--seed", options.seed, "noise seed")->capture_default_str();
  cmd->add_option("--dtype", options.dtype, "bf16, f32 or int8 (the transformer's linears W8A8; CPU only)")
      ->check(CLI::IsMember(dtype_choices()))
      ->capture_default_str();
  cmd->add_option("--device", options.device, "cpu, cuda or cuda:N")->capture_default_str();
  return cmd;
}

int run_calibrate_cache(const CalibrateCacheOptions& options) {
  EngineOptions engine_options;
  engine_options.precision = parse_precision(options.dtype, "--dtype");
  engine_options.device = options.device;
  Engine engine(options.model, engine_options);
  GenerateRequest request;
  request.prompts = {options.prompt};
  request.seed = options.seed;
  const RequestLimits limits = engine.limits();
  if (options.steps > 0)
    set_request_field(request, *find_request_field("steps"), int64_t{options.steps}, limits, "--steps");
  if (options.max_sequence_length > 0)
    set_request_field(request, *find_request_field("max_sequence_length"),
                      int64_t{options.max_sequence_length}, limits, "--max-sequence-length");
  if (!options.size.empty())
    set_request_field(request, *find_request_field("size"), options.size, limits, "--size");
  set_request_field(request, *find_request_field("cache"), std::string("mag:calibrate=true"), limits,
                    "--cache");
  const RequestPlan plan = engine.plan(request);
  if (!plan.cache)
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("calibrate-cache: {} takes no step cache ({})", engine.variant(),
                            plan.notes.empty() ? std::string("a distilled model") : plan.notes.back()));
  const GenerateResult result = engine.generate(request);
  std::string list;
  for (size_t i = 0; i < result.mag_ratios.size(); ++i)
    list += fmt::format("{}{:.5f}", i ? ", " : "", result.mag_ratios[i]);
  std::ofstream out(options.out);
  auto quoted = [](const std::string& text) {
    std::string q = "\"";
    for (char c : text) q += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    return q + "\"";
  };
  out << fmt::format(
      "{{\"model\": {}, \"variant\": {}, \"steps\": {}, \"size\": \"{}x{}\", \"mag_ratios\": [{}]}}\n",
      quoted(options.model), quoted(engine.variant()), result.steps, result.width, result.height, list);
  out.close();
  if (!out.good()) throw Error(ErrorCode::Io, fmt::format("calibrate-cache: cannot write {}", options.out));
  fmt::print("{}: {} MagCache ratios of {} ({} steps, {}x{}); use --cache mag:mag_ratios={}\n", options.out,
             result.mag_ratios.size(), engine.variant(), result.steps, result.width, result.height,
             options.out);
  std::fflush(stdout);
  return 0;
}

}  // namespace fluxrt::cli
