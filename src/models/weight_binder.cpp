#include "models/weight_binder.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace fluxrt::models {

Tensor to_device(const Tensor& t, Device device) {
  if (!t.defined() || t.device() == device) return t;
  Tensor moved = Tensor::empty(t.shape(), t.dtype(), device);
  moved.copy_from(t);
  return moved;
}

TensorStore TensorStore::from_checkpoint(const io::Checkpoint& checkpoint, const std::string& prefix) {
  TensorStore store;
  store.description_ = checkpoint.path();
  for (const std::string& name : checkpoint.names()) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    // Aligned views: kernels read elements through typed pointers.
    store.add(name.substr(prefix.size()), checkpoint.tensor_aligned(name),
              fmt::format("{}: {}", checkpoint.file_of(name), name));
  }
  return store;
}

void TensorStore::add(const std::string& name, Tensor tensor, std::string origin) {
  FLUXRT_CHECK(tensor.defined(), ErrorCode::Internal, "TensorStore::add: undefined tensor {}", name);
  entries_[name] = Entry{std::move(tensor), origin.empty() ? name : std::move(origin)};
}

void TensorStore::remove(const std::string& name) { entries_.erase(name); }

const Tensor& TensorStore::get(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail(ErrorCode::NotFound, "{}: tensor '{}' not found", description_, name);
  return it->second.tensor;
}

const std::string& TensorStore::origin(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail(ErrorCode::NotFound, "{}: tensor '{}' not found", description_, name);
  return it->second.origin;
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

WeightBinder::WeightBinder(const TensorStore& store, std::string component)
    : store_(store), component_(std::move(component)) {}

Tensor WeightBinder::fetch(const std::string& name, const Shape& shape, std::optional<DType> dtype,
                           bool required) {
  if (!store_.contains(name)) {
    if (required) missing_.push_back(name);
    return Tensor();
  }
  used_.insert(name);
  const Tensor& t = store_.get(name);
  if (t.shape() != shape) {
    misshaped_.push_back(fmt::format("{} ({} expected {})", name, t.shape().str(), shape.str()));
    return Tensor();
  }
  if (dtype && t.dtype() != *dtype) {
    FLUXRT_CHECK(dtype_is_float(t.dtype()) && dtype_is_float(*dtype), ErrorCode::Format,
                 "{}: tensor '{}' has dtype {}, expected a float tensor ({})", component_,
                 store_.origin(name), dtype_name(t.dtype()), dtype_name(*dtype));
    return t.to(*dtype);
  }
  return t;
}

Tensor WeightBinder::require(const std::string& name, const Shape& shape, std::optional<DType> dtype) {
  return fetch(name, shape, dtype, true);
}

Tensor WeightBinder::optional(const std::string& name, const Shape& shape, std::optional<DType> dtype) {
  return fetch(name, shape, dtype, false);
}

void WeightBinder::ignore_prefix(const std::string& prefix) { ignored_prefixes_.push_back(prefix); }

namespace {

std::string first_few(const std::vector<std::string>& names, size_t limit = 4) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < limit; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > limit) out += fmt::format(", ... ({} in all)", names.size());
  return out;
}

}  // namespace

void WeightBinder::finish() const {
  std::vector<std::string> unused;
  for (const std::string& name : store_.names()) {
    if (used_.count(name)) continue;
    bool ignored = std::any_of(ignored_prefixes_.begin(), ignored_prefixes_.end(), [&](const std::string& p) {
      return name.compare(0, p.size(), p) == 0;
    });
    if (!ignored) unused.push_back(name);
  }
  if (missing_.empty() && misshaped_.empty() && unused.empty()) return;
  std::vector<std::string> parts;
  if (!missing_.empty()) parts.push_back(fmt::format("missing tensors: {}", first_few(missing_)));
  if (!misshaped_.empty()) parts.push_back(fmt::format("wrong shapes: {}", first_few(misshaped_)));
  if (!unused.empty()) parts.push_back(fmt::format("unused tensors: {}", first_few(unused)));
  std::string where = store_.description().empty() ? component_ : component_ + " (" + store_.description() + ")";
  fail(ErrorCode::Format, "{}: {}", where, fmt::join(parts, "; "));
}

}  // namespace fluxrt::models
