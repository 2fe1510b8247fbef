#include <gtest/gtest.h>

#include "core/device_memory.h"
#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <vector>

namespace fluxrt {

static Tensor arange(int64_t n, DType dtype = DType::F32) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return Tensor::from_vector(v, {n}, dtype);
}

TEST(Tensor, EmptyIsContiguousAndAligned) {
  Tensor t = Tensor::empty({2, 3, 4}, DType::BF16);
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.strides(), (Dims{12, 4, 1}));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u);
  EXPECT_EQ(t.str(), "Tensor(bf16, [2, 3, 4])");
}

TEST(Tensor, ViewSharesStorage) {
  Tensor t = arange(24).view({2, 3, 4});
  Tensor v = t.view({6, -1});
  EXPECT_EQ(v.shape(), (Shape{6, 4}));
  EXPECT_EQ(v.raw_data(), t.raw_data());
  v.data<float>()[5] = 100;
  EXPECT_EQ(t.item({0, 1, 1}), 100);
  EXPECT_THROW(t.view({5, 5}), Error);
  EXPECT_THROW(t.view({-1, -1}), Error);
}

TEST(Tensor, SliceSelectNarrowWithoutCopy) {
  Tensor t = arange(24).view({2, 3, 4});
  Tensor s = t.slice(2, 1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 3, 2}));
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.storage(), t.storage());
  EXPECT_EQ(s.item({1, 2, 0}), 1 * 12 + 2 * 4 + 1);
  Tensor sel = t.select(1, 2);
  EXPECT_EQ(sel.shape(), (Shape{2, 4}));
  EXPECT_EQ(sel.item({1, 3}), 12 + 8 + 3);
  Tensor stepped = t.slice(-1, 0, 4, 2);
  EXPECT_EQ(stepped.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(stepped.item({0, 0, 1}), 2);
  EXPECT_THROW(t.slice(0, 1, 0), Error);
  EXPECT_THROW(t.select(1, 3), Error);
  EXPECT_THROW(t.slice(3, 0, 1), Error);
}

TEST(Tensor, TransposePermuteContiguous) {
  Tensor t = arange(6).view({2, 3});
  Tensor tt = t.transpose(0, 1);
  EXPECT_EQ(tt.shape(), (Shape{3, 2}));
  EXPECT_FALSE(tt.is_contiguous());
  Tensor c = tt.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  std::vector<float> expect = {0, 3, 1, 4, 2, 5};
  EXPECT_EQ(c.to_vector(), expect);
  Tensor p = arange(24).view({2, 3, 4}).permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.item({3, 1, 2}), 1 * 12 + 2 * 4 + 3);
  EXPECT_THROW(t.permute({0, 0}), Error);
}

TEST(Tensor, ReshapeCopiesOnlyWhenNeeded) {
  Tensor t = arange(6).view({2, 3});
  EXPECT_EQ(t.reshape({3, 2}).storage(), t.storage());
  Tensor r = t.transpose(0, 1).reshape({6});
  EXPECT_NE(r.storage(), t.storage());
  EXPECT_EQ(r.to_vector(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(Tensor, UnsqueezeSqueezeExpand) {
  Tensor t = arange(3);
  Tensor u = t.unsqueeze(0);
  EXPECT_EQ(u.shape(), (Shape{1, 3}));
  Tensor e = u.expand({4, 3});
  EXPECT_EQ(e.stride(0), 0);
  EXPECT_EQ(e.item({3, 2}), 2);
  EXPECT_EQ(e.contiguous().to_vector().size(), 12u);
  EXPECT_EQ(u.squeeze(0).shape(), (Shape{3}));
  EXPECT_THROW(t.squeeze(0), Error);
  EXPECT_THROW(t.expand({2, 4}), Error);
  EXPECT_EQ(t.unsqueeze(-1).shape(), (Shape{3, 1}));
}

TEST(Tensor, UnflattenAndMergeAreViewsOfStridedSlices) {
  // A column slice of a fused [2, 3, 10] projection: columns 2..8 as 3 heads of 2.
  Tensor fused = arange(60).view({2, 3, 10});
  Tensor slice = fused.narrow(2, 2, 6);
  Tensor heads = slice.unflatten(2, 3, 2);  // [2, 3, 3, 2]
  EXPECT_EQ(heads.shape(), (Shape{2, 3, 3, 2}));
  EXPECT_EQ(heads.storage(), fused.storage());
  EXPECT_EQ(heads.strides(), (Dims{30, 10, 2, 1}));
  EXPECT_EQ(heads.item({1, 2, 1, 0}), 1 * 30 + 2 * 10 + 2 + 1 * 2);
  EXPECT_EQ(heads.item({0, 1, 2, 1}), 10 + 2 + 2 * 2 + 1);
  EXPECT_THROW(slice.unflatten(2, 4, 2), Error);  // 8 != 6
  EXPECT_EQ(arange(6).unflatten(-1, 2, 3).shape(), (Shape{2, 3}));

  // Its rows [2, 3] merge into 6 rows of stride 10; its columns cannot merge with them.
  ASSERT_TRUE(slice.can_merge(0));
  Tensor rows = slice.merge(0);
  EXPECT_EQ(rows.shape(), (Shape{6, 6}));
  EXPECT_EQ(rows.strides(), (Dims{10, 1}));
  EXPECT_EQ(rows.item({4, 5}), 1 * 30 + 1 * 10 + 2 + 5);
  EXPECT_FALSE(slice.can_merge(1));
  EXPECT_THROW(slice.merge(1), Error);
  EXPECT_FALSE(slice.can_merge(2));  // no dimension after the last
  // Rows of a slice along dim 1 do not merge across the batch; an extent of 1 always does.
  EXPECT_FALSE(fused.narrow(1, 1, 2).can_merge(0));
  EXPECT_TRUE(fused.narrow(0, 1, 1).narrow(1, 1, 2).can_merge(0));
  EXPECT_EQ(fused.narrow(0, 1, 1).narrow(1, 1, 2).merge(0).item({1, 3}), 30 + 20 + 3);
}

TEST(Tensor, ConvertAndCopyStrided) {
  Tensor t = arange(8).view({2, 4});
  Tensor b = t.to(DType::BF16);
  EXPECT_EQ(b.dtype(), DType::BF16);
  EXPECT_EQ(b.to_vector(), t.to_vector());
  Tensor dst = Tensor::zeros({4, 2}, DType::F16);
  dst.copy_from(t.transpose(0, 1));
  EXPECT_EQ(dst.to_vector(), (std::vector<float>{0, 4, 1, 5, 2, 6, 3, 7}));
  EXPECT_THROW(dst.copy_from(t), Error);
}

// Channels-last: the layout test, and copies into, out of and between windows of such tensors
// (the VAE's tiles) give every element where it belongs, with and without a dtype change.
TEST(Tensor, ChannelsLastLayoutAndCopies) {
  const Tensor x = arange(2 * 5 * 4 * 6).view({2, 5, 4, 6});  // [N, C, H, W], values below 256: exact in bf16
  EXPECT_FALSE(x.is_channels_last());
  const Tensor cl = Tensor::empty({2, 4, 6, 5}, DType::F32).permute({0, 3, 1, 2});
  EXPECT_TRUE(cl.is_channels_last());
  EXPECT_FALSE(cl.is_contiguous());
  EXPECT_TRUE(Tensor::empty({1, 3, 1, 1}, DType::F32).is_channels_last());  // both layouts at once
  EXPECT_FALSE(cl.slice(3, 1, 4).is_channels_last());                       // a window is not dense
  Tensor y = cl;
  y.copy_from(x);
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    // A window of the channels-last tensor into a dense channels-last one, then back to NCHW.
    const Tensor window = y.slice(2, 1, 3).slice(3, 2, 5);  // [2, 5, 2, 3]
    Tensor dense = Tensor::empty({2, 2, 3, 5}, dt).permute({0, 3, 1, 2});
    dense.copy_from(window);
    Tensor back = Tensor::empty({2, 5, 2, 3}, DType::F32);
    back.copy_from(dense);
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 5; ++c)
        for (int64_t h = 0; h < 2; ++h)
          for (int64_t w = 0; w < 3; ++w)
            ASSERT_EQ(back.item({n, c, h, w}), x.item({n, c, h + 1, w + 2})) << n << c << h << w;
    // The same dense layout on both sides, another dtype: one run.
    Tensor same = Tensor::empty({2, 4, 6, 5}, dt).permute({0, 3, 1, 2});
    same.copy_from(y);
    EXPECT_EQ(same.item({1, 4, 3, 5}), x.item({1, 4, 3, 5}));
    EXPECT_EQ(same.item({0, 2, 1, 0}), x.item({0, 2, 1, 0}));
  }
}

// copy_from's loops: extent-1 dimensions never become the innermost run (a contiguous
// [N, C, H, 1] has stride 1 twice), and dimensions that are one run in both layouts are merged.
TEST(Tensor, CopyWalkDropsExtentOneDimsAndMergesRuns) {
  // [2, 3, 4, 1] contiguous from a transposed source: runs of 4 along H, not of 1 along the last.
  CopyWalk walk = plan_copy_walk({2, 3, 4, 1}, {12, 4, 1, 1}, {12, 1, 3, 1});
  EXPECT_EQ(walk.shape, (Shape{2, 3, 4}));
  EXPECT_EQ(walk.dst_strides, (Dims{12, 4, 1}));
  EXPECT_EQ(walk.src_strides, (Dims{12, 1, 3}));
  // A dense channels-last [2, 5, 2, 3] from a window of a channels-last [2, 5, 4, 6] (full
  // channels, 3 of 6 columns): W and C are one run of 15 in both; H is not.
  walk = plan_copy_walk({2, 5, 2, 3}, {30, 1, 15, 5}, {120, 1, 30, 5});
  EXPECT_EQ(walk.shape, (Shape{2, 2, 15}));
  EXPECT_EQ(walk.dst_strides, (Dims{30, 15, 1}));
  EXPECT_EQ(walk.src_strides, (Dims{120, 30, 1}));
  EXPECT_EQ(plan_copy_walk({1, 1}, {1, 1}, {5, 7}).shape.size(), 0);  // one element, no loop

  const Tensor x = arange(24).view({2, 4, 3, 1}).transpose(1, 2);  // [2, 3, 4, 1], strides {12, 1, 3, 1}
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor y = Tensor::empty({2, 3, 4, 1}, dt);
    y.copy_from(x);
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t h = 0; h < 4; ++h) ASSERT_EQ(y.item({n, c, h, 0}), x.item({n, c, h, 0})) << n << c << h;
  }
  Tensor one = Tensor::empty({1, 1}, DType::F32);
  one.copy_from(arange(2).view({2, 1}).narrow(0, 1, 1).transpose(0, 1));
  EXPECT_EQ(one.item({0, 0}), 1);
}

TEST(Tensor, FillAndFull) {
  Tensor t = Tensor::full({3, 2}, DType::BF16, 1.5);
  for (float v : t.to_vector()) EXPECT_EQ(v, 1.5f);
  Tensor z = Tensor::zeros({2, 3}, DType::F32);
  z.slice(1, 1, 2).fill(7);
  EXPECT_EQ(z.to_vector(), (std::vector<float>{0, 7, 0, 0, 7, 0}));
}

TEST(Tensor, FromBlobKeepsOwnerAlive) {
  auto owner = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4});
  Tensor t = Tensor::from_blob(owner->data(), {2, 2}, DType::F32, owner);
  std::weak_ptr<std::vector<float>> weak = owner;
  owner.reset();
  EXPECT_FALSE(weak.expired());
  EXPECT_EQ(t.item({1, 0}), 3);
  t = Tensor();
  EXPECT_TRUE(weak.expired());
}

TEST(Tensor, RejectsBadShapes) {
  EXPECT_THROW(Tensor::empty({-1, 2}, DType::F32), Error);
  EXPECT_THROW(Tensor::empty({1, 1, 1, 1, 1, 1, 1, 1, 1}, DType::F32), Error);
}

// Tensor::fill / zeros on a device go to the backend's fill hook when it has one (the CUDA backend
// fills on the GPU) and otherwise fill on the host and copy over. A fake CUDA memory backend whose
// "device memory" is host memory stands in, so this runs without a GPU; the registered hooks (the
// real ones in a CUDA build) are restored after.
namespace {
struct FakeDevice {
  static inline std::vector<double> fills;
  static inline int copies = 0;
  static void* allocate(Device, size_t bytes) { return std::malloc(bytes == 0 ? 1 : bytes); }
  static void release(Device, void* p) { std::free(p); }
  static void copy(const Tensor& dst, const Tensor& src) {  // contiguous, same dtype: enough here
    ++copies;
    std::memcpy(dst.raw_data(), src.raw_data(), dst.nbytes());
  }
  static void fill(const Tensor& dst, double value) {
    fills.push_back(value);
    const Tensor one = Tensor::full({}, dst.dtype(), value);
    for (int64_t i = 0; i < dst.numel(); ++i)
      std::memcpy(static_cast<char*>(dst.raw_data()) + i * dst.element_size(), one.raw_data(), dst.element_size());
  }
};
const DeviceMemoryHooks kWithFill{FakeDevice::allocate, FakeDevice::release, FakeDevice::copy, nullptr, FakeDevice::fill};
const DeviceMemoryHooks kWithoutFill{FakeDevice::allocate, FakeDevice::release, FakeDevice::copy, nullptr, nullptr};
}  // namespace

TEST(Tensor, DeviceFillUsesTheBackendsFillHook) {
  const DeviceMemoryHooks* real = register_device_memory(DeviceType::CUDA, &kWithFill);
  FakeDevice::fills.clear();
  FakeDevice::copies = 0;
  const Tensor z = Tensor::zeros({6}, DType::BF16, Device::cuda(0));
  Tensor t = Tensor::empty({4}, DType::F32, Device::cuda(0));
  t.fill(2.5);
  EXPECT_EQ(FakeDevice::fills, (std::vector<double>{0.0, 2.5}));
  EXPECT_EQ(FakeDevice::copies, 0) << "no host fill and upload when the backend fills";
  EXPECT_EQ(static_cast<const float*>(t.raw_data())[3], 2.5f);
  register_device_memory(DeviceType::CUDA, &kWithoutFill);
  t.fill(-1.0);
  EXPECT_EQ(FakeDevice::copies, 1) << "without the hook: filled on the host, copied over";
  EXPECT_EQ(static_cast<const float*>(t.raw_data())[0], -1.0f);
  register_device_memory(DeviceType::CUDA, real);
}

}  // namespace fluxrt
