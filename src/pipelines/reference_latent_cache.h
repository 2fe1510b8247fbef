#pragma once
// Encoded reference images kept by content and shared by the requests of one pipeline: a server
// asked for several edits of one image runs the VAE encoder on it once. Keyed by the SHA-256 of
// the encoder's input (the preprocessed pixels, their shape and dtype), so two different images
// never share an entry; bounded in bytes, the least recently used entry leaves first.
#include <cstddef>
#include <functional>
#include <list>
#include <mutex>
#include <string>

#include "core/tensor.h"

namespace fluxrt::pipelines {

class ReferenceLatentCache {
 public:
  // 256 MiB holds ~250 encoded 1024x1024 references in bf16 (128 x 64 x 64 x 2 bytes each).
  explicit ReferenceLatentCache(size_t max_bytes = size_t{256} << 20) : max_bytes_(max_bytes) {}

  // The latents of `pixels` (the VAE encoder's input), kept from an earlier call or computed by
  // `encode` (and then kept unless larger than the whole bound). `hit` (may be null) says which.
  Tensor get_or_encode(const Tensor& pixels, const std::function<Tensor()>& encode, bool* hit = nullptr);

  size_t bytes() const;
  size_t entries() const;
  void clear();

 private:
  struct Entry {
    std::string key;
    Tensor latents;  // on the host: the cache never holds device memory between requests
  };
  mutable std::mutex mutex_;
  std::list<Entry> entries_;  // most recently used first
  size_t bytes_ = 0;
  size_t max_bytes_;
};

}  // namespace fluxrt::pipelines
