// The public API (include/fluxrt/) on the tiny test models: fluxrt::Engine renders exactly what
// the pipelines render for the same request (it hands the request over as it is), reports
// progress, stops on its cancel token, serves several threads one call at a time with each call's
// own result, throws fluxrt::Error with codes naming the request field, and gives the metadata,
// defaults, plan (with its notes) and model info a front end shows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fluxrt/engine.h"
#include "fluxrt/request_fields.h"
#include "pipelines/flux1/flux1_pipeline.h"
#include "pipelines/klein/flux2_klein_pipeline.h"
#include "runtime/model_info.h"

namespace fs = std::filesystem;

namespace {

const fs::path kData = FLUXRT_TEST_DATA_DIR;
const fs::path kKlein = kData / "models" / "flux2-klein-tiny";
const fs::path kKleinBase = kData / "models" / "flux2-klein-base-tiny";
const fs::path kSchnell = kData / "models" / "flux1-schnell-tiny";
const fs::path kDev = kData / "models" / "flux1-dev-tiny";

fluxrt::GenerateRequest small_request(uint64_t seed = 7) {
  fluxrt::GenerateRequest r;
  r.prompts = {"a red circle"};
  r.width = 64;
  r.height = 64;
  r.steps = 2;
  r.seed = seed;
  return r;
}

fluxrt::Image gradient(int width, int height) {
  fluxrt::Image image{width, height, {}};
  image.rgb.resize(static_cast<size_t>(width) * height * 3);
  for (size_t i = 0; i < image.rgb.size(); ++i) image.rgb[i] = static_cast<uint8_t>(i * 7);
  return image;
}

fluxrt::ErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const fluxrt::Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "no fluxrt::Error thrown";
  return fluxrt::ErrorCode::Internal;
}

// The request field the error names (Error::field).
std::string field_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const fluxrt::Error& e) {
    return e.field();
  }
  ADD_FAILURE() << "no fluxrt::Error thrown";
  return "";
}

void expect_same_images(const fluxrt::GenerateResult& engine,
                        const fluxrt::pipelines::GenerateResult& pipeline) {
  ASSERT_EQ(engine.images.size(), pipeline.images.size());
  for (size_t i = 0; i < engine.images.size(); ++i) {
    const fluxrt::Image& a = engine.images[i].image;
    const fluxrt::io::Image& b = pipeline.images[i];
    EXPECT_EQ(a.width, b.width);
    EXPECT_EQ(a.height, b.height);
    EXPECT_EQ(b.channels, 3);
    EXPECT_TRUE(a.rgb == b.pixels) << "image " << i << " differs from the pipeline's";
  }
}

}  // namespace

TEST(Engine, KleinImagesAreThePipelinesBitForBit) {
  fluxrt::Engine engine(kKlein.string());
  fluxrt::GenerateRequest r = small_request();
  r.prompts = {"a red circle", ""};
  r.images_per_prompt = 2;
  const fluxrt::GenerateResult got = engine.generate(r);

  fluxrt::pipelines::PipelineOptions options;
  auto pipeline = fluxrt::pipelines::Flux2KleinPipeline::load(kKlein, options);
  expect_same_images(got, pipeline->generate(r));
  EXPECT_EQ(got.width, 64);
  EXPECT_EQ(got.steps, 2);
  EXPECT_EQ(got.timing.images, 4);
  EXPECT_EQ(got.timing.run.steps, 2);
  EXPECT_GT(got.timing.run.denoise_total_s, 0);
  ASSERT_TRUE(got.timing.cold_load.has_value());
  EXPECT_GT(got.timing.cold_load->total_s, 0);
  EXPECT_EQ(got.timing.model, kKlein.string());
}

TEST(Engine, KleinReferenceImageIsThePipelines) {
  fluxrt::Engine engine(kKlein.string());
  fluxrt::GenerateRequest r = small_request(3);
  r.width.reset();
  r.height.reset();  // from the reference image: 80x64 -> 80x64 (multiples of 16)
  r.reference_images = {gradient(80, 64)};
  r.reference_image_names = {"ref one.png"};
  const fluxrt::GenerateResult got = engine.generate(r);
  EXPECT_EQ(got.width, 80);
  // The names the request gave, joined; no FLUX.1 chunks on klein.
  const fluxrt::TextChunks text = fluxrt::metadata_text(got.images[0].metadata);
  const fluxrt::TextChunks want_tail = {{"reference_images", "ref one.png"}};
  ASSERT_GE(text.size(), 1u);
  EXPECT_EQ(fluxrt::TextChunks(text.end() - 1, text.end()), want_tail);
  EXPECT_EQ(engine.plan(r).width, 80);
  EXPECT_TRUE(got.timing.run.has_reference_images);

  auto pipeline = fluxrt::pipelines::Flux2KleinPipeline::load(kKlein, {});
  expect_same_images(got, pipeline->generate(r));
}

TEST(Engine, Flux1TrueCfgAndImg2ImgAreThePipelines) {
  fluxrt::Engine engine(kDev.string());
  fluxrt::GenerateRequest r = small_request(5);
  r.negative_prompt = "blurry";
  r.true_cfg = 2.0f;
  r.init_image = gradient(64, 64);
  r.init_image_name = "init.png";
  r.strength = 0.75f;
  r.steps = 4;
  const fluxrt::GenerateResult got = engine.generate(r);
  EXPECT_TRUE(got.used_cfg);
  EXPECT_EQ(got.steps, 3);  // 4 x 0.75
  const fluxrt::RequestPlan plan = engine.plan(r);
  EXPECT_EQ(plan.steps, 4);
  EXPECT_EQ(plan.steps_run, 3);

  auto pipeline = fluxrt::pipelines::Flux1Pipeline::load(kDev, {});
  EXPECT_EQ(pipeline->plan(r).max_sequence_length, engine.defaults().max_sequence_length);
  expect_same_images(got, pipeline->generate(r));

  const fluxrt::TextChunks text = fluxrt::metadata_text(got.images[0].metadata);
  auto value = [&](const std::string& key) {
    for (const auto& [k, v] : text)
      if (k == key) return v;
    return std::string("<absent>");
  };
  EXPECT_EQ(value("init_image"), "init.png");
  EXPECT_EQ(value("strength"), "0.75");
  EXPECT_EQ(value("scheduled_steps"), "4");
  EXPECT_EQ(value("steps"), "3");
  EXPECT_EQ(value("true_cfg"), "2");
  EXPECT_EQ(value("reference_images"), "<absent>");
}

TEST(Engine, ProgressAndCancellation) {
  fluxrt::Engine engine(kKlein.string());
  fluxrt::GenerateRequest r = small_request();
  r.steps = 3;
  std::vector<fluxrt::Progress> seen;
  fluxrt::Callbacks callbacks;
  callbacks.on_progress = [&](const fluxrt::Progress& p) { seen.push_back(p); };
  engine.generate(r, callbacks);
  ASSERT_EQ(seen.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(seen[i].step, i + 1);
    EXPECT_EQ(seen[i].total, 3);
    EXPECT_GT(seen[i].step_seconds, 0);
  }
  EXPECT_NEAR(seen[2].elapsed_seconds, seen[0].step_seconds + seen[1].step_seconds + seen[2].step_seconds,
              1e-9);
  EXPECT_NEAR(seen[0].eta_seconds, 2 * seen[0].elapsed_seconds, 1e-9);
  EXPECT_EQ(seen[2].eta_seconds, 0);

  // Cancelled after the first step: stops before the second, no result.
  fluxrt::Callbacks stop;
  int steps = 0;
  stop.on_progress = [&](const fluxrt::Progress&) {
    ++steps;
    stop.cancel.cancel();
  };
  EXPECT_EQ(code_of([&] { engine.generate(r, stop); }), fluxrt::ErrorCode::Cancelled);
  EXPECT_EQ(steps, 1);
  // A token stays cancelled; a fresh one runs again.
  EXPECT_TRUE(stop.cancel.cancelled());
  EXPECT_EQ(code_of([&] { engine.generate(r, stop); }), fluxrt::ErrorCode::Cancelled);
  EXPECT_EQ(engine.generate(r).images.size(), 1u);
}

TEST(Engine, ServesSeveralThreadsOneCallAtATime) {
  fluxrt::Engine engine(kKlein.string());
  std::vector<fluxrt::GenerateResult> alone;
  for (uint64_t seed = 1; seed <= 3; ++seed) alone.push_back(engine.generate(small_request(seed)));

  std::mutex mutex;
  std::vector<int> order;  // the seed of each progress report, in the order they came
  std::vector<fluxrt::GenerateResult> together(3);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      fluxrt::Callbacks callbacks;
      callbacks.on_progress = [&, t](const fluxrt::Progress&) {
        std::lock_guard<std::mutex> lock(mutex);
        order.push_back(t);
      };
      together[t] = engine.generate(small_request(static_cast<uint64_t>(t + 1)), callbacks);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < 3; ++t) {
    ASSERT_EQ(together[t].images.size(), 1u);
    EXPECT_TRUE(together[t].images[0].image.rgb == alone[t].images[0].image.rgb) << "seed " << t + 1;
    EXPECT_EQ(together[t].images[0].metadata.seed, static_cast<uint64_t>(t + 1));
  }
  // Serialised: each call's two steps are reported together.
  ASSERT_EQ(order.size(), 6u);
  for (size_t i = 0; i < order.size(); i += 2) EXPECT_EQ(order[i], order[i + 1]);
}

TEST(Engine, ErrorsCarryCodes) {
  EXPECT_EQ(code_of([] { fluxrt::Engine((kData / "no-such-model").string()); }), fluxrt::ErrorCode::NotFound);
  fluxrt::EngineOptions bad_device;
  bad_device.device = "tpu";
  EXPECT_EQ(code_of([&] { fluxrt::Engine(kKlein.string(), bad_device); }),
            fluxrt::ErrorCode::InvalidArgument);

  fluxrt::EngineOptions no_encoder;
  no_encoder.vae_encoder = false;
  fluxrt::Engine engine(kKlein.string(), no_encoder);
  fluxrt::GenerateRequest odd = small_request();
  odd.width = 63;
  EXPECT_EQ(code_of([&] { engine.generate(odd); }), fluxrt::ErrorCode::InvalidArgument);
  fluxrt::GenerateRequest cfg = small_request();
  cfg.true_cfg = 2.0f;  // FLUX.1 only
  EXPECT_EQ(code_of([&] { engine.generate(cfg); }), fluxrt::ErrorCode::InvalidArgument);
  fluxrt::GenerateRequest ref = small_request();
  ref.reference_images = {gradient(64, 64)};  // needs the encoder this engine did not load
  EXPECT_EQ(code_of([&] { engine.generate(ref); }), fluxrt::ErrorCode::InvalidArgument);
  fluxrt::GenerateRequest torn = small_request();
  torn.reference_images = {fluxrt::Image{64, 64, std::vector<uint8_t>(10)}};
  EXPECT_EQ(code_of([&] { engine.generate(torn); }), fluxrt::ErrorCode::InvalidArgument);
  EXPECT_EQ(engine.generate(small_request()).images.size(), 1u);  // still serves after errors
}

TEST(Engine, ErrorsNameTheRequestField) {
  fluxrt::Engine engine(kKlein.string());
  auto with = [](auto change) {
    fluxrt::GenerateRequest r = small_request();
    change(r);
    return r;
  };
  const std::pair<fluxrt::GenerateRequest, std::string> cases[] = {
      {with([](auto& r) { r.width = 63; }), "size"},
      {with([](auto& r) { r.steps = 0; }), "steps"},
      {with([](auto& r) { r.guidance = std::nanf(""); }), "guidance"},
      {with([](auto& r) { r.true_cfg = 2.0f; }), "true_cfg"},    // FLUX.1 only
      {with([](auto& r) { r.guidance = 101.0f; }), "guidance"},  // [0, 100]
      {with([](auto& r) { r.negative_prompt = std::string("\xff"); }), "negative_prompt"},
      // Four at most (BFL's limit for klein).
      {with([](auto& r) { r.reference_images.assign(5, gradient(64, 64)); }), "reference_images"},
      {with([](auto& r) { r.strength = 0.5f; }), "strength"},  // FLUX.1 img2img only
      {with([](auto& r) { r.init_image = gradient(64, 64); }), "init_image"},
      {with([](auto& r) { r.mask_image = gradient(64, 64); }), "mask"},  // without the image it edits
      {with([](auto& r) {
         r.init_image = gradient(64, 64);
         r.mask_image = gradient(32, 64);
       }),
       "mask"},  // of another size
      {with([](auto& r) { r.max_sequence_length = 0; }), "max_sequence_length"},
      {with([](auto& r) { r.images_per_prompt = 0; }), "batch"},  // the field table's key
      {with([](auto& r) { r.prompts.clear(); }), "prompts"},
      {with([](auto& r) { r.reference_images = {gradient(32, 64)}; }), "reference_images"},   // too small
      {with([](auto& r) { r.reference_images = {gradient(64, 640)}; }), "reference_images"},  // 10:1
      {with([](auto& r) {
         r.reference_images = {fluxrt::Image{64, 64, std::vector<uint8_t>(10)}};
       }),
       "reference_images"},
  };
  for (const auto& [request, field] : cases) EXPECT_EQ(field_of([&] { engine.generate(request); }), field);
  // Errors about no one request field leave it empty.
  EXPECT_EQ(field_of([] { fluxrt::Engine((kData / "no-such-model").string()); }), "");

  fluxrt::EngineOptions options;
  options.low_memory = true;
  fluxrt::Engine flux1(kSchnell.string(), options);
  fluxrt::GenerateRequest img2img;
  img2img.init_image = gradient(64, 64);
  img2img.strength = 0.0f;  // leaves no denoising step
  EXPECT_EQ(field_of([&] { flux1.plan(img2img); }), "strength");
  fluxrt::GenerateRequest refs;
  refs.reference_images = {gradient(64, 64)};
  EXPECT_EQ(field_of([&] { flux1.generate(refs); }), "reference_images");
  fluxrt::GenerateRequest no_init;
  no_init.strength = 0.5f;  // img2img's field without the init image
  EXPECT_EQ(field_of([&] { flux1.plan(no_init); }), "strength");
  fluxrt::GenerateRequest masked;
  masked.init_image = gradient(64, 64);
  masked.mask_image = gradient(64, 64);
  EXPECT_NO_THROW(flux1.plan(masked));   // FluxInpaintPipeline
  masked.mask_image = gradient(64, 32);  // not the init image's size
  EXPECT_EQ(field_of([&] { flux1.plan(masked); }), "mask");
  fluxrt::GenerateRequest cfg;
  cfg.true_cfg = 100.5f;
  cfg.negative_prompt = "";
  EXPECT_EQ(field_of([&] { flux1.plan(cfg); }), "true_cfg");
}

// FLUX.1 true CFG runs as diffusers' do_true_cfg: true_cfg > 1 and a negative prompt given, even
// an empty one; otherwise one forward per step and a note saying what had no effect.
TEST(Engine, Flux1TrueCfgNeedsANegativePrompt) {
  fluxrt::Engine engine(kDev.string());
  fluxrt::GenerateRequest r = small_request(5);
  r.true_cfg = 2.0f;
  fluxrt::RequestPlan plan = engine.plan(r);
  EXPECT_FALSE(plan.cfg);
  EXPECT_FALSE(plan.true_cfg.has_value());
  ASSERT_EQ(plan.notes.size(), 1u);
  EXPECT_NE(plan.notes[0].find("true_cfg"), std::string::npos) << plan.notes[0];
  const fluxrt::GenerateResult plain = engine.generate(r);
  EXPECT_FALSE(plain.used_cfg);
  EXPECT_EQ(plain.notes, plan.notes);
  EXPECT_FALSE(plain.images[0].metadata.true_cfg.has_value());

  r.negative_prompt = "";
  plan = engine.plan(r);
  EXPECT_TRUE(plan.cfg);
  EXPECT_EQ(plan.true_cfg, std::optional<float>(2.0f));
  EXPECT_EQ(plan.negative_prompt, "");
  EXPECT_TRUE(plan.notes.empty());
  const fluxrt::GenerateResult guided = engine.generate(r);
  EXPECT_TRUE(guided.used_cfg);
  EXPECT_EQ(guided.images[0].metadata.true_cfg, std::optional<float>(2.0f));
  EXPECT_FALSE(guided.images[0].image.rgb == plain.images[0].image.rgb) << "true CFG changed nothing";

  r.true_cfg = 1.0f;  // the "off" value with a negative prompt: no CFG, a note about the prompt
  plan = engine.plan(r);
  EXPECT_FALSE(plan.cfg);
  ASSERT_EQ(plan.notes.size(), 1u);
  EXPECT_NE(plan.notes[0].find("negative prompt"), std::string::npos) << plan.notes[0];
}

TEST(Engine, MetadataRecordsWhatRan) {
  fluxrt::Engine engine(kKleinBase.string());
  fluxrt::GenerateRequest r = small_request(11);
  r.prompts = {"one", "two"};
  r.negative_prompt = "dull";
  r.guidance = 3.5f;
  const fluxrt::GenerateResult got = engine.generate(r);
  ASSERT_EQ(got.images.size(), 2u);
  const fluxrt::ImageMetadata& m = got.images[1].metadata;
  EXPECT_EQ(m.prompt, "two");
  EXPECT_EQ(m.index, 1);
  EXPECT_EQ(m.prompt_index, 1);
  EXPECT_EQ(m.count, 2);
  EXPECT_TRUE(got.used_cfg);
  EXPECT_EQ(m.max_sequence_length, engine.defaults().max_sequence_length);
  const fluxrt::TextChunks text = fluxrt::metadata_text(m);
  const fluxrt::TextChunks expected = {{"prompt", "two"},
                                       {"negative_prompt", "dull"},
                                       {"seed", "11"},
                                       {"batch_index", "1 of 2"},
                                       {"steps", "2"},
                                       {"guidance", "3.5"},
                                       {"size", "64x64"},
                                       {"max_sequence_length", std::to_string(*m.max_sequence_length)},
                                       {"model", kKleinBase.string()},
                                       {"variant", engine.variant()},
                                       {"dtype", "bf16"},
                                       {"fluxrt_version", fluxrt::version()}};
  EXPECT_EQ(text, expected);
}

// The limits say which of the field table's rows a model takes (the server lists them under
// /v1/models); the plan takes exactly those and refuses the others, naming the field.
TEST(Engine, TheFieldsTheLimitsListAreTheOnesThePlanTakes) {
  const std::map<std::string, std::string> valid = {{"negative_prompt", "blurry"},
                                                    {"size", "64x64"},
                                                    {"steps", "2"},
                                                    {"guidance", "1"},
                                                    {"true_cfg", "2"},
                                                    {"strength", "0.5"},
                                                    {"seed", "1"},
                                                    {"batch", "1"},
                                                    {"max_sequence_length", "64"},
                                                    {"padding_mask_crop", "8"},
                                                    {"max_area", "4096"},
                                                    {"cache", "first-block:threshold=0.2"}};
  fluxrt::EngineOptions options;
  options.low_memory = true;  // planning loads nothing
  for (const fs::path& model : {kKlein, kSchnell}) {
    fluxrt::Engine engine(model.string(), options);
    const fluxrt::RequestLimits limits = engine.limits();
    int not_taken = 0;
    for (const fluxrt::RequestField& f : fluxrt::request_fields()) {
      SCOPED_TRACE(model.filename().string() + " " + f.key);
      fluxrt::GenerateRequest r = small_request();
      ASSERT_TRUE(valid.count(f.key)) << "a valid value for the new field";
      fluxrt::set_request_field(r, f, valid.at(f.key), limits, f.key);
      if (std::string_view(f.key) == "strength" && limits.init_image) r.init_image = gradient(64, 64);
      if (std::string_view(f.key) == "strength" && !limits.init_image && limits.mask) {  // klein inpainting
        r.init_image = gradient(64, 64);
        r.mask_image = gradient(64, 64);
      }
      if (std::string_view(f.key) == "padding_mask_crop") {  // inpainting's: the image with its mask
        r.init_image = gradient(64, 64);
        r.mask_image = gradient(64, 64);
      }
      if (fluxrt::request_field_taken(f, limits)) {
        EXPECT_NO_THROW(engine.plan(r));
      } else {
        ++not_taken;
        EXPECT_EQ(field_of([&] { engine.plan(r); }), f.key);
      }
    }
    // klein: no true CFG (strength: inpainting); neither: max_area (Kontext's)
    EXPECT_EQ(not_taken, model == kKlein ? 2 : 1);
  }
}

TEST(Engine, DefaultsPlanInfoAndVersion) {
  fluxrt::EngineOptions options;
  options.low_memory = true;  // nothing loads until a request
  fluxrt::Engine engine(kSchnell.string(), options);
  EXPECT_FALSE(engine.load_timings().has_value());
  EXPECT_EQ(engine.options().low_memory, std::optional<bool>(true));
  const fluxrt::ModelDefaults d = engine.defaults();
  EXPECT_EQ(d.steps, 4);  // schnell
  EXPECT_TRUE(d.img2img_strength.has_value());
  fluxrt::GenerateRequest r;
  const fluxrt::RequestPlan plan = engine.plan(r);
  EXPECT_EQ(plan.steps, d.steps);
  EXPECT_EQ(plan.steps_run, d.steps);
  EXPECT_EQ(plan.width, d.width);
  EXPECT_EQ(plan.max_sequence_length, d.max_sequence_length);
  r.init_image = gradient(64, 64);
  r.strength = 0.0f;  // leaves no denoising step
  EXPECT_EQ(code_of([&] { engine.plan(r); }), fluxrt::ErrorCode::InvalidArgument);

  const fluxrt::ModelInfo info = engine.info();
  EXPECT_EQ(info.pipeline_class, "FluxPipeline");
  EXPECT_EQ(info.family, "flux.1");
  ASSERT_TRUE(info.shape.has_value());
  EXPECT_EQ(fluxrt::model_info_json(info),
            fluxrt::runtime::model_report_json(fluxrt::runtime::inspect_model(kSchnell.string())));
  EXPECT_EQ(std::string(fluxrt::version()), FLUXRT_VERSION_STRING);
}

TEST(Engine, MovesAndOpensFromASingleFile) {
  fluxrt::EngineOptions options;
  options.components = kKlein.string();
  fluxrt::Engine opened((kData / "models" / "flux2-klein-tiny-bfl.safetensors").string(), options);
  fluxrt::Engine engine = std::move(opened);
  const fluxrt::GenerateResult got = engine.generate(small_request());
  ASSERT_EQ(got.images.size(), 1u);
  fluxrt::Engine folder(kKlein.string());
  EXPECT_TRUE(got.images[0].image.rgb == folder.generate(small_request()).images[0].image.rgb)
      << "the BFL single file is the same transformer as the folder's";
}
