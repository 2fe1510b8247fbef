#include "models/weight_binder.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/log.h"

namespace fluxrt::models {

Shape detect_2d_shape(const TensorStore& store, const std::string& name, const std::string& what) {
  const std::string& where = store.description();
  if (!store.contains(name))
    fail(ErrorCode::Format, "{}: cannot detect the {}: tensor '{}' is missing", where, what, name);
  const Shape shape = store.shape(name);
  FLUXRT_CHECK(shape.size() == 2, ErrorCode::Format, "{}: '{}' should be 2-D, is {}", where, name,
               shape.str());
  return shape;
}

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

TensorStore TensorStore::from_gguf(std::shared_ptr<io::GgufFile> file, const std::string& prefix) {
  TensorStore store;
  store.description_ = file->path();
  for (const io::GgufTensorInfo& t : file->tensors()) {
    if (t.name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string name = t.name.substr(prefix.size());
    std::string origin = fmt::format("{}: {}", file->path(), t.name);
    if (quant_is_blocked(t.type) && t.shape.size() == 2)
      store.add_quantized(name, file->matrix(t.name), std::move(origin));
    else
      store.add(name, file->tensor(t.name), std::move(origin));
  }
  return store;
}

TensorStore TensorStore::open(const std::string& path, const std::string& prefix) {
  if (io::is_gguf_file(path)) return from_gguf(io::GgufFile::open(path), prefix);
  return from_checkpoint(io::Checkpoint::open(path), prefix);
}

void TensorStore::add(const std::string& name, Tensor tensor, std::string origin) {
  FLUXRT_CHECK(tensor.defined(), ErrorCode::Internal, "TensorStore::add: undefined tensor {}", name);
  entries_[name] = Entry{std::move(tensor), origin.empty() ? name : std::move(origin), nullptr};
}

void TensorStore::add_quantized(const std::string& name, QuantizedMatrix q, std::string origin) {
  validate_quantized(q, origin.empty() ? name : origin);
  entries_[name] = Entry{Tensor(), origin.empty() ? name : std::move(origin),
                         std::make_shared<const QuantizedMatrix>(std::move(q))};
}

void TensorStore::add_entry(const std::string& name, const TensorStore& src, const std::string& from) {
  entries_[name] = src.entry(from);
}

bool TensorStore::add_row_split(const std::vector<std::string>& names, const TensorStore& src,
                                const std::string& from, const std::vector<int64_t>& rows) {
  const Entry& e = src.entry(from);
  const int64_t total = e.quantized ? e.quantized->rows : (e.tensor.dim() >= 1 ? e.tensor.size(0) : 0);
  std::vector<int64_t> sizes = rows;
  if (sizes.empty()) {
    const int64_t parts = static_cast<int64_t>(names.size());
    if (parts == 0 || total % parts != 0) return false;
    sizes.assign(names.size(), total / parts);
  }
  int64_t sum = 0;
  for (int64_t r : sizes) {
    if (r <= 0) return false;
    sum += r;
  }
  if (sizes.size() != names.size() || sum != total) return false;
  if (!e.quantized) {
    const Tensor& t = e.tensor;
    if (t.dim() < 1 || t.dim() > 2) return false;
    int64_t at = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      add(names[i], t.narrow(0, at, sizes[i]), e.origin);
      at += sizes[i];
    }
    return true;
  }
  const QuantizedMatrix& q = *e.quantized;
  int64_t at = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    QuantizedMatrix part = q;
    part.rows = sizes[i];
    part.bytes = q.bytes.narrow(0, static_cast<int64_t>(at * q.row_bytes()),
                                static_cast<int64_t>(sizes[i] * q.row_bytes()));
    if (q.scale.numel() > 1)
      part.scale = q.scale.narrow(0, at, sizes[i]);  // per-row fp8 scales follow their rows
    add_quantized(names[i], std::move(part), e.origin);
    at += sizes[i];
  }
  return true;
}

void TensorStore::remove(const std::string& name) { entries_.erase(name); }

const TensorStore::Entry& TensorStore::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail(ErrorCode::NotFound, "{}: tensor '{}' not found", description_, name);
  return it->second;
}

const Tensor& TensorStore::get(const std::string& name) const {
  const Entry& e = entry(name);
  if (e.quantized && !e.tensor.defined()) {
    // The dense values for code that reads them (norms, embeddings, fused copies).
    const_cast<Entry&>(e).tensor = dequantize_ref(*e.quantized).to(DType::BF16);
  }
  return e.tensor;
}

Shape TensorStore::shape(const std::string& name) const {
  const Entry& e = entry(name);
  if (e.quantized) return Shape({e.quantized->rows, e.quantized->cols});
  return e.tensor.shape();
}

const QuantizedMatrix* TensorStore::quantized(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : it->second.quantized.get();
}

const std::string& TensorStore::origin(const std::string& name) const { return entry(name).origin; }

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
  const Shape stored = store_.shape(name);
  if (stored != shape) {
    misshaped_.push_back(fmt::format("{} ({} expected {})", name, stored.str(), shape.str()));
    return Tensor();
  }
  if (store_.quantized(name)) ++widened_;
  const Tensor& t = store_.get(name);
  if (dtype && t.dtype() != *dtype) {
    FLUXRT_CHECK(dtype_is_float(t.dtype()) && dtype_is_float(*dtype), ErrorCode::Format,
                 "{}: tensor '{}' has dtype {}, expected a float tensor ({})", component_,
                 store_.origin(name), dtype_name(t.dtype()), dtype_name(*dtype));
    return t.to(*dtype);
  }
  return t;
}

const QuantizedMatrix* WeightBinder::quantized(const std::string& name, const Shape& shape) {
  const QuantizedMatrix* q = store_.quantized(name);
  if (q == nullptr || shape.size() != 2 || q->rows != shape[0] || q->cols != shape[1]) return nullptr;
  used_.insert(name);
  return q;
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
  if (widened_ > 0)
    FLUXRT_LOG_INFO(
        "{}: {} quantized tensors were dequantized to bf16 for the model (not linear weights here)",
        component_, widened_);
  if (missing_.empty() && misshaped_.empty() && unused.empty()) return;
  std::vector<std::string> parts;
  if (!missing_.empty()) parts.push_back(fmt::format("missing tensors: {}", first_few(missing_)));
  if (!misshaped_.empty()) parts.push_back(fmt::format("wrong shapes: {}", first_few(misshaped_)));
  if (!unused.empty()) parts.push_back(fmt::format("unused tensors: {}", first_few(unused)));
  std::string where = store_.description().empty() ? component_ : component_ + " (" + store_.description() + ")";
  fail(ErrorCode::Format, "{}: {}", where, fmt::join(parts, "; "));
}

}  // namespace fluxrt::models
