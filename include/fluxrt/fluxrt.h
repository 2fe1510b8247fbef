#pragma once
// The whole public API (docs/api.md): the engine and its types, errors, images, model info, the
// timing report, runs stated the `fluxrt generate` way, and the scheduler over an engine.
#include "fluxrt/engine.h"
#include "fluxrt/error.h"
#include "fluxrt/image.h"
#include "fluxrt/model_info.h"
#include "fluxrt/run.h"
#include "fluxrt/scheduler.h"
#include "fluxrt/timing.h"
#include "fluxrt/version.h"
