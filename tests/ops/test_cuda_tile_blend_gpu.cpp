// The CUDA tile blending kernels (tile_blend.cu) against the CPU ones, bitwise: the VAE's tiled
// passes must give the same image on the GPU as on the CPU. Also a blend on a second GPU when one
// is present (cuda:1 work must stay on cuda:1). Skips without a GPU.
#include <cstring>
#include <string>
#include <tuple>

#include "cuda_test_util.h"
#include "tile_blend_cases.h"

namespace fluxrt::test {
namespace {

void expect_bitwise(const Tensor& device_result, const Tensor& want) {
  const Tensor got = to_host(device_result);
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), want.dtype());
  EXPECT_EQ(0, std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()));
}

const std::tuple<int64_t, int64_t, int64_t, int64_t> kGrids[] = {
    {40, 24, 16, 4}, {33, 70, 24, 8}, {200, 136, 64, 16}};

TEST(CudaTileBlend, MatchesCpuBitwise) {
  FLUXRT_REQUIRE_GPU();
  const int devices = cuda::device_count();
  for (int index : {0, 1}) {
    if (index >= devices) continue;
    for (DType dtype : {DType::F32, DType::BF16, DType::F16})
      for (const auto& [H, W, tile, overlap] : kGrids) {
        SCOPED_TRACE("cuda:" + std::to_string(index) + " " + std::string(dtype_name(dtype)) + " " +
                     std::to_string(H) + "x" + std::to_string(W));
        const TileGrid g = make_grid(2, 3, H, W, tile, overlap);
        const auto tiles = random_tiles(g, dtype, 11 + W);
        const Blended want = blend_on(Device::cpu(), g, tiles, dtype);
        const Blended got = blend_on(Device::cuda(index), g, tiles, dtype);
        EXPECT_EQ(got.image.device(), Device::cuda(index));
        expect_bitwise(got.weight_sum, want.weight_sum);
        expect_bitwise(got.acc, want.acc);
        expect_bitwise(got.image, want.image);
      }
  }
}

}  // namespace
}  // namespace fluxrt::test
