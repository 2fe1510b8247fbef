#pragma once
// A call's per-request LoRAs on the transformer for its denoising loop. Requests with the same
// list (or one request) get one attachment on every batch element. Requests with different lists
// meet in one call only when each list is plain low-rank LoRA on the transformer (the batch key,
// models::loras_batch_by_rows): each request's deltas are then attached to its own images' batch
// elements, so the call runs one base GEMM per layer for everyone and each request's rows add only
// its own low-rank product, giving the images the request gets alone.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "models/lora/lora_delta.h"
#include "nn/linear.h"
#include "pipelines/pipeline.h"

namespace fluxrt::pipelines {

class RequestLoras {
 public:
  // Reads the requests' LoRA files and attaches their deltas, named by `scheme` (the kind's; null
  // for a model that takes no LoRA), in `dtype` on `device` (errors carry the field "loras").
  // Detached when destroyed.
  RequestLoras(const std::vector<PlannedRequest>& batch, const std::map<std::string, nn::Linear>& linears,
               const models::LoraNameScheme* scheme, DType dtype, Device device);
  bool empty() const { return attachments_.empty(); }

 private:
  std::vector<std::unique_ptr<models::LoraAttachment>> attachments_;
};

}  // namespace fluxrt::pipelines
