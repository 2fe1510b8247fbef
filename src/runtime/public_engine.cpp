// The public fluxrt::Engine (include/fluxrt/engine.h): a pimpl over runtime::Engine, plus the
// metadata's text chunks.
#include <fmt/format.h>

#include "core/error.h"
#include "fluxrt/engine.h"
#include "fluxrt/run.h"
#include "runtime/engine.h"
#include "runtime/resolved_model.h"

namespace fluxrt {

class Engine::Impl : public runtime::Engine {
 public:
  using runtime::Engine::Engine;
};

Engine::Engine(const std::string& model, const EngineOptions& options)
    : impl_(std::make_unique<Impl>(model, options)) {}
Engine::Engine(const Run& run)
    : impl_(run.resolved ? std::make_unique<Impl>(run.model, run.resolved->pipeline, run.engine)
                         : std::make_unique<Impl>(run.model, run.engine)) {}
Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

GenerateResult Engine::generate(const GenerateRequest& request, const Callbacks& callbacks) {
  return impl_->generate(request, callbacks);
}
std::vector<GenerateResult> Engine::generate_batch(const std::vector<GenerateRequest>& requests,
                                                   const Callbacks& callbacks) {
  return impl_->generate_batch(requests, callbacks);
}
std::string Engine::batch_key(const GenerateRequest& request) const { return impl_->batch_key(request); }
RequestPlan Engine::plan(const GenerateRequest& request) const { return impl_->plan(request); }
ModelDefaults Engine::defaults() const { return impl_->defaults(); }
RequestLimits Engine::limits() const { return impl_->limits(); }
const std::string& Engine::model() const { return impl_->model(); }
const std::string& Engine::variant() const { return impl_->variant(); }
ModelInfo Engine::info() const { return impl_->info(); }
std::optional<LoadTimings> Engine::load_timings() const { return impl_->load_timings(); }
const EngineOptions& Engine::options() const { return impl_->options(); }

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::F32:
      return "f32";
    case Precision::Int8:
      return "int8";
    case Precision::BF16:
      break;
  }
  return "bf16";
}

Precision parse_precision(const std::string& name, const std::string& what) {
  for (Precision p : kPrecisions)
    if (name == precision_name(p)) return p;
  fail(ErrorCode::InvalidArgument, "{} '{}' must be bf16, f32 or int8", what, name);
}

TextChunks metadata_text(const ImageMetadata& m) {
  TextChunks text = {
      {"prompt", m.prompt},
      {"negative_prompt", m.negative_prompt},
      {"seed", std::to_string(m.seed)},
      {"batch_index", fmt::format("{} of {}", m.index, m.count)},
      {"steps", std::to_string(m.steps)},
      {"guidance", fmt::format("{}", m.guidance)},
      {"size", fmt::format("{}x{}", m.width, m.height)},
      {"max_sequence_length",
       m.max_sequence_length ? std::to_string(*m.max_sequence_length) : std::string("default")},
      {"model", m.model},
      {"variant", m.variant},
      {"dtype", m.dtype},
      {"fluxrt_version", m.version},
  };
  if (!m.reference_images.empty()) {
    std::string names;
    for (const std::string& name : m.reference_images) names += (names.empty() ? "" : ", ") + name;
    text.emplace_back("reference_images", names);
  }
  if (m.img2img) {
    text.emplace_back("init_image", m.init_image);
    if (m.mask) text.emplace_back("mask", *m.mask);
    if (m.padding_mask_crop) text.emplace_back("padding_mask_crop", std::to_string(*m.padding_mask_crop));
    if (m.strength) text.emplace_back("strength", fmt::format("{}", *m.strength));
    // "steps" is what ran; rerunning needs the schedule's length, which strength trims.
    text.emplace_back("scheduled_steps", std::to_string(m.scheduled_steps));
  }
  if (m.true_cfg) text.emplace_back("true_cfg", fmt::format("{}", *m.true_cfg));
  if (!m.cache.empty()) {
    text.emplace_back("cache", m.cache);
    text.emplace_back("cache_steps", m.cache_steps);
  }
  if (!m.loras.empty()) {
    std::string loras;
    for (const auto& l : m.loras)
      loras +=
          fmt::format("{}{}:{}:{}", loras.empty() ? "" : ", ", l.name, l.strength, l.sha256.substr(0, 12));
    text.emplace_back("loras", loras);
  }
  return text;
}

}  // namespace fluxrt
