// The AMX GEMM (gemm_amx.h) on every CPU: its packing, blocking, K passes and epilogue run with
// the tile instructions emulated in C++ (amx_gemm_emulated) against the f64 reference; on a CPU
// with AMX, the real instructions against both. test_linear.cpp
// runs the real one through linear_cpu where the CPU has it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/gemm_amx.h"
#include "backend/cpu/gemm_packed.h"
#include "backend/ref/linear_ref.h"
#include "support/compare.h"
#include "support/random_tensor.h"
#include "test_linear_common.h"  // has()

namespace fluxrt::test {
namespace {

struct AmxCase {
  int64_t m, k, n;
  std::string variant;  // "bias", "gelu", "silu", "gated", "inplace", "strided_x", "strided_y",
                        // "transposed_w", "x_f32", "x_f16", "y_f32", "y_f16"
};

struct AmxRun {
  Tensor y, expected;  // y from the GEMM; the f64 reference as f32
};

using Gemm = void (*)(const Tensor&, const backend::gemm::AmxWeights&, backend::Activation, const Tensor&,
                      const Tensor&, const Tensor&);

AmxRun run_case(const AmxCase& c, Gemm gemm) {
  const uint64_t seed = static_cast<uint64_t>(c.m * 7919 + c.k * 131 + c.n);
  const double wscale = 1.0 / std::sqrt(static_cast<double>(c.k));
  // A transposed weight (stride(1) != 1) takes the packer's pair-by-pair path.
  const Tensor w = has(c.variant, "transposed_w")
                       ? random_normal({c.k, c.n}, DType::BF16, seed + 1, 0.0, wscale).transpose(0, 1)
                       : random_normal({c.n, c.k}, DType::BF16, seed + 1, 0.0, wscale);
  const Tensor bias =
      has(c.variant, "bias") ? random_normal({c.n}, DType::BF16, seed + 2, 0.0, 0.5) : Tensor();
  const DType xdt = has(c.variant, "x_f32") ? DType::F32 : has(c.variant, "x_f16") ? DType::F16 : DType::BF16;
  const DType ydt = has(c.variant, "y_f32") ? DType::F32 : has(c.variant, "y_f16") ? DType::F16 : DType::BF16;
  const Tensor x = has(c.variant, "strided_x")
                       ? random_normal({c.m, c.k + 7}, xdt, seed + 3).narrow(1, 3, c.k)
                       : random_normal({c.m, c.k}, xdt, seed + 3);
  backend::Activation act = backend::Activation::None;
  if (has(c.variant, "gelu")) act = backend::Activation::GeluTanh;
  if (has(c.variant, "silu")) act = backend::Activation::Silu;
  const bool gated = has(c.variant, "gated") || has(c.variant, "inplace");
  const Tensor gate = gated ? random_normal({c.n}, ydt, seed + 4) : Tensor();
  const Tensor residual = gated ? random_normal({c.m, c.n}, ydt, seed + 5) : Tensor();

  AmxRun run;
  Tensor res = residual;
  if (has(c.variant, "inplace")) {
    run.y = residual.clone();
    res = run.y;
  } else if (has(c.variant, "strided_y")) {
    run.y = Tensor::zeros({c.m, c.n + 9}, ydt).narrow(1, 4, c.n);
  } else {
    run.y = Tensor::empty({c.m, c.n}, ydt);
  }
  const backend::gemm::AmxWeights packed = backend::gemm::pack_weights_amx(w, bias);
  gemm(x, packed, act, res, gate, run.y);

  // The reference multiplies what the tile unit multiplies: x rounded to bf16.
  const auto ref_w = backend::prepare_linear_ref(w.contiguous(), bias);
  backend::LinearArgs r;
  r.x = x.to(DType::BF16).to(DType::F32);
  r.w = ref_w.get();
  r.activation = act;
  r.residual = residual;
  r.gate = gate;
  r.y = Tensor::empty({c.m, c.n}, DType::F32);
  backend::linear_ref(r);
  run.expected = r.y;
  return run;
}

std::string case_name(const AmxCase& c) {
  return fmt::format("M{}_K{}_N{}{}{}", c.m, c.k, c.n, c.variant.empty() ? "" : "_", c.variant);
}

// Shapes across every boundary of the blocking: 32-row blocks, 32-column panels, K steps of 32
// (with odd K and K below one step), tasks of 256 columns x up to 512 rows, passes of K 512.
std::vector<AmxCase> shape_cases() {
  return {{1, 1, 1, ""},      {1, 32, 32, ""},    {31, 31, 31, ""},   {32, 32, 32, ""},
          {33, 33, 33, ""},   {1, 544, 257, ""},  {17, 1025, 40, ""}, {64, 1000, 289, ""},
          {511, 96, 255, ""}, {513, 64, 300, ""}, {70, 513, 513, ""}, {2, 7, 600, ""}};
}

std::vector<AmxCase> epilogue_cases() {
  return {{45, 200, 70, "bias"},
          {45, 200, 70, "gelu"},
          {45, 200, 70, "bias_silu"},
          {45, 200, 70, "gated"},
          {45, 200, 70, "bias_inplace"},
          {45, 200, 70, "strided_x"},
          {45, 200, 70, "strided_y_gelu"},
          {45, 201, 70, "transposed_w"},
          {45, 200, 70, "x_f32_y_f32"},
          {45, 200, 70, "x_f16_y_f16"},
          {45, 200, 70, "x_f32_y_f16_gated"},
          {45, 200, 70, "y_f32_bias_gelu"}};
}

bool emulation_runs_here() { return backend::gemm::packed_gemm_supported(); }  // the epilogue's AVX2

TEST(GemmAmxEmulated, ShapesMatchTheReference) {
  if (!emulation_runs_here()) GTEST_SKIP() << "the GEMM epilogue needs AVX2 + FMA + F16C";
  for (const AmxCase& c : shape_cases()) {
    const AmxRun run = run_case(c, backend::gemm::amx_gemm_emulated);
    EXPECT_TRUE(all_close(run.y, run.expected, TolClass::Gemm)) << case_name(c);
  }
}

TEST(GemmAmxEmulated, EpiloguesLayoutsAndDtypesMatchTheReference) {
  if (!emulation_runs_here()) GTEST_SKIP() << "the GEMM epilogue needs AVX2 + FMA + F16C";
  for (const AmxCase& c : epilogue_cases()) {
    const AmxRun run = run_case(c, backend::gemm::amx_gemm_emulated);
    EXPECT_TRUE(all_close(run.y, run.expected, TolClass::Gemm)) << case_name(c);
  }
}

// Padding must not leak: a weight packed from a transposed view equals the one packed from the
// same values laid out contiguously, byte for byte, zeros past N and K included.
TEST(GemmAmxEmulated, PackingIsTheSameFromEveryLayout) {
  for (const int64_t k : {64, 95, 1}) {
    const Tensor w_t = random_normal({k, 77}, DType::BF16, 5 + static_cast<uint64_t>(k));
    const auto a = backend::gemm::pack_weights_amx(w_t.transpose(0, 1), Tensor());
    const auto b = backend::gemm::pack_weights_amx(w_t.transpose(0, 1).contiguous(), Tensor());
    ASSERT_EQ(a.bytes(), b.bytes());
    EXPECT_EQ(std::memcmp(a.buffer.get(), b.buffer.get(), a.bytes()), 0) << "K = " << k;
  }
}

TEST(GemmAmxEmulated, RejectsWhatItCannotMultiply) {
  EXPECT_THROW(backend::gemm::pack_weights_amx(random_normal({8, 4}, DType::F32, 1), Tensor()), Error);
  const auto w = backend::gemm::pack_weights_amx(random_normal({8, 4}, DType::BF16, 1), Tensor());
  const Tensor y = Tensor::empty({2, 8}, DType::F32);
  EXPECT_THROW(backend::gemm::amx_gemm_emulated(random_normal({2, 5}, DType::BF16, 2), w,
                                                backend::Activation::None, Tensor(), Tensor(), y),
               Error);
  // No rows: nothing to do, and nothing written.
  backend::gemm::amx_gemm_emulated(Tensor::empty({0, 4}, DType::BF16), w, backend::Activation::None, Tensor(),
                                   Tensor(), Tensor::empty({0, 8}, DType::F32));
}

// On the tile unit itself: the instructions agree with the reference and with the emulation. The
// SDM gives TDPBF16PS's sums as pseudo-code but does not promise its internal rounding bit for
// bit, so the check against the emulation is the GEMM tolerance too.
TEST(GemmAmxHardware, InstructionsGiveTheEmulatedResult) {
  if (!backend::gemm::amx_gemm_supported()) GTEST_SKIP() << "no AMX on this CPU";
  std::vector<AmxCase> all = shape_cases();
  for (const AmxCase& c : epilogue_cases()) all.push_back(c);
  for (const AmxCase& c : all) {
    const AmxRun hw = run_case(c, backend::gemm::amx_gemm);
    const AmxRun emu = run_case(c, backend::gemm::amx_gemm_emulated);
    EXPECT_TRUE(all_close(hw.y, hw.expected, TolClass::Gemm)) << case_name(c);
    EXPECT_TRUE(all_close(hw.y, emu.y.to(DType::F32), TolClass::Gemm)) << case_name(c);
  }
}

TEST(GemmAmxHardware, RefusesWithoutTheTileUnit) {
  if (backend::gemm::amx_gemm_supported()) GTEST_SKIP() << "this CPU has AMX";
  const auto w = backend::gemm::pack_weights_amx(random_normal({8, 4}, DType::BF16, 1), Tensor());
  EXPECT_THROW(backend::gemm::amx_gemm(random_normal({2, 4}, DType::BF16, 2), w, backend::Activation::None,
                                       Tensor(), Tensor(), Tensor::empty({2, 8}, DType::F32)),
               Error);
}

}  // namespace
}  // namespace fluxrt::test
