#pragma once
// Initial noise that reproduces torch.randn bit for bit for a torch CPU generator, the way
// diffusers users make results reproducible (`generator=torch.Generator("cpu").manual_seed(s)`):
// the same seed gives the same latents as diffusers on any machine and any fluxrt backend.
//
// What is reproduced (torch 2.x CPU, as built in the official x86-64 wheels; see noise.cpp for
// the details and for what differs elsewhere):
//   * the generator: at::mt19937 seeded with the low 32 bits of the 64-bit seed, `random()` one
//     32-bit draw, `random64()` two draws (first = high word);
//   * torch.randn for f32, bf16, f16 and f64, contiguous output:
//       - numel >= 16: uniforms in blocks of 16, Box-Muller over the pairs (j, j + 8) of each
//         block, a last block redrawn over the final 16 elements when numel % 16 != 0. f32 and
//         f64 draw every uniform first; bf16/f16 work in f32 one block at a time and round;
//       - numel < 16: the scalar double-precision Box-Muller whose second value is cached in the
//         generator for the next scalar draw (torch's `next_double_normal_sample`).
//   * f32 (and bf16/f16, which go through the f32 kernel) use the AVX2 kernel's Cephes log and
//     sincos with torch's exact FMA placement, emulated in portable scalar code, so the result
//     does not depend on the machine fluxrt runs on.
#include <cstdint>
#include <optional>
#include <span>

#include "core/tensor.h"

namespace fluxrt::pipelines {

// torch's default seed for a fresh torch.Generator() (67280421310721).
inline constexpr uint64_t kTorchDefaultSeed = 67280421310721ull;

class TorchGenerator {
 public:
  explicit TorchGenerator(uint64_t seed = kTorchDefaultSeed) { manual_seed(seed); }

  // torch.Generator.manual_seed: resets the engine and drops the cached normal value. Python
  // ints in [-2^63, 2^64) are accepted by torch; negative ones arrive here as their two's
  // complement. Only the low 32 bits reach the Mersenne Twister, so seeds equal modulo 2^32
  // give the same numbers (initial_seed() still reports the full value, as torch does).
  void manual_seed(uint64_t seed);
  uint64_t initial_seed() const { return seed_; }

  uint32_t random();    // one 32-bit engine output
  uint64_t random64();  // (first << 32) | second

  // torch.randn(shape, dtype=dtype, generator=this) on the CPU; dtype f32, bf16, f16 or f64.
  Tensor randn(const Shape& shape, DType dtype);
  // Same, into caller memory holding numel contiguous elements of dtype.
  void fill_randn(void* data, int64_t numel, DType dtype);

  // The cached second value of the scalar Box-Muller, as torch keeps it between calls.
  const std::optional<double>& next_double_normal_sample() const { return next_double_normal_; }

 private:
  static constexpr int kStateSize = 624;
  void twist();
  double scalar_normal();  // at::normal_distribution<double>(0, 1) with its cache

  uint64_t seed_ = 0;
  uint32_t state_[kStateSize] = {};
  int index_ = kStateSize;
  std::optional<double> next_double_normal_;
};

// torch.randn(shape, dtype, generator=torch.Generator("cpu").manual_seed(seed)).
Tensor randn_like_torch(const Shape& shape, DType dtype, uint64_t seed);

// diffusers.utils.torch_utils.randn_tensor on a CPU generator. With one generator the whole
// [B, ...] tensor is one torch.randn call; with a list (one generator per batch element, length
// = shape[0]) each sample is its own [1, ...] call and the results are concatenated. A list of
// length 1 behaves like a single generator, as in diffusers. The generators advance.
Tensor randn_tensor(const Shape& shape, DType dtype, TorchGenerator& generator);
Tensor randn_tensor(const Shape& shape, DType dtype, std::span<TorchGenerator> generators);

// The noise shapes the diffusers pipelines request (height/width in pixels, f = the VAE's
// vae_scale_factor 2 ** (len(block_out_channels) - 1), 8 for every released FLUX VAE):
//   FluxPipeline.prepare_latents:       [B, 16, 2*(H/(2f)), 2*(W/(2f))] (then packed to tokens)
//   Flux2KleinPipeline.prepare_latents: [B, in_channels, H/(2f), W/(2f)] (128 = 32 latent ch x 2x2)
// Both draw in the prompt-embedding dtype (bf16 for the shipped checkpoints).
Shape flux1_noise_shape(int64_t batch, int64_t height, int64_t width, int64_t latent_channels = 16,
                        int64_t vae_scale_factor = 8);
Shape flux2_noise_shape(int64_t batch, int64_t height, int64_t width, int64_t in_channels = 128,
                        int64_t vae_scale_factor = 8);

}  // namespace fluxrt::pipelines
