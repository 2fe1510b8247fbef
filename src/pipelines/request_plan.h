#pragma once
// The one place a request's unset fields are filled in and its values checked (issue: "one
// request path"): plan_request runs the checks every family shares against the model's
// RequestLimits, then the family's own plan (PipelineKind::plan: its defaults and rules), then
// the size and memory check. Engine::plan, Engine::batch_key, Engine::generate and the settings
// resolver (before anything is loaded) all call it, so every front end refuses the same requests
// with the same messages, and the pipelines run exactly the plan.
//
// Errors are InvalidArgument (OutOfMemory for a size that cannot fit) with Error::field() the
// field at fault: its key in the field table (fluxrt/request_fields.h), or "prompts",
// "reference_images", "init_image" for the inputs outside it.
#include <string>

#include "fluxrt/request.h"
#include "pipelines/memory_estimate.h"
#include "pipelines/pipeline.h"

namespace fluxrt::pipelines {

fluxrt::RequestPlan plan_request(const PipelineKind& kind, const fluxrt::GenerateRequest& request,
                                 const ModelFacts& facts, const MemoryCheck& memory);

// What must agree for requests to share one pipeline call, as a string: the plan's size, steps,
// guidance, CFG, text length, the LoRAs and the negative prompt CFG uses. "" for a request that
// cannot share a call (reference images, an init image).
std::string batch_key(const fluxrt::GenerateRequest& request, const fluxrt::RequestPlan& plan);

}  // namespace fluxrt::pipelines
