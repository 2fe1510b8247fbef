#include "pipelines/batch.h"

#include <numeric>

#include "core/error.h"

namespace fluxrt::pipelines {

CallBatch call_batch(const std::vector<PlannedRequest>& batch) {
  FLUXRT_CHECK(!batch.empty(), ErrorCode::InvalidArgument, "generate: no requests");
  CallBatch out;
  for (const PlannedRequest& planned : batch) {
    const fluxrt::GenerateRequest& r = *planned.request;
    FLUXRT_CHECK_FIELD(!r.prompts.empty(), ErrorCode::InvalidArgument, "prompts", "generate: no prompts");
    FLUXRT_CHECK_FIELD(r.images_per_prompt >= 1, ErrorCode::InvalidArgument, "batch",
                       "generate: images_per_prompt {} < 1", r.images_per_prompt);
    const int64_t images = static_cast<int64_t>(r.prompts.size()) * r.images_per_prompt;
    for (const std::string& prompt : r.prompts) {
      out.prompts.push_back(prompt);
      out.repeats.push_back(r.images_per_prompt);
    }
    if (batch.size() > 1) out.noise_groups.push_back({r.seed, images});
    out.images += images;
  }
  return out;
}

Tensor repeat_rows(const Tensor& x, const std::vector<int64_t>& repeats) {
  FLUXRT_CHECK(x.size(0) == static_cast<int64_t>(repeats.size()), ErrorCode::InvalidArgument,
               "repeat_rows: {} rows for {} repeat counts", x.size(0), repeats.size());
  const int64_t total = std::accumulate(repeats.begin(), repeats.end(), int64_t{0});
  if (total == x.size(0)) return x;  // every count is 1
  Shape shape = x.shape();
  shape[0] = total;
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  int64_t row = 0;
  for (int64_t r = 0; r < x.size(0); ++r)
    for (int64_t k = 0; k < repeats[r]; ++k) out.narrow(0, row++, 1).copy_from(x.narrow(0, r, 1));
  return out;
}

Tensor broadcast_batch(const Tensor& x, int64_t batch) {
  Shape shape = x.shape();
  shape[0] = batch;
  return x.expand(shape).contiguous();
}

Tensor draw_noise(const CallBatch& batch, const Shape& shape, DType dtype, TorchGenerator& generator) {
  if (batch.noise_groups.empty()) return randn_tensor(shape, dtype, generator);
  Tensor noise = Tensor::empty(shape, dtype);
  int64_t first = 0;
  for (const CallBatch::NoiseGroup& g : batch.noise_groups) {
    Shape part = shape;
    part[0] = g.images;
    TorchGenerator own(g.seed);
    noise.narrow(0, first, g.images).copy_from(randn_tensor(part, dtype, own));
    first += g.images;
  }
  FLUXRT_CHECK(first == shape[0], ErrorCode::InvalidArgument,
               "generate: the noise groups cover {} of {} images", first, shape[0]);
  return noise;
}

std::vector<io::Image> to_images(const Tensor& u8) {  // [B, H, W, 3] uint8
  const Tensor c = u8.contiguous();
  const int64_t b = c.size(0), h = c.size(1), w = c.size(2);
  std::vector<io::Image> images;
  const uint8_t* src = c.data<uint8_t>();
  const size_t per = static_cast<size_t>(h * w * 3);
  for (int64_t i = 0; i < b; ++i) {
    io::Image im{static_cast<int>(w), static_cast<int>(h), 3, {}};
    im.pixels.assign(src + i * per, src + (i + 1) * per);
    images.push_back(std::move(im));
  }
  return images;
}

}  // namespace fluxrt::pipelines
