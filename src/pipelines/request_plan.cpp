#include "pipelines/request_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "io/utf8.h"
#include "models/lora/lora_delta.h"
#include "pipelines/step_cache.h"

namespace fluxrt {

RequestLimits request_limits() { return RequestLimits{}; }

}  // namespace fluxrt

namespace fluxrt::pipelines {
namespace {

void check_text(const std::string& text, const char* field, const std::string& what, int max_chars) {
  size_t bad = 0;
  FLUXRT_CHECK_FIELD(io::is_valid_utf8(text, &bad), ErrorCode::InvalidArgument, field,
                     "{} is not valid UTF-8 (byte {})", what, bad);
  FLUXRT_CHECK_FIELD(text.find('\0') == std::string::npos, ErrorCode::InvalidArgument, field,
                     "{} contains a NUL byte", what);
  FLUXRT_CHECK_FIELD(io::utf8_length(text) <= static_cast<size_t>(max_chars), ErrorCode::InvalidArgument,
                     field, "{} is longer than {} characters", what, max_chars);
}

void check_scale(const std::optional<float>& value, const char* field, float max) {
  if (!value) return;
  FLUXRT_CHECK_FIELD(std::isfinite(*value) && *value >= 0.0f && *value <= max, ErrorCode::InvalidArgument,
                     field, "{} {} must be a number from 0 to {}", field, *value, max);
}

// The checks every family shares: what the limits bound, and the inputs the family takes.
void check_request(const PipelineKind& kind, const fluxrt::GenerateRequest& r,
                   const fluxrt::RequestLimits& l) {
  FLUXRT_CHECK_FIELD(!r.prompts.empty(), ErrorCode::InvalidArgument, "prompts",
                     "no prompt (an empty one is allowed)");
  for (size_t i = 0; i < r.prompts.size(); ++i)
    check_text(r.prompts[i], "prompts",
               r.prompts.size() == 1 ? "the prompt" : fmt::format("prompt {}", i + 1), l.max_prompt_chars);
  if (r.negative_prompt)
    check_text(*r.negative_prompt, "negative_prompt", "the negative prompt", l.max_prompt_chars);
  FLUXRT_CHECK_FIELD(r.images_per_prompt >= 1 && r.images_per_prompt <= l.max_images_per_prompt,
                     ErrorCode::InvalidArgument, "batch", "images_per_prompt {} must be in [1, {}]",
                     r.images_per_prompt, l.max_images_per_prompt);
  FLUXRT_CHECK_FIELD(static_cast<int64_t>(r.prompts.size()) * r.images_per_prompt <= l.max_images,
                     ErrorCode::InvalidArgument, "batch",
                     "{} prompts x {} images is more than {} images in one request", r.prompts.size(),
                     r.images_per_prompt, l.max_images);
  if (r.steps)
    FLUXRT_CHECK_FIELD(*r.steps >= 1 && *r.steps <= l.max_steps, ErrorCode::InvalidArgument, "steps",
                       "steps {} must be in [1, {}]", *r.steps, l.max_steps);
  check_scale(r.guidance, "guidance", l.max_guidance);
  if (r.max_sequence_length)
    FLUXRT_CHECK_FIELD(*r.max_sequence_length >= 1 && *r.max_sequence_length <= l.max_sequence_length,
                       ErrorCode::InvalidArgument, "max_sequence_length",
                       "max_sequence_length {} must be in [1, {}] for {} models", *r.max_sequence_length,
                       l.max_sequence_length, kind.name);
  for (const std::optional<int>* side : {&r.width, &r.height})
    if (*side)
      FLUXRT_CHECK_FIELD(**side >= 1 && **side <= l.max_side, ErrorCode::InvalidArgument, "size",
                         "image size {}x{}: sides must be in [1, {}]", r.width.value_or(0),
                         r.height.value_or(0), l.max_side);

  // The inputs only some families take: refused, never dropped.
  if (!r.reference_images.empty()) {
    FLUXRT_CHECK_FIELD(l.max_reference_images > 0, ErrorCode::InvalidArgument, "reference_images",
                       "{} models take no reference images{}", kind.name,
                       l.init_image ? " (give one image as init_image for img2img)" : "");
    FLUXRT_CHECK_FIELD(static_cast<int>(r.reference_images.size()) <= l.max_reference_images,
                       ErrorCode::InvalidArgument, "reference_images",
                       "{} reference images: {} models take at most {}", r.reference_images.size(), kind.name,
                       l.max_reference_images);
  }
  FLUXRT_CHECK_FIELD(static_cast<int>(r.reference_images.size()) >= l.min_reference_images,
                     ErrorCode::InvalidArgument, "reference_images",
                     "{} models edit an image: give it as a reference image (--image, the edits endpoint's "
                     "'image')",
                     kind.name);
  // Before the mask rules: a crop without a mask is about the crop.
  FLUXRT_CHECK_FIELD(!r.padding_mask_crop || l.padding_mask_crop, ErrorCode::InvalidArgument,
                     "padding_mask_crop",
                     "padding_mask_crop is not for {} models (their diffusers pipeline has "
                     "none)",
                     kind.name);
  FLUXRT_CHECK_FIELD(!r.padding_mask_crop || r.mask_image, ErrorCode::InvalidArgument, "padding_mask_crop",
                     "padding_mask_crop crops around the mask: it needs a mask (and init_image)");
  if (r.padding_mask_crop)
    FLUXRT_CHECK_FIELD(*r.padding_mask_crop >= 0 && *r.padding_mask_crop <= l.max_side,
                       ErrorCode::InvalidArgument, "padding_mask_crop",
                       "padding_mask_crop {} must be an integer from 0 to {}", *r.padding_mask_crop,
                       l.max_side);
  FLUXRT_CHECK_FIELD(!r.mask_image || l.mask, ErrorCode::InvalidArgument, "mask",
                     "a mask (inpainting) is not for {} models", kind.name);
  FLUXRT_CHECK_FIELD(!l.mask_required || r.mask_image, ErrorCode::InvalidArgument, "mask",
                     "{} models repaint a masked image: give the image (init_image) and a mask (white "
                     "repaints)",
                     kind.name);
  FLUXRT_CHECK_FIELD(!r.mask_image || r.init_image, ErrorCode::InvalidArgument, "mask",
                     "a mask needs the image being edited (init_image)");
  if (r.mask_image && r.init_image)
    FLUXRT_CHECK_FIELD(
        r.mask_image->width == r.init_image->width && r.mask_image->height == r.init_image->height,
        ErrorCode::InvalidArgument, "mask",
        "the mask is {}x{}, the image being edited {}x{}: they must match", r.mask_image->width,
        r.mask_image->height, r.init_image->width, r.init_image->height);
  FLUXRT_CHECK_FIELD(!r.init_image || l.init_image || r.mask_image, ErrorCode::InvalidArgument, "init_image",
                     "init_image (img2img) is not for {} models{}", kind.name,
                     l.max_reference_images > 0
                         ? " (give the image as a reference image to edit it, or with a mask to inpaint)"
                         : "");
  FLUXRT_CHECK_FIELD(!r.strength || l.init_image || l.mask, ErrorCode::InvalidArgument, "strength",
                     "strength is for img2img, which {} models do not have", kind.name);
  FLUXRT_CHECK_FIELD(!r.strength || r.init_image, ErrorCode::InvalidArgument, "strength",
                     "strength is for img2img and needs init_image");
  if (r.strength)
    FLUXRT_CHECK_FIELD(std::isfinite(*r.strength) && *r.strength > 0.0f && *r.strength <= 1.0f,
                       ErrorCode::InvalidArgument, "strength",
                       "strength {} must be in (0, 1] (1: the init image is fully noised)", *r.strength);
  FLUXRT_CHECK_FIELD(
      !r.true_cfg || l.true_cfg, ErrorCode::InvalidArgument, "true_cfg", "true_cfg is not for {} models{}",
      kind.name, l.true_cfg ? "" : " (classifier-free guidance, where the model has it, is guidance > 1)");
  check_scale(r.true_cfg, "true_cfg", l.max_guidance);
  FLUXRT_CHECK_FIELD(!r.max_area || l.max_area, ErrorCode::InvalidArgument, "max_area",
                     "max_area is for FLUX.1 Kontext models, not {} (give the size itself)", kind.name);
}

}  // namespace

fluxrt::RequestPlan plan_request(const PipelineKind& kind, const fluxrt::GenerateRequest& request,
                                 const ModelFacts& facts, const MemoryCheck& memory) {
  check_request(kind, request, facts.limits);
  fluxrt::RequestPlan plan = kind.plan(request, facts);
  plan.images = static_cast<int>(request.prompts.size()) * request.images_per_prompt;
  check_image_size(plan.width, plan.height, plan.images, facts.vae_scale_factor);
  kind.validate_size(plan.width, plan.height, plan.images, facts.vae_scale_factor, memory);
  for (const std::string& note : facts.notes) plan.notes.push_back(note);
  if (request.cache) {
    const fluxrt::CacheConfig cache =
        resolve_cache_config(*request.cache, plan.steps_run, facts.mag_ratios, kind.name);
    // The few-step distilled models gain nothing from a step cache (peers switch it off there):
    // a no-op, said, never a silent slowdown.
    if (facts.limits.step_cache)
      plan.cache = cache;
    else
      plan.notes.push_back(
          fmt::format("cache ({}) not used: this {} model is distilled to a few steps, "
                      "where a step cache saves nothing",
                      describe_cache_config(cache), kind.name));
  }
  return plan;
}

std::string batch_key(const fluxrt::GenerateRequest& request, const fluxrt::RequestPlan& p) {
  // Reference and init images are per request inputs of the loop (tokens, the start latents).
  if (!request.reference_images.empty() || request.init_image) return "";
  // The negative prompt last, with its length, so no prompt text can make two keys collide.
  // The LoRA set before it: plain transformer LoRAs attach to each request's own images
  // (RequestLoras), so any such sets share a batch; other sets (LoKr, LoHa, DoRA merge weights for
  // the whole call, text-encoder modules change the batch's prompt encoding) only the same set,
  // each path with its length, so no path can make two keys collide.
  std::string loras;
  if (models::loras_batch_by_rows(request.loras)) {
    loras = "each request's own low-rank";
  } else {
    for (const fluxrt::Lora& l : request.loras)
      loras += fmt::format("{}:{}:{} ", l.path.size(), l.path, l.strength);
  }
  // First-Block Cache decides from the whole batch's residual: its requests run alone, as they
  // would alone. TaylorSeer and MagCache decide from the step alone and compute per row: the
  // same settings share a call.
  if (p.cache && std::holds_alternative<fluxrt::FirstBlockCacheConfig>(*p.cache)) return "";
  return fmt::format(
      "{}x{} steps {} guidance {} cfg {} true_cfg {} text {} loras [{}] cache [{}] negative {}:{}", p.width,
      p.height, p.steps, p.guidance, p.cfg, p.true_cfg ? fmt::format("{}", *p.true_cfg) : "unset",
      p.max_sequence_length, loras, p.cache ? cache_key(*p.cache) : "", p.negative_prompt.size(),
      p.negative_prompt);
}

fluxrt::RequestPlan Pipeline::plan(const fluxrt::GenerateRequest& request) const {
  return plan_request(kind(), request, facts(), options().memory_check(facts().weights));
}

GenerateResult Pipeline::generate(const fluxrt::GenerateRequest& request, const CallContext& call) {
  return generate({PlannedRequest{&request, plan(request)}}, call);
}

}  // namespace fluxrt::pipelines
