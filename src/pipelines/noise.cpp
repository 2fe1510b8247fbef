// torch.randn on a CPU generator, reproduced bit for bit.
//
// Findings this file relies on (torch 2.15 wheel, read from its kernels and checked against
// dumped tensors in tests/data/noise/):
//
// Generator. at::CPUGeneratorImpl wraps at::mt19937, the standard 32-bit Mersenne Twister; its
// seeding takes a uint64 but initialises state[0] with `seed & 0xffffffff`, so 2^32 + 5 and 5
// draw the same numbers. random() is one engine output; random64() is (first << 32) | second.
// A float uniform in [0, 1) is (random() & (2^24 - 1)) * 2^-24; a double one uses random64()
// and 53 bits.
//
// normal_kernel (aten/src/ATen/native/cpu/DistributionTemplates.h) picks, per call:
//  * contiguous and numel >= 16 -> normal_fill. f32/f64: every uniform is drawn first into the
//    output, then each 16-element block is replaced by Box-Muller over the pairs (j, j + 8):
//    u1 = 1 - data[j], u2 = data[j + 8], r = sqrt(-2 log u1), theta = 2 pi u2, data[j] =
//    fma(r cos theta, std, mean), data[j + 8] = fma(r sin theta, std, mean). If numel % 16 != 0,
//    16 further uniforms are drawn into the last 16 elements and that block is transformed
//    again (it overlaps the last full block). bf16/f16 ("opmath" = f32): the uniforms are f32,
//    drawn 16 at a time into a scratch block that is transformed in f32 and rounded into the
//    output; the tail block is again 16 fresh uniforms. So a bf16 draw consumes
//    16 * (numel / 16) (+ 16) uniforms while an f32 draw consumes numel (+ 16): after a draw
//    with a tail, the generator states differ between the two dtypes.
//    bf16/f16 history (not reproduced, no older torch in the reference environment): releases
//    up to about 2.9 ran this Box-Muller in the narrow type itself from 8/11-bit uniforms,
//    one uniform per element (pytorch#166853); an interim version computed it in f32 with libm;
//    pytorch#179834 (April 2026) moved it onto the AVX2 f32 kernel, which is what 2.15 does.
//  * otherwise (numel < 16 here) -> at::normal_distribution<double> per element: u1, u2 double
//    uniforms, r = sqrt(-2 log1p(-u2)), theta = 2 pi u1, returns r cos theta and caches
//    r sin theta in the generator for the next scalar draw (of any dtype); the double is cast
//    to the output type (bf16/f16 via float, i.e. rounded twice, like c10's constructors).
//    manual_seed clears the cache; normal_fill neither reads nor writes it.
//
// The f32 Box-Muller. The kernel built for CPU_CAPABILITY_AVX2 uses avx_mathfun.h's
// log256_ps / sincos256_ps (Cephes polynomials), compiled by GCC with FMA contraction; torch
// registers no AVX-512 normal kernel, so AVX-512 machines run the same AVX2 code. The exact
// instruction sequence (from the wheel's disassembly) is emulated below lane by lane with
// std::fma at exactly the fused places, so fluxrt produces the AVX2 bits on any CPU. A torch
// running the generic kernel (DEFAULT capability: x86-64 without AVX2 or with
// ATEN_CPU_CAPABILITY=default; aarch64 builds such as Apple-silicon macOS have no AVX2
// specialisation either) uses libm logf/cosf/sinf instead: measured here, 38% of
// 2^20 f32 values differ, by up to 2.3e-6 absolute, and 69 of the 524288 bf16 values of a
// [1, 128, 64, 64] klein draw differ by one bf16 ulp. Those users get different noise from
// diffusers itself on their machine; fluxrt matches the x86-64 AVX2/AVX-512 result.
// Unverified: the FMA placement is a compiler decision, so torch wheels built by another
// compiler (MSVC for Windows, older GCC for older releases) may differ in the last f32 bit.
//
// f64 uses glibc's log/sin/cos (torch calls the same functions), so it matches torch run on
// the same C library.
#include "pipelines/noise.h"

#include <bit>
#include <cmath>

#include "core/error.h"

namespace fluxrt::pipelines {
namespace {

constexpr int kN = 624;
constexpr int kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfu;
constexpr uint32_t kUpperMask = 0x80000000u;
constexpr uint32_t kLowerMask = 0x7fffffffu;

// float(2 * pi) as _mm256_set1_ps(2.0f * c10::pi<double>) rounds it.
constexpr float kTwoPiF = static_cast<float>(2.0 * 3.14159265358979323846);
constexpr double kPi = 3.14159265358979323846;

float bits_to_float(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t float_to_bits(float value) { return std::bit_cast<uint32_t>(value); }

// log256_ps for one lane, with the FMA fusions GCC made in torch's AVX2 build.
float cephes_logf(float x) {
  // The argument is 1 - u with u in [0, 1 - 2^-24]: never <= 0, never denormal, so the
  // original's NaN mask and denormal clamp are no-ops; the clamp is kept for fidelity.
  x = std::fmax(x, bits_to_float(0x00800000u));
  const uint32_t bits = float_to_bits(x);
  const int32_t exponent = static_cast<int32_t>(bits >> 23) - 0x7f;
  float m = bits_to_float((bits & 0x807fffffu) | 0x3f000000u);  // mantissa in [0.5, 1)
  float e = static_cast<float>(exponent) + 1.0f;
  float low = 0.0f;
  if (m < bits_to_float(0x3f3504f3u)) {  // sqrt(1/2)
    low = m;
    e = e - 1.0f;
  }
  m = m + -1.0f;
  m = m + low;
  const float z = m * m;
  float y = std::fma(7.0376836292e-2f, m, -1.1514610310e-1f);
  y = std::fma(y, m, 1.1676998740e-1f);
  y = std::fma(y, m, -1.2420140846e-1f);
  y = std::fma(y, m, 1.4249322787e-1f);
  y = std::fma(y, m, -1.6668057665e-1f);
  y = std::fma(y, m, 2.0000714765e-1f);
  y = std::fma(y, m, -2.4999993993e-1f);
  y = std::fma(y, m, 3.3333331174e-1f);
  y = y * m;
  const float e_q1 = e * -2.12194440e-4f;
  y = std::fma(y, z, e_q1);
  y = std::fma(-z, 0.5f, y);
  const float sum = m + y;
  return std::fma(e, 0.693359375f, sum);
}

// sincos256_ps for one lane (argument in [0, 2 pi)), with torch's FMA fusions.
void cephes_sincosf(float x, float* sin_out, float* cos_out) {
  uint32_t sign_sin = float_to_bits(x) & 0x80000000u;
  x = bits_to_float(float_to_bits(x) & 0x7fffffffu);
  const float scaled = x * 1.27323954473516f;  // 4 / pi
  int32_t j = static_cast<int32_t>(scaled);    // truncation, as cvttps2dq
  j = (j + 1) & ~1;
  const float yj = static_cast<float>(j);
  const uint32_t swap_sin = static_cast<uint32_t>(j & 4) << 29;
  const bool first_poly_is_sin = (j & 2) == 0;
  sign_sin ^= swap_sin;
  // Extended-precision reduction x - yj * pi/4 in three fused steps.
  x = std::fma(yj, -0.78515625f, x);
  x = std::fma(-2.4187564849853515625e-4f, yj, x);
  x = std::fma(yj, -3.77489497744594108e-8f, x);
  const uint32_t sign_cos = static_cast<uint32_t>(~(j - 2) & 4) << 29;
  const float z = x * x;
  const float half_z = z * 0.5f;
  float yc = std::fma(2.443315711809948e-5f, z, -1.388731625493765e-3f);
  yc = std::fma(yc, z, 4.166664568298827e-2f);
  yc = z * yc;
  yc = std::fma(z, yc, -half_z);
  yc = yc + 1.0f;
  float ys = std::fma(-1.9515295891e-4f, z, 8.3321608736e-3f);
  ys = std::fma(ys, z, -1.6666654611e-1f);
  ys = z * ys;
  ys = std::fma(x, ys, x);
  // The original selects with masks and adds: each result is (value + 0), which turns -0 into
  // +0 before the sign flip. Reproduce the additions literally.
  const float sin_part_s = first_poly_is_sin ? ys : 0.0f;
  const float sin_part_c = first_poly_is_sin ? 0.0f : yc;
  const float sin_val = sin_part_s + sin_part_c;
  const float cos_val = (ys - sin_part_s) + (yc - sin_part_c);
  *sin_out = bits_to_float(float_to_bits(sin_val) ^ sign_sin);
  *cos_out = bits_to_float(float_to_bits(cos_val) ^ sign_cos);
}

// NormalFill16<float> of torch's AVX2 kernel (mean 0, std 1), in place.
void normal_fill_16_f32(float* data) {
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - data[j];
    const float u2 = data[j + 8];
    const float radius = std::sqrt(cephes_logf(u1) * -2.0f);
    const float theta = kTwoPiF * u2;
    float s = 0.0f;
    float c = 0.0f;
    cephes_sincosf(theta, &s, &c);
    data[j] = std::fma(radius * c, 1.0f, 0.0f);
    data[j + 8] = std::fma(radius * s, 1.0f, 0.0f);
  }
}

// NormalFill16<double>: the generic template with libm (torch calls log and sincos).
void normal_fill_16_f64(double* data) {
  for (int j = 0; j < 8; ++j) {
    const double u1 = 1.0 - data[j];
    const double u2 = data[j + 8];
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double theta = 2.0 * kPi * u2;
    data[j] = std::fma(radius * std::cos(theta), 1.0, 0.0);
    data[j + 8] = std::fma(radius * std::sin(theta), 1.0, 0.0);
  }
}

float uniform_f32(TorchGenerator& gen) {
  return static_cast<float>(gen.random() & 0xffffffu) * (1.0f / 16777216.0f);
}

double uniform_f64(TorchGenerator& gen) {
  return static_cast<double>(gen.random64() & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
}

void store_rounded(const float* src, void* dst, int64_t offset, int count, DType dtype) {
  auto* out = static_cast<uint16_t*>(dst) + offset;
  for (int i = 0; i < count; ++i) out[i] = dtype == DType::BF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
}

}  // namespace

void TorchGenerator::manual_seed(uint64_t seed) {
  seed_ = seed;
  state_[0] = static_cast<uint32_t>(seed & 0xffffffffu);
  for (int i = 1; i < kN; ++i) {
    state_[i] = 1812433253u * (state_[i - 1] ^ (state_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  }
  index_ = kN;
  next_double_normal_.reset();
}

void TorchGenerator::twist() {
  for (int i = 0; i < kN; ++i) {
    const uint32_t y = (state_[i] & kUpperMask) | (state_[(i + 1) % kN] & kLowerMask);
    state_[i] = state_[(i + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
  }
  index_ = 0;
}

uint32_t TorchGenerator::random() {
  if (index_ >= kN) twist();
  uint32_t y = state_[index_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint64_t TorchGenerator::random64() {
  const uint64_t hi = random();
  const uint64_t lo = random();
  return (hi << 32) | lo;
}

double TorchGenerator::scalar_normal() {
  if (next_double_normal_) {
    const double cached = *next_double_normal_;
    next_double_normal_.reset();
    return cached * 1.0 + 0.0;  // transformation::normal(val, mean 0, std 1)
  }
  const double u1 = uniform_f64(*this);
  const double u2 = uniform_f64(*this);
  const double r = std::sqrt(-2.0 * std::log1p(-u2));
  const double theta = 2.0 * kPi * u1;
  next_double_normal_ = r * std::sin(theta);
  return r * std::cos(theta) * 1.0 + 0.0;
}

void TorchGenerator::fill_randn(void* data, int64_t numel, DType dtype) {
  FLUXRT_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16 || dtype == DType::F64,
               ErrorCode::Unsupported, "randn: dtype {} is not supported (f32, bf16, f16, f64)",
               dtype_name(dtype));
  FLUXRT_CHECK(numel >= 0, ErrorCode::InvalidArgument, "randn: negative element count {}", numel);
  if (numel < 16) {
    for (int64_t i = 0; i < numel; ++i) {
      const double v = scalar_normal();
      switch (dtype) {
        case DType::F64: static_cast<double*>(data)[i] = v; break;
        case DType::F32: static_cast<float*>(data)[i] = static_cast<float>(v); break;
        case DType::BF16: static_cast<uint16_t*>(data)[i] = f32_to_bf16(static_cast<float>(v)); break;
        default: static_cast<uint16_t*>(data)[i] = f32_to_f16(static_cast<float>(v)); break;
      }
    }
    return;
  }
  if (dtype == DType::F32) {
    auto* out = static_cast<float*>(data);
    for (int64_t i = 0; i < numel; ++i) out[i] = uniform_f32(*this);
    for (int64_t i = 0; i + 16 <= numel; i += 16) normal_fill_16_f32(out + i);
    if (numel % 16 != 0) {
      float* tail = out + numel - 16;
      for (int i = 0; i < 16; ++i) tail[i] = uniform_f32(*this);
      normal_fill_16_f32(tail);
    }
  } else if (dtype == DType::F64) {
    auto* out = static_cast<double*>(data);
    for (int64_t i = 0; i < numel; ++i) out[i] = uniform_f64(*this);
    for (int64_t i = 0; i + 16 <= numel; i += 16) normal_fill_16_f64(out + i);
    if (numel % 16 != 0) {
      double* tail = out + numel - 16;
      for (int i = 0; i < 16; ++i) tail[i] = uniform_f64(*this);
      normal_fill_16_f64(tail);
    }
  } else {
    float block[16];
    for (int64_t i = 0; i + 16 <= numel; i += 16) {
      for (float& u : block) u = uniform_f32(*this);
      normal_fill_16_f32(block);
      store_rounded(block, data, i, 16, dtype);
    }
    if (numel % 16 != 0) {
      for (float& u : block) u = uniform_f32(*this);
      normal_fill_16_f32(block);
      store_rounded(block, data, numel - 16, 16, dtype);
    }
  }
}

Tensor TorchGenerator::randn(const Shape& shape, DType dtype) {
  for (int64_t extent : shape) {
    FLUXRT_CHECK(extent >= 0, ErrorCode::InvalidArgument, "randn: negative extent in shape {}", shape.str());
  }
  FLUXRT_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16 || dtype == DType::F64,
               ErrorCode::Unsupported, "randn: dtype {} is not supported (f32, bf16, f16, f64)",
               dtype_name(dtype));
  Tensor out = Tensor::empty(shape, dtype);
  fill_randn(out.raw_data(), out.numel(), dtype);
  return out;
}

Tensor randn_like_torch(const Shape& shape, DType dtype, uint64_t seed) {
  TorchGenerator gen(seed);
  return gen.randn(shape, dtype);
}

Tensor randn_tensor(const Shape& shape, DType dtype, TorchGenerator& generator) {
  return generator.randn(shape, dtype);
}

Tensor randn_tensor(const Shape& shape, DType dtype, std::span<TorchGenerator> generators) {
  FLUXRT_CHECK(!generators.empty(), ErrorCode::InvalidArgument, "randn_tensor: empty generator list");
  if (generators.size() == 1) return generators[0].randn(shape, dtype);
  FLUXRT_CHECK(shape.size() >= 1 && shape[0] == static_cast<int64_t>(generators.size()),
               ErrorCode::InvalidArgument, "randn_tensor: {} generators for shape {} (need one per batch element)",
               generators.size(), shape.str());
  Shape sample_shape = shape;
  sample_shape[0] = 1;
  Tensor out = Tensor::empty(shape, dtype);
  const int64_t per_sample = sample_shape.numel();
  auto* base = static_cast<uint8_t*>(out.raw_data());
  for (size_t b = 0; b < generators.size(); ++b) {
    generators[b].fill_randn(base + static_cast<size_t>(b * per_sample) * dtype_size(dtype), per_sample, dtype);
  }
  return out;
}

Shape flux1_noise_shape(int64_t batch, int64_t height, int64_t width, int64_t latent_channels,
                        int64_t vae_scale_factor) {
  const int64_t multiple = vae_scale_factor * 2;  // one packed token
  FLUXRT_CHECK(batch > 0 && vae_scale_factor > 0 && height >= multiple && width >= multiple && latent_channels > 0,
               ErrorCode::InvalidArgument, "flux1 noise shape: bad batch {} or size {}x{} (VAE factor {})", batch,
               width, height, vae_scale_factor);
  // prepare_latents: h = 2 * (H // (vae_scale_factor * 2)).
  return Shape{batch, latent_channels, 2 * (height / multiple), 2 * (width / multiple)};
}

Shape flux2_noise_shape(int64_t batch, int64_t height, int64_t width, int64_t in_channels, int64_t vae_scale_factor) {
  const int64_t multiple = vae_scale_factor * 2;  // one packed token
  FLUXRT_CHECK(batch > 0 && vae_scale_factor > 0 && height >= multiple && width >= multiple && in_channels > 0,
               ErrorCode::InvalidArgument, "flux2 noise shape: bad batch {} or size {}x{} (VAE factor {})", batch,
               width, height, vae_scale_factor);
  // prepare_latents: (B, (in_channels // 4) * 4, h // 2, w // 2) with h = 2 * (H // (vae_scale_factor * 2)).
  return Shape{batch, (in_channels / 4) * 4, height / multiple, width / multiple};
}

}  // namespace fluxrt::pipelines
