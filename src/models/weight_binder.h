#pragma once
// Weight binding (DESIGN.md section 3): checkpoints are first turned into a TensorStore keyed by the
// model's canonical names (name maps convert other layouts: fused/split q,k,v, swapped halves);
// then each block asks a WeightBinder for its tensors by name with the shape it expects. Problems
// are collected rather than thrown one at a time, so finish() reports every missing, mis-shaped
// and unused tensor of a component in one error (the first few names of each kind).
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"

namespace fluxrt::models {

// Canonical name -> tensor. Tensors are usually zero-copy views into a checkpoint mapping;
// converted tensors (concatenations, dtype upcasts) own their memory.
class TensorStore {
 public:
  // Every tensor of the checkpoint whose name starts with `prefix`, keyed by the rest of the name.
  static TensorStore from_checkpoint(const io::Checkpoint& checkpoint, const std::string& prefix = "");

  // `origin` says where the tensor came from, for error messages ("file.safetensors: name").
  void add(const std::string& name, Tensor tensor, std::string origin = {});
  void remove(const std::string& name);
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const Tensor& get(const std::string& name) const;
  const std::string& origin(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  size_t size() const { return entries_.size(); }
  const std::string& description() const { return description_; }  // e.g. the checkpoint path
  void set_description(std::string d) { description_ = std::move(d); }

 private:
  struct Entry {
    Tensor tensor;
    std::string origin;
  };
  std::map<std::string, Entry> entries_;
  std::string description_;
};

// `t` on `device`: `t` itself when it is already there (or undefined), else a copy (an upload or a
// download). Models call it once at load for every tensor an op reads besides prepared linears and
// convolutions (norm weights, embedding tables, biases applied by hand), and per call for the small
// host-built inputs (ids, RoPE tables, masks, timestep projections).
Tensor to_device(const Tensor& t, Device device);

class WeightBinder {
 public:
  // `component` names the model part in errors ("transformer", "text_encoder", "vae").
  WeightBinder(const TensorStore& store, std::string component);

  // The tensor `name` with exactly `shape`. With `dtype` set, a tensor stored in another float
  // dtype is converted once here (e.g. fp8 or f32 checkpoints into bf16); otherwise it is returned
  // as stored. Returns an undefined tensor when missing or mis-shaped (recorded for finish()).
  Tensor require(const std::string& name, const Shape& shape, std::optional<DType> dtype = std::nullopt);
  // Like require, but a missing tensor is not an error (undefined tensor returned).
  Tensor optional(const std::string& name, const Shape& shape, std::optional<DType> dtype = std::nullopt);
  bool has(const std::string& name) const { return store_.contains(name); }
  // Marks tensors as deliberately unused (e.g. a VAE encoder for txt2img) so finish() accepts them.
  void ignore_prefix(const std::string& prefix);

  // Throws Format listing missing, mis-shaped and unused tensors; no-op when everything bound.
  void finish() const;
  const std::string& component() const { return component_; }

 private:
  Tensor fetch(const std::string& name, const Shape& shape, std::optional<DType> dtype, bool required);
  const TensorStore& store_;
  std::string component_;
  std::set<std::string> used_;
  std::vector<std::string> ignored_prefixes_;
  std::vector<std::string> missing_;
  std::vector<std::string> misshaped_;
};

}  // namespace fluxrt::models
