// Schedules and Euler step, mirroring diffusers 0.42 (pipeline_flux.py, pipeline_flux2_klein.py,
// scheduling_flow_match_euler_discrete.py) operation by operation; see schedule.h for the dtype
// flow. Every product that the reference rounds before an addition goes through `rounded` so
// that a compiler targeting FMA hardware (GCC contracts a*b+c by default there) cannot fuse it.
#include "pipelines/schedule.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "ops/elementwise.h"

namespace fluxrt::pipelines {
namespace {

template <typename T>
T rounded(T value) {
  volatile T stored = value;
  return stored;
}

using nlohmann::json;

double number_field(const json& doc, const char* key, double fallback) {
  if (!doc.contains(key) || doc[key].is_null()) return fallback;
  FLUXRT_CHECK(doc[key].is_number(), ErrorCode::Format, "scheduler config: '{}' must be a number", key);
  return doc[key].get<double>();
}

int64_t integer_field(const json& doc, const char* key, int64_t fallback) {
  if (!doc.contains(key) || doc[key].is_null()) return fallback;
  const json& v = doc[key];
  FLUXRT_CHECK(v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()),
               ErrorCode::Format, "scheduler config: '{}' must be an integer", key);
  return v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
}

bool bool_field(const json& doc, const char* key, bool fallback) {
  if (!doc.contains(key) || doc[key].is_null()) return fallback;
  FLUXRT_CHECK(doc[key].is_boolean(), ErrorCode::Format, "scheduler config: '{}' must be true or false", key);
  return doc[key].get<bool>();
}

uint16_t to_narrow(float value, DType dtype) { return dtype == DType::BF16 ? f32_to_bf16(value) : f32_to_f16(value); }
float from_narrow(uint16_t bits, DType dtype) { return dtype == DType::BF16 ? bf16_to_f32(bits) : f16_to_f32(bits); }

bool is_step_dtype(DType dtype) { return dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16; }

}  // namespace

FlowMatchSchedulerConfig FlowMatchSchedulerConfig::flux1_dev() {
  FlowMatchSchedulerConfig c;
  c.num_train_timesteps = 1000;
  c.shift = 3.0;  // present in the file, unused with dynamic shifting
  c.use_dynamic_shifting = true;
  c.base_shift = 0.5;
  c.max_shift = 1.15;
  c.base_image_seq_len = 256;
  c.max_image_seq_len = 4096;
  return c;
}

FlowMatchSchedulerConfig FlowMatchSchedulerConfig::flux1_schnell() {
  FlowMatchSchedulerConfig c = flux1_dev();
  c.use_dynamic_shifting = false;
  c.shift = 1.0;
  return c;
}

void FlowMatchSchedulerConfig::validate() const {
  FLUXRT_CHECK(num_train_timesteps > 0, ErrorCode::InvalidArgument, "scheduler config: num_train_timesteps {} <= 0",
               num_train_timesteps);
  FLUXRT_CHECK(!use_karras_sigmas && !use_exponential_sigmas && !use_beta_sigmas, ErrorCode::Unsupported,
               "scheduler config: Karras/exponential/beta sigmas are not supported");
  FLUXRT_CHECK(!shift_terminal.has_value(), ErrorCode::Unsupported, "scheduler config: shift_terminal is not supported");
  FLUXRT_CHECK(!invert_sigmas, ErrorCode::Unsupported, "scheduler config: invert_sigmas is not supported");
  FLUXRT_CHECK(!stochastic_sampling, ErrorCode::Unsupported, "scheduler config: stochastic_sampling is not supported");
}

FlowMatchSchedulerConfig parse_flow_match_scheduler_config(std::string_view json_text) {
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::exception& e) {
    fail(ErrorCode::Format, "scheduler config: invalid JSON ({})", e.what());
  }
  FLUXRT_CHECK(doc.is_object(), ErrorCode::Format, "scheduler config: expected a JSON object");
  if (doc.contains("_class_name")) {
    FLUXRT_CHECK(doc["_class_name"] == "FlowMatchEulerDiscreteScheduler", ErrorCode::Unsupported,
                 "scheduler config: class {} is not supported (FlowMatchEulerDiscreteScheduler)",
                 doc["_class_name"].dump());
  }
  FlowMatchSchedulerConfig c;
  c.num_train_timesteps = integer_field(doc, "num_train_timesteps", c.num_train_timesteps);
  c.shift = number_field(doc, "shift", c.shift);
  c.use_dynamic_shifting = bool_field(doc, "use_dynamic_shifting", c.use_dynamic_shifting);
  c.base_shift = number_field(doc, "base_shift", c.base_shift);
  c.max_shift = number_field(doc, "max_shift", c.max_shift);
  c.base_image_seq_len = integer_field(doc, "base_image_seq_len", c.base_image_seq_len);
  c.max_image_seq_len = integer_field(doc, "max_image_seq_len", c.max_image_seq_len);
  if (doc.contains("time_shift_type") && !doc["time_shift_type"].is_null()) {
    const json& t = doc["time_shift_type"];
    if (t == "exponential") {
      c.time_shift_type = TimeShiftType::Exponential;
    } else if (t == "linear") {
      c.time_shift_type = TimeShiftType::Linear;
    } else {
      fail(ErrorCode::Format, "scheduler config: time_shift_type {} (expected exponential or linear)", t.dump());
    }
  }
  c.invert_sigmas = bool_field(doc, "invert_sigmas", false);
  if (doc.contains("shift_terminal") && !doc["shift_terminal"].is_null()) {
    c.shift_terminal = number_field(doc, "shift_terminal", 0.0);
  }
  c.use_karras_sigmas = bool_field(doc, "use_karras_sigmas", false);
  c.use_exponential_sigmas = bool_field(doc, "use_exponential_sigmas", false);
  c.use_beta_sigmas = bool_field(doc, "use_beta_sigmas", false);
  c.stochastic_sampling = bool_field(doc, "stochastic_sampling", false);
  return c;
}

FlowMatchSchedulerConfig load_flow_match_scheduler_config(const std::filesystem::path& path) {
  std::filesystem::path file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) file = path / "scheduler" / "scheduler_config.json";
  std::ifstream in(file, std::ios::binary);
  FLUXRT_CHECK(in.good(), ErrorCode::NotFound, "scheduler config: cannot open {}", file.string());
  std::stringstream text;
  text << in.rdbuf();
  try {
    return parse_flow_match_scheduler_config(text.str());
  } catch (const Error& e) {
    fail(e.code(), "{}: {}", file.string(), e.what());
  }
}

int64_t packed_image_seq_len(int64_t height, int64_t width, int64_t vae_scale_factor) {
  const int64_t multiple = vae_scale_factor * 2;  // pixels per packed token side
  FLUXRT_CHECK(vae_scale_factor > 0 && height >= multiple && width >= multiple, ErrorCode::InvalidArgument,
               "image size {}x{} below {} pixels (VAE factor {})", width, height, multiple, vae_scale_factor);
  return (height / multiple) * (width / multiple);
}

double compute_empirical_mu(int64_t image_seq_len, int num_steps) {
  // Constants and operation order of the Python function; each product rounds on its own.
  const double a1 = 8.73809524e-05, b1 = 1.89833333;
  const double a2 = 0.00016927, b2 = 0.45666666;
  const double seq = static_cast<double>(image_seq_len);
  if (image_seq_len > 4300) return rounded(a2 * seq) + b2;
  const double m_200 = rounded(a2 * seq) + b2;
  const double m_10 = rounded(a1 * seq) + b1;
  const double a = (m_200 - m_10) / 190.0;
  const double b = m_200 - rounded(200.0 * a);
  return rounded(a * static_cast<double>(num_steps)) + b;
}

double calculate_shift(int64_t image_seq_len, int64_t base_seq_len, int64_t max_seq_len, double base_shift,
                       double max_shift) {
  FLUXRT_CHECK(max_seq_len != base_seq_len, ErrorCode::InvalidArgument,
               "calculate_shift: max_image_seq_len equals base_image_seq_len ({})", base_seq_len);
  const double m = (max_shift - base_shift) / static_cast<double>(max_seq_len - base_seq_len);
  const double b = base_shift - rounded(m * static_cast<double>(base_seq_len));
  return rounded(static_cast<double>(image_seq_len) * m) + b;
}

std::vector<double> pipeline_base_sigmas(int num_steps) {
  FLUXRT_CHECK(num_steps >= 1, ErrorCode::InvalidArgument, "number of steps {} < 1", num_steps);
  const double start = 1.0;
  const double stop = 1.0 / num_steps;
  std::vector<double> sigmas(static_cast<size_t>(num_steps));
  if (num_steps == 1) {
    sigmas[0] = start;  // numpy: 0 * delta + start
    return sigmas;
  }
  // numpy.linspace: step = (stop - start) / (num - 1); y[i] = i * step + start; y[-1] = stop.
  const double step = (stop - start) / static_cast<double>(num_steps - 1);
  for (int i = 0; i < num_steps; ++i) sigmas[i] = rounded(static_cast<double>(i) * step) + start;
  sigmas.back() = stop;
  return sigmas;
}

Schedule flow_match_set_timesteps(const FlowMatchSchedulerConfig& config, std::span<const double> sigmas,
                                  std::optional<double> mu) {
  config.validate();
  FLUXRT_CHECK(!sigmas.empty(), ErrorCode::InvalidArgument, "set_timesteps: no sigmas");
  FLUXRT_CHECK(!config.use_dynamic_shifting || mu.has_value(), ErrorCode::InvalidArgument,
               "set_timesteps: mu is required when use_dynamic_shifting is true");
  Schedule out;
  out.mu = mu;
  out.sigmas.reserve(sigmas.size() + 1);
  // Python-float constants meet a float32 array, so they are rounded to float32 first.
  const float exp_mu = config.use_dynamic_shifting ? static_cast<float>(std::exp(*mu)) : 0.0f;
  const float mu_f = config.use_dynamic_shifting ? static_cast<float>(*mu) : 0.0f;
  const float shift_f = static_cast<float>(config.shift);
  const float shift_minus_one_f = static_cast<float>(config.shift - 1.0);
  for (double s64 : sigmas) {
    const float s = static_cast<float>(s64);  // np.array(sigmas).astype(np.float32)
    float shifted = 0.0f;
    if (config.use_dynamic_shifting) {
      const float odds = 1.0f / s - 1.0f;  // (1 / t - 1) ** 1.0: the power is exact
      if (config.time_shift_type == TimeShiftType::Exponential) {
        shifted = exp_mu / (exp_mu + odds);
      } else {
        shifted = mu_f / (mu_f + odds);
      }
    } else {
      shifted = rounded(shift_f * s) / (1.0f + rounded(shift_minus_one_f * s));
    }
    out.sigmas.push_back(shifted);
  }
  const float train_steps = static_cast<float>(config.num_train_timesteps);
  out.timesteps.reserve(out.sigmas.size());
  for (float s : out.sigmas) out.timesteps.push_back(s * train_steps);
  out.sigmas.push_back(0.0f);
  return out;
}

Schedule flux1_schedule(const FlowMatchSchedulerConfig& config, int num_steps, int64_t image_seq_len) {
  const std::vector<double> base = pipeline_base_sigmas(num_steps);
  // FluxPipeline always computes mu; the scheduler ignores it without dynamic shifting.
  const double mu = calculate_shift(image_seq_len, config.base_image_seq_len, config.max_image_seq_len,
                                    config.base_shift, config.max_shift);
  return flow_match_set_timesteps(config, base, mu);
}

Schedule flux2_schedule(const FlowMatchSchedulerConfig& config, int num_steps, int64_t image_seq_len) {
  const std::vector<double> base = pipeline_base_sigmas(num_steps);
  return flow_match_set_timesteps(config, base, compute_empirical_mu(image_seq_len, num_steps));
}

float model_timestep(float timestep, DType latent_dtype) {
  FLUXRT_CHECK(is_step_dtype(latent_dtype), ErrorCode::Unsupported, "model_timestep: dtype {} not supported",
               dtype_name(latent_dtype));
  if (latent_dtype == DType::F32) return timestep / 1000.0f;
  // Narrow tensor / Python scalar: computed in f32 on the narrow value, rounded back.
  const float t = from_narrow(to_narrow(timestep, latent_dtype), latent_dtype);
  return from_narrow(to_narrow(t / 1000.0f, latent_dtype), latent_dtype);
}

Tensor euler_step(const Tensor& sample, const Tensor& model_output, float sigma, float sigma_next) {
  FLUXRT_CHECK(sample.shape() == model_output.shape(), ErrorCode::InvalidArgument,
               "euler_step: sample {} and model output {} differ in shape", sample.shape().str(),
               model_output.shape().str());
  FLUXRT_CHECK(is_step_dtype(sample.dtype()) && is_step_dtype(model_output.dtype()), ErrorCode::Unsupported,
               "euler_step: dtypes {} / {} not supported (f32, bf16, f16)", dtype_name(sample.dtype()),
               dtype_name(model_output.dtype()));
  // Ops on the sample's device, so a step makes no host round trip. Each op computes in f32 and
  // rounds once to its output dtype (round-to-nearest-even), so on cpu the result is bitwise the
  // f32 loop this replaced: product = round_v(v * dt_v), out = round_v(f32(sample) + product).
  const DType out_dtype = model_output.dtype();
  const float dt = sigma_next - sigma;
  // 0-dim f32 tensor * narrow tensor -> narrow result: dt is rounded to the narrow dtype first and
  // the product is rounded again (measured on torch 2.15's CPU kernels); in f32 both are no-ops.
  const float dt_v = out_dtype == DType::F32 ? dt : from_narrow(to_narrow(dt, out_dtype), out_dtype);
  const Tensor product = ops::scale(model_output, dt_v);  // dtype of v
  // The sum is taken in f32 on the upcast sample. When sample and v share a dtype, add() widens
  // both to f32 and rounds the sum once to that dtype; otherwise the f32 sum is rounded by to().
  if (sample.dtype() == out_dtype) return ops::add(sample, product);
  return ops::add(sample.to(DType::F32), product).to(out_dtype);
}

Tensor euler_step(const Tensor& sample, const Tensor& model_output, const Schedule& schedule, int index) {
  FLUXRT_CHECK(index >= 0 && index + 1 < static_cast<int>(schedule.sigmas.size()), ErrorCode::InvalidArgument,
               "euler_step: step {} outside a schedule of {} steps", index, schedule.num_steps());
  return euler_step(sample, model_output, schedule.sigmas[index], schedule.sigmas[index + 1]);
}

}  // namespace fluxrt::pipelines
