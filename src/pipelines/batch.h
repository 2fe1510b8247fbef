#pragma once
// The batch of one generate call, shared by both pipelines: which prompt each image belongs to,
// the per-image rows of the prompt embeddings, the initial noise, and the images out.
//
// A batch is diffusers' prompt list + num_images_per_prompt, generalised so that several
// requests can run as one (runtime::Engine::generate_batch): each prompt may have its own image
// count (GenerateRequest::prompt_repeats) and each request's images their own generator
// (GenerateRequest::noise_groups), so a request's images are the ones it gets alone.
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "io/image.h"
#include "pipelines/flux2_klein_pipeline.h"
#include "pipelines/noise.h"

namespace fluxrt::pipelines {

// Images per prompt, one entry per prompt: request.prompt_repeats, else images_per_prompt each.
// InvalidArgument (one line) when there are no prompts, a count is < 1, prompt_repeats does not
// have one entry per prompt, or the noise groups do not cover the batch exactly.
std::vector<int64_t> images_per_prompt(const GenerateRequest& request);
// The number of images: the sum of images_per_prompt(request).
int64_t batch_size(const GenerateRequest& request);

// Rows of x [P, ...] each repeated repeats[p] times consecutively -> [sum(repeats), ...], like
// diffusers' prompt_embeds.repeat(1, n, 1).view(P * n, ...) when every count is n.
Tensor repeat_rows(const Tensor& x, const std::vector<int64_t>& repeats);
// The batch-B version of a batch-1 tensor (reference tokens, the negative prompt).
Tensor broadcast_batch(const Tensor& x, int64_t batch);

// The initial noise [B, ...] (shape[0] = the batch) in `dtype`: one torch CPU generator seeded
// with request.seed for the whole batch (randn_tensor), or with noise groups one generator per
// group, each drawing its group's images as one torch.randn call, concatenated in order.
// `generator` is the request's own, used and advanced only without noise groups (FLUX.1 img2img
// draws its posterior sample from it first).
Tensor draw_noise(const GenerateRequest& request, const Shape& shape, DType dtype, TorchGenerator& generator);

// [B, H, W, 3] uint8 -> one RGB image per batch element.
std::vector<io::Image> to_images(const Tensor& u8);

}  // namespace fluxrt::pipelines
