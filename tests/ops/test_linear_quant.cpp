// Linear layers on quantized weights (core/quant.h): the CPU's Highway dequantization against the
// scalar reference (bit for bit, every compiled SIMD target), and the CPU linear, which keeps the
// weight in its bytes and dequantizes a group of rows per call, against the ref backend's linear
// on the whole dequantized weight, for every type, odd shapes and the fused epilogues.
// (The reference dequantization itself is checked against the gguf package in tests/io.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/dequant_cpu.h"
#include "backend/cpu/linear_cpu.h"
#include "core/quant.h"
#include "for_each_cpu_target.h"
#include "ops/dispatch.h"
#include "ops/linear.h"
#include "support/compare.h"
#include "support/random_tensor.h"

namespace fluxrt {
namespace {

using test::all_close;
using test::random_normal;
using test::TolClass;

constexpr QuantType kTypes[] = {QuantType::F32,  QuantType::F16,    QuantType::BF16,  QuantType::Q8_0,
                                QuantType::Q4_0, QuantType::Q4_1,   QuantType::Q5_0,  QuantType::Q5_1,
                                QuantType::Q2_K, QuantType::Q3_K,   QuantType::Q4_K,  QuantType::Q5_K,
                                QuantType::Q6_K, QuantType::F8E4M3, QuantType::F8E5M2};

// Byte offsets of each block type's f16 scale fields (the rest of a block is random bits).
std::vector<size_t> scale_offsets(QuantType t) {
  switch (t) {
    case QuantType::Q8_0:
    case QuantType::Q4_0:
    case QuantType::Q5_0:
      return {0};
    case QuantType::Q4_1:
    case QuantType::Q5_1:
    case QuantType::Q4_K:
    case QuantType::Q5_K:
      return {0, 2};
    case QuantType::Q2_K:
      return {80, 82};
    case QuantType::Q3_K:
      return {108};
    case QuantType::Q6_K:
      return {208};
    default:
      return {};
  }
}

// A random [rows, cols] weight of `type` whose values are O(scale): random block bits with
// scales drawn around `scale` (signed), or random normal values for the element types.
QuantizedMatrix random_quantized(QuantType type, int64_t rows, int64_t cols, uint64_t seed, float scale) {
  QuantizedMatrix q;
  q.type = type;
  q.rows = rows;
  q.cols = cols;
  q.bytes = Tensor::empty({static_cast<int64_t>(rows * quant_row_bytes(type, cols))}, DType::U8);
  auto* b = q.bytes.data<uint8_t>();
  std::mt19937_64 rng(seed);
  const QuantTraits& t = quant_traits(type);
  if (!quant_is_blocked(type)) {
    const DType dt = type == QuantType::F32      ? DType::F32
                     : type == QuantType::F16    ? DType::F16
                     : type == QuantType::BF16   ? DType::BF16
                     : type == QuantType::F8E4M3 ? DType::F8E4M3
                                                 : DType::F8E5M2;
    const Tensor v = random_normal({rows, cols}, dt, seed, 0.0, scale * 20);
    std::memcpy(b, v.raw_data(), q.nbytes());
    return q;
  }
  for (size_t i = 0; i < q.nbytes(); ++i) b[i] = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> mag(0.5f, 2.0f);
  const size_t blocks = q.nbytes() / t.block_bytes;
  for (size_t blk = 0; blk < blocks; ++blk)
    for (size_t off : scale_offsets(type)) {
      const float v = scale * mag(rng) * ((rng() & 1) ? 1.0f : -1.0f);
      const uint16_t h = f32_to_f16(v);
      std::memcpy(b + blk * t.block_bytes + off, &h, 2);
    }
  return q;
}

// Per-value scale so that the dequantized weights are ~1/sqrt(K) whatever the type's range.
float scale_for(QuantType t, int64_t k) {
  const float unit = 1.0f / std::sqrt(static_cast<float>(k));
  switch (t) {
    case QuantType::Q8_0:
      return unit / 64;
    case QuantType::Q4_0:
    case QuantType::Q4_1:
      return unit / 8;
    case QuantType::Q5_0:
    case QuantType::Q5_1:
      return unit / 16;
    case QuantType::Q2_K:
      return unit / 20;
    case QuantType::Q3_K:
      return unit / 100;
    case QuantType::Q4_K:
    case QuantType::Q5_K:
      return unit / 300;
    case QuantType::Q6_K:
      return unit / 1000;
    default:
      return unit / 20;
  }
}

TEST(QuantDequant, CpuSimdEqualsReferenceBitForBit) {
  for (QuantType type : kTypes) {
    SCOPED_TRACE(std::string(quant_name(type)));
    const int64_t cols = 512;
    const QuantizedMatrix q = random_quantized(type, 3, cols, 11, 0.01f);
    std::vector<float> ref(static_cast<size_t>(3 * cols));
    dequantize_rows_ref(q, 0, 3, ref.data(), cols);
    test::for_each_target([&] {
      std::vector<float> got(ref.size(), -1.0f);
      backend::cpu::dequantize_rows_cpu(q, 0, 3, got.data(), cols);
      EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * 4), 0);
    });
  }
}

// Every fp8 byte (normals, subnormals, zeros of both signs, e5m2's infinities and NaNs, e4m3fn's
// NaN) through the SIMD bit arithmetic, bit for bit against core/dtype's scalar decode, with a
// row length that leaves a scalar tail (260 = 32 vectors of 8 + 4).
TEST(QuantDequant, Fp8EveryByteEqualsTheScalarDecode) {
  std::vector<uint8_t> bytes(260);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 37 % 256);
  for (size_t i = 0; i < 256; ++i) bytes[i] = static_cast<uint8_t>(i);
  for (QuantType type : {QuantType::F8E4M3, QuantType::F8E5M2}) {
    SCOPED_TRACE(std::string(quant_name(type)));
    std::vector<float> ref(bytes.size());
    dequantize_row_ref(type, bytes.data(), ref.data(), static_cast<int64_t>(bytes.size()));
    test::for_each_target([&] {
      std::vector<float> got(bytes.size(), -1.0f);
      backend::cpu::dequantize_row_cpu(type, bytes.data(), got.data(), static_cast<int64_t>(bytes.size()));
      for (size_t i = 0; i < bytes.size(); ++i) {
        uint32_t a, b;
        std::memcpy(&a, &got[i], 4);
        std::memcpy(&b, &ref[i], 4);
        EXPECT_EQ(a, b) << "byte 0x" << std::hex << int(bytes[i]);
      }
    });
  }
}

TEST(QuantDequant, RowScaleMultipliesEachRow) {
  QuantizedMatrix q = random_quantized(QuantType::F8E4M3, 4, 64, 12, 0.05f);
  q.scale = Tensor::empty({4}, DType::F32);
  for (int i = 0; i < 4; ++i) q.scale.data<float>()[i] = 0.5f * static_cast<float>(i + 1);
  validate_quantized(q, "test");
  const Tensor whole = dequantize_ref(q);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t j = 0; j < 64; ++j)
      EXPECT_EQ(whole.data<float>()[r * 64 + j], f8e4m3_to_f32(q.row(r)[j]) * q.row_scale(r));
}

struct QuantCase {
  int64_t m, k, n;
  const char* variant;  // "", "bias", "gelu_bias", "gated_inplace"
};

void check_quant_linear(QuantType type, const QuantCase& c, Device device = Device::cpu()) {
  const uint64_t seed = static_cast<uint64_t>(c.m * 7919 + c.k * 31 + c.n);
  const QuantizedMatrix q = random_quantized(type, c.n, c.k, seed, scale_for(type, c.k));
  const std::string variant = c.variant;
  const Tensor bias =
      variant.find("bias") != std::string::npos ? random_normal({c.n}, DType::F32, seed + 1) : Tensor();
  const ops::Activation act =
      variant.find("gelu") != std::string::npos ? ops::Activation::GeluTanh : ops::Activation::None;
  const Tensor x = random_normal({c.m, c.k}, DType::BF16, seed + 2);
  const bool gated = variant.find("gated") != std::string::npos;
  const Tensor gate = gated ? random_normal({c.n}, DType::BF16, seed + 3) : Tensor();
  const Tensor residual = gated ? random_normal({c.m, c.n}, DType::BF16, seed + 4) : Tensor();

  auto cpu = ops::prepare_linear_quantized(q, bias, device);
  ASSERT_TRUE(cpu->quantized != nullptr);
  EXPECT_EQ(cpu->weight.stride(0), 0) << "the CPU must not hold a dense copy of the weight";
  EXPECT_EQ(cpu->out_features(), c.n);
  EXPECT_EQ(cpu->in_features(), c.k);
  Tensor y;
  if (gated) {
    y = residual.clone().host_view_on(device);
    ops::linear_gated_residual_into(x.host_view_on(device), *cpu, gate.host_view_on(device), y, y, act);
  } else {
    y = ops::linear(x.host_view_on(device), *cpu, act);
  }
  EXPECT_EQ(y.device(), device);

  // On CPUs with native bf16 matmul the oneDNN path rounds each dequantized chunk to bf16 before
  // the product (as a dense bf16 model's weights are), an extra 2^-9 relative per weight that the
  // GEMM tolerance does not cover for the types whose values are not bf16 numbers (Q5_1, K types).
  // The reference then runs on the same rounded weights; the dequantization itself is checked
  // bit for bit elsewhere.
  const bool bf16_weights = device == Device::cpu() && backend::describe_linear_cpu(*cpu).find(
                                                           "onednn matmul bf16") != std::string::npos;
  Tensor expect;
  {
    ops::ScopedKernelTable force(backend::ref_kernels());
    auto ref = bf16_weights ? ops::prepare_linear(dequantize_ref(q).to(DType::BF16).to(DType::F32), bias)
                            : ops::prepare_linear_quantized(q, bias);
    expect = Tensor::empty({c.m, c.n}, DType::F32);
    if (gated)
      ops::linear_gated_residual_into(x.to(DType::F32), *ref, gate, residual, expect, act);
    else
      ops::linear_into(x.to(DType::F32), *ref, expect, act);
  }
  EXPECT_TRUE(all_close(y.host_view_on(Device::cpu()), expect, TolClass::Gemm));
}

class QuantLinear : public ::testing::TestWithParam<QuantType> {};

TEST_P(QuantLinear, EqualsRefOnTheDequantizedWeight) {
  const QuantType type = GetParam();
  const int64_t kb = quant_traits(type).block == 256 ? 256 : 64;
  const QuantCase cases[] = {
      {1, kb, 37, ""},          // one row (a modulation linear), N not a multiple of 16
      {7, 2 * kb, 19, "bias"},  // odd M and N, two K blocks
      {13, 3 * kb, 50, "gelu_bias"},
      {101, 2 * kb, 530, "gated_inplace"},  // two M blocks, N past one 512-column block
      // K past one 256-wide panel slice: for the 32-value types a partial last slice (96), for the
      // K types (blocks of 256) three whole slices.
      {9, kb == 256 ? 3 * 256 : 256 + 96, 33, "bias"},
  };
  for (const QuantCase& c : cases) {
    SCOPED_TRACE(testing::Message() << "M" << c.m << " K" << c.k << " N" << c.n << " " << c.variant);
    check_quant_linear(type, c);
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantLinear, ::testing::ValuesIn(kTypes),
                         [](const auto& info) { return std::string(quant_name(info.param)); });

// The oneDNN path (what CPUs with bf16 matrix units take; FLUXRT_LINEAR_IMPL=onednn selects it
// here, in f32 where bf16 is not native): chunks of weight rows dequantized per call. Chunks of
// kOneDnnChunkRows rows plus a shorter tail (N = 530 is one chunk and a tail of 18).
class QuantLinearOneDnn : public ::testing::TestWithParam<QuantType> {
 protected:
  void SetUp() override { setenv("FLUXRT_LINEAR_IMPL", "onednn", 1); }
  void TearDown() override { unsetenv("FLUXRT_LINEAR_IMPL"); }
};

TEST_P(QuantLinearOneDnn, EqualsRefOnTheDequantizedWeight) {
  const QuantType type = GetParam();
  const int64_t kb = quant_traits(type).block == 256 ? 256 : 64;
  const QuantCase cases[] = {
      {1, kb, 37, ""},
      {13, 3 * kb, 50, "gelu_bias"},
      {101, 2 * kb, 530, "gated_inplace"},
      {9, kb == 256 ? 3 * 256 : 256 + 96, 1100, "bias"},
  };
  for (const QuantCase& c : cases) {
    SCOPED_TRACE(testing::Message() << "M" << c.m << " K" << c.k << " N" << c.n << " " << c.variant);
    check_quant_linear(type, c);
  }
  const auto prepared = ops::prepare_linear_quantized(random_quantized(type, 40, kb, 1, 0.01f), Tensor());
  EXPECT_NE(backend::describe_linear_cpu(*prepared).find("onednn matmul"), std::string::npos)
      << backend::describe_linear_cpu(*prepared);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantLinearOneDnn, ::testing::ValuesIn(kTypes),
                         [](const auto& info) { return std::string(quant_name(info.param)); });

TEST(QuantLinearPlacement, RunsOnAPlacementDevice) {
  check_quant_linear(QuantType::Q4_K, {5, 512, 40, "bias"}, Device::placement_check());
}

TEST(QuantLinearPlacement, LongRows) {
  // 80 panel slices of K per output panel, N past two 512-column blocks.
  const int64_t k = 256 * 80;
  check_quant_linear(QuantType::Q8_0, {3, k, 1100, "bias"});
}

TEST(QuantLinearPlacement, Fp8RowsOfAnyLength) {
  // fp8 blocks are single values: K need not be a multiple of 8 (the panel transpose's scalar
  // tail) nor of 256 (a last slice of 45 columns).
  check_quant_linear(QuantType::F8E4M3, {4, 301, 21, "bias"});
  check_quant_linear(QuantType::F8E5M2, {8, 13, 40, "gelu_bias"});
}

TEST(QuantLinearErrors, BadShapesAreRefused) {
  QuantizedMatrix q = random_quantized(QuantType::Q8_0, 4, 64, 8, 0.01f);
  q.cols = 48;  // not whole blocks
  EXPECT_THROW(ops::prepare_linear_quantized(q), Error);
  q.cols = 128;  // more bytes than the tensor has
  EXPECT_THROW(ops::prepare_linear_quantized(q), Error);
  q.cols = 64;
  EXPECT_THROW(ops::prepare_linear_quantized(q, Tensor::zeros({5}, DType::F32)), Error);
}

}  // namespace
}  // namespace fluxrt
