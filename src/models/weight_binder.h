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

#include "core/quant.h"
#include "core/tensor.h"
#include "io/gguf.h"
#include "io/safetensors.h"

namespace fluxrt::models {

// Canonical name -> tensor. Tensors are usually zero-copy views into a checkpoint mapping;
// converted tensors (concatenations, dtype upcasts) own their memory. An entry may instead be a
// weight kept in its quantized bytes (GGUF blocks): quantized() gives it to linears, which keep
// it so; get() gives its bf16 dequantization (made on first use and kept: not for concurrent
// first reads), so code that needs the values densely still gets them.
class TensorStore {
 public:
  // Every tensor of the checkpoint whose name starts with `prefix`, keyed by the rest of the name.
  static TensorStore from_checkpoint(const io::Checkpoint& checkpoint, const std::string& prefix = "");
  // Every tensor of a GGUF file likewise: F32 / F16 / BF16 as views, block types quantized.
  static TensorStore from_gguf(std::shared_ptr<io::GgufFile> file, const std::string& prefix = "");
  // A checkpoint file or folder, or a GGUF file (by its magic).
  static TensorStore open(const std::string& path, const std::string& prefix = "");

  // `origin` says where the tensor came from, for error messages ("file.safetensors: name").
  void add(const std::string& name, Tensor tensor, std::string origin = {});
  // A [rows, cols] weight in its quantized bytes.
  void add_quantized(const std::string& name, QuantizedMatrix q, std::string origin = {});
  // Entry `from` of `src` under `name`, dense or quantized alike (what a 1:1 rename does).
  void add_entry(const std::string& name, const TensorStore& src, const std::string& from);
  // Entry `from` of `src` (1-D or 2-D) split into row blocks named `names` (fused q/k/v and the
  // like): `rows` rows each, or equal blocks when `rows` is empty; quantized entries by their rows'
  // bytes. False (nothing added) when its rows do not split so.
  bool add_row_split(const std::vector<std::string>& names, const TensorStore& src, const std::string& from,
                     const std::vector<int64_t>& rows = {});
  void remove(const std::string& name);
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const Tensor& get(const std::string& name) const;
  // The entry's shape without reading (or dequantizing) it.
  Shape shape(const std::string& name) const;
  // The quantized weight of entry `name`, or null when it is dense (or absent).
  const QuantizedMatrix* quantized(const std::string& name) const;
  const std::string& origin(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  size_t size() const { return entries_.size(); }
  const std::string& description() const { return description_; }  // e.g. the checkpoint path
  void set_description(std::string d) { description_ = std::move(d); }

 private:
  struct Entry {
    Tensor tensor;  // for a quantized entry: its dequantization, made by get() on first use
    std::string origin;
    std::shared_ptr<const QuantizedMatrix> quantized;
  };
  const Entry& entry(const std::string& name) const;
  std::map<std::string, Entry> entries_;
  std::string description_;
};

// The shape of entry `name`, which must be 2-D, for detecting a config from a checkpoint's shapes
// (no entry is read or dequantized). Throws Format "<store>: cannot detect the <what>: ...".
Shape detect_2d_shape(const TensorStore& store, const std::string& name, const std::string& what);

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
  // A linear's weight kept quantized: the entry's quantized matrix when it is one and has exactly
  // `shape` (recorded as used), else null, and the caller binds the dense tensor with require().
  const QuantizedMatrix* quantized(const std::string& name, const Shape& shape);
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
  // Tensors bound dense here that the store holds quantized (dequantized for the model).
  size_t widened_ = 0;
  std::set<std::string> used_;
  std::vector<std::string> ignored_prefixes_;
  std::vector<std::string> missing_;
  std::vector<std::string> misshaped_;
};

}  // namespace fluxrt::models
