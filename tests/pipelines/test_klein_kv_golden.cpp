// FLUX.2-klein-9B-KV vs diffusers' Flux2KleinKVPipeline on the tiny random klein weights run as a
// KV model (tests/data/klein_kv, tools/reference/dump_klein_kv.py: one reference, two of
// different sizes, two images sharing one reference, no reference; f32, some also in bf16):
//   FirstStep     the reference-only pass plus a cached forward gives diffusers' "extract" step's
//                 velocity (module-golden row of the dtype), from diffusers' own inputs
//   Generate      size, final latents (module-golden row) and the images: f32 every sample within
//                 2/255, bf16 SSIM >= 0.98 (docs/numerics.md)
// and the request-scoped cache: a request after another one with other references gives exactly
// what it gives alone (no stale keys), the reference latents are kept by content across requests.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/image.h"
#include "io/public_image.h"
#include "io/safetensors.h"
#include "models/flux/flux2_transformer.h"
#include "pipelines/klein/flux2_klein_pipeline.h"
#include "support/compare.h"
#include "support/golden_images.h"
#include "support/image_compare.h"

namespace fluxrt::pipelines {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kData = FLUXRT_TEST_DATA_DIR;
const fs::path kGolden = kData / "klein_kv";
const fs::path kInputs = kData / "klein_pipeline" / "inputs";

struct KvCase {
  std::string name, model, prompt;
  DType dtype = DType::F32;
  uint64_t seed = 0;
  int steps = 0, images_per_prompt = 1, width = 0, height = 0, max_sequence_length = 64;
  std::optional<int> width_arg, height_arg;
  std::vector<std::string> references, outputs;

  fs::path dir() const { return kGolden / name; }
  fs::path model_root() const { return kData / "models" / model; }
};

void PrintTo(const KvCase& c, std::ostream* os) { *os << c.name; }

// Read at test registration; a missing manifest gives no cases, which the Manifest test reports.
std::vector<KvCase> load_cases() {
  std::vector<KvCase> cases;
  try {
    std::ifstream in(kGolden / "manifest.json");
    if (!in) return cases;
    const json manifest = json::parse(in);
    for (const json& j : manifest.at("cases")) {
      KvCase c;
      c.name = j.at("name");
      c.model = j.at("model");
      c.dtype = j.at("dtype") == "bf16" ? DType::BF16 : DType::F32;
      c.prompt = j.at("prompt");
      c.seed = j.at("seed");
      c.steps = j.at("steps");
      c.images_per_prompt = j.at("images_per_prompt");
      c.max_sequence_length = j.at("max_sequence_length");
      c.references = j.at("references").get<std::vector<std::string>>();
      if (!j.at("width_arg").is_null()) c.width_arg = j.at("width_arg").get<int>();
      if (!j.at("height_arg").is_null()) c.height_arg = j.at("height_arg").get<int>();
      c.width = j.at("width");
      c.height = j.at("height");
      c.outputs = j.at("outputs").get<std::vector<std::string>>();
      cases.push_back(std::move(c));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tests/data/klein_kv/manifest.json: %s\n", e.what());
    cases.clear();
  }
  return cases;
}

const std::vector<KvCase>& all_cases() {
  static const std::vector<KvCase> cases = load_cases();
  return cases;
}

const KvCase& case_named(const std::string& name) {
  for (const KvCase& c : all_cases())
    if (c.name == name) return c;
  throw std::runtime_error("no case " + name);
}

Tensor intermediate(const KvCase& c, const std::string& name) {
  const io::Checkpoint file = io::Checkpoint::open((c.dir() / "intermediates.safetensors").string());
  return file.tensor(name).clone();
}

std::unique_ptr<Flux2KleinPipeline> load_pipeline(const KvCase& c) {
  PipelineOptions options;
  options.dtype = c.dtype;
  return Flux2KleinPipeline::load(c.model_root(), options);
}

std::shared_ptr<Flux2KleinPipeline> shared_pipeline(const KvCase& c) {
  static std::map<DType, std::shared_ptr<Flux2KleinPipeline>> cache;
  auto& slot = cache[c.dtype];
  if (!slot) slot = load_pipeline(c);
  return slot;
}

GenerateRequest request_for(const KvCase& c) {
  GenerateRequest r;
  r.prompts = {c.prompt};
  r.images_per_prompt = c.images_per_prompt;
  r.steps = c.steps;
  r.max_sequence_length = c.max_sequence_length;
  r.seed = c.seed;
  if (c.width_arg) r.width = *c.width_arg;
  if (c.height_arg) r.height = *c.height_arg;
  for (const std::string& file : c.references)
    r.reference_images.push_back(io::to_public(io::to_rgb(io::read_png((kInputs / file).string()))));
  return r;
}

// [B, C, h, w] -> [B, h*w, C], as diffusers' Flux2 _pack_latents.
Tensor pack(const Tensor& latents) {
  const Shape& s = latents.shape();
  return latents.reshape({s[0], s[1], s[2] * s[3]}).permute({0, 2, 1}).contiguous();
}

// The first batch row of a [B, L, ...] tensor, without the batch dimension.
Tensor first_row(const Tensor& t) { return t.slice(0, 0, 1).contiguous().squeeze(0); }

class KleinKvGolden : public ::testing::TestWithParam<KvCase> {};

TEST(KleinKvGoldenManifest, EveryCaseHasItsFiles) {
  ASSERT_GE(all_cases().size(), 6u) << "tests/data/klein_kv/manifest.json missing or unreadable";
  for (const KvCase& c : all_cases()) {
    EXPECT_TRUE(fs::exists(c.dir() / "intermediates.safetensors")) << c.name;
    for (const std::string& f : c.outputs) EXPECT_TRUE(fs::exists(c.dir() / f)) << c.name << " " << f;
  }
}

TEST(KleinKvGoldenManifest, FolderRunsAsTheKvPipeline) {
  const auto pipe = load_pipeline(case_named("one_ref_f32"));
  EXPECT_TRUE(pipe->defaults().reference_kv);
  EXPECT_FALSE(pipe->facts().cfg);
  EXPECT_FALSE(pipe->facts().limits.mask);
  EXPECT_EQ(pipe->facts().defaults.steps, 4);
}

TEST_P(KleinKvGolden, FirstStep) {
  const KvCase& c = GetParam();
  if (c.references.empty()) GTEST_SKIP() << "no reference: the standard forward";
  const auto transformer = models::Flux2Transformer::load(c.model_root().string(), {c.dtype});
  const DType dt = c.dtype;
  const Tensor refs = intermediate(c, "reference_latents").slice(0, 0, 1).contiguous().to(dt);  // [1, R, 128]
  const Tensor ref_ids = first_row(intermediate(c, "reference_ids"));                           // [R, 4]
  const models::Flux2Transformer::ReferenceCache cache = transformer->reference_cache(refs, ref_ids);
  ASSERT_EQ(cache.modules.size(),
            static_cast<size_t>(transformer->config().double_blocks + transformer->config().single_blocks));
  const Tensor x = intermediate(c, "noise_tokens").to(dt);  // [B, N, 128]
  const int64_t b = x.size(0);
  const Tensor t = intermediate(c, "timesteps").slice(0, 0, 1).to(DType::F32);  // [1] diffusers' t
  std::vector<float> sigma(static_cast<size_t>(b), t.to_vector()[0] / 1000.0f);
  const Tensor timesteps = Tensor::from_vector(sigma, {b});
  const Tensor v = transformer->forward(x, first_row(intermediate(c, "latent_ids")),
                                        intermediate(c, "prompt_embeds").to(dt),
                                        first_row(intermediate(c, "text_ids")), timesteps, cache);
  const Tensor expected = intermediate(c, "step1_velocity").to(DType::F32);
  const auto stats = test::compare(v.to(DType::F32), expected);
  EXPECT_TRUE(
      test::all_close(v.to(DType::F32), expected, test::tolerance_for(test::TolClass::ModuleGolden, dt), dt))
      << "step 1 velocity: " << stats.rel_l2;
  std::printf("%s: step 1 velocity rel-L2 %.3e\n", c.name.c_str(), stats.rel_l2);
}

TEST_P(KleinKvGolden, Generate) {
  const KvCase& c = GetParam();
  const GenerateRequest request = request_for(c);
  const auto pipe = shared_pipeline(c);
  const fluxrt::RequestPlan plan = pipe->plan(request);
  EXPECT_EQ(plan.width, c.width);
  EXPECT_EQ(plan.height, c.height);
  EXPECT_FALSE(plan.cfg);
  const GenerateResult out = pipe->generate(request);
  ASSERT_EQ(out.images.size(), static_cast<size_t>(c.images_per_prompt));
  EXPECT_EQ(out.reference_latents, static_cast<int>(c.references.size()));
  EXPECT_EQ(out.reference_kv_bytes > 0, !c.references.empty());

  const Tensor final_ref = intermediate(c, "final_latents").to(DType::F32);  // [B, N, 128]
  const Tensor final_ours = pack(out.final_latents).to(DType::F32);
  const auto stats = test::compare(final_ours, final_ref);
  EXPECT_TRUE(test::all_close(final_ours, final_ref,
                              test::tolerance_for(test::TolClass::ModuleGolden, c.dtype), c.dtype))
      << "final latents";
  const test::GoldenImagesWorst worst = test::expect_golden_images(out.images, c.dir(), c.outputs, c.dtype);
  std::printf("%s: final latents rel-L2 %.3e; images max |diff| %d, min SSIM %.5f\n", c.name.c_str(),
              stats.rel_l2, worst.max_abs, worst.min_ssim);
}

INSTANTIATE_TEST_SUITE_P(Diffusers, KleinKvGolden, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param.name; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(KleinKvGolden);

bool same_pixels(const io::Image& a, const io::Image& b) {
  return a.width == b.width && a.height == b.height && a.pixels == b.pixels;
}

// A ComfyUI klein node once reused one generation's reference cache in the next: a request after
// one with other references must give exactly what it gives on a fresh pipeline.
TEST(KleinKvCache, NeverReusedByTheNextRequest) {
  const KvCase& first = case_named("two_refs_f32");
  const KvCase& second = case_named("one_ref_f32");
  const auto fresh = load_pipeline(second);
  const GenerateResult alone = fresh->generate(request_for(second));

  const auto pipe = load_pipeline(first);
  const GenerateResult a = pipe->generate(request_for(first));
  const GenerateResult b = pipe->generate(request_for(second));
  ASSERT_EQ(b.images.size(), 1u);
  EXPECT_TRUE(same_pixels(b.images[0], alone.images[0]));
  // The cache's size is this request's: 2 x (keys, values) x modules x R tokens x D in f32.
  const models::Flux2Config& cfg = pipe->transformer_config();
  const int64_t modules = cfg.double_blocks + cfg.single_blocks;
  const int64_t tokens = (64 / 16) * (64 / 16);  // one 64x64 reference
  EXPECT_EQ(b.reference_kv_bytes, static_cast<size_t>(2 * modules * tokens * cfg.hidden * 4));
  EXPECT_GT(a.reference_kv_bytes, b.reference_kv_bytes);
}

// Several edits of one image encode it once; the kept latents give the same image.
TEST(KleinKvCache, ReferenceLatentsKeptByContent) {
  const KvCase& c = case_named("one_ref_f32");
  const auto pipe = load_pipeline(c);
  const GenerateResult first = pipe->generate(request_for(c));
  EXPECT_EQ(first.reference_latents_kept, 0);
  const GenerateResult again = pipe->generate(request_for(c));
  EXPECT_EQ(again.reference_latents, 1);
  EXPECT_EQ(again.reference_latents_kept, 1);
  EXPECT_TRUE(same_pixels(first.images[0], again.images[0]));
  // Another image is encoded, not taken from the cache.
  GenerateRequest other = request_for(c);
  other.reference_images[0].rgb[0] ^= 0x80;
  EXPECT_EQ(pipe->generate(other).reference_latents_kept, 0);
}

// A single transformer file named like BFL's ("...-kv...") run with a plain klein folder's
// components is the KV model, said in a note: the same image as the KV folder.
TEST(KleinKvCache, SingleFileNamedKvWithPlainComponents) {
  const KvCase& c = case_named("one_ref_f32");
  const fs::path dir = fs::temp_directory_path() / ("fluxrt_kv_file_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / "flux-2-klein-tiny-kv.safetensors";
  fs::copy_file(kData / "models" / "flux2-klein-tiny-bfl.safetensors", file,
                fs::copy_options::overwrite_existing);
  PipelineOptions options;
  options.dtype = DType::F32;
  options.transformer_file = file;
  const auto pipe = Flux2KleinPipeline::load(kData / "models" / "flux2-klein-tiny", options);
  EXPECT_TRUE(pipe->defaults().reference_kv);
  ASSERT_FALSE(pipe->facts().notes.empty());
  EXPECT_NE(pipe->facts().notes.back().find("FLUX.2-klein-9B-KV"), std::string::npos)
      << pipe->facts().notes.back();
  const GenerateResult out = pipe->generate(request_for(c));
  const test::ImageDiff d = test::compare_images(io::to_rgb(out.images[0]),
                                                 io::to_rgb(io::read_png((c.dir() / c.outputs[0]).string())));
  EXPECT_LE(d.max_abs, 2) << d.str();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fluxrt::pipelines
