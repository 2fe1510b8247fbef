// LoRA files (issue 25, docs/lora.md) against diffusers on the tiny FLUX.1-dev and FLUX.2-klein
// pipelines (tests/data/lora, made by tools/reference/dump_lora.py with diffusers + PEFT):
//   Formats      every key scheme of the same weights, merged at load, gives diffusers' image of
//                the PEFT file (load_lora_weights): f32 within 2/255, bf16 SSIM >= 0.98
//   Requests     the same per request (unmerged branches), and the pipeline is its base again after
//   Strengths    0.5 and -0.7 (set_adapters weights), two LoRAs at once, strength 0 = base bitwise
//   Modes        merged == unmerged within the same tolerances
//   FinalLayer   the BFL final layer's (shift, scale) halves go where they were trained: the BFL
//                file gives the PEFT image, which diffusers' own FLUX.2 BFL converter misses
//   Rejections   the other family, wrong shapes, unmatched keys, other LyCORIS kinds, a corrupt file
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "io/image.h"
#include "io/safetensors.h"
#include "pipelines/flux1/flux1_pipeline.h"
#include "pipelines/klein/flux2_klein_pipeline.h"
#include "pipelines/lora_test_support.h"
#include "support/image_compare.h"
#include "support/random_tensor.h"

namespace fluxrt::pipelines {
namespace {

namespace fs = std::filesystem;
using models::LoraSpec;
using test::error_of;
using test::expect_lora_image_matches;
using test::lora_dtype_dir;
using test::lora_manifest;
using test::lora_request;
using test::temp_lora;

const fs::path kData = FLUXRT_TEST_DATA_DIR;
const fs::path kLora = test::kLoraData;

struct Family {
  std::string name;  // "flux1" / "klein"
  fs::path model;
};

Family flux1() { return {"flux1", kData / "models/flux1-dev-tiny"}; }
Family klein() { return {"klein", kData / "models/flux2-klein-tiny"}; }

std::unique_ptr<Pipeline> load(const Family& f, DType dtype, std::vector<LoraSpec> loras = {},
                               const fs::path& transformer_file = {}) {
  PipelineOptions o;
  o.dtype = dtype;
  o.parallel_load = false;
  o.loras = std::move(loras);
  o.transformer_file = transformer_file;
  if (f.name == "flux1") return Flux1Pipeline::load(f.model, o);
  return Flux2KleinPipeline::load(f.model, o);
}

LoraSpec spec(const Family& f, const std::string& format, float strength = 1.0f) {
  return {(kLora / f.name / (format + ".safetensors")).string(), strength};
}

io::Image reference(const Family& f, const std::string& c, DType dtype) {
  return io::to_rgb(
      io::read_png((kLora / (f.name + "_" + c + "_" + lora_dtype_dir(dtype)) / "image_0.png").string()));
}

std::vector<std::string> formats_of(const Family& f) {
  std::vector<std::string> out;
  const nlohmann::json m = lora_manifest();
  for (const auto& [name, rec] : m["families"][f.name]["formats"].items())
    if (name != "xlabs") out.push_back(name);
  return out;
}

struct FormatCase {
  std::string family, format;
  DType dtype;
};

std::vector<FormatCase> format_cases() {
  std::vector<FormatCase> out;
  for (const Family& f : {flux1(), klein()})
    for (const std::string& fmt : formats_of(f))
      for (DType d : {DType::F32, DType::BF16}) out.push_back({f.name, fmt, d});
  return out;
}

Family family_named(const std::string& n) { return n == "flux1" ? flux1() : klein(); }

class LoraFormat : public ::testing::TestWithParam<FormatCase> {};

TEST_P(LoraFormat, MergedAtLoadMatchesDiffusers) {
  const FormatCase& c = GetParam();
  const Family f = family_named(c.family);
  const GenerateResult out = load(f, c.dtype, {spec(f, c.format)})->generate(lora_request());
  expect_lora_image_matches(out.images.at(0), reference(f, "peft", c.dtype), c.dtype,
                            c.family + " " + c.format + " merged");
}

INSTANTIATE_TEST_SUITE_P(Diffusers, LoraFormat, ::testing::ValuesIn(format_cases()),
                         [](const ::testing::TestParamInfo<FormatCase>& i) {
                           return i.param.family + "_" + i.param.format + "_" + lora_dtype_dir(i.param.dtype);
                         });

class LoraByDtype : public ::testing::TestWithParam<DType> {};

// Per request: the branches for that request only; the next request without them is the base
// image again, bit for bit.
TEST_P(LoraByDtype, PerRequestMatchesDiffusersAndDetaches) {
  const DType dt = GetParam();
  for (const Family& f : {flux1(), klein()}) {
    const auto pipe = load(f, dt);
    const GenerateResult base = pipe->generate(lora_request());
    expect_lora_image_matches(base.images.at(0), reference(f, "base", dt), dt, f.name + " base");
    expect_lora_image_matches(pipe->generate(lora_request({spec(f, "kohya")})).images.at(0),
                              reference(f, "peft", dt), dt, f.name + " kohya per request");
    expect_lora_image_matches(pipe->generate(lora_request({spec(f, "peft", 0.5f)})).images.at(0),
                              reference(f, "half", dt), dt, f.name + " strength 0.5 per request");
    expect_lora_image_matches(
        pipe->generate(lora_request({spec(f, "peft"), spec(f, "second", 0.7f)})).images.at(0),
        reference(f, "two", dt), dt, f.name + " two LoRAs per request");
    const GenerateResult again = pipe->generate(lora_request());
    EXPECT_TRUE(again.images.at(0).pixels == base.images.at(0).pixels) << f.name << ": LoRA left attached";
  }
}

TEST_P(LoraByDtype, StrengthsAndTwoLorasMerged) {
  const DType dt = GetParam();
  for (const Family& f : {flux1(), klein()}) {
    expect_lora_image_matches(load(f, dt, {spec(f, "peft", 0.5f)})->generate(lora_request()).images.at(0),
                              reference(f, "half", dt), dt, f.name + " strength 0.5 merged");
    expect_lora_image_matches(load(f, dt, {spec(f, "bfl", -0.7f)})->generate(lora_request()).images.at(0),
                              reference(f, "negative", dt), dt, f.name + " strength -0.7 merged");
    expect_lora_image_matches(
        load(f, dt, {spec(f, "peft"), spec(f, "second", 0.7f)})->generate(lora_request()).images.at(0),
        reference(f, "two", dt), dt, f.name + " two LoRAs merged");
  }
}

// Merged at load and unmerged per request agree within the pipeline tolerance.
TEST_P(LoraByDtype, MergedEqualsUnmerged) {
  const DType dt = GetParam();
  for (const Family& f : {flux1(), klein()}) {
    const GenerateResult merged =
        load(f, dt, {spec(f, "peft"), spec(f, "second", 0.7f)})->generate(lora_request());
    const GenerateResult unmerged =
        load(f, dt)->generate(lora_request({spec(f, "peft"), spec(f, "second", 0.7f)}));
    expect_lora_image_matches(unmerged.images.at(0), io::to_rgb(merged.images.at(0)), dt,
                              f.name + " merged vs unmerged");
  }
}

// Strength 0, merged or per request: the base image and latents, bit for bit.
TEST_P(LoraByDtype, StrengthZeroIsTheBaseBitwise) {
  const DType dt = GetParam();
  for (const Family& f : {flux1(), klein()}) {
    const auto plain = load(f, dt);
    const GenerateResult base = plain->generate(lora_request());
    const GenerateResult merged = load(f, dt, {spec(f, "peft", 0.0f)})->generate(lora_request());
    const GenerateResult unmerged = plain->generate(lora_request({spec(f, "kohya", 0.0f)}));
    for (const GenerateResult* r : {&merged, &unmerged}) {
      EXPECT_TRUE(r->images.at(0).pixels == base.images.at(0).pixels) << f.name;
      const Tensor a = r->final_latents.contiguous(), b = base.final_latents.contiguous();
      ASSERT_EQ(a.nbytes(), b.nbytes());
      EXPECT_EQ(0, std::memcmp(a.raw_data(), b.raw_data(), a.nbytes())) << f.name << ": latents differ";
    }
  }
}

// A LoRA in split diffusers names on a fused BFL single-file checkpoint, and a fused BFL LoRA on
// the split diffusers folder: the same image (the canonical layout meets both by row slices).
TEST_P(LoraByDtype, SplitLoraOnFusedCheckpoint) {
  const DType dt = GetParam();
  const Family f = klein();
  const fs::path bfl_checkpoint = kData / "models/flux2-klein-tiny-bfl.safetensors";
  expect_lora_image_matches(
      load(f, dt, {spec(f, "peft")}, bfl_checkpoint)->generate(lora_request()).images.at(0),
      reference(f, "peft", dt), dt, "klein diffusers LoRA on the BFL checkpoint");
  expect_lora_image_matches(
      load(f, dt, {spec(f, "kohya")}, bfl_checkpoint)->generate(lora_request()).images.at(0),
      reference(f, "peft", dt), dt, "klein kohya LoRA on the BFL checkpoint");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LoraByDtype, ::testing::Values(DType::F32, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& i) {
                           return std::string(lora_dtype_dir(i.param));
                         });

// XLabs (FLUX.1, attention only, no alpha) against diffusers' own XLabs conversion, and the PEFT
// twin of the same weights against it.
TEST(LoraXLabs, MatchesDiffusers) {
  const Family f = flux1();
  for (DType dt : {DType::F32, DType::BF16}) {
    expect_lora_image_matches(load(f, dt, {spec(f, "xlabs")})->generate(lora_request()).images.at(0),
                              reference(f, "xlabs", dt), dt, "flux1 xlabs");
    expect_lora_image_matches(load(f, dt)->generate(lora_request({spec(f, "xlabs_peft")})).images.at(0),
                              reference(f, "xlabs", dt), dt, "flux1 xlabs PEFT twin");
  }
}

// The final layer: BFL `final_layer.adaLN_modulation.1` rows are (shift, scale), diffusers
// `norm_out.linear` rows (scale, shift); the BFL file holds the PEFT file's B halves swapped. We
// give each half to the layer it was trained for, so the BFL file makes the PEFT (trained) image;
// diffusers 0.42.1's FLUX.2 BFL converter renames without swapping, and its image of the same
// file is outside the pipeline tolerance of the trained one (8/255 off when recorded by
// dump_lora.py). If diffusers ever starts swapping, its recorded image moves onto the PEFT one and
// this test says so.
TEST(LoraFinalLayer, BflHalvesGoWhereTheyWereTrained) {
  const Family f = klein();
  const io::Image trained = reference(f, "peft", DType::F32);
  const io::Image diffusers_bfl =
      io::to_rgb(io::read_png((kLora / "klein_bfl_as_diffusers_loads_it_f32.png").string()));
  const test::ImageDiff unswapped = test::compare_images(diffusers_bfl, trained);
  EXPECT_GT(unswapped.max_abs, 2) << "diffusers' unswapped load is now close to the trained image: "
                                  << unswapped.str();
  const io::Image ours =
      io::to_rgb(load(f, DType::F32, {spec(f, "bfl")})->generate(lora_request()).images.at(0));
  expect_lora_image_matches(ours, trained, DType::F32, "klein bfl final layer");
  EXPECT_GT(test::compare_images(ours, diffusers_bfl).max_abs, 2);
}

// A GGUF (Q8_0) klein transformer takes LoRAs both ways: merged (the touched weights widened from
// their dequantization) and per request (branches on the quantized linears). The two agree, the
// LoRA moves the image as far as it moves the dense model's, and the result is diffusers' LoRA
// image within the quantization error the base image already has.
TEST(LoraOnGguf, QuantizedKleinTakesLorasMergedAndPerRequest) {
  const Family f = klein();
  const fs::path q8 = kData / "gguf" / "flux2-klein-tiny-q8_0.gguf";
  const auto pipe = load(f, DType::F32, {}, q8);
  const io::Image base = io::to_rgb(pipe->generate(lora_request()).images.at(0));
  const io::Image per_request = io::to_rgb(pipe->generate(lora_request({spec(f, "peft")})).images.at(0));
  const io::Image merged =
      io::to_rgb(load(f, DType::F32, {spec(f, "peft")}, q8)->generate(lora_request()).images.at(0));
  const test::ImageDiff quant_error = test::compare_images(base, reference(f, "base", DType::F32));
  const test::ImageDiff modes = test::compare_images(per_request, merged);
  const test::ImageDiff vs_trained = test::compare_images(per_request, reference(f, "peft", DType::F32));
  const test::ImageDiff moved = test::compare_images(per_request, base);
  std::printf(
      "q8 base vs diffusers base: %s\nq8 per request vs merged: %s\nq8 + LoRA vs diffusers LoRA: "
      "%s\nq8 + LoRA vs q8 base: %s\n",
      quant_error.str().c_str(), modes.str().c_str(), vs_trained.str().c_str(), moved.str().c_str());
  EXPECT_LE(modes.max_abs, 4) << modes.str();
  EXPECT_GE(modes.ssim, 0.99) << modes.str();
  EXPECT_LE(vs_trained.max_abs, quant_error.max_abs + 6) << vs_trained.str();
  EXPECT_GE(vs_trained.ssim, 0.95) << vs_trained.str();
  const test::ImageDiff dense_moved =
      test::compare_images(reference(f, "peft", DType::F32), reference(f, "base", DType::F32));
  EXPECT_GT(moved.mse, 0.25 * dense_moved.mse) << moved.str() << " vs dense " << dense_moved.str();
  // The next request without LoRAs is the quantized base again, bit for bit.
  EXPECT_TRUE(io::to_rgb(pipe->generate(lora_request()).images.at(0)).pixels == base.pixels);
}

// ---------------------------------------------------------------------------------------------
// Rejections: one-line errors naming the file and the first offending tensor; nothing applied.

TEST(LoraRejects, OtherFamily) {
  ErrorCode code{};
  const std::string on_flux1 = error_of([&] { load(flux1(), DType::F32, {spec(klein(), "peft")}); }, &code);
  EXPECT_EQ(code, ErrorCode::Format);
  EXPECT_NE(on_flux1.find("FLUX.2 LoRA"), std::string::npos) << on_flux1;
  const std::string on_klein = error_of([&] { load(klein(), DType::F32, {spec(flux1(), "kohya")}); });
  EXPECT_NE(on_klein.find("FLUX.1 LoRA"), std::string::npos) << on_klein;
  // Per request: the same error, and the pipeline still makes its base image.
  const auto pipe = load(klein(), DType::F32);
  EXPECT_NE(error_of([&] { pipe->generate(lora_request({spec(flux1(), "bfl")})); }).find("FLUX.1"),
            std::string::npos);
  expect_lora_image_matches(pipe->generate(lora_request()).images.at(0),
                            reference(klein(), "base", DType::F32), DType::F32,
                            "klein base after a refused request");
}

TEST(LoraRejects, WrongShapesNameTheTensor) {
  // A klein img_in LoRA for 64 input channels (the tiny klein has 128).
  const fs::path p = temp_lora(
      "shape", {{"diffusion_model.img_in.lora_A.weight", test::random_normal({4, 64}, DType::F32, 1)},
                {"diffusion_model.img_in.lora_B.weight", test::random_normal({128, 4}, DType::F32, 2)}});
  const std::string e = error_of([&] { load(klein(), DType::F32, {{p.string(), 1.0f}}); });
  EXPECT_NE(e.find("diffusion_model.img_in"), std::string::npos) << e;
  EXPECT_NE(e.find("[4, 64]"), std::string::npos) << e;
  EXPECT_NE(e.find("img_in.weight [128, 128]"), std::string::npos) << e;
  fs::remove(p);
}

TEST(LoraRejects, UnmatchedKeysListed) {
  const Tensor a = test::random_normal({4, 128}, DType::F32, 1),
               b = test::random_normal({128, 4}, DType::F32, 2);
  // A valid module next to a name no scheme knows, and a block the tiny model does not have.
  const fs::path p =
      temp_lora("unmatched", {{"diffusion_model.img_in.lora_A.weight", a},
                              {"diffusion_model.img_in.lora_B.weight", b},
                              {"diffusion_model.mystery_layer.lora_A.weight", a},
                              {"diffusion_model.double_blocks.7.img_attn.proj.lora_A.weight", a},
                              {"diffusion_model.double_blocks.7.img_attn.proj.lora_B.weight", b}});
  const std::string e1 = error_of([&] { load(klein(), DType::F32, {{p.string(), 1.0f}}); });
  EXPECT_NE(e1.find("mystery_layer"), std::string::npos) << e1;
  fs::remove(p);
  const fs::path q =
      temp_lora("noblock", {{"diffusion_model.img_in.lora_A.weight", a},
                            {"diffusion_model.img_in.lora_B.weight", b},
                            {"diffusion_model.double_blocks.7.img_attn.proj.lora_A.weight", a},
                            {"diffusion_model.double_blocks.7.img_attn.proj.lora_B.weight", b}});
  const std::string e2 = error_of([&] { load(klein(), DType::F32, {{q.string(), 1.0f}}); });
  EXPECT_NE(e2.find("double_blocks.7.img_attn.proj"), std::string::npos) << e2;
  EXPECT_NE(e2.find("match no layer"), std::string::npos) << e2;
  fs::remove(q);
}

// LoKr, LoHa and DoRA load (test_lora_lycoris.cpp); the other LyCORIS algorithms are refused by
// name, and a LoKr / LoHa module missing a half by the key that lacks it.
TEST(LoraRejects, OtherLycorisByNameAndMissingHalves) {
  const Tensor t = test::random_normal({4, 4}, DType::F32, 1);
  for (const auto& [key, name, code_wanted] : std::vector<std::tuple<std::string, std::string, ErrorCode>>{
           {"lycoris_double_blocks_0_img_attn_qkv.oft_blocks", "OFT", ErrorCode::Unsupported},
           {"diffusion_model.double_blocks.0.img_attn.qkv.lokr_w1", "lokr_w2", ErrorCode::Format},
           {"lycoris_double_blocks_0_img_attn_qkv.hada_w1_a", "hada_w1_b", ErrorCode::Format}}) {
    const fs::path p = temp_lora("lycoris", {{key, t}});
    ErrorCode code{};
    const std::string e = error_of([&] { load(klein(), DType::F32, {{p.string(), 1.0f}}); }, &code);
    EXPECT_EQ(code, code_wanted) << e;
    EXPECT_NE(e.find(name), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    fs::remove(p);
  }
}

TEST(LoraRejects, CorruptFile) {
  const fs::path p = fs::temp_directory_path() / "fluxrt_lora_corrupt.safetensors";
  fs::copy_file(kLora / "klein" / "peft.safetensors", p, fs::copy_options::overwrite_existing);
  fs::resize_file(p, fs::file_size(p) / 2);
  ErrorCode code{};
  const std::string e = error_of([&] { load(klein(), DType::F32, {{p.string(), 1.0f}}); }, &code);
  EXPECT_EQ(code, ErrorCode::Format) << e;
  EXPECT_NE(e.find(p.string()), std::string::npos) << e;
  fs::remove(p);
}

}  // namespace
}  // namespace fluxrt::pipelines
