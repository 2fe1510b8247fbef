// The settings resolver (include/fluxrt/run.h): settings over a preset over the model's defaults,
// the model resolved once, the request read and planned, before any weight is loaded.
#include "fluxrt/run.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <system_error>

#include "core/device.h"
#include "core/error.h"
#include "fluxrt/request_fields.h"
#include "frontend/output_files.h"
#include "frontend/presets.h"
#include "io/image.h"
#include "io/public_image.h"
#include "io/utf8.h"
#include "pipelines/request_plan.h"
#include "runtime/engine.h"
#include "runtime/model_resolution.h"
#include "runtime/resolved_model.h"

namespace fluxrt {
namespace fs = std::filesystem;
namespace {

// The presets in effect: `--config`, else default.yaml when shipped, with demo.yaml over it when
// no model is named anywhere (the bundled demo model runs at the size it was trained at, far
// from the 1024x1024 a FLUX model defaults to).
frontend::Preset presets_of(const RunSettings& s) {
  frontend::Preset preset;
  if (s.preset && *s.preset == "none") return preset;
  if (s.preset) return frontend::load_preset(frontend::find_preset(*s.preset));
  if (const fs::path file = frontend::shipped_preset("default"); !file.empty())
    preset = frontend::load_preset(file);
  if (!s.model && !preset.model)
    if (const fs::path file = frontend::shipped_preset("demo"); !file.empty())
      preset = frontend::merge_presets(preset, frontend::load_preset(file));
  return preset;
}

std::vector<std::string> read_prompts_file(const fs::path& file) {
  std::error_code ec;
  FLUXRT_CHECK(fs::is_regular_file(file, ec), ErrorCode::NotFound, "prompts file {} not found",
               file.string());
  std::ifstream in(file, std::ios::binary);
  FLUXRT_CHECK(in.good(), ErrorCode::Io, "cannot read prompts file {}", file.string());
  std::vector<std::string> prompts;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    // Named by file and line here; the plan would only say "prompt N" of the non-blank ones.
    size_t bad = 0;
    FLUXRT_CHECK_FIELD(io::is_valid_utf8(line, &bad), ErrorCode::InvalidArgument, "prompts",
                       "{}:{} is not valid UTF-8 (byte {})", file.string(), number, bad);
    FLUXRT_CHECK_FIELD(line.find('\0') == std::string::npos, ErrorCode::InvalidArgument, "prompts",
                       "{}:{} contains a NUL byte", file.string(), number);
    prompts.push_back(line);
  }
  FLUXRT_CHECK(!in.bad(), ErrorCode::Io, "cannot read prompts file {}", file.string());
  FLUXRT_CHECK(!prompts.empty(), ErrorCode::InvalidArgument, "prompts file {} holds no prompt (one per line)",
               file.string());
  return prompts;
}

Image read_request_image(const std::string& path, const char* flag) {
  try {
    return io::to_public(io::to_rgb(io::read_image(path)));
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", flag, e.what()));  // read_image names the file
  }
}

// The request fields the settings and the preset give, flags over the preset, each set with the
// model's limits and named as the user wrote it. Returns whether the seed was drawn at random (no
// seed anywhere draws one, as `seed: random` does).
bool apply_fields(GenerateRequest& r, const RunSettings& s, const frontend::Preset& preset,
                  const RequestLimits& limits) {
  bool seed_given = false, random = false;
  auto set = [&](const RequestField& field, const std::string& text, std::string_view name) {
    const bool drawn = set_request_field(r, field, text, limits, name);
    if (std::string_view(field.key) == "seed") {
      seed_given = true;
      random = drawn;
    }
  };
  for (const auto& [key, text] : preset.fields) set(*find_request_field(key), text, preset.where.at(key));
  for (const auto& [key, text] : s.fields) {
    const RequestField* field = find_request_field(key);
    FLUXRT_CHECK(field != nullptr, ErrorCode::InvalidArgument, "'{}' is not a request field", key);
    set(*field, text, field->flag);
  }
  if (!seed_given) set(*find_request_field("seed"), "random", "seed");
  return random;
}

VaeTiling tiling_of(const std::string& text) {
  if (text == "on") return VaeTiling::On;
  if (text == "off") return VaeTiling::Off;
  FLUXRT_CHECK(text == "auto", ErrorCode::InvalidArgument, "--vae-tiling '{}' must be auto, on or off", text);
  return VaeTiling::Auto;
}

}  // namespace

Lora parse_lora_text(const std::string& text) {
  Lora l{text, 1.0f};
  const size_t colon = text.rfind(':');
  if (colon != std::string::npos) {
    const std::string tail = text.substr(colon + 1);
    char* end = nullptr;
    const double v = std::strtod(tail.c_str(), &end);
    // Finite as the float a Lora holds: "1e300" is no strength, so part of the file name.
    if (!tail.empty() && end == tail.c_str() + tail.size() && std::isfinite(v) &&
        std::fabs(v) <= std::numeric_limits<float>::max()) {
      l.path = text.substr(0, colon);
      l.strength = static_cast<float>(v);
    }
  }
  FLUXRT_CHECK(!l.path.empty(), ErrorCode::InvalidArgument, "--lora '{}': no file name (FILE[:STRENGTH])",
               io::escape_for_message(text, 100));
  return l;
}

Run resolve_run(const RunSettings& s) {
  const frontend::Preset preset = presets_of(s);
  Run run;
  run.preset = preset.source;

  // Every stated field's syntax first, with the bounds every model has: a typo costs no model
  // resolution.
  for (const auto& [key, text] : s.fields) {
    const RequestField* field = find_request_field(key);
    FLUXRT_CHECK(field != nullptr, ErrorCode::InvalidArgument, "'{}' is not a request field", key);
    GenerateRequest scratch;
    set_request_field(scratch, *field, text, request_limits(), field->flag);
  }
  FLUXRT_CHECK(!(s.prompt && s.prompts_file), ErrorCode::InvalidArgument,
               "give either --prompt or --prompts-file, not both");

  // The engine options.
  EngineOptions& e = run.engine;
  const std::string dtype = s.dtype.value_or(preset.dtype.value_or("bf16"));
  e.precision = parse_precision(dtype, "--dtype");
  e.device = Device::parse(s.device.value_or(preset.device.value_or("cpu"))).str();
  e.threads = s.threads ? s.threads : preset.threads;
  if (e.threads) FLUXRT_CHECK(*e.threads >= 0, ErrorCode::InvalidArgument, "--threads must be >= 0");
  const std::optional<bool> low_memory_asked = s.low_memory ? s.low_memory : preset.low_memory;
  e.vae_tiling = tiling_of(s.vae_tiling.value_or(preset.vae_tiling.value_or("auto")));
  e.cuda_graphs = s.cuda_graphs;
  e.free_text_encoder = s.free_text_encoder;
  e.components = s.components;
  e.text_encoder = s.text_encoder;
  for (const Lora& l : s.loras ? *s.loras : preset.loras.value_or(std::vector<Lora>{})) {
    std::error_code ec;
    FLUXRT_CHECK(fs::is_regular_file(l.path, ec), ErrorCode::NotFound, "LoRA file {} not found", l.path);
    e.loras.push_back(l);
  }

  // Prompts and images, read now so a missing file fails before the model.
  GenerateRequest& r = run.request;
  if (s.prompt) {
    r.prompts = {*s.prompt};
  } else if (s.prompts_file) {
    r.prompts = read_prompts_file(*s.prompts_file);
  } else if (preset.prompts) {
    r.prompts = *preset.prompts;
  }
  run.prompt_given = s.prompt || s.prompts_file || preset.prompts;
  for (const std::string& path : s.reference_images) {
    r.reference_images.push_back(read_request_image(path, "--image"));
    r.reference_image_names.push_back(fs::path(path).filename().string());
  }
  if (const std::optional<std::string> init = s.init_image ? s.init_image : preset.init_image) {
    r.init_image = read_request_image(*init, "--init-image");
    r.init_image_name = fs::path(*init).filename().string();
    run.init_image = *init;
  }
  if (const std::optional<std::string> mask = s.mask ? s.mask : preset.mask) {
    r.mask_image = read_request_image(*mask, "--mask");
    r.mask_image_name = fs::path(*mask).filename().string();
  }
  // The encoder only when this request needs it: its weights and load time otherwise.
  e.vae_encoder = !r.reference_images.empty() || r.init_image.has_value();

  if (s.writes_images) {
    run.out_dir = s.out_dir.value_or(preset.out_dir.value_or(frontend::kDefaultOutDir));
    frontend::check_output_dir_writable(run.out_dir);
    run.filename_pattern =
        s.filename_pattern.value_or(preset.filename_pattern.value_or(frontend::kDefaultFilenamePattern));
    frontend::format_output_name(run.filename_pattern, {});  // a bad pattern fails before the run
  }
  if (s.profile) {
    const fs::path profile(*s.profile);
    frontend::check_output_dir_writable(profile.has_parent_path() ? profile.parent_path() : ".");
    std::error_code ec;
    FLUXRT_CHECK(!fs::is_directory(profile, ec), ErrorCode::InvalidArgument,
                 "--profile {} is a folder; give a file name", *s.profile);
  }

  // The model last: the most expensive step, and the bundled demo only when nothing else says.
  run.model = s.model ? *s.model : preset.model ? *preset.model : runtime::find_bundled_demo_model().string();
  runtime::ResolvedPipeline resolved = runtime::resolve_pipeline(run.model, s.components, s.text_encoder);
  run.variant = runtime::variant_label(resolved);
  pipelines::PipelineOptions options;
  options.dtype = runtime::dtype_of(e.precision);
  options.transformer_linears = runtime::transformer_linears_of(e.precision);
  options.transformer_file = resolved.transformer_file;
  options.text_encoder_file = resolved.text_encoder_file;
  options.low_memory = true;  // describe loads nothing anyway
  const pipelines::ModelFacts facts = resolved.kind->describe(resolved.model.path, options);
  run.limits = facts.limits;
  run.seed_was_random = apply_fields(r, s, preset, facts.limits);

  // The plan with the components resident together; a model whose components do not fit
  // (klein-9B, FLUX.1 with T5-XXL on 24 GiB) runs one component at a time rather than failing,
  // unless low_memory was set to false explicitly.
  // A front end with requests of its own (a server, a binding) plans here only the defaults its
  // requests start from: the images a model needs with every request (FLUX.1 Fill's mask, Kontext's
  // image) come with those requests and are checked with them (Engine::plan).
  pipelines::ModelFacts plan_facts = facts;
  if (!s.writes_images) {
    plan_facts.limits.mask_required = false;
    plan_facts.limits.min_reference_images = 0;
  }
  auto plan_with = [&](bool low_memory) {
    return pipelines::plan_request(*resolved.kind, r, plan_facts,
                                   pipelines::MemoryCheck{facts.weights.peak(low_memory, s.free_text_encoder),
                                                          s.ram_limit_bytes, !low_memory});
  };
  bool low_memory = low_memory_asked.value_or(false);
  try {
    run.plan = plan_with(low_memory);
  } catch (const Error& e2) {
    if (e2.code() != ErrorCode::OutOfMemory || low_memory || low_memory_asked.has_value()) throw;
    run.plan = plan_with(true);  // throws when even one component at a time does not fit
    low_memory = true;
    run.notes.push_back(
        fmt::format("the components need {:.1f} GiB of weights together, more than this machine has: running "
                    "in low-memory "
                    "mode (one component resident at a time; --low-memory to ask for it, low_memory: false "
                    "in a preset to refuse)",
                    static_cast<double>(facts.weights.peak(false, s.free_text_encoder)) / 1073741824.0));
  }
  e.low_memory = low_memory;
  for (const std::string& note : run.plan.notes) run.notes.push_back(note);
  if (s.cuda_graphs && Device::parse(e.device) == Device::cpu())
    run.notes.push_back("--cuda-graphs has no effect on the CPU");
  run.resolved = std::make_shared<const ResolvedModel>(std::move(resolved));
  return run;
}

}  // namespace fluxrt
