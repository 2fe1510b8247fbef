#include "pipelines/request_loras.h"

#include "core/error.h"

namespace fluxrt::pipelines {

namespace {

bool same_loras(const std::vector<fluxrt::Lora>& a, const std::vector<fluxrt::Lora>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].path != b[i].path || a[i].strength != b[i].strength) return false;
  return true;
}

}  // namespace

RequestLoras::RequestLoras(const std::vector<PlannedRequest>& batch,
                           const std::map<std::string, nn::Linear>& linears,
                           const models::LoraNameScheme* scheme, DType dtype, Device device) {
  FLUXRT_CHECK(!batch.empty(), ErrorCode::Internal, "RequestLoras: an empty batch");
  const std::vector<fluxrt::Lora>& first = batch.front().request->loras;
  bool shared = true;
  for (const PlannedRequest& p : batch) shared = shared && same_loras(p.request->loras, first);
  bool any = false;
  for (const PlannedRequest& p : batch) any = any || !p.request->loras.empty();
  if (!any) return;
  FLUXRT_CHECK_FIELD(scheme != nullptr, ErrorCode::Unsupported, "loras", "this model takes no LoRA");
  const models::LinearShapes shapes = models::linear_shapes_of(linears);
  if (shared) {
    attachments_.push_back(std::make_unique<models::LoraAttachment>(
        linears, models::lora_deltas(first, *scheme, shapes), dtype, device));
    return;
  }
  // Each request's images are consecutive batch elements, in request order (call_batch).
  int64_t begin = 0;
  for (const PlannedRequest& p : batch) {
    const int64_t images = p.plan.images;
    if (!p.request->loras.empty())
      attachments_.push_back(std::make_unique<models::LoraAttachment>(
          linears, models::lora_deltas(p.request->loras, *scheme, shapes), dtype, device,
          nn::Linear::Rows{begin, images}));
    begin += images;
  }
}

}  // namespace fluxrt::pipelines
