#pragma once
// Tensor: a strided view over a shared buffer, dimensions in PyTorch order (outermost first).
// Views, slices, transposes and reshapes of contiguous data share the buffer and copy nothing;
// the buffer lives as long as any view of it (it may be a zero-copy window into an mmapped file).
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"

namespace fluxrt {

inline constexpr int kMaxDims = 8;

// A small fixed-capacity list of extents or strides (no heap allocation per tensor).
class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<int64_t> values);
  explicit Dims(const std::vector<int64_t>& values);
  int size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t operator[](int i) const { return values_[i]; }
  int64_t& operator[](int i) { return values_[i]; }
  const int64_t* begin() const { return values_.data(); }
  const int64_t* end() const { return values_.data() + size_; }
  void push_back(int64_t v);
  void insert(int pos, int64_t v);
  void erase(int pos);
  int64_t numel() const;  // product of extents (1 for an empty list)
  std::vector<int64_t> vec() const { return {begin(), end()}; }
  std::string str() const;  // "[2, 4608, 3072]"
  bool operator==(const Dims& other) const;
  bool operator!=(const Dims& other) const { return !(*this == other); }

 private:
  std::array<int64_t, kMaxDims> values_{};
  int size_ = 0;
};

using Shape = Dims;

// Owns (or keeps alive) the bytes behind tensors.
struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device;
  std::shared_ptr<void> owner;  // releases the memory when the last Storage user goes away
};

class Tensor {
 public:
  Tensor() = default;

  // New host tensors (64-byte aligned). empty() leaves the contents uninitialised.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  // An uninitialised channels-last [N, C, H, W] tensor (see is_channels_last).
  static Tensor empty_channels_last(const Shape& nchw, DType dtype, Device device = Device::cpu());
  // An uninitialised tensor of `shape` on like's device, channels-last when `like` is only that
  // (is_channels_last_only), else contiguous: the output of an op that keeps its input's layout.
  static Tensor empty_like_layout(const Tensor& like, const Shape& shape, DType dtype);
  static Tensor full(const Shape& shape, DType dtype, double value);
  // A contiguous view of memory owned elsewhere; `keep_alive` is held for the tensor's lifetime.
  static Tensor from_blob(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> keep_alive,
                          Device device = Device::cpu());
  // A contiguous tensor holding a copy of `values` converted to `dtype`.
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape, DType dtype = DType::F32);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : Device::cpu(); }
  int dim() const { return shape_.size(); }
  const Shape& shape() const { return shape_; }
  const Dims& strides() const { return strides_; }  // in elements
  int64_t size(int d) const { return shape_[wrap_dim(d)]; }
  int64_t stride(int d) const { return strides_[wrap_dim(d)]; }
  int64_t numel() const { return shape_.numel(); }
  size_t element_size() const { return dtype_size(dtype_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  int64_t offset() const { return offset_; }  // in elements, from the storage start
  bool is_contiguous() const;
  // A 4-D [N, C, H, W] tensor whose memory is a dense [N, H, W, C] (PyTorch's channels_last):
  // strides (H*W*C, 1, W*C, C), extents of 1 matching any stride.
  bool is_channels_last() const;
  // Channels-last and not also contiguous (with C = 1, or H = W = 1, a tensor is both): the
  // tensors whose layout the VAE ops keep instead of copying them to NCHW.
  bool is_channels_last_only() const { return is_channels_last() && !is_contiguous(); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  void* raw_data() const;
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw_data());
  }

  // --- views (share storage, copy nothing) ---
  Tensor view(const Shape& shape) const;          // requires a contiguous tensor; one extent may be -1
  Tensor reshape(const Shape& shape) const;       // view when possible, else a contiguous copy
  Tensor slice(int d, int64_t start, int64_t end, int64_t step = 1) const;  // [start, end)
  Tensor narrow(int d, int64_t start, int64_t length) const { return slice(d, start, start + length); }
  Tensor select(int d, int64_t index) const;      // removes dimension d
  Tensor transpose(int d0, int d1) const;
  Tensor permute(const std::vector<int>& order) const;
  Tensor unsqueeze(int d) const;
  Tensor squeeze(int d) const;
  Tensor expand(const Shape& shape) const;        // broadcast size-1 dims with stride 0
  // Dimension d of extent outer * inner as two, [outer, inner]: a view for any strides (torch's
  // unflatten), e.g. a column slice [B, L, H*d] of a fused projection as heads [B, L, H, d].
  Tensor unflatten(int d, int64_t outer, int64_t inner) const;
  // Dimensions d and d + 1 as one when the layout allows it without a copy (stride(d) ==
  // size(d + 1) * stride(d + 1), or either extent is 1): e.g. [B, L] rows of a column slice.
  bool can_merge(int d) const;
  Tensor merge(int d) const;  // InvalidArgument when !can_merge(d)
  // The same host memory (same strides) labelled with another host device, cpu <-> cpu:N: no copy,
  // since the placement-check devices are host memory. InvalidArgument for a non-host device.
  Tensor host_view_on(Device device) const;
  Tensor flatten() const { return reshape({numel()}); }

  // --- copies ---
  Tensor contiguous() const;  // this tensor when already contiguous
  Tensor clone() const;
  Tensor to(DType dtype) const;  // converts with PyTorch rounding; this tensor when dtype matches
  // Copies (and converts) src into this tensor; shapes must match, strides may differ.
  void copy_from(const Tensor& src);
  void fill(double value);

  // Element access for tests and tools (slow): reads any dtype as double.
  double item(std::initializer_list<int64_t> index) const;
  std::vector<float> to_vector() const;  // all elements in logical order, as f32

  std::string str() const;  // "Tensor(bf16, [2, 16, 128])"

 private:
  int wrap_dim(int d) const;
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Dims strides_;
  int64_t offset_ = 0;
  DType dtype_ = DType::F32;
};

Dims contiguous_strides(const Shape& shape);

// The loops Tensor::copy_from runs on the host between two layouts of one shape: the dimensions
// outermost first, each with its stride in the destination and in the source (in elements); the
// innermost one is the run copied at a time. Exposed for the tests.
struct CopyWalk {
  Shape shape;
  Dims dst_strides, src_strides;
};
CopyWalk plan_copy_walk(const Shape& shape, const Dims& dst_strides, const Dims& src_strides);

// How many Tensor::copy_from calls so far (process-wide) copied from another device into cpu,
// cpu:1 included: tests check on cpu:1 that a step loop makes no host round trip. to_vector of a
// tensor already in host memory (cpu:1, as the CPU kernels do for small parameters) is not counted.
uint64_t device_to_host_copies();

}  // namespace fluxrt
