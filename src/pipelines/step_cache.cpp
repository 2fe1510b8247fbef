#include "pipelines/step_cache.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "models/weight_binder.h"
#include "ops/elementwise.h"

namespace fluxrt::pipelines {
namespace {

// The double the user wrote for a float setting ("0.2", not 0.2000000030): diffusers compares
// some settings as Python floats.
double as_written(float value) { return std::stod(fmt::format("{}", value)); }

float round_to(float value, DType dtype) {
  if (dtype == DType::BF16) return bf16_to_f32(f32_to_bf16(value));
  if (dtype == DType::F16) return f16_to_f32(f32_to_f16(value));
  return value;
}

// a - b as torch evaluates it in a's dtype (negation is exact).
Tensor subtract(const Tensor& a, const Tensor& b) { return ops::add(a, ops::scale(b, -1.0f)); }

std::vector<float> host_values(const Tensor& t) { return models::to_device(t, Device::cpu()).to_vector(); }

// torch's x.abs().mean() of a tensor of `dtype`: accumulated wide, the result in that dtype.
float mean_abs(const Tensor& x, DType dtype) {
  const std::vector<float> v = host_values(x);
  double sum = 0;
  for (float e : v) sum += std::fabs(e);
  return round_to(static_cast<float>(sum / static_cast<double>(v.size())), dtype);
}

// torch's `x / divisor` (true division, each element rounded to x's dtype). On the host exactly;
// a device tensor is scaled by the reciprocal, as torch's CUDA kernel does.
Tensor divide(const Tensor& x, int divisor) {
  if (divisor == 1) return x;
  if (!x.device().is_cpu()) return ops::scale(x, 1.0f / static_cast<float>(divisor));
  Tensor wide = x.to(DType::F32).contiguous().clone();
  float* p = wide.data<float>();
  for (int64_t i = 0; i < wide.numel(); ++i) p[i] = p[i] / static_cast<float>(divisor);
  return wide.to(x.dtype());
}

bool is_taylor_dtype(const std::string& name) {
  return name == "bfloat16" || name == "float16" || name == "float32";
}

DType taylor_dtype(const std::string& name) {
  return name == "float32" ? DType::F32 : name == "float16" ? DType::F16 : DType::BF16;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Settings

const std::vector<float>& flux1_dev_mag_ratios() {
  static const std::vector<float> ratios{
      1.0f,     1.21094f, 1.11719f, 1.07812f, 1.0625f,  1.03906f, 1.03125f, 1.03906f, 1.02344f, 1.03125f,
      1.02344f, 0.98047f, 1.01562f, 1.00781f, 1.0f,     1.00781f, 1.0f,     1.00781f, 1.0f,     1.0f,
      0.99609f, 0.99609f, 0.98047f, 0.98828f, 0.96484f, 0.95703f, 0.93359f, 0.89062f};
  return ratios;
}

std::vector<float> interpolate_mag_ratios(const std::vector<float>& ratios, int length) {
  if (length == 1) return {ratios.back()};
  // grid (f32) * scale (a Python float, applied in f32), rounded half to even.
  const float scale = static_cast<float>(static_cast<double>(ratios.size() - 1) / (length - 1));
  std::vector<float> out;
  for (int i = 0; i < length; ++i)
    out.push_back(ratios[static_cast<size_t>(std::nearbyint(static_cast<float>(i) * scale))]);
  return out;
}

fluxrt::CacheConfig resolve_cache_config(const fluxrt::CacheConfig& config, int steps_run,
                                         const std::vector<float>& shipped_ratios, const std::string& model) {
  auto check = [](bool ok, const std::string& message) {
    FLUXRT_CHECK_FIELD(ok, ErrorCode::InvalidArgument, "cache", "cache: {}", message);
  };
  if (const auto* fbc = std::get_if<fluxrt::FirstBlockCacheConfig>(&config)) {
    check(std::isfinite(fbc->threshold) && fbc->threshold >= 0,
          fmt::format("first-block threshold {} must be a number >= 0", fbc->threshold));
    return config;
  }
  if (const auto* ts = std::get_if<fluxrt::TaylorSeerCacheConfig>(&config)) {
    check(ts->cache_interval >= 1,
          fmt::format("taylorseer cache_interval {} must be >= 1", ts->cache_interval));
    check(ts->disable_cache_before_step >= 0,
          fmt::format("taylorseer disable_cache_before_step {} must be >= 0", ts->disable_cache_before_step));
    check(!ts->disable_cache_after_step || *ts->disable_cache_after_step >= 0,
          fmt::format("taylorseer disable_cache_after_step {} must be >= 0",
                      ts->disable_cache_after_step.value_or(0)));
    check(ts->max_order >= 0 && ts->max_order <= 4,
          fmt::format("taylorseer max_order {} must be in [0, 4]", ts->max_order));
    check(is_taylor_dtype(ts->taylor_factors_dtype),
          fmt::format("taylorseer taylor_factors_dtype \"{}\" must be bfloat16, float16 or float32",
                      ts->taylor_factors_dtype));
    return config;
  }
  fluxrt::MagCacheConfig mag = std::get<fluxrt::MagCacheConfig>(config);
  check(std::isfinite(mag.threshold) && mag.threshold >= 0,
        fmt::format("mag threshold {} must be a number >= 0", mag.threshold));
  check(mag.max_skip_steps >= 0, fmt::format("mag max_skip_steps {} must be >= 0", mag.max_skip_steps));
  check(std::isfinite(mag.retention_ratio) && mag.retention_ratio >= 0 && mag.retention_ratio <= 1,
        fmt::format("mag retention_ratio {} must be in [0, 1]", mag.retention_ratio));
  check(!mag.num_inference_steps || (*mag.num_inference_steps >= 1 && *mag.num_inference_steps <= 100000),
        fmt::format("mag num_inference_steps {} must be >= 1", mag.num_inference_steps.value_or(0)));
  if (!mag.num_inference_steps) mag.num_inference_steps = steps_run;
  for (float r : mag.mag_ratios)
    check(std::isfinite(r) && r >= 0, fmt::format("mag_ratios value {} must be a number >= 0", r));
  if (mag.calibrate) {
    mag.mag_ratios.clear();
    return mag;
  }
  if (mag.mag_ratios.empty()) {
    check(!shipped_ratios.empty(),
          fmt::format("mag needs mag_ratios for {} (make them with `fluxrt calibrate-cache --model M`)",
                      model));
    mag.mag_ratios = shipped_ratios;
  }
  if (static_cast<int>(mag.mag_ratios.size()) != *mag.num_inference_steps)
    mag.mag_ratios = interpolate_mag_ratios(mag.mag_ratios, *mag.num_inference_steps);
  return mag;
}

std::string describe_cache_config(const fluxrt::CacheConfig& config) {
  if (const auto* fbc = std::get_if<fluxrt::FirstBlockCacheConfig>(&config))
    return fmt::format("first-block threshold={}", fbc->threshold);
  if (const auto* ts = std::get_if<fluxrt::TaylorSeerCacheConfig>(&config))
    return fmt::format(
        "taylorseer cache_interval={} disable_cache_before_step={}{} max_order={} taylor_factors_dtype={}{}",
        ts->cache_interval, ts->disable_cache_before_step,
        ts->disable_cache_after_step
            ? fmt::format(" disable_cache_after_step={}", *ts->disable_cache_after_step)
            : std::string(),
        ts->max_order, ts->taylor_factors_dtype, ts->use_lite_mode ? " use_lite_mode=true" : "");
  const auto& mag = std::get<fluxrt::MagCacheConfig>(config);
  return fmt::format("mag threshold={} max_skip_steps={} retention_ratio={}{}{}", mag.threshold,
                     mag.max_skip_steps, mag.retention_ratio,
                     mag.num_inference_steps
                         ? fmt::format(" num_inference_steps={}", *mag.num_inference_steps)
                         : std::string(),
                     mag.calibrate ? " calibrate=true" : "");
}

std::string cache_key(const fluxrt::CacheConfig& config) {
  std::string key = describe_cache_config(config);
  if (const auto* mag = std::get_if<fluxrt::MagCacheConfig>(&config))
    for (float r : mag->mag_ratios) key += fmt::format(" {}", r);
  return key;
}

// ---------------------------------------------------------------------------------------------
// One branch's state: the method's hooks on one CFG branch's transformer calls.

class StepCache::Branch : public models::FluxForwardHooks {
 public:
  explicit Branch(DType dtype) : dtype_(dtype) {}
  char decision = 'F';  // of the current call
  virtual std::vector<float> calibration() const { return {}; }

 protected:
  DType dtype_;
};

namespace {

// diffusers FBCHeadBlockHook / FBCBlockHook: the head is double block 0, the tail the last single
// block; the residuals are of the image and the text rows.
class FirstBlockBranch final : public StepCache::Branch {
 public:
  FirstBlockBranch(const fluxrt::FirstBlockCacheConfig& c, DType dtype)
      : Branch(dtype), threshold_(as_written(c.threshold)) {}

  bool rest_cached(const Tensor& img_in, Tensor& img, Tensor& txt) override {
    const Tensor residual = subtract(img, img_in);  // [B, Li, D]
    bool compute = true;
    if (head_residual_.defined()) {
      // Relative L1 change of the head's residual since the last full step, in the model dtype.
      const float change = mean_abs(subtract(residual, head_residual_), dtype_);
      compute = static_cast<double>(round_to(change / head_mean_abs_, dtype_)) > threshold_;
    }
    computing_ = compute;
    decision = compute ? 'F' : 'C';
    if (!compute) {
      img = ops::add(tail_img_, img);
      txt = ops::add(tail_txt_, txt);
      return true;
    }
    head_img_ = img.clone();  // the later blocks update img and txt in place
    head_txt_ = txt.clone();
    head_residual_ = residual;
    head_mean_abs_ = mean_abs(residual, dtype_);  // the denominator until the next full step
    return false;
  }

  void blocks_computed(const Tensor& h, int64_t text_tokens) override {
    if (!computing_) return;
    const int64_t l = h.size(1);
    tail_img_ = subtract(h.slice(1, text_tokens, l), head_img_);  // [B, Li, D]
    tail_txt_ = subtract(h.slice(1, 0, text_tokens), head_txt_);  // [B, Lt, D]
  }

 private:
  double threshold_;
  bool computing_ = true;
  float head_mean_abs_ = 0;
  Tensor head_img_, head_txt_, head_residual_, tail_img_, tail_txt_;
};

// diffusers MagCacheHeadHook / MagCacheBlockHook: the head's image input, the tail's image rows;
// the accumulated ratio and error are f32 tensors there (the ratios are), so f32 here.
class MagBranch final : public StepCache::Branch {
 public:
  MagBranch(const fluxrt::MagCacheConfig& c, DType dtype)
      : Branch(dtype),
        config_(c),
        steps_(*c.num_inference_steps),
        retention_step_(static_cast<int>(as_written(c.retention_ratio) * steps_ + 0.5)) {}

  bool blocks_cached(Tensor& img, Tensor& /*txt*/) override {
    bool compute = true;
    if (!config_.calibrate) {
      const float scale =
          step_ < static_cast<int>(config_.mag_ratios.size()) ? config_.mag_ratios[step_] : 1.0f;
      if (step_ >= retention_step_) {
        ratio_ *= scale;
        skipped_ += 1;
        error_ += std::fabs(1.0f - ratio_);
        if (previous_residual_.defined() && error_ <= config_.threshold &&
            skipped_ <= config_.max_skip_steps) {
          compute = false;
        } else {
          ratio_ = 1.0f;
          skipped_ = 0;
          error_ = 0.0f;
        }
      }
    }
    decision = compute ? 'F' : 'C';
    if (!compute) {
      img = ops::add(img, previous_residual_);  // the text stream passes through unchanged
      advance();
      return true;
    }
    head_input_ = img.clone();  // the blocks update img in place
    return false;
  }

  void blocks_computed(const Tensor& h, int64_t text_tokens) override {
    const Tensor residual = subtract(h.slice(1, text_tokens, h.size(1)), head_input_);  // [B, Li, D]
    if (config_.calibrate) calibrate(residual);
    previous_residual_ = residual;
    advance();
  }

  std::vector<float> calibration() const override { return completed_.empty() ? ratios_ : completed_; }

 private:
  // Mean over tokens of |residual| / |previous residual| (L2 over channels, in f32).
  void calibrate(const Tensor& residual) {
    if (!previous_residual_.defined()) {
      ratios_.push_back(1.0f);
      return;
    }
    const std::vector<float> cur = host_values(residual), prev = host_values(previous_residual_);
    const int64_t d = residual.size(2), rows = residual.numel() / d;
    double sum = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double c = 0, p = 0;
      for (int64_t j = 0; j < d; ++j) {
        c += static_cast<double>(cur[r * d + j]) * cur[r * d + j];
        p += static_cast<double>(prev[r * d + j]) * prev[r * d + j];
      }
      sum += static_cast<float>(std::sqrt(c)) / (static_cast<float>(std::sqrt(p)) + 1e-8f);
    }
    ratios_.push_back(static_cast<float>(sum / static_cast<double>(rows)));
  }

  // _advance_step: after num_inference_steps calls the state starts over.
  void advance() {
    if (++step_ < steps_) return;
    if (config_.calibrate) completed_ = ratios_;
    step_ = 0;
    ratio_ = 1.0f;
    skipped_ = 0;
    error_ = 0.0f;
    previous_residual_ = Tensor();
    ratios_.clear();
  }

  fluxrt::MagCacheConfig config_;
  int steps_, retention_step_;
  int step_ = 0, skipped_ = 0;
  float ratio_ = 1.0f, error_ = 0.0f;
  Tensor head_input_, previous_residual_;
  std::vector<float> ratios_, completed_;
};

// diffusers TaylorSeerCacheHook / TaylorSeerState: every attention module (use_lite_mode: the
// output projection, the blocks skipped) holds Taylor factors of its outputs, updated on full
// steps by finite differences and evaluated on the others.
class TaylorSeerBranch final : public StepCache::Branch {
 public:
  TaylorSeerBranch(const fluxrt::TaylorSeerCacheConfig& c, DType dtype)
      : Branch(dtype), config_(c), factor_dtype_(taylor_dtype(c.taylor_factors_dtype)) {}

  // The first hook of every call: the step counter and the decision.
  Tensor cached_output() override {
    ++step_;
    const int since = step_ - config_.disable_cache_before_step - 1;
    const bool interval =
        ((since % config_.cache_interval) + config_.cache_interval) % config_.cache_interval == 0;
    computing_ = step_ < config_.disable_cache_before_step || interval ||
                 (config_.disable_cache_after_step && step_ >= *config_.disable_cache_after_step);
    decision = computing_ ? 'F' : 'C';
    if (computing_ || !config_.use_lite_mode) return {};
    return predict(kOutputModule)[0];
  }
  void output_computed(const Tensor& out) override {
    if (config_.use_lite_mode && computing_) update(kOutputModule, {out});
  }

  bool attention_hooked() const override { return !config_.use_lite_mode; }
  bool attention_cached() const override { return !computing_; }
  std::vector<Tensor> cached_attention(size_t module) override { return predict(module); }
  void attention_computed(size_t module, const std::vector<Tensor>& outputs) override {
    update(module, outputs);
  }

 private:
  static constexpr size_t kOutputModule = static_cast<size_t>(-1);
  struct Module {
    std::vector<std::vector<Tensor>> factors;  // per output: orders 0..n, in factor_dtype
    int last_update = -1;
  };

  void update(size_t module, const std::vector<Tensor>& outputs) {
    Module& m = modules_[module];
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::vector<Tensor> next{outputs[i]};
      if (m.last_update >= 0) {
        const int delta = step_ - m.last_update;
        const std::vector<Tensor>& prev = m.factors[i];
        for (int j = 0; j < config_.max_order && j < static_cast<int>(prev.size()); ++j)
          next.push_back(divide(subtract(next[j], prev[j].to(outputs[i].dtype())), delta));
      }
      if (m.factors.size() <= i) m.factors.resize(i + 1);
      m.factors[i].clear();
      for (const Tensor& f : next) m.factors[i].push_back(f.to(factor_dtype_).contiguous().clone());
    }
    m.last_update = step_;
  }

  std::vector<Tensor> predict(size_t module) {
    const Module& m = modules_.at(module);
    const int offset = step_ - m.last_update;
    std::vector<Tensor> out;
    for (const std::vector<Tensor>& factors : m.factors) {
      Tensor sum = factors[0].to(dtype_).clone();  // 0 + factor_0 * 1
      double power = 1, factorial = 1;
      for (size_t k = 1; k < factors.size(); ++k) {
        power *= offset;
        factorial *= static_cast<double>(k);
        sum = ops::add(sum, ops::scale(factors[k].to(dtype_), static_cast<float>(power / factorial)));
      }
      out.push_back(std::move(sum));
    }
    return out;
  }

  fluxrt::TaylorSeerCacheConfig config_;
  DType factor_dtype_;
  int step_ = -1;
  bool computing_ = true;
  std::map<size_t, Module> modules_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------

StepCache::StepCache(const fluxrt::CacheConfig& config, int branches, DType model_dtype) {
  for (int b = 0; b < branches; ++b) {
    std::visit(
        [&](const auto& c) {
          using C = std::decay_t<decltype(c)>;
          if constexpr (std::is_same_v<C, fluxrt::FirstBlockCacheConfig>)
            branches_.push_back(std::make_unique<FirstBlockBranch>(c, model_dtype));
          else if constexpr (std::is_same_v<C, fluxrt::MagCacheConfig>)
            branches_.push_back(std::make_unique<MagBranch>(c, model_dtype));
          else
            branches_.push_back(std::make_unique<TaylorSeerBranch>(c, model_dtype));
        },
        config);
  }
}

StepCache::~StepCache() = default;

models::FluxForwardHooks* StepCache::hooks(int branch) {
  if (!in_step_) return nullptr;
  FLUXRT_CHECK(branch >= 0 && branch < static_cast<int>(branches_.size()), ErrorCode::Internal,
               "step cache: branch {} of {}", branch, branches_.size());
  return branches_[branch].get();
}

void StepCache::begin_step() {
  in_step_ = true;
  for (auto& b : branches_) b->decision = 'F';
}

void StepCache::end_step() {
  in_step_ = false;
  bool all_full = true, all_cached = true;
  for (const auto& b : branches_) {
    all_full = all_full && b->decision == 'F';
    all_cached = all_cached && b->decision == 'C';
  }
  decisions_ += all_full ? 'F' : all_cached ? 'C' : 'P';
}

std::vector<float> StepCache::calibration_ratios() const {
  return branches_.empty() ? std::vector<float>{} : branches_.front()->calibration();
}

}  // namespace fluxrt::pipelines
