#pragma once
// Step caching for the denoising loop (GenerateRequest::cache): diffusers 0.42.1's First-Block
// Cache, TaylorSeer and MagCache hooks (src/diffusers/hooks/first_block_cache.py,
// taylorseer_cache.py, mag_cache.py), computed the same way on either FLUX transformer through
// its models::FluxForwardHooks. One StepCache serves one request: a state per CFG branch, as
// diffusers keeps one per `cache_context` ("cond", "uncond"), started fresh as diffusers resets
// its hooks at the end of every pipeline call.
//
// What the methods decide is logged per denoising step (decisions()): 'F' every branch ran the
// whole transformer, 'C' every branch reused the cache, 'P' (First-Block Cache under CFG) the
// branches decided differently.
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "fluxrt/request.h"
#include "models/flux/flux_forward_hooks.h"
#include "pipelines/cache_text.h"

namespace fluxrt::pipelines {

// diffusers' FLUX_MAG_RATIOS (hooks/mag_cache.py): FLUX.1 dev's magnitude ratios for 28 steps,
// the first 1.
const std::vector<float>& flux1_dev_mag_ratios();

// diffusers' nearest_interp: `ratios` resampled to `length` entries by nearest index (computed in
// f32, ties to even, as torch.round).
std::vector<float> interpolate_mag_ratios(const std::vector<float>& ratios, int length);

// The config as a request's plan runs it: values checked (InvalidArgument naming field "cache"),
// MagCache's num_inference_steps set (unset: `steps_run`) and its ratios filled in (empty: the
// model's `shipped_ratios`; none: refused) and interpolated to num_inference_steps.
fluxrt::CacheConfig resolve_cache_config(const fluxrt::CacheConfig& config, int steps_run,
                                         const std::vector<float>& shipped_ratios, const std::string& model);

// "first-block threshold=0.05", ...: the method and its settings, for the metadata and notes.
std::string describe_cache_config(const fluxrt::CacheConfig& config);
// Every setting of a resolved config (the description and MagCache's ratios), for the batch key.
std::string cache_key(const fluxrt::CacheConfig& config);

class StepCache {
 public:
  // `config` as resolve_cache_config returned it; `branches`: 2 under CFG, else 1; `model_dtype`:
  // the transformer's, in which diffusers' hooks compute.
  StepCache(const fluxrt::CacheConfig& config, int branches, DType model_dtype);
  ~StepCache();
  StepCache(const StepCache&) = delete;
  StepCache& operator=(const StepCache&) = delete;

  // The hooks for branch `branch`'s transformer call (0: conditional, 1: unconditional); null
  // outside begin_step / end_step, so a call that computes nothing (the kernels' planning pass)
  // changes no state.
  models::FluxForwardHooks* hooks(int branch);
  void begin_step();
  void end_step();

  // One character per step that ran: 'F', 'C' or 'P' (above).
  const std::string& decisions() const { return decisions_; }
  // MagCache with calibrate: the conditional branch's ratio per step (the first 1), as diffusers
  // prints them; else empty.
  std::vector<float> calibration_ratios() const;

  class Branch;  // one branch's state and hooks (step_cache.cpp)

 private:
  std::vector<std::unique_ptr<Branch>> branches_;
  bool in_step_ = false;
  std::string decisions_;
};

}  // namespace fluxrt::pipelines
