#pragma once
// Sigma schedules and the Euler step of the FLUX pipelines, computed exactly as diffusers'
// FluxPipeline / Flux2KleinPipeline with FlowMatchEulerDiscreteScheduler compute them, so the
// float32 sigmas, timesteps and updated latents are bit-identical to the reference.
//
// Dtype flow of the reference (all reproduced here):
//   1. base sigmas: np.linspace(1.0, 1/N, N) in float64 (i * step + 1, the last set to 1/N);
//   2. mu in float64 Python arithmetic: compute_empirical_mu (FLUX.2) or calculate_shift with
//      the scheduler config (FLUX.1), from the packed image token count (H/16)*(W/16);
//   3. set_timesteps casts the sigmas to float32 and shifts them in float32 numpy arithmetic,
//      the Python-float constants (exp(mu), mu, shift) rounded to float32 first (NEP 50):
//        exponential: e / (e + (1/s - 1)),  e = f32(exp(mu))   (the "** 1.0" is exact)
//        linear:      m / (m + (1/s - 1)),  m = f32(mu)
//        static:      f32(shift) * s / (1 + f32(shift - 1) * s)   (use_dynamic_shifting false)
//   4. timesteps = sigmas * 1000 in float32; a final sigma 0 is appended (N + 1 sigmas);
//   5. the transformer receives f32 -> latent dtype -> / 1000 in that dtype (model_timestep).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace fluxrt::pipelines {

enum class TimeShiftType { Exponential, Linear };

// scheduler/scheduler_config.json of FlowMatchEulerDiscreteScheduler. Missing keys take the
// class defaults of diffusers 0.42. The options the FLUX repos never set (Karras / exponential
// / beta sigmas, shift_terminal, invert_sigmas, stochastic sampling) are parsed so that a config
// using them is rejected instead of silently giving different sigmas.
struct FlowMatchSchedulerConfig {
  int64_t num_train_timesteps = 1000;
  double shift = 1.0;
  bool use_dynamic_shifting = false;
  double base_shift = 0.5;
  double max_shift = 1.15;
  int64_t base_image_seq_len = 256;
  int64_t max_image_seq_len = 4096;
  TimeShiftType time_shift_type = TimeShiftType::Exponential;
  bool invert_sigmas = false;
  std::optional<double> shift_terminal;
  bool use_karras_sigmas = false;
  bool use_exponential_sigmas = false;
  bool use_beta_sigmas = false;
  bool stochastic_sampling = false;

  // The configs the repos ship: FLUX.1-dev (dynamic exponential shift, base 0.5 / max 1.15 over
  // 256..4096 tokens; the klein repos carry the same file) and FLUX.1-schnell (no shift).
  static FlowMatchSchedulerConfig flux1_dev();
  static FlowMatchSchedulerConfig flux1_schnell();
  static FlowMatchSchedulerConfig flux2_klein() { return flux1_dev(); }

  // Throws Unsupported when an option outside the plain flow-matching Euler schedule is on.
  void validate() const;
};

FlowMatchSchedulerConfig parse_flow_match_scheduler_config(std::string_view json_text);
// Reads a scheduler_config.json file, or <dir>/scheduler/scheduler_config.json when given a
// model folder.
FlowMatchSchedulerConfig load_flow_match_scheduler_config(const std::filesystem::path& path);

struct Schedule {
  std::vector<float> sigmas;     // num_steps + 1 values, the last 0
  std::vector<float> timesteps;  // num_steps values: sigmas * num_train_timesteps in f32
  std::optional<double> mu;      // the shift parameter passed to the scheduler, if any
  int num_steps() const { return static_cast<int>(timesteps.size()); }
};

// Packed image tokens of an H x W (pixels) image: (H/(2f)) * (W/(2f)) for a VAE of spatial factor
// f (8: (H/16) * (W/16)), the `image_seq_len` both pipelines feed to mu.
int64_t packed_image_seq_len(int64_t height, int64_t width, int64_t vae_scale_factor = 8);

// Flux2KleinPipeline.compute_empirical_mu (float64, as the Python function).
double compute_empirical_mu(int64_t image_seq_len, int num_steps);
// FluxPipeline.calculate_shift (float64).
double calculate_shift(int64_t image_seq_len, int64_t base_seq_len, int64_t max_seq_len, double base_shift,
                       double max_shift);

// np.linspace(1.0, 1 / num_steps, num_steps): the sigmas both pipelines pass to set_timesteps.
std::vector<double> pipeline_base_sigmas(int num_steps);

// FlowMatchEulerDiscreteScheduler.set_timesteps(sigmas=sigmas, mu=mu). mu is required when the
// config uses dynamic shifting and ignored otherwise.
Schedule flow_match_set_timesteps(const FlowMatchSchedulerConfig& config, std::span<const double> sigmas,
                                  std::optional<double> mu);

// The whole "prepare timesteps" step of each pipeline.
Schedule flux1_schedule(const FlowMatchSchedulerConfig& config, int num_steps, int64_t image_seq_len);
Schedule flux2_schedule(const FlowMatchSchedulerConfig& config, int num_steps, int64_t image_seq_len);

// The timestep value the transformer receives at a step: `t.expand(B).to(dtype) / 1000` with
// dtype the latents' dtype (f32, bf16 or f16); returned as f32 holding the dtype's value.
float model_timestep(float timestep, DType latent_dtype);

// FlowMatchEulerDiscreteScheduler.step (deterministic): x + (sigma_next - sigma) * v.
// dt is an f32 scalar; the product takes model_output's dtype (for bf16/f16: dt rounded to that
// dtype, product rounded to it, as torch's 0-dim-tensor promotion does); the sum is f32
// (sample upcast to f32); the result is cast to model_output's dtype. dtypes: f32, bf16, f16;
// shapes must match; both on one device, where the update runs (ops, no host round trip) and the
// result stays. Returns a new contiguous tensor.
Tensor euler_step(const Tensor& sample, const Tensor& model_output, float sigma, float sigma_next);
// Step `index` of a schedule (uses sigmas[index] and sigmas[index + 1]).
Tensor euler_step(const Tensor& sample, const Tensor& model_output, const Schedule& schedule, int index);

}  // namespace fluxrt::pipelines
