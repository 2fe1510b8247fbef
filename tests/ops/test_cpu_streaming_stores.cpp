// The CPU kernels' non-temporal store path (outputs of at least stream_min_output_bytes(), see
// backend/cpu/cpu_common.h): every op that streams gives, bit for bit, what it gives on the same
// data cut into slices too small to stream (the conformance tests check those against ref). Odd
// row lengths make output rows start at every alignment (the norms also get aligned rows, the only
// ones they stream), so the unaligned heads, the streamed bodies and the ordinary tails all run;
// under every Highway target this binary carries and this CPU supports.
#include "backend/cpu/hwy_targets.h"
// (hwy_targets.h must precede the Highway headers so HWY_TARGETS matches the kernels')
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/cpu_common.h"
#include "conformance_common.h"
#include "for_each_cpu_target.h"
#include "ops/elementwise.h"
#include "ops/norm.h"
#include "ops/vae_ops.h"

namespace fluxrt::test {
namespace {

// Streaming starts at 4 MiB in this binary (FLUXRT_STREAM_MIN_BYTES, read once by the first
// kernel call, so set before any) to keep the tensors small: the path is the same at any size.
const bool kThresholdSet = [] { return setenv("FLUXRT_STREAM_MIN_BYTES", "4194304", 1) == 0; }();
const size_t kStreamBytes = backend::cpu::stream_min_output_bytes();

TEST(CpuStreamingStores, ThresholdFromEnvironment) {
  ASSERT_TRUE(kThresholdSet);
  EXPECT_EQ(kStreamBytes, size_t{4} << 20);
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.is_contiguous() && b.is_contiguous() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// An op on tensors whose dim 0 indexes independent problems (batch entries, rows): op(inputs)
// on the whole must equal op on each dim-0 slice. `whole` holds the full inputs; `sliced(i)` gives
// the inputs of slice i. The whole output must stream and no slice's may.
struct SplitCase {
  std::string name;
  int64_t slices;
  std::function<Tensor()> whole;
  std::function<Tensor(int64_t)> sliced;
};

void expect_same_as_slices(const SplitCase& c) {
  SCOPED_TRACE(c.name);
  const Tensor y = run_on("cpu", c.whole);
  ASSERT_GE(y.nbytes(), kStreamBytes) << "whole output too small to stream";
  const int64_t per = y.size(0) / c.slices;
  for (int64_t i = 0; i < c.slices; ++i) {
    const Tensor part = run_on("cpu", [&] { return c.sliced(i); });
    ASSERT_LT(part.nbytes(), kStreamBytes) << "slice output would stream";
    EXPECT_TRUE(bitwise_equal(y.narrow(0, i * per, per).contiguous(), part)) << "slice " << i;
  }
}

// Rows [S, R, D] whose output reaches the streaming size in `dt` (4 slices below it).
Shape rows_shape(DType dt, int64_t D) {
  const int64_t S = 4;
  const int64_t elements = static_cast<int64_t>(kStreamBytes / dtype_size(dt)) + 1;
  const int64_t R = (elements + S * D - 1) / (S * D);
  return Shape({S, R, D});
}

TEST(CpuStreamingStores, ElementwiseMatchSlices) {
  {
    for (DType dt : {DType::F32, DType::BF16}) {
      for (int64_t D : {int64_t{1001}}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " D=" + std::to_string(D));
        const Shape s = rows_shape(dt, D);
        const Tensor x = random_normal(s, dt, 1, 0.0, 3.0), y = random_normal(s, dt, 2);
        const Tensor b = random_normal({D}, dt, 3);
        const Tensor h = random_normal({s[0], s[1], 2 * D}, dt, 4, 0.0, 3.0);
        auto sl = [](const Tensor& t, int64_t i) { return t.narrow(0, i, 1); };
        const std::vector<SplitCase> cases = {
            {"silu", 4, [&] { return ops::silu(x); }, [&](int64_t i) { return ops::silu(sl(x, i)); }},
            {"gelu_tanh", 4, [&] { return ops::gelu_tanh(x); },
             [&](int64_t i) { return ops::gelu_tanh(sl(x, i)); }},
            {"quick_gelu", 4, [&] { return ops::quick_gelu(x); },
             [&](int64_t i) { return ops::quick_gelu(sl(x, i)); }},
            {"add bcast", 4, [&] { return ops::add(x, b); },
             [&](int64_t i) { return ops::add(sl(x, i), b); }},
            {"mul", 4, [&] { return ops::mul(x, y); },
             [&](int64_t i) { return ops::mul(sl(x, i), sl(y, i)); }},
            {"silu_mul", 4, [&] { return ops::silu_mul(x, y); },
             [&](int64_t i) { return ops::silu_mul(sl(x, i), sl(y, i)); }},
            {"gated_gelu", 4, [&] { return ops::gated_gelu(x, y); },
             [&](int64_t i) { return ops::gated_gelu(sl(x, i), sl(y, i)); }},
            {"swiglu", 4, [&] { return ops::swiglu(h); }, [&](int64_t i) { return ops::swiglu(sl(h, i)); }},
        };
        for_each_target([&] {
          for (const SplitCase& c : cases) expect_same_as_slices(c);
          if (dt == DType::F32) {
            expect_same_as_slices({"softmax", 4, [&] { return ops::softmax(x); },
                                   [&](int64_t i) { return ops::softmax(sl(x, i)); }});
          }
        });
      }
    }
  }
}

TEST(CpuStreamingStores, NormsMatchSlices) {
  {
    for (DType dt : {DType::F32, DType::BF16}) {
      for (int64_t D : {int64_t{1001}, int64_t{1024}}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " D=" + std::to_string(D));
        const Shape s = rows_shape(dt, D);
        const Tensor x = random_normal(s, dt, 5, 0.3, 2.0);
        const Tensor mod = random_normal({s[0], 2 * D}, dt, 6, 0.0, 0.5);
        const Tensor shift = mod.narrow(1, 0, D), scale = mod.narrow(1, D, D);
        const Tensor w = random_normal({D}, dt, 7, 1.0, 0.3), bias = random_normal({D}, dt, 8);
        auto sl = [](const Tensor& t, int64_t i) { return t.narrow(0, i, 1); };
        const std::vector<SplitCase> cases = {
            {"adaln_modulate", 4, [&] { return ops::adaln_modulate(x, shift, scale); },
             [&](int64_t i) { return ops::adaln_modulate(sl(x, i), sl(shift, i), sl(scale, i)); }},
            {"layer_norm", 4, [&] { return ops::layer_norm(x, w, bias, 1e-5f); },
             [&](int64_t i) { return ops::layer_norm(sl(x, i), w, bias, 1e-5f); }},
            {"rms_norm", 4, [&] { return ops::rms_norm(x, w, 1e-6f); },
             [&](int64_t i) { return ops::rms_norm(sl(x, i), w, 1e-6f); }},
            {"t5_rms_norm", 4, [&] { return ops::t5_rms_norm(x, w); },
             [&](int64_t i) { return ops::t5_rms_norm(sl(x, i), w); }},
        };
        for_each_target([&] {
          for (const SplitCase& c : cases) expect_same_as_slices(c);
        });
      }
    }
  }
}

TEST(CpuStreamingStores, VaeOpsMatchSlices) {
  {
    for (DType dt : {DType::F32, DType::BF16}) {
      for (int64_t W : {int64_t{181}, int64_t{192}}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " W=" + std::to_string(W));
        // [4, 64, H, W] images whose output reaches the streaming size.
        const int64_t plane = static_cast<int64_t>(kStreamBytes / dtype_size(dt)) / (4 * 64) + 1;
        const int64_t H = (plane + W - 1) / W;
        const Tensor x = random_normal({4, 64, H, W}, dt, 9, 0.2, 1.5);
        const Tensor cw = random_normal({64}, dt, 10, 1.0, 0.2), cb = random_normal({64}, dt, 11);
        const Tensor var = random_normal({64}, dt, 12, 2.0, 0.1);
        // Upsampling quadruples the output: a quarter of the input already streams.
        const Tensor small = random_normal({4, 64, H / 2, W}, dt, 13);
        auto sl = [](const Tensor& t, int64_t i) { return t.narrow(0, i, 1); };
        const std::vector<SplitCase> cases = {
            {"group_norm+silu", 4, [&] { return ops::group_norm(x, cw, cb, 32, 1e-6f, true); },
             [&](int64_t i) { return ops::group_norm(sl(x, i), cw, cb, 32, 1e-6f, true); }},
            {"group_norm", 4, [&] { return ops::group_norm(x, cw, cb, 32, 1e-6f, false); },
             [&](int64_t i) { return ops::group_norm(sl(x, i), cw, cb, 32, 1e-6f, false); }},
            {"latent_normalize", 4, [&] { return ops::latent_normalize(x, cb, var); },
             [&](int64_t i) { return ops::latent_normalize(sl(x, i), cb, var); }},
            {"upsample_nearest_2x", 4, [&] { return ops::upsample_nearest_2x(small); },
             [&](int64_t i) { return ops::upsample_nearest_2x(sl(small, i)); }},
        };
        for_each_target([&] {
          for (const SplitCase& c : cases) expect_same_as_slices(c);
        });
      }
    }
  }
}

}  // namespace
}  // namespace fluxrt::test
