#include "pipelines/reference_latent_cache.h"

#include <fmt/format.h>

#include "core/error.h"
#include "io/sha256.h"
#include "models/weight_binder.h"

namespace fluxrt::pipelines {
namespace {

std::string content_key(const Tensor& pixels) {
  const Tensor host = models::to_device(pixels, Device::cpu()).contiguous();
  return fmt::format("{} {} {}", host.shape().str(), dtype_name(host.dtype()),
                     io::sha256_hex(static_cast<const uint8_t*>(host.raw_data()), host.nbytes()));
}

}  // namespace

Tensor ReferenceLatentCache::get_or_encode(const Tensor& pixels, const std::function<Tensor()>& encode,
                                           bool* hit) {
  const std::string key = content_key(pixels);
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->key != key) continue;
      entries_.splice(entries_.begin(), entries_, it);  // most recently used first
      if (hit) *hit = true;
      return entries_.front().latents;
    }
  }
  if (hit) *hit = false;
  // Encoded outside the lock: a second request for another image is not held up by this one.
  const Tensor latents = models::to_device(encode(), Device::cpu()).contiguous();
  const size_t size = latents.nbytes();
  if (size > max_bytes_) return latents;
  const std::lock_guard<std::mutex> lock(mutex_);
  for (const Entry& e : entries_)
    if (e.key == key) return latents;  // another call kept the same image meanwhile
  entries_.push_front({key, latents});
  bytes_ += size;
  while (bytes_ > max_bytes_) {
    bytes_ -= entries_.back().latents.nbytes();
    entries_.pop_back();
  }
  return latents;
}

size_t ReferenceLatentCache::bytes() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

size_t ReferenceLatentCache::entries() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

void ReferenceLatentCache::clear() {
  const std::lock_guard<std::mutex> lock(mutex_);
  entries_.clear();
  bytes_ = 0;
}

}  // namespace fluxrt::pipelines
