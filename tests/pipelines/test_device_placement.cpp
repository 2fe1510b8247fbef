// Placement on a non-default device without a GPU: the test device cpu:1 (core/device.h) runs the
// CPU kernels on host memory but is a different device for every same-device check, so a model or
// pipeline that leaves a weight, table or activation on cpu fails here with "[op] tensors on cpu
// and cpu:1", as it would on CUDA. Outputs must be bitwise those of cpu (same kernels, same RNG).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/threads.h"
#include "io/public_image.h"
#include "models/vae/flux1_vae.h"
#include "models/vae/flux2_vae.h"
#include "ops/conv.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "pipeline_test_support.h"
#include "pipelines/flux1/flux1_pipeline.h"
#include "pipelines/klein/flux2_klein_pipeline.h"
#include "support/vae_tiling.h"

namespace fluxrt::pipelines {
namespace {

namespace fs = std::filesystem;

const bool kSingleThreaded = [] {
  set_num_threads(1);
  return true;
}();

const fs::path kData = FLUXRT_TEST_DATA_DIR;
const Device kCheck = Device::placement_check();

using test::options_on;
using test::StepDownloads;

GenerateRequest tiny_request(uint64_t seed) {
  GenerateRequest r;
  r.prompts = {"a red circle", "stripes"};
  r.seed = seed;
  r.width = 64;
  r.height = 64;
  r.steps = 2;
  r.max_sequence_length = 32;
  return r;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PlacementDevice, ParsesPrintsAndDiffersFromCpu) {
  EXPECT_EQ(Device::parse("cpu:1"), kCheck);
  EXPECT_EQ(kCheck.str(), "cpu:1");
  EXPECT_EQ(Device::parse("cpu:0"), Device::cpu());
  EXPECT_TRUE(kCheck.is_cpu());
  EXPECT_NE(kCheck, Device::cpu());
  EXPECT_EQ(Device::parse("cpu:2"), Device::placement_check(2));
  EXPECT_EQ(Device::parse("cpu:2").str(), "cpu:2");
  EXPECT_NE(Device::placement_check(2), kCheck);
  EXPECT_THROW(Device::parse("cpu:"), Error);
  EXPECT_THROW(Device::parse("cpu:x"), Error);
  EXPECT_THROW(Device::parse("cpu:1000"), Error);
}

// cpu:2 stands in for cuda:1: preparing a layer for it must put the weight and bias on cpu:2 (the
// CUDA backend prepares on the device of what it is given, so a weight left on the host or on
// another device would be prepared for the wrong GPU).
TEST(PlacementDevice, PrepareKeepsTheRequestedDeviceIndex) {
  const Device second = Device::placement_check(2);
  const Tensor w = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}), b = Tensor::from_vector({0.5f, -1}, {2});
  const auto lin = ops::prepare_linear(w, b, second);
  EXPECT_EQ(lin->device, second);
  EXPECT_EQ(lin->weight.device(), second);
  EXPECT_EQ(lin->bias.device(), second);
  const Tensor x = ops::linear(Tensor::from_vector({1, 0, -1}, {1, 3}).clone(), *ops::prepare_linear(w, b));
  Tensor x2 = Tensor::empty({1, 3}, DType::F32, second);
  x2.copy_from(Tensor::from_vector({1, 0, -1}, {1, 3}));
  EXPECT_EQ(ops::linear(x2, *lin).to_vector(), x.to_vector());
  const std::string msg = error_of([&] { (void)ops::linear(x2, *ops::prepare_linear(w, b, kCheck)); });
  EXPECT_NE(msg.find("cpu:2 and cpu:1"), std::string::npos) << msg;

  const Tensor cw = Tensor::from_vector(std::vector<float>(2 * 3 * 3 * 3, 0.25f), {2, 3, 3, 3});
  const auto conv = ops::prepare_conv2d(cw, b, second);
  EXPECT_EQ(conv->device, second);
  EXPECT_EQ(conv->weight.device(), second);
  EXPECT_EQ(conv->bias.device(), second);
  // A weight already on another device moves too (cpu:1 -> cpu:2 is what cuda:0 -> cuda:1 would be).
  Tensor on_first = Tensor::empty(w.shape(), w.dtype(), kCheck);
  on_first.copy_from(w);
  EXPECT_EQ(ops::prepare_linear(on_first, Tensor(), second)->weight.device(), second);
}

TEST(PlacementDevice, HostCopiesBetweenCpuAndCpu1Work) {
  const Tensor host = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor dev = Tensor::empty(host.shape(), DType::BF16, kCheck);
  dev.copy_from(host.transpose(0, 1).transpose(0, 1));
  EXPECT_EQ(dev.device(), kCheck);
  EXPECT_EQ(dev.clone().device(), kCheck);
  Tensor back = Tensor::empty(host.shape(), DType::F32);
  back.copy_from(dev);
  EXPECT_EQ(back.to_vector(), host.to_vector());
}

// The counter behind the step-loop checks: only copies from another device into cpu count.
TEST(PlacementDevice, CountsDeviceToHostCopiesOnly) {
  const Tensor host = Tensor::from_vector({1, 2, 3}, {3});
  const uint64_t before = device_to_host_copies();
  Tensor dev = Tensor::empty(host.shape(), DType::F32, kCheck);
  dev.copy_from(host);
  (void)dev.clone();
  (void)dev.to_vector();  // a host-memory read (what the CPU kernels do), not a transfer
  // Strided and converting reads of host memory labelled cpu:2 are no transfer either.
  Tensor wide = Tensor::empty({2, 3}, DType::BF16, Device::placement_check(2));
  wide.copy_from(Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}));
  EXPECT_EQ(wide.transpose(0, 1).to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(device_to_host_copies(), before);
  Tensor back = Tensor::empty(host.shape(), DType::F32);
  back.copy_from(dev);
  EXPECT_EQ(device_to_host_copies(), before + 1);
}

// The checker can fail: an op mixing a cpu tensor with a cpu:1 one names both devices in one line.
TEST(PlacementDevice, UnplacedTensorGivesTheDeviceMismatchError) {
  const Tensor a = Tensor::from_vector({1, 2, 3}, {3});
  Tensor b = Tensor::empty({3}, DType::F32, kCheck);
  b.copy_from(a);
  const std::string msg = error_of([&] { (void)ops::add(a, b); });
  EXPECT_NE(msg.find("tensors on cpu and cpu:1"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(ops::add(b, b).device(), kCheck);
}

Tensor ramp(const Shape& shape, float scale) {
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(static_cast<int64_t>((i * 7919) % 97) - 48) / 48.0f;
  return Tensor::from_vector(v, shape);
}

void expect_bitwise_on_host(const Tensor& want, const Tensor& got_on_device) {
  ASSERT_EQ(got_on_device.device(), kCheck) << "the model's output should stay on its device";
  Tensor got = Tensor::empty(got_on_device.shape(), got_on_device.dtype());
  got.copy_from(got_on_device);
  const Tensor w = want.contiguous();
  ASSERT_EQ(w.shape(), got.shape());
  EXPECT_EQ(0, std::memcmp(w.raw_data(), got.raw_data(), w.nbytes()));
}

// The VAEs' three decode/encode paths (whole image, lean bands, blended tiles) on
// cpu:1, with host inputs (uploaded by the VAE) and with inputs already on the device.
TEST(PlacementVae, BothVaesEveryTilingModeOnCpu1MatchCpu) {
  const std::vector<std::pair<const char*, models::TilingOptions>> modes = {
      {"whole", models::TilingOptions{}}, {"lean", test::lean_bands(3)}, {"tiles", test::forced_tiles(64, 16)}};
  for (const auto& [mode, tiling] : modes) {
    SCOPED_TRACE(mode);
    models::AutoencoderKLOptions o;
    o.dtype = DType::F32;
    o.tiling = tiling;
    if (std::string(mode) == "whole") o.tiling.mode = models::TilingMode::Never;
    models::AutoencoderKLOptions od = o;
    od.device = kCheck;
    {
      const std::string dir = (kData / "flux2_vae" / "model").string();
      const models::Flux2Vae cpu = models::Flux2Vae::load(dir, o), dev = models::Flux2Vae::load(dir, od);
      const Tensor z = ramp({1, cpu.config().packed_channels(), 6, 5}, 1.5f);
      expect_bitwise_on_host(cpu.decode_latents(z), dev.decode_latents(z));
      const Tensor image = ramp({1, 3, 96, 80}, 1.0f);
      Tensor image_dev = Tensor::empty(image.shape(), image.dtype(), kCheck);
      image_dev.copy_from(image);
      expect_bitwise_on_host(cpu.encode_latents(image), dev.encode_latents(image_dev));
    }
    {
      const std::string dir = (kData / "flux1_vae" / "model").string();
      const models::Flux1Vae cpu = models::Flux1Vae::load(dir, o), dev = models::Flux1Vae::load(dir, od);
      const Tensor z = ramp({1, cpu.config().latent_channels, 12, 10}, 1.5f);
      expect_bitwise_on_host(cpu.decode_latents(z), dev.decode_latents(z));
      const Tensor image = ramp({1, 3, 96, 80}, 1.0f);
      expect_bitwise_on_host(cpu.encode_latents(image), dev.encode_latents(image));
    }
  }
}

// Blended tiles stay on the device: a forced-tiled decode (and encode) on cpu:1 copies nothing to
// the host; the caller's download of the image is the only copy. Both tiled layouts: the whole
// latent per tile (tile 32 / overlap 16 on 48x40 images) and the mid block once with the outer
// levels per tile.
TEST(PlacementVae, TiledPassesMakeNoHostCopy) {
  std::set<int> layouts;  // whole-image stages of each case's plan
  for (const auto& [tile, overlap] : {std::pair{32, 16}, std::pair{64, 16}}) {
    SCOPED_TRACE("tile " + std::to_string(tile));
    models::AutoencoderKLOptions od;
    od.dtype = DType::F32;
    od.device = kCheck;
    od.tiling = test::forced_tiles(tile, overlap);
    const models::Flux1Vae dev = models::Flux1Vae::load((kData / "flux1_vae" / "model").string(), od);
    const int64_t h = 12, w = 10;
    const models::TilePlan plan = dev.core().decode_tile_plan(1, 8 * h, 8 * w);
    ASSERT_TRUE(plan.tiled);
    SCOPED_TRACE("whole-image stages " + std::to_string(plan.whole_image_stages));
    layouts.insert(plan.whole_image_stages);
    Tensor z = Tensor::empty({1, dev.config().latent_channels, h, w}, DType::F32, kCheck);
    z.copy_from(ramp(z.shape(), 1.5f));
    const uint64_t before = device_to_host_copies();
    const Tensor image = dev.decode_latents(z);
    EXPECT_EQ(device_to_host_copies(), before) << "the tiled decode copied tiles to the host";
    Tensor host = Tensor::empty(image.shape(), image.dtype());
    host.copy_from(image);
    EXPECT_EQ(device_to_host_copies(), before + 1);

    Tensor x = Tensor::empty({1, 3, 8 * h, 8 * w}, DType::F32, kCheck);
    x.copy_from(ramp(x.shape(), 1.0f));
    const uint64_t before_encode = device_to_host_copies();
    const Tensor latents = dev.encode_latents(x);
    EXPECT_EQ(latents.device(), kCheck);
    EXPECT_EQ(device_to_host_copies(), before_encode) << "the tiled encode copied tiles to the host";
  }
  EXPECT_EQ(layouts.size(), 2u) << "both tiled layouts (whole latent per tile, mid block once) should run";
}

// Loads `model` on cpu and with `on_device` (its device, dtype, low-memory choice), generates
// `request` on both and expects the same images and final latents, bitwise; with
// `no_step_copies`, also that the device's step loop copied nothing to the host.
template <typename Pipeline>
void expect_generate_matches_cpu(const fs::path& model, const PipelineOptions& on_device, GenerateRequest request,
                                 bool no_step_copies = false) {
  auto cpu = Pipeline::load(model, options_on(Device::cpu(), on_device.dtype));
  auto dev = Pipeline::load(model, on_device);
  const GenerateResult want = cpu->generate(request);
  StepDownloads downloads;
  CallContext call;
  if (no_step_copies) downloads.attach(call);
  GenerateResult got;
  ASSERT_EQ("", error_of([&] { got = dev->generate(request, call); }));
  test::expect_same_generation(want, got);
  EXPECT_EQ(got.final_latents.device(), Device::cpu()) << "final latents must come back to the host";
  if (no_step_copies) downloads.expect_none_between_steps();
}

TEST(PlacementKlein, GenerateOnCpu1MatchesCpuBitwise) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    expect_generate_matches_cpu<Flux2KleinPipeline>(kData / "models" / "flux2-klein-tiny", options_on(kCheck, dtype),
                                                    tiny_request(7));
  }
}

// A second device index end to end: every weight, table and input of the tiny klein pipeline must
// land on cpu:2, not on cpu or cpu:1.
TEST(PlacementKlein, GenerateOnCpu2MatchesCpuBitwise) {
  expect_generate_matches_cpu<Flux2KleinPipeline>(kData / "models" / "flux2-klein-tiny",
                                                  options_on(Device::placement_check(2), DType::F32), tiny_request(7));
}

TEST(PlacementKlein, BaseVariantCfgAndReferenceImageOnCpu1MatchCpu) {
  GenerateRequest r = tiny_request(3);
  r.prompts = {"a cat"};
  r.guidance = 4.0f;
  io::Image ref{64, 64, 3, std::vector<uint8_t>(64 * 64 * 3)};
  for (size_t i = 0; i < ref.pixels.size(); ++i) ref.pixels[i] = static_cast<uint8_t>((i * 37) % 251);
  r.reference_images = {io::to_public(ref)};
  expect_generate_matches_cpu<Flux2KleinPipeline>(kData / "models" / "flux2-klein-base-tiny",
                                                  options_on(kCheck, DType::F32), r, /*no_step_copies=*/true);
}

TEST(PlacementKlein, DistilledBf16StepLoopMakesNoHostCopy) {
  const fs::path model = kData / "models" / "flux2-klein-tiny";
  auto dev = Flux2KleinPipeline::load(model, options_on(kCheck, DType::BF16));
  GenerateRequest r = tiny_request(9);
  r.steps = 3;
  StepDownloads downloads;
  CallContext call;
  downloads.attach(call);
  ASSERT_EQ("", error_of([&] { dev->generate(r, call); }));
  downloads.expect_none_between_steps();
}

TEST(PlacementKlein, LowMemoryLoadingPlacesToo) {
  PipelineOptions o = options_on(kCheck, DType::F32);
  o.low_memory = true;
  expect_generate_matches_cpu<Flux2KleinPipeline>(kData / "models" / "flux2-klein-tiny", o, tiny_request(5));
}

TEST(PlacementFlux1, DevAndSchnellOnCpu1MatchCpuBitwise) {
  for (const char* name : {"flux1-dev-tiny", "flux1-schnell-tiny"}) {
    SCOPED_TRACE(name);
    expect_generate_matches_cpu<Flux1Pipeline>(kData / "models" / name, options_on(kCheck, DType::F32),
                                               tiny_request(11));
  }
}

TEST(PlacementFlux1, TrueCfgAndImg2ImgOnCpu1MatchCpu) {
  GenerateRequest r = tiny_request(13);
  r.prompts = {"a dog"};
  r.true_cfg = 2.0f;
  r.negative_prompt = "blurry";
  io::Image init{64, 64, 3, std::vector<uint8_t>(64 * 64 * 3)};
  for (size_t i = 0; i < init.pixels.size(); ++i) init.pixels[i] = static_cast<uint8_t>((i * 13) % 256);
  r.init_image = io::to_public(init);
  r.strength = 0.7f;
  r.steps = 3;
  expect_generate_matches_cpu<Flux1Pipeline>(kData / "models" / "flux1-dev-tiny", options_on(kCheck, DType::BF16), r,
                                             /*no_step_copies=*/true);
}

}  // namespace
}  // namespace fluxrt::pipelines
