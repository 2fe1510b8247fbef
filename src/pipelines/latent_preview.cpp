#include "pipelines/latent_preview.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/weight_binder.h"

namespace fluxrt::pipelines {
namespace {

Tensor host_f32(const Tensor& t) { return models::to_device(t, Device::cpu()).to(DType::F32).contiguous(); }

// Cholesky solve of the (n x n) symmetric positive definite system a x = b for `cols` right-hand
// sides, in place (b becomes x). False when a is not positive definite.
bool cholesky_solve(std::vector<double> a, std::vector<double>& b, int n, int cols) {
  for (int j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (int k = 0; k < j; ++k) d -= a[j * n + k] * a[j * n + k];
    if (!(d > 0)) return false;
    d = std::sqrt(d);
    a[j * n + j] = d;
    for (int i = j + 1; i < n; ++i) {
      double s = a[i * n + j];
      for (int k = 0; k < j; ++k) s -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = s / d;
    }
  }
  for (int c = 0; c < cols; ++c) {
    for (int i = 0; i < n; ++i) {  // L y = b
      double s = b[i * cols + c];
      for (int k = 0; k < i; ++k) s -= a[i * n + k] * b[k * cols + c];
      b[i * cols + c] = s / a[i * n + i];
    }
    for (int i = n - 1; i >= 0; --i) {  // L^T x = y
      double s = b[i * cols + c];
      for (int k = i + 1; k < n; ++k) s -= a[k * n + i] * b[k * cols + c];
      b[i * cols + c] = s / a[i * n + i];
    }
  }
  return true;
}

// The latent channels of one VAE latent cell (gi, gj) on the (lh * kPatch) x (lw * kPatch) grid:
// token (gi / kPatch, gj / kPatch), its packed channels c * kPatch^2 + dy * kPatch + dx (the
// (c, dy, dx) order both FLUX packings use).
void latent_cell(const float* tokens, int64_t b, int64_t gi, int64_t gj, int64_t lh, int64_t lw, int64_t c,
                 double* out) {
  const int64_t token = (b * lh + gi / kPatch) * lw + gj / kPatch;
  const int64_t sub = (gi % kPatch) * kPatch + gj % kPatch;
  const float* t = tokens + token * c * kPatch * kPatch;
  for (int64_t k = 0; k < c; ++k) out[k] = t[k * kPatch * kPatch + sub];
}

}  // namespace

void LatentPreviewer::observe(const Tensor& tokens, const Tensor& images_u8, int64_t lh, int64_t lw) {
  FLUXRT_CHECK(tokens.dim() == 3 && tokens.size(1) == lh * lw && tokens.size(2) % (kPatch * kPatch) == 0 &&
                   images_u8.dim() == 4 && images_u8.size(0) == tokens.size(0) && images_u8.size(3) == 3 &&
                   images_u8.size(1) % (lh * kPatch) == 0 && images_u8.size(2) % (lw * kPatch) == 0,
               ErrorCode::InvalidArgument, "latent preview: tokens {} do not match images {} on a {}x{} grid",
               tokens.shape().str(), images_u8.shape().str(), lh, lw);
  const int64_t c = tokens.size(2) / (kPatch * kPatch), n = c + 1;
  if (c != channels_) {  // another model's latents: start over
    channels_ = c;
    gram_.assign(static_cast<size_t>(n * n), 0.0);
    cross_.assign(static_cast<size_t>(n * 3), 0.0);
    samples_ = 0;
    weights_.clear();
  }
  const Tensor x = host_f32(tokens);
  const Tensor im = models::to_device(images_u8, Device::cpu()).contiguous();
  const int64_t b = x.size(0), h = im.size(1), w = im.size(2);
  const int64_t gh = lh * kPatch, gw = lw * kPatch, ph = h / gh, pw = w / gw;  // pixels per latent cell
  const float* xp = x.data<float>();
  const uint8_t* ip = im.data<uint8_t>();
  std::vector<double> f(static_cast<size_t>(n));
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t gi = 0; gi < gh; ++gi)
      for (int64_t gj = 0; gj < gw; ++gj) {
        latent_cell(xp, bi, gi, gj, lh, lw, c, f.data());
        f[c] = 1.0;
        double rgb[3] = {0, 0, 0};  // the cell's mean colour in [0, 1]
        for (int64_t y = gi * ph; y < (gi + 1) * ph; ++y)
          for (int64_t xx = gj * pw; xx < (gj + 1) * pw; ++xx)
            for (int ch = 0; ch < 3; ++ch) rgb[ch] += ip[((bi * h + y) * w + xx) * 3 + ch];
        for (double& v : rgb) v /= 255.0 * static_cast<double>(ph * pw);
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t q = 0; q <= r; ++q) gram_[r * n + q] += f[r] * f[q];
          for (int ch = 0; ch < 3; ++ch) cross_[r * 3 + ch] += f[r] * rgb[ch];
        }
        samples_ += 1;
      }
  solve();
}

void LatentPreviewer::solve() {
  const int n = static_cast<int>(channels_ + 1);
  std::vector<double> a(gram_.size());
  double trace = 0;
  for (int r = 0; r < n; ++r)
    for (int s = 0; s <= r; ++s) a[r * n + s] = a[s * n + r] = gram_[r * n + s];
  for (int r = 0; r < n; ++r) trace += a[r * n + r];
  // A small ridge keeps the fit defined with fewer tokens than channels (a first 64x64 image of
  // a 128-channel model has 16) and tames channels the images never exercised.
  const double ridge = 1e-3 * trace / n + 1e-9;
  for (int r = 0; r < n; ++r) a[r * n + r] += ridge;
  std::vector<double> x = cross_;
  if (!cholesky_solve(a, x, n, 3)) return;  // keep the previous fit
  weights_.assign(x.begin(), x.end());
}

std::vector<io::Image> LatentPreviewer::preview(const Tensor& x0_tokens, int64_t lh, int64_t lw, int width,
                                                int height) const {
  std::vector<io::Image> out;
  if (!ready() || x0_tokens.dim() != 3 || x0_tokens.size(2) != channels_ * kPatch * kPatch ||
      x0_tokens.size(1) != lh * lw || width < 1 || height < 1)
    return out;
  const Tensor x = host_f32(x0_tokens);
  const int64_t b = x.size(0), c = channels_, gh = lh * kPatch, gw = lw * kPatch;
  const float* xp = x.data<float>();
  std::vector<float> grid(static_cast<size_t>(gh * gw * 3));
  std::vector<double> f(static_cast<size_t>(c));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t gi = 0; gi < gh; ++gi)
      for (int64_t gj = 0; gj < gw; ++gj) {
        latent_cell(xp, bi, gi, gj, lh, lw, c, f.data());
        for (int ch = 0; ch < 3; ++ch) {
          double v = weights_[c * 3 + ch];
          for (int64_t k = 0; k < c; ++k) v += f[k] * weights_[k * 3 + ch];
          grid[(gi * gw + gj) * 3 + ch] = static_cast<float>(std::clamp(v, 0.0, 1.0));
        }
      }
    io::Image im{width, height, 3, std::vector<uint8_t>(static_cast<size_t>(width) * height * 3)};
    // Bilinear from cell centres: cell (i, j) covers pixels [i*H/gh, (i+1)*H/gh).
    for (int y = 0; y < height; ++y) {
      const float fy = std::clamp((y + 0.5f) * gh / height - 0.5f, 0.0f, static_cast<float>(gh - 1));
      const int64_t y0 = static_cast<int64_t>(fy), y1 = std::min(y0 + 1, gh - 1);
      const float wy = fy - y0;
      for (int xq = 0; xq < width; ++xq) {
        const float fx = std::clamp((xq + 0.5f) * gw / width - 0.5f, 0.0f, static_cast<float>(gw - 1));
        const int64_t x0 = static_cast<int64_t>(fx), x1 = std::min(x0 + 1, gw - 1);
        const float wx = fx - x0;
        for (int ch = 0; ch < 3; ++ch) {
          auto at = [&](int64_t i, int64_t j) { return grid[(i * gw + j) * 3 + ch]; };
          const float v = (1 - wy) * ((1 - wx) * at(y0, x0) + wx * at(y0, x1)) +
                          wy * ((1 - wx) * at(y1, x0) + wx * at(y1, x1));
          im.pixels[(static_cast<size_t>(y) * width + xq) * 3 + ch] =
              static_cast<uint8_t>(std::lround(v * 255.0f));
        }
      }
    }
    out.push_back(std::move(im));
  }
  return out;
}

Tensor predicted_clean_latents(const Tensor& latents, const Tensor& velocity, float sigma) {
  FLUXRT_CHECK(latents.shape() == velocity.shape(), ErrorCode::InvalidArgument,
               "latent preview: latents {} and velocity {} differ in shape", latents.shape().str(),
               velocity.shape().str());
  const Tensor x = host_f32(latents), v = host_f32(velocity);
  Tensor out = Tensor::empty(x.shape(), DType::F32);
  const float* xp = x.data<float>();
  const float* vp = v.data<float>();
  float* op = out.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) op[i] = xp[i] - sigma * vp[i];
  return out;
}

}  // namespace fluxrt::pipelines
