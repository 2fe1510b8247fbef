// Weight and RAM figures for the size checks (see memory_estimate.h).
#include "pipelines/memory_estimate.h"

#include <unistd.h>

#include <algorithm>
#include <system_error>

#include "core/error.h"
#include "io/gguf.h"
#include "io/image.h"
#include "io/safetensors.h"

namespace fluxrt::pipelines {
namespace fs = std::filesystem;

namespace {

// Bytes per element of a dense tensor as bound for the run.
size_t dense_element_bytes(DType dtype) { return dtype == DType::F32 ? 4 : 2; }

}  // namespace

// At int8 the count is what the RAM check needs: the int8 copies. A mapped checkpoint's bf16 (or
// fp8) tensors stay mapped as the linears' sources (per-request LoRA merges read them), but after
// the requantization at load nothing touches those pages again: they are clean file cache the
// kernel takes back under pressure, as for a bf16 run whose backend reordered the weights into a
// copy of its own. (A weight converted at load, from f32 or with a LoRA merged in, is an anonymous
// buffer that stays resident beside its int8 copy: not counted here, as in bf16 runs.)
size_t checkpoint_weight_bytes(const fs::path& weights, DType dtype, nn::LinearFormat linears) {
  std::error_code ec;
  if (weights.empty() || !fs::exists(weights, ec)) return 0;
  const bool int8 = linears == nn::LinearFormat::Int8;
  if (io::is_gguf_file(weights.string())) {
    // GGUF: block types stay in their bytes; dense ones are bound in the run's dtype.
    size_t bytes = 0;
    const auto file = io::GgufFile::open(weights.string());  // held: the loop reads its header
    for (const io::GgufTensorInfo& t : file->tensors()) {
      const size_t numel = static_cast<size_t>(t.numel());
      const size_t kept = quant_is_blocked(t.type) ? t.nbytes : numel * dense_element_bytes(dtype);
      bytes += int8 && t.shape.size() == 2 ? std::min(kept, numel) : kept;
    }
    return bytes;
  }
  const io::Checkpoint checkpoint = io::Checkpoint::open(weights.string());
  const std::vector<std::string> names = checkpoint.names();
  // ComfyUI all-in-one files: the loaders read only the transformer's tensors.
  const std::string comfy = "model.diffusion_model.";
  const bool mixed =
      std::any_of(names.begin(), names.end(), [&](const std::string& n) { return n.rfind(comfy, 0) == 0; });
  size_t bytes = 0;
  for (const std::string& name : names) {
    if (mixed && name.rfind(comfy, 0) != 0) continue;
    const io::TensorInfo& info = checkpoint.info(name);
    // Small f32 tensors (norm scales, biases) may stay f32 in a bf16 run; they are a rounding error here.
    const bool int8_matrix = int8 && info.shape.size() == 2;
    bytes += static_cast<size_t>(info.numel()) * (int8_matrix ? 1 : dense_element_bytes(dtype));
  }
  return bytes;
}

size_t ResidentWeights::peak(bool low_memory, bool text_encoder_apart) const {
  if (low_memory) return std::max({transformer, text_encoders, vae});
  if (text_encoder_apart) return std::max(text_encoders, transformer + vae);
  return transformer + text_encoders + vae;
}

ResidentWeights pipeline_weight_bytes(const fs::path& root, DType dtype, const fs::path& transformer_file,
                                      const fs::path& text_encoder_file,
                                      nn::LinearFormat transformer_linears) {
  ResidentWeights w;
  w.transformer = checkpoint_weight_bytes(transformer_file.empty() ? root / "transformer" : transformer_file,
                                          dtype, transformer_linears);
  fs::path small = root / "text_encoder", large = root / "text_encoder_2";
  if (!fs::is_directory(large)) std::swap(small, large);  // klein: one encoder, text_encoder/
  if (!text_encoder_file.empty()) large = text_encoder_file;
  w.text_encoders = checkpoint_weight_bytes(small, dtype) + checkpoint_weight_bytes(large, dtype);
  w.vae = checkpoint_weight_bytes(root / "vae", dtype);
  return w;
}

size_t physical_ram_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
}

void check_fits_in_memory(size_t activation_bytes, const MemoryCheck& check, const std::string& what) {
  const size_t ram = check.ram_bytes != 0 ? check.ram_bytes : physical_ram_bytes();
  const size_t need = activation_bytes + check.weight_bytes;
  constexpr double kGiB = 1073741824.0;
  FLUXRT_CHECK(ram == 0 || need <= ram, ErrorCode::OutOfMemory,
               "{}: needs about {:.2f} GiB ({:.2f} GiB of resident weights + {:.2f} GiB of activations), more than "
               "the {:.2f} GiB of RAM{}",
               what, need / kGiB, check.weight_bytes / kGiB, activation_bytes / kGiB, ram / kGiB,
               check.suggest_low_memory ? " (--low-memory keeps one component resident at a time)" : "");
}

void check_image_size(int width, int height, int batch, int vae_scale_factor) {
  FLUXRT_CHECK(vae_scale_factor >= 1 && vae_scale_factor <= 64, ErrorCode::InvalidArgument,
               "VAE scale factor {} not in [1, 64]", vae_scale_factor);
  const int multiple = 2 * vae_scale_factor;
  FLUXRT_CHECK_FIELD(
      width > 0 && height > 0 && width % multiple == 0 && height % multiple == 0, ErrorCode::InvalidArgument,
      "size", "image size {}x{}: width and height must be positive multiples of {} (2 x the VAE's factor {})",
      width, height, multiple, vae_scale_factor);
  FLUXRT_CHECK_FIELD(width <= io::kMaxImageSide && height <= io::kMaxImageSide, ErrorCode::InvalidArgument,
                     "size", "image size {}x{}: at most {} pixels per side", width, height,
                     io::kMaxImageSide);
  FLUXRT_CHECK_FIELD(batch >= 1, ErrorCode::InvalidArgument, "batch", "batch of {} images: need at least 1",
                     batch);
}

}  // namespace fluxrt::pipelines
