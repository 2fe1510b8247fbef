#include "core/tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/allocator.h"
#include "core/device_memory.h"

namespace fluxrt {

// ---------------------------------------------------------------- Dims

Dims::Dims(std::initializer_list<int64_t> values) {
  FLUXRT_CHECK(values.size() <= kMaxDims, ErrorCode::InvalidArgument, "tensor rank {} exceeds {}",
               values.size(), kMaxDims);
  for (int64_t v : values) values_[size_++] = v;
}

Dims::Dims(const std::vector<int64_t>& values) {
  FLUXRT_CHECK(values.size() <= kMaxDims, ErrorCode::InvalidArgument, "tensor rank {} exceeds {}",
               values.size(), kMaxDims);
  for (int64_t v : values) values_[size_++] = v;
}

void Dims::push_back(int64_t v) {
  FLUXRT_CHECK(size_ < kMaxDims, ErrorCode::InvalidArgument, "tensor rank exceeds {}", kMaxDims);
  values_[size_++] = v;
}

void Dims::insert(int pos, int64_t v) {
  FLUXRT_CHECK(size_ < kMaxDims && pos >= 0 && pos <= size_, ErrorCode::InvalidArgument,
               "cannot insert dimension {} into rank {}", pos, size_);
  for (int i = size_; i > pos; --i) values_[i] = values_[i - 1];
  values_[pos] = v;
  ++size_;
}

void Dims::erase(int pos) {
  FLUXRT_CHECK(pos >= 0 && pos < size_, ErrorCode::InvalidArgument, "no dimension {} in rank {}", pos,
               size_);
  for (int i = pos; i + 1 < size_; ++i) values_[i] = values_[i + 1];
  --size_;
}

int64_t Dims::numel() const {
  int64_t n = 1;
  for (int i = 0; i < size_; ++i) n *= values_[i];
  return n;
}

std::string Dims::str() const { return fmt::format("[{}]", fmt::join(begin(), end(), ", ")); }

bool Dims::operator==(const Dims& other) const {
  return size_ == other.size_ && std::equal(begin(), end(), other.begin());
}

Dims contiguous_strides(const Shape& shape) {
  Dims strides = shape;
  int64_t s = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

// ---------------------------------------------------------------- construction

namespace {

void check_shape(const Shape& shape) {
  for (int64_t e : shape)
    FLUXRT_CHECK(e >= 0, ErrorCode::InvalidArgument, "negative extent in shape {}", shape.str());
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  check_shape(shape);
  size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  auto storage = std::make_shared<Storage>();
  if (device.is_cpu()) {
    storage->data = aligned_alloc_bytes(bytes);
    storage->owner = std::shared_ptr<void>(storage->data, aligned_free);
  } else {
    // Device memory comes from the backend's allocator (core/device_memory.h).
    const DeviceMemoryHooks& mem = device_memory(device);
    storage->data = mem.allocate(device, bytes);
    auto release = mem.release;
    storage->owner = std::shared_ptr<void>(storage->data, [device, release](void* p) { release(device, p); });
  }
  storage->bytes = bytes;
  storage->device = device;
  Tensor t;
  t.storage_ = std::move(storage);
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (device.is_cpu())
    std::memset(t.raw_data(), 0, t.nbytes());
  else
    t.fill(0.0);
  return t;
}

Tensor Tensor::full(const Shape& shape, DType dtype, double value) {
  Tensor t = empty(shape, dtype);
  t.fill(value);
  return t;
}

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> keep_alive,
                         Device device) {
  check_shape(shape);
  auto storage = std::make_shared<Storage>();
  storage->data = data;
  storage->bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  storage->device = device;
  storage->owner = std::move(keep_alive);
  Tensor t;
  t.storage_ = std::move(storage);
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape, DType dtype) {
  FLUXRT_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), ErrorCode::InvalidArgument,
               "from_vector: {} values for shape {}", values.size(), shape.str());
  Tensor t = empty(shape, dtype);
  convert(values.data(), DType::F32, t.raw_data(), dtype, values.size());
  return t;
}

// ---------------------------------------------------------------- properties

int Tensor::wrap_dim(int d) const {
  int n = dim();
  int w = d < 0 ? d + n : d;
  FLUXRT_CHECK(w >= 0 && w < n, ErrorCode::InvalidArgument, "dimension {} out of range for {}", d,
               str());
  return w;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

Tensor Tensor::empty_channels_last(const Shape& nchw, DType dtype, Device device) {
  FLUXRT_CHECK(nchw.size() == 4, ErrorCode::InvalidArgument, "channels-last shape {} is not [N, C, H, W]",
               nchw.str());
  return empty({nchw[0], nchw[2], nchw[3], nchw[1]}, dtype, device).permute({0, 3, 1, 2});
}

Tensor Tensor::empty_like_layout(const Tensor& like, const Shape& shape, DType dtype) {
  return like.is_channels_last_only() ? empty_channels_last(shape, dtype, like.device())
                                      : empty(shape, dtype, like.device());
}

bool Tensor::is_channels_last() const {
  if (dim() != 4) return false;
  int64_t expected = 1;
  for (int d : {1, 3, 2, 0}) {
    if (shape_[d] != 1 && strides_[d] != expected) return false;
    expected *= shape_[d];
  }
  return true;
}

void* Tensor::raw_data() const {
  if (!storage_) return nullptr;
  return static_cast<char*>(storage_->data) + offset_ * static_cast<int64_t>(element_size());
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  return fmt::format("Tensor({}, {}{})", dtype_name(dtype_), shape_.str(),
                     device() == Device::cpu() ? "" : ", " + device().str());
}

// ---------------------------------------------------------------- views

Tensor Tensor::view(const Shape& new_shape_in) const {
  FLUXRT_CHECK(is_contiguous(), ErrorCode::InvalidArgument,
               "view {} of non-contiguous {} (use reshape)", new_shape_in.str(), str());
  Shape new_shape = new_shape_in;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < new_shape.size(); ++i) {
    if (new_shape[i] == -1) {
      FLUXRT_CHECK(infer < 0, ErrorCode::InvalidArgument, "view {}: more than one -1",
                   new_shape_in.str());
      infer = i;
    } else {
      FLUXRT_CHECK(new_shape[i] >= 0, ErrorCode::InvalidArgument, "view {}: negative extent",
                   new_shape_in.str());
      known *= new_shape[i];
    }
  }
  if (infer >= 0) {
    FLUXRT_CHECK(known != 0 && numel() % known == 0, ErrorCode::InvalidArgument,
                 "view {} of {}: cannot infer the -1 extent", new_shape_in.str(), str());
    new_shape[infer] = numel() / known;
  }
  FLUXRT_CHECK(new_shape.numel() == numel(), ErrorCode::InvalidArgument,
               "view {} of {}: element counts differ", new_shape_in.str(), str());
  Tensor t = *this;
  t.shape_ = new_shape;
  t.strides_ = contiguous_strides(new_shape);
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (is_contiguous()) return view(shape);
  return contiguous().view(shape);
}

Tensor Tensor::slice(int d, int64_t start, int64_t end, int64_t step) const {
  int w = wrap_dim(d);
  int64_t n = shape_[w];
  if (start < 0) start += n;
  if (end < 0) end += n;
  end = std::min(end, n);
  FLUXRT_CHECK(step > 0 && start >= 0 && start <= end, ErrorCode::InvalidArgument,
               "slice [{}:{}:{}] out of range for dimension {} of {}", start, end, step, d, str());
  Tensor t = *this;
  t.offset_ += start * strides_[w];
  t.shape_[w] = (end - start + step - 1) / step;
  t.strides_[w] = strides_[w] * step;
  return t;
}

Tensor Tensor::select(int d, int64_t index) const {
  int w = wrap_dim(d);
  if (index < 0) index += shape_[w];
  FLUXRT_CHECK(index >= 0 && index < shape_[w], ErrorCode::InvalidArgument,
               "index {} out of range for dimension {} of {}", index, d, str());
  Tensor t = *this;
  t.offset_ += index * strides_[w];
  t.shape_.erase(w);
  t.strides_.erase(w);
  return t;
}

Tensor Tensor::transpose(int d0, int d1) const {
  int a = wrap_dim(d0), b = wrap_dim(d1);
  Tensor t = *this;
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

Tensor Tensor::permute(const std::vector<int>& order) const {
  FLUXRT_CHECK(static_cast<int>(order.size()) == dim(), ErrorCode::InvalidArgument,
               "permute with {} indices on {}", order.size(), str());
  Tensor t = *this;
  std::array<bool, kMaxDims> seen{};
  for (int i = 0; i < dim(); ++i) {
    int src = wrap_dim(order[i]);
    FLUXRT_CHECK(!seen[src], ErrorCode::InvalidArgument, "permute repeats dimension {}", src);
    seen[src] = true;
    t.shape_[i] = shape_[src];
    t.strides_[i] = strides_[src];
  }
  return t;
}

Tensor Tensor::unsqueeze(int d) const {
  int w = d < 0 ? d + dim() + 1 : d;
  FLUXRT_CHECK(w >= 0 && w <= dim(), ErrorCode::InvalidArgument, "unsqueeze({}) on {}", d, str());
  Tensor t = *this;
  int64_t stride = w < dim() ? strides_[w] * shape_[w] : 1;
  t.shape_.insert(w, 1);
  t.strides_.insert(w, stride);
  return t;
}

Tensor Tensor::squeeze(int d) const {
  int w = wrap_dim(d);
  FLUXRT_CHECK(shape_[w] == 1, ErrorCode::InvalidArgument, "squeeze({}) of extent {} in {}", d,
               shape_[w], str());
  Tensor t = *this;
  t.shape_.erase(w);
  t.strides_.erase(w);
  return t;
}

Tensor Tensor::unflatten(int d, int64_t outer, int64_t inner) const {
  const int w = wrap_dim(d);
  FLUXRT_CHECK(outer >= 0 && inner >= 0 && outer * inner == shape_[w] && dim() < kMaxDims,
               ErrorCode::InvalidArgument, "unflatten({}, [{}, {}]) of {}", d, outer, inner, str());
  Tensor t = *this;
  t.shape_[w] = inner;
  t.shape_.insert(w, outer);
  t.strides_.insert(w, strides_[w] * inner);
  return t;
}

bool Tensor::can_merge(int d) const {
  const int w = wrap_dim(d);
  if (w + 1 >= dim()) return false;
  return shape_[w] == 1 || shape_[w + 1] == 1 || strides_[w] == shape_[w + 1] * strides_[w + 1];
}

Tensor Tensor::merge(int d) const {
  FLUXRT_CHECK(can_merge(d), ErrorCode::InvalidArgument, "merge({}) of {} with strides {} needs a copy", d,
               str(), strides_.str());
  const int w = wrap_dim(d);
  Tensor t = *this;
  t.strides_[w] = shape_[w + 1] == 1 ? strides_[w] : strides_[w + 1];
  t.shape_[w] = shape_[w] * shape_[w + 1];
  t.shape_.erase(w + 1);
  t.strides_.erase(w + 1);
  return t;
}

Tensor Tensor::expand(const Shape& shape) const {
  FLUXRT_CHECK(shape.size() >= dim(), ErrorCode::InvalidArgument, "expand {} to {}", str(),
               shape.str());
  int lead = shape.size() - dim();
  Dims strides;
  for (int i = 0; i < lead; ++i) strides.push_back(0);
  for (int i = 0; i < dim(); ++i) {
    int64_t want = shape[lead + i];
    FLUXRT_CHECK(shape_[i] == want || shape_[i] == 1, ErrorCode::InvalidArgument,
                 "expand {} to {}: extent {} is not 1", str(), shape.str(), shape_[i]);
    strides.push_back(shape_[i] == want ? strides_[i] : 0);
  }
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = strides;
  return t;
}

// ---------------------------------------------------------------- copies

namespace {

// Whether the elements fill numel() consecutive slots in some order of the dimensions (a
// contiguous tensor, a channels-last one, any permutation of either): then two tensors with the
// same strides hold their elements in the same order, and a copy between them is one run.
bool is_dense(const Shape& shape, const Dims& strides) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, extent) of the extents above 1
  for (int i = 0; i < shape.size(); ++i)
    if (shape[i] != 1) dims.emplace_back(strides[i], shape[i]);
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto& [stride, extent] : dims) {
    if (stride != expected) return false;
    expected *= extent;
  }
  return true;
}

// Calls fn(dst_offset, src_offset, n) for each innermost run; offsets in elements.
template <typename Fn>
void for_each_row(const Shape& shape, const Dims& dst_strides, const Dims& src_strides, Fn&& fn) {
  int nd = shape.size();
  if (shape.numel() == 0) return;
  if (nd == 0) {
    fn(0, 0, 1);
    return;
  }
  int64_t inner = shape[nd - 1];
  int64_t rows = shape.numel() / inner;
  std::array<int64_t, kMaxDims> idx{};
  for (int64_t r = 0; r < rows; ++r) {
    int64_t d_off = 0, s_off = 0;
    for (int i = 0; i < nd - 1; ++i) {
      d_off += idx[i] * dst_strides[i];
      s_off += idx[i] * src_strides[i];
    }
    fn(d_off, s_off, inner);
    for (int i = nd - 2; i >= 0; --i) {
      if (++idx[i] < shape[i]) break;
      idx[i] = 0;
    }
  }
}

std::atomic<uint64_t> g_device_to_host_copies{0};

}  // namespace

CopyWalk plan_copy_walk(const Shape& shape, const Dims& dst_strides, const Dims& src_strides) {
  // Walk the dimensions in the destination's memory order (largest stride first), so that rows
  // run along its unit stride where it has one: a window of a channels-last tensor copies whole
  // runs of channels instead of one element at a time. A dimension of extent 1 moves no address:
  // left in, it could sort innermost (it may share stride 1 with the last one) and cut every run
  // to one element.
  std::array<int, kMaxDims> order{};
  int n = 0;
  for (int i = 0; i < shape.size(); ++i)
    if (shape[i] != 1) order[n++] = i;
  std::stable_sort(order.begin(), order.begin() + n,
                   [&](int a, int b) { return dst_strides[a] > dst_strides[b]; });
  CopyWalk walk;
  for (int k = 0; k < n; ++k) {
    const int i = order[k];
    const int last = walk.shape.size() - 1;
    // One run in both tensors with the dimension before it: merge them into one longer dimension.
    if (last >= 0 && walk.dst_strides[last] == dst_strides[i] * shape[i] &&
        walk.src_strides[last] == src_strides[i] * shape[i]) {
      walk.shape[last] *= shape[i];
      walk.dst_strides[last] = dst_strides[i];
      walk.src_strides[last] = src_strides[i];
      continue;
    }
    walk.shape.push_back(shape[i]);
    walk.dst_strides.push_back(dst_strides[i]);
    walk.src_strides.push_back(src_strides[i]);
  }
  return walk;
}

uint64_t device_to_host_copies() { return g_device_to_host_copies.load(std::memory_order_relaxed); }

void Tensor::copy_from(const Tensor& src) {
  FLUXRT_CHECK(defined() && src.defined(), ErrorCode::InvalidArgument, "copy_from undefined tensor");
  FLUXRT_CHECK(shape_ == src.shape_, ErrorCode::InvalidArgument, "copy_from: shape {} into {}",
               src.shape_.str(), shape_.str());
  if (device() == Device::cpu() && src.device() != Device::cpu())
    g_device_to_host_copies.fetch_add(1, std::memory_order_relaxed);
  if (!device().is_cpu() || !src.device().is_cpu()) {
    device_memory(device().is_cpu() ? src.device() : device()).copy(*this, src);
    return;
  }
  const bool same_order =
      is_contiguous() ? src.is_contiguous() : strides_ == src.strides_ && is_dense(shape_, strides_);
  if (same_order) {
    if (dtype_ == src.dtype_)
      std::memmove(raw_data(), src.raw_data(), nbytes());
    else
      convert(src.raw_data(), src.dtype_, raw_data(), dtype_, static_cast<size_t>(numel()));
    return;
  }
  const size_t de = element_size(), se = src.element_size();
  char* dst_base = static_cast<char*>(raw_data());
  const char* src_base = static_cast<const char*>(src.raw_data());
  const CopyWalk walk = plan_copy_walk(shape_, strides_, src.strides_);
  const Shape& shape = walk.shape;
  const Dims &dst_strides = walk.dst_strides, &src_strides = walk.src_strides;
  const int nd = shape.size();
  const int64_t d_inner = nd ? dst_strides[nd - 1] : 1;
  const int64_t s_inner = nd ? src_strides[nd - 1] : 1;
  for_each_row(shape, dst_strides, src_strides, [&](int64_t d_off, int64_t s_off, int64_t n) {
    if (d_inner == 1 && s_inner == 1) {
      convert(src_base + s_off * se, src.dtype_, dst_base + d_off * de, dtype_, n);
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      convert(src_base + (s_off + i * s_inner) * se, src.dtype_, dst_base + (d_off + i * d_inner) * de,
              dtype_, 1);
  });
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device());
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor t = empty(shape_, dtype, device());
  t.copy_from(*this);
  return t;
}

void Tensor::fill(double value) {
  if (!device().is_cpu()) {
    const DeviceMemoryHooks& mem = device_memory(device());
    if (mem.fill != nullptr) {
      mem.fill(*this, value);
      return;
    }
    Tensor host = empty(shape_, dtype_);  // a backend without a device fill: fill here, copy over
    host.fill(value);
    copy_from(host);
    return;
  }
  Tensor one = empty({}, DType::F64);
  *one.data<double>() = value;
  Tensor converted = one.to(dtype_);
  const size_t es = element_size();
  const char* pattern = static_cast<const char*>(converted.raw_data());
  char* base = static_cast<char*>(raw_data());
  Dims zero_strides = strides_;
  for (int i = 0; i < zero_strides.size(); ++i) zero_strides[i] = 0;
  int64_t inner = dim() ? strides_[dim() - 1] : 1;
  for_each_row(shape_, strides_, zero_strides, [&](int64_t d_off, int64_t, int64_t n) {
    for (int64_t i = 0; i < n; ++i) std::memcpy(base + (d_off + i * inner) * es, pattern, es);
  });
}

double Tensor::item(std::initializer_list<int64_t> index) const {
  FLUXRT_CHECK(static_cast<int>(index.size()) == dim(), ErrorCode::InvalidArgument,
               "item with {} indices on {}", index.size(), str());
  if (!device().is_cpu()) {
    Tensor host = empty(shape_, dtype_);
    host.copy_from(*this);
    return host.item(index);
  }
  int64_t off = 0;
  int i = 0;
  for (int64_t v : index) {
    FLUXRT_CHECK(v >= 0 && v < shape_[i], ErrorCode::InvalidArgument, "index {} out of range in {}",
                 v, str());
    off += v * strides_[i++];
  }
  double out = 0;
  convert(static_cast<const char*>(raw_data()) + off * static_cast<int64_t>(element_size()), dtype_,
          &out, DType::F64, 1);
  return out;
}

Tensor Tensor::host_view_on(Device device) const {
  FLUXRT_CHECK(defined() && this->device().is_cpu() && device.is_cpu(), ErrorCode::InvalidArgument,
               "host_view_on: {} as {} (host devices only)", defined() ? this->device().str() : "undefined",
               device.str());
  if (this->device() == device) return *this;
  Tensor view = *this;
  view.storage_ = std::make_shared<Storage>(*storage_);  // shares the owner: no copy of the bytes
  view.storage_->device = device;
  return view;
}

std::vector<float> Tensor::to_vector() const {
  Tensor f = Tensor::empty(shape_, DType::F32);
  // Host memory under a placement-check label (cpu:N) is read as the cpu view it is: no transfer
  // between memories (the CPU kernels read small parameter vectors this way), so
  // device_to_host_copies() does not count it.
  f.copy_from(defined() && device().is_cpu() ? host_view_on(Device::cpu()) : *this);
  const float* p = f.data<float>();
  return std::vector<float>(p, p + numel());
}

}  // namespace fluxrt
