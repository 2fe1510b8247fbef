#pragma once
// What fluxrt::Run carries from the settings resolver to Engine(run) (include/fluxrt/run.h holds
// it as an opaque pointer): the model as resolved, so the engine does not resolve it again.
#include "runtime/model_resolution.h"

namespace fluxrt {

class ResolvedModel {
 public:
  explicit ResolvedModel(runtime::ResolvedPipeline resolved) : pipeline(std::move(resolved)) {}
  const runtime::ResolvedPipeline pipeline;
};

}  // namespace fluxrt
