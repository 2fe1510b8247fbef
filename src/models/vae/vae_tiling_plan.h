#pragma once
// How one AutoencoderKL decode or encode will run: the plain whole-image pass, the lean exact pass,
// or blended tiles, and the grid, memory estimates and FLOPs behind that choice.
//
// Why a planner: the plain pass's peak grows with the image (about six tensors of the widest
// full-resolution level, 2048^2 klein decode: tens of GiB in f32), and the only passes that bound
// it change either the speed (lean: convolutions in bands) or the result (tiles: per-tile GroupNorm
// statistics and border context). Auto therefore takes the first of plain, lean, tiles whose
// estimate fits the memory budget, so small images stay exact and fast and large ones still run.
// The estimates are pure arithmetic on the config and image size (no weights), so the CLI, bench
// and tests can ask what a size would do without running it.
//
// The forward passes (autoencoder_kl.cpp) follow the plan: TilePlan::lean selects the lean pass,
// TilePlan::tiled the tiles, with TilePlan::whole_image_stages saying where the tiled pass splits
// (stage numbering below).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"

namespace fluxrt::models {

struct AutoencoderKLConfig;  // autoencoder_kl.h

// Never: the plain whole-image pass. Lean: the memory-lean exact pass: the same whole-image
// computation (every GroupNorm sees the whole image, the result is the untiled one to f32
// rounding), with each convolution run over bands of output rows and every tensor released after
// its last use, so its peak is a few tensors of the widest level instead of about six plus the
// convolution backend's image-sized copies. Always: blended tiles. Auto: the plain pass when its
// estimate fits the budget, else the lean pass when its estimate fits, else blended tiles.
enum class TilingMode { Auto, Always, Never, Lean };

// Overlapping tiles, blended with linear ramps over the overlap (weights normalised per pixel,
// so the seam is a smooth cross-fade rather than diffusers' crop-and-blend of half the overlap).
// Only the high-resolution stages run per tile: the mid block (its attention over all pixels) and
// the low-resolution levels next to it run once on the whole image (TilePlan::whole_image_stages).
struct TilingOptions {
  TilingMode mode = TilingMode::Auto;
  int tile_pixels = 512;    // tile edge in image pixels (multiple of 16)
  int overlap_pixels = 128; // overlap between neighbouring tiles in image pixels (multiple of 16)
  // Auto's budget (bytes) for the plain pass's, then the lean pass's estimate (tiles when neither
  // fits); 0 derives it from the free memory of the VAE's device when the pass starts
  // (vae_auto_memory_budget_bytes).
  size_t memory_budget_bytes = 0;
  // Output rows per convolution band in the lean pass; 0 sizes each band to about
  // kLeanBandBytes of its widest side (tests set a few rows to exercise the band seams).
  int band_rows = 0;
};

// About this much per convolution band in the lean pass (f32-counted): small against the image's
// tensors, large enough that oneDNN still runs long rows of output per call.
inline constexpr size_t kLeanBandBytes = size_t{64} << 20;

// Half of what `device` has free right now (core/memory_info.h device_free_bytes: Linux
// MemAvailable for cpu and cpu:N, the GPU's own free memory for cuda:N), or 6 GiB where that is
// unknown: the activation budget of TilingMode::Auto when TilingOptions gives none. Half, since
// the estimate covers activations only and other work (the next request, another process) needs room.
size_t vae_auto_memory_budget_bytes(Device device = Device::cpu());


// How one decode or encode of a given size will run under the current tiling options.
struct TilePlan {
  bool tiled = false;
  bool lean = false;                         // the lean exact pass (untiled result, bounded memory; not tiled)
  int rows = 1, cols = 1;                    // tile grid (1 x 1 when untiled)
  int64_t tile_height = 0, tile_width = 0;   // image pixels of one tile (the whole image when untiled)
  size_t estimate_bytes = 0;                 // estimated peak activation bytes of the plain untiled pass
  size_t budget_bytes = 0;                   // the budget Auto compared the estimates with
  size_t lean_estimate_bytes = 0;            // estimated peak of the lean exact pass (any mode)
  // Stages of a tiled pass that run once on the whole image, counted from the deepest: the mid block
  // (decode: with post_quant_conv and conv_in; encode: with conv_norm_out, conv_out, quant_conv),
  // then whole up levels from the deepest (decode) or down levels from the deepest (encode). A stage
  // joins while its widest whole-image tensor is no larger than one tile's widest, so a tiled pass
  // still needs about one tile's memory; the full-resolution level always runs per tile. 0: every
  // stage runs per tile (the whole latent is larger than a tile's widest tensor).
  int whole_image_stages = 0;
  size_t tiled_estimate_bytes = 0;           // estimated peak of the tiled pass (0 when untiled)
  double executed_flops = 0;                 // FLOPs the pass runs (tile overlaps included)
};

// OutOfMemory (one line naming `what`, the device, the estimate and the free bytes) when `plan` is
// tiled and even its estimate exceeds `free_bytes` (0: unknown, no check). The VAE calls it on GPUs,
// where there is no swap to fall back on and tiles are already the leanest pass.
void check_tiled_pass_fits(const TilePlan& plan, size_t free_bytes, Device device, const char* what);

// The passes as stages, for the split between the whole-image part and the tiles (n levels):
// decode stages: 0 = post_quant_conv, conv_in, mid block; k = 1..n: up level k-1's resnets (after
// the previous level's upsampler); n+1 = conv_norm_out, conv_out. With w = whole_image_stages > 0
// the whole-image part is the decoder up to level w-2 (stages [0, w)), the tiles run the rest.
// Encode stages: k = 0..n-1: down level k (conv_in before level 0, its downsampler after);
// n = mid block, conv_norm_out, conv_out, quant_conv. The tiles run down levels [0, n+1-w), the
// whole image the rest.
//
// The plan of a decode to / encode of `batch` images of height x width pixels in `dtype`, under
// `tiling` on `device` (Auto reads vae_auto_memory_budget_bytes(device) when tiling gives no
// budget). rows / cols 0: tile options the passes reject (not multiples of the tiled input's pixel,
// overlap >= tile).
TilePlan plan_vae_decode(const AutoencoderKLConfig& config, DType dtype, const TilingOptions& tiling, int64_t batch,
                         int64_t height, int64_t width, Device device = Device::cpu());
TilePlan plan_vae_encode(const AutoencoderKLConfig& config, DType dtype, const TilingOptions& tiling, int64_t batch,
                         int64_t height, int64_t width, Device device = Device::cpu());

// Estimated peak activation bytes of the plain untiled pass: the widest full-resolution stage holds
// about six tensors at once (input, norm output, conv output, skip, and the conv backend's blocked
// input/output copies), counted as f32 since the convolutions accumulate in f32.
size_t vae_decode_estimate_bytes(const AutoencoderKLConfig& config, DType dtype, int64_t batch, int64_t height,
                                 int64_t width);
size_t vae_encode_estimate_bytes(const AutoencoderKLConfig& config, DType dtype, int64_t batch, int64_t height,
                                 int64_t width);

// FLOPs (2 per MAC, convolutions + attention) of one untiled decode / encode at this image size.
double vae_decode_flops(const AutoencoderKLConfig& config, int64_t batch, int64_t height, int64_t width);
double vae_encode_flops(const AutoencoderKLConfig& config, int64_t batch, int64_t height, int64_t width);

// Tile starts along one axis of length n (tile t, overlap o): stride t - o, the last tile flush
// with the end so every tile has full size. Shared by the plan's grid and the blending pass.
std::vector<int64_t> vae_tile_starts(int64_t n, int64_t t, int64_t o);

}  // namespace fluxrt::models
