// Whole FLUX.2-klein pipeline vs diffusers' Flux2KleinPipeline on the tiny random models
// (tests/data/klein_pipeline, made by tools/reference/dump_klein_pipeline.py): for every case of the
// manifest (f32 and bf16; txt2img, batch, base variant with CFG, reference images, a 3-level VAE
// with vae_scale_factor 4), first the
// stages one at a time on diffusers' own intermediates, so a failure says where the pipeline
// diverges, then the whole generate() against the diffusers PNGs:
//   Inputs        noise bit-exact (torch.randn), sigmas/timesteps bit-exact, position ids exact
//   Prompt        Qwen3 prompt embeddings (module-golden row of the dtype)
//   Steps         each denoising step from diffusers' latents of the step before: the transformer
//                 velocity (module-golden row) and the Euler update of diffusers' own velocity
//                 (with the CFG combination in the latent dtype) bit-exact
//   Generate      result metadata, schedule, final latents (module-golden row) and the images:
//                 f32 every sample within 2/255, bf16 SSIM >= 0.98 (docs/numerics.md)
// bf16 results are compared with the f32 twin's tensors where the inputs are the same (prompt
// embeddings, final latents): the accurate answer, with the bf16 row. The reference's own bf16 run
// is within that row in every case (the manifest records it: final-latent rel-L2 <= 1e-2, image
// SSIM vs f32 >= 0.998), so the tiny model is not ill-conditioned here and no tolerance is widened.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "io/image.h"
#include "io/public_image.h"
#include "io/safetensors.h"
#include "models/flux/flux2_transformer.h"
#include "models/qwen3/qwen3_encoder.h"
#include "pipelines/klein/flux2_klein_pipeline.h"
#include "pipelines/noise.h"
#include "pipelines/schedule.h"
#include "support/compare.h"
#include "support/golden_images.h"

namespace fluxrt::pipelines {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kData = FLUXRT_TEST_DATA_DIR;
const fs::path kGolden = kData / "klein_pipeline";

struct GoldenCase {
  std::string name, model, twin;
  DType dtype = DType::F32;
  std::vector<std::string> prompts;
  std::string negative_prompt;
  int images_per_prompt = 1, batch = 1, width = 0, height = 0, steps = 0, max_sequence_length = 512;
  int vae_scale_factor = 8;  // diffusers' pipe.vae_scale_factor; the manifest says when it is not 8
  std::optional<int> width_arg, height_arg, max_sequence_length_arg;
  uint64_t seed = 0;
  float guidance_scale = 1;
  bool used_cfg = false;
  std::vector<std::string> reference_images, outputs;

  fs::path dir() const { return kGolden / name; }
  fs::path model_root() const { return kData / "models" / model; }
  int64_t latent_h() const { return height / (2 * vae_scale_factor); }
  int64_t latent_w() const { return width / (2 * vae_scale_factor); }
};

void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.name; }

template <class T>
std::optional<T> optional_field(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  return j[key].get<T>();
}

// Read at test registration; a missing or broken manifest gives no cases, which the Manifest test
// below reports as a failure (an exception here would abort the binary before gtest runs).
std::vector<GoldenCase> load_cases() {
  std::vector<GoldenCase> cases;
  try {
    std::ifstream in(kGolden / "manifest.json");
    if (!in) return cases;
    const json manifest = json::parse(in);
    for (const json& j : manifest.at("cases")) {
      GoldenCase c;
      c.name = j.at("name");
      c.model = j.at("model");
      c.twin = j.value("f32_twin", "");
      c.dtype = j.at("dtype") == "bf16" ? DType::BF16 : DType::F32;
      c.prompts = j.at("prompts").get<std::vector<std::string>>();
      c.negative_prompt = j.at("negative_prompt");
      c.images_per_prompt = j.at("images_per_prompt");
      c.batch = j.at("batch");
      c.width = j.at("width");
      c.height = j.at("height");
      c.steps = j.at("steps");
      c.vae_scale_factor = j.value("vae_scale_factor", 8);
      c.max_sequence_length = j.at("max_sequence_length");
      c.width_arg = optional_field<int>(j, "width_arg");
      c.height_arg = optional_field<int>(j, "height_arg");
      c.max_sequence_length_arg = optional_field<int>(j, "max_sequence_length_arg");
      c.seed = j.at("seed");
      c.guidance_scale = j.at("guidance_scale");
      c.used_cfg = j.at("used_cfg");
      c.reference_images = j.at("reference_images").get<std::vector<std::string>>();
      c.outputs = j.at("outputs").get<std::vector<std::string>>();
      cases.push_back(std::move(c));
    }
  } catch (const std::exception&) {
    cases.clear();
  }
  return cases;
}

const std::vector<GoldenCase>& all_cases() {
  static const std::vector<GoldenCase> cases = load_cases();
  return cases;
}

const GoldenCase* find_case(const std::string& name) {
  for (const GoldenCase& c : all_cases())
    if (c.name == name) return &c;
  return nullptr;
}

// One open intermediates file per case, tensors copied out of the mapping.
struct Intermediates {
  io::Checkpoint file;
  explicit Intermediates(const GoldenCase& c) : file(io::Checkpoint::open((c.dir() / "intermediates.safetensors").string())) {}
  bool has(const std::string& name) const { return file.contains(name); }
  Tensor get(const std::string& name) const { return file.tensor(name).clone(); }
};

// [B, C, h, w] -> [B, h*w, C], as diffusers' _pack_latents (written here with plain tensor views
// so the stage checks do not depend on the pipeline's own helpers).
Tensor pack(const Tensor& latents) {
  const Shape& s = latents.shape();
  return latents.reshape({s[0], s[1], s[2] * s[3]}).permute({0, 2, 1}).contiguous();
}

// Concatenate [B, n1, C] and [B, n2, C] along dim 1 (same dtype).
Tensor cat_tokens(const Tensor& a, const Tensor& b) {
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  const int64_t batch = ac.shape()[0], n1 = ac.shape()[1], n2 = bc.shape()[1], ch = ac.shape()[2];
  Tensor out = Tensor::empty({batch, n1 + n2, ch}, ac.dtype());
  const size_t es = dtype_size(ac.dtype());
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  for (int64_t i = 0; i < batch; ++i) {
    std::memcpy(dst + static_cast<size_t>(i * (n1 + n2) * ch) * es,
                static_cast<const uint8_t*>(ac.raw_data()) + static_cast<size_t>(i * n1 * ch) * es,
                static_cast<size_t>(n1 * ch) * es);
    std::memcpy(dst + static_cast<size_t>((i * (n1 + n2) + n1) * ch) * es,
                static_cast<const uint8_t*>(bc.raw_data()) + static_cast<size_t>(i * n2 * ch) * es,
                static_cast<size_t>(n2 * ch) * es);
  }
  return out;
}

// Rows [0, n) of dim 1 of a [B, L, C] tensor, contiguous.
Tensor first_tokens(const Tensor& t, int64_t n) { return t.slice(1, 0, n).contiguous(); }

// diffusers' CFG line `neg + g * (cond - neg)` as torch evaluates it on CPU: every operation in
// f32 (a Python-float scalar enters as f32), each result rounded to the tensors' dtype.
Tensor cfg_combine(const Tensor& cond, const Tensor& uncond, float guidance) {
  const DType dt = cond.dtype();
  const std::vector<float> c = cond.to_vector(), u = uncond.to_vector();
  std::vector<float> out(c.size());
  auto round = [dt](float v) {
    if (dt == DType::F32) return v;
    uint16_t h = 0;
    convert(&v, DType::F32, &h, dt, 1);
    float r = 0;
    convert(&h, dt, &r, DType::F32, 1);
    return r;
  };
  for (size_t i = 0; i < c.size(); ++i) {
    const float d = round(c[i] - u[i]);
    const float m = round(guidance * d);
    out[i] = round(u[i] + m);
  }
  return Tensor::from_vector(out, cond.shape(), DType::F32).to(dt);
}

Tensor timesteps_for(float timestep, int64_t batch, DType dtype) {
  return Tensor::full({batch}, DType::F32, model_timestep(timestep, dtype));
}

// Loaded components are cached per (folder, dtype): each test process loads each once.
template <class T>
using Cache = std::map<std::pair<std::string, DType>, std::shared_ptr<T>>;

std::shared_ptr<Flux2KleinPipeline> pipeline_for(const GoldenCase& c) {
  static Cache<Flux2KleinPipeline> cache;
  auto& slot = cache[{c.model, c.dtype}];
  if (!slot) {
    PipelineOptions options;
    options.dtype = c.dtype;
    slot = Flux2KleinPipeline::load(c.model_root(), options);
  }
  return slot;
}

std::shared_ptr<models::Flux2Transformer> transformer_for(const GoldenCase& c) {
  static Cache<models::Flux2Transformer> cache;
  auto& slot = cache[{c.model, c.dtype}];
  if (!slot) {
    models::Flux2LoadOptions options;
    options.dtype = c.dtype;
    slot = models::Flux2Transformer::load(c.model_root().string(), options);
  }
  return slot;
}

std::shared_ptr<models::KleinPromptEmbedder> embedder_for(const GoldenCase& c) {
  static Cache<models::KleinPromptEmbedder> cache;
  auto& slot = cache[{c.model, c.dtype}];
  if (!slot) {
    models::Qwen3EncoderOptions options;
    options.dtype = c.dtype;
    slot = models::KleinPromptEmbedder::load(c.model_root(), options);
  }
  return slot;
}

::testing::AssertionResult module_close(const Tensor& actual, const Tensor& expected, DType dtype,
                                        const std::string& what) {
  const Tensor a = actual.to(DType::F32), e = expected.to(DType::F32);
  if (a.shape() != e.shape())
    return ::testing::AssertionFailure() << what << ": shape " << a.shape().str() << " vs " << e.shape().str();
  auto r = test::all_close(a, e, test::tolerance_for(test::TolClass::ModuleGolden, dtype), dtype);
  if (!r) r << " (" << what << ")";
  return r;
}

::testing::AssertionResult bit_exact(const Tensor& actual, const Tensor& expected, const std::string& what) {
  if (actual.shape() != expected.shape() || actual.dtype() != expected.dtype())
    return ::testing::AssertionFailure() << what << ": " << actual.str() << " vs " << expected.str();
  auto r = test::all_close(actual, expected, test::TolClass::Exact);
  if (!r) r << " (" << what << ")";
  return r;
}

class KleinGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST(KleinGoldenManifest, EveryCaseHasItsFiles) {
  const auto& cases = all_cases();
  ASSERT_GE(cases.size(), 10u) << "tests/data/klein_pipeline/manifest.json missing or unreadable";
  bool f32 = false, bf16 = false, cfg = false, refs = false, batch = false, vae3 = false;
  for (const GoldenCase& c : cases) {
    EXPECT_TRUE(fs::exists(c.dir() / "intermediates.safetensors")) << c.name;
    EXPECT_EQ(c.outputs.size(), static_cast<size_t>(c.batch)) << c.name;
    for (const auto& o : c.outputs) EXPECT_TRUE(fs::exists(c.dir() / o)) << c.name << " " << o;
    for (const auto& r : c.reference_images) EXPECT_TRUE(fs::exists(kGolden / r)) << c.name << " " << r;
    EXPECT_TRUE(fs::exists(c.model_root() / "model_index.json")) << c.model;
    if (c.dtype == DType::BF16 && !c.twin.empty()) {
      EXPECT_NE(find_case(c.twin), nullptr) << c.twin;
    }
    f32 |= c.dtype == DType::F32;
    bf16 |= c.dtype == DType::BF16;
    cfg |= c.used_cfg;
    refs |= !c.reference_images.empty();
    batch |= c.batch > 1;
    vae3 |= c.vae_scale_factor == 4;
  }
  EXPECT_TRUE(f32 && bf16 && cfg && refs && batch && vae3) << "the manifest lost a kind of case";
}

TEST(KleinGoldenManifest, VariantFolders) {
  PipelineOptions options;
  options.dtype = DType::F32;
  EXPECT_TRUE(Flux2KleinPipeline::load(kData / "models/flux2-klein-tiny", options)->defaults().is_distilled);
  EXPECT_FALSE(Flux2KleinPipeline::load(kData / "models/flux2-klein-base-tiny", options)->defaults().is_distilled);
}

// The VAE factor comes from vae/config.json as in diffusers (2 ** (levels - 1)), and with it the
// default size (128 x factor), the size multiple (2 x factor) and the noise shape.
TEST(KleinGoldenManifest, VaeScaleFactorFromTheFolder) {
  PipelineOptions options;
  options.dtype = DType::F32;
  const auto released = Flux2KleinPipeline::load(kData / "models/flux2-klein-tiny", options);
  EXPECT_EQ(released->vae_scale_factor(), 8);
  EXPECT_EQ(released->defaults().width, 1024);
  const auto vae3 = Flux2KleinPipeline::load(kData / "models/flux2-klein-vae3-tiny", options);
  EXPECT_EQ(vae3->vae_scale_factor(), 4);
  EXPECT_EQ(vae3->defaults().width, 512);
  EXPECT_EQ(vae3->defaults().height, 512);
  EXPECT_EQ(flux2_noise_shape(2, 64, 72, 128, 4), (Shape{2, 128, 8, 9}));
  EXPECT_NO_THROW(Flux2KleinPipeline::validate_size(72, 56, 1, 4));
  try {
    Flux2KleinPipeline::validate_size(72, 56, 1, 8);
    ADD_FAILURE() << "72x56 accepted with 16-pixel tokens";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiples of 16"), std::string::npos) << e.what();
  }
  // A size that is a multiple of 8 but not of 16 is refused with the folder's own factor in the message.
  GenerateRequest req;
  req.prompts = {"x"};
  req.width = 72;
  req.height = 64;
  req.steps = 1;
  req.max_sequence_length = 8;
  try {
    released->generate(req);
    ADD_FAILURE() << "72x64 accepted by the 8x VAE";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("multiples of 16"), std::string::npos) << e.what();
  }
  const GenerateResult out = vae3->generate(req);
  ASSERT_EQ(out.images.size(), 1u);
  EXPECT_EQ(out.images[0].width, 72);
  EXPECT_EQ(out.images[0].height, 64);
  EXPECT_EQ(out.final_latents.shape(), (Shape{1, 128, 8, 9}));
}

TEST_P(KleinGolden, Inputs) {
  const GoldenCase& c = GetParam();
  const Intermediates ref(c);
  // Noise: one torch.randn over the whole batch, in the run's dtype.
  TorchGenerator generator(c.seed);
  const Tensor noise =
      randn_tensor(flux2_noise_shape(c.batch, c.height, c.width, 128, c.vae_scale_factor), c.dtype, generator);
  EXPECT_TRUE(bit_exact(noise, ref.get("noise"), "noise"));

  const Schedule schedule = flux2_schedule(load_flow_match_scheduler_config(c.model_root()), c.steps,
                                           packed_image_seq_len(c.height, c.width, c.vae_scale_factor));
  const Tensor sigmas = ref.get("sigmas"), timesteps = ref.get("timesteps");
  EXPECT_TRUE(bit_exact(Tensor::from_vector(schedule.sigmas, {static_cast<int64_t>(schedule.sigmas.size())}), sigmas,
                        "sigmas"));
  EXPECT_TRUE(bit_exact(Tensor::from_vector(schedule.timesteps, {static_cast<int64_t>(schedule.timesteps.size())}),
                        timesteps, "timesteps"));

  EXPECT_TRUE(bit_exact(klein_image_ids(c.latent_h(), c.latent_w()), ref.get("latent_ids").select(0, 0).contiguous(),
                        "latent_ids"));
  EXPECT_TRUE(bit_exact(klein_text_ids(c.max_sequence_length), ref.get("text_ids").select(0, 0).contiguous(),
                        "text_ids"));
  if (!c.reference_images.empty()) {
    // Each reference's latent grid follows from Flux2ImageProcessor's size; ids (10 + 10 r, i, j, 0).
    std::vector<Tensor> parts;
    int64_t rows = 0;
    for (size_t r = 0; r < c.reference_images.size(); ++r) {
      const int multiple = 2 * c.vae_scale_factor;
      const Tensor pixels =
          preprocess_reference_image(io::read_png((kGolden / c.reference_images[r]).string()), multiple);
      const Tensor ids = klein_image_ids(pixels.shape()[2] / multiple, pixels.shape()[3] / multiple,
                                         10 + 10 * static_cast<int64_t>(r));
      rows += ids.shape()[0];
      parts.push_back(ids.unsqueeze(0));
    }
    Tensor all = parts[0];
    for (size_t i = 1; i < parts.size(); ++i) all = cat_tokens(all, parts[i]);
    EXPECT_EQ(all.shape()[1], rows);
    EXPECT_TRUE(bit_exact(all.select(0, 0).contiguous(), ref.get("reference_ids").select(0, 0).contiguous(),
                          "reference_ids"));
  }
}

TEST_P(KleinGolden, PromptEmbeddings) {
  const GoldenCase& c = GetParam();
  // Accurate answer: the f32 run's embeddings (for an f32 case, its own).
  const GoldenCase* truth = c.twin.empty() ? &c : find_case(c.twin);
  ASSERT_NE(truth, nullptr);
  const Intermediates ref(*truth), own(c);
  const auto embedder = embedder_for(c);
  const Tensor expected = ref.get("prompt_embeds");  // [B, L, 24], prompts repeated per image
  const models::PromptEmbeddings got = embedder->embed(c.prompts, c.max_sequence_length);
  ASSERT_EQ(got.embeds.shape()[0], static_cast<int64_t>(c.prompts.size()));
  for (size_t p = 0; p < c.prompts.size(); ++p)
    for (int r = 0; r < c.images_per_prompt; ++r) {
      const int64_t row = static_cast<int64_t>(p) * c.images_per_prompt + r;
      EXPECT_TRUE(module_close(got.embeds.select(0, static_cast<int64_t>(p)), expected.select(0, row), c.dtype,
                               "prompt_embeds row " + std::to_string(row)));
    }
  if (c.used_cfg) {
    const std::vector<std::string> negatives(c.prompts.size(), c.negative_prompt);
    const models::PromptEmbeddings neg = embedder->embed(negatives, c.max_sequence_length);
    const Tensor expected_neg = ref.get("negative_prompt_embeds");
    for (int64_t row = 0; row < c.batch; ++row)
      EXPECT_TRUE(module_close(neg.embeds.select(0, row / c.images_per_prompt), expected_neg.select(0, row), c.dtype,
                               "negative_prompt_embeds row " + std::to_string(row)));
  }
}

// Each step from diffusers' own latents of the step before, so an error does not accumulate and
// the first failing step is where the pipeline diverges.
TEST_P(KleinGolden, Steps) {
  const GoldenCase& c = GetParam();
  const Intermediates ref(c);
  const auto transformer = transformer_for(c);
  const Tensor sigmas = ref.get("sigmas"), timesteps = ref.get("timesteps");
  const Tensor prompt = ref.get("prompt_embeds"), text_ids = ref.get("text_ids");
  const Tensor negative = c.used_cfg ? ref.get("negative_prompt_embeds") : Tensor();
  Tensor ids = ref.get("latent_ids");
  const bool has_refs = ref.has("reference_latents");
  if (has_refs) ids = cat_tokens(ids, ref.get("reference_ids"));
  const int64_t n = c.latent_h() * c.latent_w();
  Tensor latents = pack(ref.get("noise"));
  for (int k = 1; k <= c.steps; ++k) {
    SCOPED_TRACE("step " + std::to_string(k) + " of " + std::to_string(c.steps));
    const std::string prefix = "step" + std::to_string(k);
    const Tensor x = has_refs ? cat_tokens(latents, ref.get("reference_latents")) : latents;
    const Tensor t = timesteps_for(timesteps.to_vector()[k - 1], c.batch, c.dtype);
    const Tensor cond = first_tokens(transformer->forward(x, ids, prompt, text_ids, t), n);
    EXPECT_TRUE(module_close(cond, ref.get(prefix + "_velocity"), c.dtype, prefix + "_velocity"));
    Tensor velocity = ref.get(prefix + "_velocity");
    if (c.used_cfg) {
      const Tensor uncond = first_tokens(transformer->forward(x, ids, negative, text_ids, t), n);
      EXPECT_TRUE(module_close(uncond, ref.get(prefix + "_velocity_uncond"), c.dtype, prefix + "_velocity_uncond"));
      velocity = cfg_combine(velocity, ref.get(prefix + "_velocity_uncond"), c.guidance_scale);
    }
    // The update itself, on diffusers' velocity: bit-exact.
    const std::vector<float> s = sigmas.to_vector();
    const Tensor next = euler_step(latents, velocity, s[k - 1], s[k]);
    const Tensor expected = ref.get(prefix + "_latents");
    EXPECT_TRUE(bit_exact(next, expected, prefix + "_latents (Euler on diffusers' velocity)"));
    latents = expected;
  }
}

GenerateRequest request_for(const GoldenCase& c) {
  GenerateRequest req;
  req.prompts = c.prompts;
  // dump_klein_pipeline.py passes a negative prompt only when the case has one (diffusers' None
  // otherwise, which klein's CFG takes as "").
  if (!c.negative_prompt.empty()) req.negative_prompt = c.negative_prompt;
  req.images_per_prompt = c.images_per_prompt;
  req.width = c.width_arg;
  req.height = c.height_arg;
  req.steps = c.steps;
  req.guidance = c.guidance_scale;
  req.max_sequence_length = c.max_sequence_length_arg;
  req.seed = c.seed;
  for (const auto& r : c.reference_images)
    req.reference_images.push_back(io::to_public(io::read_png((kGolden / r).string())));
  return req;
}

TEST_P(KleinGolden, Generate) {
  const GoldenCase& c = GetParam();
  const Intermediates ref(c);
  const GenerateResult out = pipeline_for(c)->generate(request_for(c));

  ASSERT_EQ(out.images.size(), static_cast<size_t>(c.batch));
  EXPECT_EQ(out.width, c.width);
  EXPECT_EQ(out.height, c.height);
  EXPECT_EQ(out.num_steps, c.steps);
  EXPECT_EQ(out.used_cfg, c.used_cfg);
  EXPECT_TRUE(bit_exact(Tensor::from_vector(out.schedule.sigmas, {static_cast<int64_t>(out.schedule.sigmas.size())}),
                        ref.get("sigmas"), "result schedule sigmas"));

  // Final latents: f32 against its own dump; bf16 against the f32 twin (same seed and inputs).
  const GoldenCase* truth = c.twin.empty() ? &c : find_case(c.twin);
  ASSERT_NE(truth, nullptr);
  const Tensor final_ref = Intermediates(*truth).get("final_latents");
  const auto latent_stats = test::compare(out.final_latents.to(DType::F32), final_ref.to(DType::F32));
  EXPECT_TRUE(module_close(out.final_latents, final_ref, c.dtype, "final_latents"));

  const test::GoldenImagesWorst worst = test::expect_golden_images(out.images, c.dir(), c.outputs, c.dtype);
  std::printf("%s: final latents rel-L2 %.3e vs diffusers %s; images max |diff| %d, min SSIM %.5f\n",
              c.name.c_str(), latent_stats.rel_l2, truth == &c ? "(same dtype)" : "f32", worst.max_abs,
              worst.min_ssim);
}

INSTANTIATE_TEST_SUITE_P(Diffusers, KleinGolden, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param.name; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(KleinGolden);

}  // namespace
}  // namespace fluxrt::pipelines
