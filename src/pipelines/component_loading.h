#pragma once
// How both pipelines hold and load their components: resident ones borrowed for a stage, owned
// ones (low-memory mode) freed when the stage ends (ComponentLease), and the components of a
// pipeline loaded side by side (load_components).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/tensor.h"

namespace fluxrt::pipelines {

// A component for the duration of one pipeline stage: either borrowed from the resident set or
// owned (low-memory mode) and freed when the lease ends.
template <typename T>
class ComponentLease {
 public:
  explicit ComponentLease(const T* resident) : ptr_(resident) {}
  explicit ComponentLease(std::unique_ptr<T> owned) : owned_(std::move(owned)), ptr_(owned_.get()) {}
  ComponentLease(ComponentLease&&) noexcept = default;
  ComponentLease& operator=(ComponentLease&&) noexcept = default;
  // An owned component's blocks go back to the OS, not into the allocator's block cache: low
  // memory means the next stage gets that memory.
  ~ComponentLease() {
    if (!owned_) return;
    owned_.reset();
    release_cached_host_blocks();
  }
  const T* operator->() const { return ptr_; }
  const T& operator*() const { return *ptr_; }

 private:
  std::unique_ptr<T> owned_;
  const T* ptr_ = nullptr;
};

// With PipelineOptions::text_encoder_apart(), the text encoder's output for the last request's
// prompts, so that a request with the same prompts (a benchmark's timed run after its warm-up)
// needs neither the encoder nor a second load of the transformer, which would have to make room
// for it. `key` is everything the tensors depend on (text_encoding_key).
struct KeptTextEncoding {
  std::string key;
  std::vector<Tensor> tensors;
};

// A key for KeptTextEncoding: every part length-prefixed, so no two lists of parts share one.
std::string text_encoding_key(const std::vector<std::string>& parts);

// Runs every job, each on its own thread when `parallel` (loading is mostly reading and
// converting weights, which overlap), else one after another in order. Each thread runs with the
// process's thread setting (OpenMP's count is per thread: a new thread would start from the
// default, ignoring --threads). Waits for all of them, then rethrows the first job's error in
// job order, so a failure is reported the same way whichever thread finished first.
void load_components(const std::vector<std::function<void()>>& jobs, bool parallel);

}  // namespace fluxrt::pipelines
