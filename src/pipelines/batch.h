#pragma once
// The batch of one generate call, shared by both pipelines: which prompt each image belongs to,
// the per-image rows of the prompt embeddings, the initial noise, and the images out.
//
// A call is one request (diffusers' prompt list + num_images_per_prompt) or several requests that
// share a batch key (runtime::Engine::generate_batch): their prompts run as one list, each prompt
// with its own request's image count, and each request's images drawn from a generator seeded
// with its own seed, so a request's images are the ones it gets alone.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/image.h"
#include "pipelines/noise.h"
#include "pipelines/pipeline.h"

namespace fluxrt::pipelines {

struct CallBatch {
  std::vector<std::string> prompts;  // every request's prompts, in request order
  std::vector<int64_t> repeats;      // images of each prompt
  // One per request when the call has several: its seed and image count. Empty for one request,
  // whose images one generator seeded with its seed draws (FLUX.1 img2img draws its posterior
  // sample from that generator first).
  struct NoiseGroup {
    uint64_t seed = 0;
    int64_t images = 0;
  };
  std::vector<NoiseGroup> noise_groups;
  int64_t images = 0;
};

// The call's prompts, counts and noise groups. InvalidArgument (one line) for an empty batch, a
// request without prompts or with images_per_prompt < 1.
CallBatch call_batch(const std::vector<PlannedRequest>& batch);

// Rows of x [P, ...] each repeated repeats[p] times consecutively -> [sum(repeats), ...], like
// diffusers' prompt_embeds.repeat(1, n, 1).view(P * n, ...) when every count is n.
Tensor repeat_rows(const Tensor& x, const std::vector<int64_t>& repeats);
// The batch-B version of a batch-1 tensor (reference tokens, the negative prompt).
Tensor broadcast_batch(const Tensor& x, int64_t batch);

// The initial noise [B, ...] (shape[0] = the batch) in `dtype`: one torch CPU generator for the
// whole call (randn_tensor), or with noise groups one generator per group, each drawing its
// group's images as one torch.randn call, concatenated in order. `generator` is the single
// request's own, used and advanced only without noise groups.
Tensor draw_noise(const CallBatch& batch, const Shape& shape, DType dtype, TorchGenerator& generator);

// [B, H, W, 3] uint8 -> one RGB image per batch element.
std::vector<io::Image> to_images(const Tensor& u8);

}  // namespace fluxrt::pipelines
