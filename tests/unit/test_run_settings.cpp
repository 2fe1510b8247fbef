// The settings resolver (fluxrt/run.h: resolve_run): settings over a preset over the model's
// defaults, resolved once before anything is loaded or written: the shipped default and demo
// presets, prompts files, the request planned against the model's limits (with the notes of
// settings that change nothing), the output checks, one-line errors for bad values, and the
// low-memory fallback when the components do not fit together.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "fluxrt/run.h"
#include "run_settings_fixture.h"

namespace fs = std::filesystem;
using fluxrt::Error;
using fluxrt::ErrorCode;
using fluxrt::RunSettings;

namespace {

const fs::path kModels = fs::path(FLUXRT_TEST_DATA_DIR) / "models";
const fs::path kTinyModel = kModels / "flux2-klein-tiny";
const fs::path kDev = kModels / "flux1-dev-tiny";
const fs::path kConfigs = fs::path(FLUXRT_TEST_DATA_DIR).parent_path().parent_path() / "configs";

class RunSettingsResolve : public fluxrt::test::RunSettingsTest {
 protected:
  RunSettingsResolve() : RunSettingsTest("fluxrt_run_") {}
  RunSettings tiny_settings() const { return small_settings(kTinyModel); }
};

bool has_note(const fluxrt::Run& run, const std::string& text) {
  return std::any_of(run.notes.begin(), run.notes.end(),
                     [&](const std::string& n) { return n.find(text) != std::string::npos; });
}

std::string notes_of(const fluxrt::Run& run) {
  std::string all;
  for (const std::string& n : run.notes) all += n + "\n";
  return all;
}

}  // namespace

// Precedence, highest first: the settings (flags), the preset, the model's own defaults.
TEST_F(RunSettingsResolve, SettingsOverPresetOverModelDefaults) {
  std::ofstream(tmp_ / "p.yaml")
      << "steps: 9\nguidance: 2.5\nbatch: 2\nnegative_prompt: dull\nfilename: \"x-{index}\"\n"
      << "dtype: f32\nvae_tiling: off\n";
  RunSettings s = tiny_settings();
  s.preset = (tmp_ / "p.yaml").string();
  s.dtype = "bf16";
  const fluxrt::Run run = fluxrt::resolve_run(s);
  EXPECT_EQ(run.preset, (tmp_ / "p.yaml").string());
  EXPECT_EQ(run.request.steps, 2);  // setting
  EXPECT_EQ(run.plan.steps, 2);
  EXPECT_EQ(run.request.guidance, 2.5f);  // preset
  EXPECT_EQ(run.plan.guidance, 2.5f);
  EXPECT_EQ(run.request.images_per_prompt, 2);
  EXPECT_EQ(run.images(), 2);
  EXPECT_EQ(run.plan.images, 2);
  EXPECT_EQ(run.request.negative_prompt, std::optional<std::string>("dull"));
  EXPECT_EQ(run.filename_pattern, "x-{index}");
  EXPECT_EQ(run.engine.precision, fluxrt::Precision::BF16);  // setting over the preset's f32
  EXPECT_EQ(run.engine.vae_tiling, fluxrt::VaeTiling::Off);  // preset
  EXPECT_EQ(run.request.seed, 7u);
  EXPECT_FALSE(run.seed_was_random);
  EXPECT_EQ(run.request.prompts, std::vector<std::string>{"a red circle"});
  EXPECT_TRUE(run.prompt_given);
  EXPECT_EQ(run.request.width, 64);
  EXPECT_EQ(run.plan.width, 64);
  // Unset everywhere: the model's default, in the plan only (the request keeps it unset).
  EXPECT_FALSE(run.request.max_sequence_length.has_value());
  EXPECT_EQ(run.plan.max_sequence_length, 512);
  EXPECT_EQ(run.model, kTinyModel.string());
  EXPECT_FALSE(run.variant.empty());
  EXPECT_EQ(run.limits.max_reference_images, 4);  // the model's limits, not the generic ones
  EXPECT_FALSE(run.limits.true_cfg);
  ASSERT_NE(run.resolved, nullptr);
  EXPECT_FALSE(run.engine.vae_encoder) << "no reference or init image: no VAE encoder to load";
  // A distilled klein runs without guidance and CFG: what was given without effect is a note.
  EXPECT_TRUE(has_note(run, "guidance 2.5 has no effect")) << notes_of(run);
  EXPECT_TRUE(has_note(run, "negative prompt has no effect")) << notes_of(run);
  EXPECT_EQ(run.plan.notes.size(), 2u);
  EXPECT_FALSE(fs::exists(tmp_ / "out"));  // nothing written while resolving
}

// dtype int8 (the transformer's linears W8A8) from a preset or a setting: the engine's precision.
TEST_F(RunSettingsResolve, DtypeInt8IsThePrecision) {
  std::ofstream(tmp_ / "int8.yaml") << "dtype: int8\n";
  RunSettings s = tiny_settings();
  s.preset = (tmp_ / "int8.yaml").string();
  EXPECT_EQ(fluxrt::resolve_run(s).engine.precision, fluxrt::Precision::Int8);
  s.dtype = "bf16";
  EXPECT_EQ(fluxrt::resolve_run(s).engine.precision, fluxrt::Precision::BF16);
  s.preset.reset();
  s.dtype = "int8";
  EXPECT_EQ(fluxrt::resolve_run(s).engine.precision, fluxrt::Precision::Int8);
  for (fluxrt::Precision p : {fluxrt::Precision::BF16, fluxrt::Precision::F32, fluxrt::Precision::Int8})
    EXPECT_EQ(fluxrt::parse_precision(fluxrt::precision_name(p)), p);
}

// A key given twice takes the last; every field is checked, even one the preset replaces.
TEST_F(RunSettingsResolve, LaterSettingsWinAndSeedsCanBeRandom) {
  std::ofstream(tmp_ / "random.yaml") << "seed: random\n";
  std::ofstream(tmp_ / "fixed.yaml") << "seed: 5\n";
  RunSettings s = tiny_settings();
  s.fields.push_back({"steps", "3"});
  s.preset = (tmp_ / "random.yaml").string();
  fluxrt::Run run = fluxrt::resolve_run(s);
  EXPECT_EQ(run.plan.steps, 3);
  EXPECT_EQ(run.request.seed, 7u);  // a seed setting over the preset's random
  EXPECT_FALSE(run.seed_was_random);

  s.fields = {{"size", "64x64"}, {"steps", "2"}, {"seed", "random"}};
  s.preset = (tmp_ / "fixed.yaml").string();
  run = fluxrt::resolve_run(s);
  EXPECT_TRUE(run.seed_was_random);  // random over the preset's 5
  EXPECT_LT(run.request.seed, uint64_t{1} << 53);

  s.fields = {{"size", "64x64"}, {"steps", "2"}};
  run = fluxrt::resolve_run(s);
  EXPECT_EQ(run.request.seed, 5u);  // the preset's
  EXPECT_FALSE(run.seed_was_random);
}

// No --config: default.yaml, with demo.yaml over it when no model is named anywhere (the bundled
// demo model at the size it was trained at).
TEST_F(RunSettingsResolve, DemoPresetWhenNoModelIsNamed) {
  RunSettings s;
  s.out_dir = (tmp_ / "out").string();
  const fluxrt::Run demo = fluxrt::resolve_run(s);
  EXPECT_EQ(fs::path(demo.preset), kConfigs / "demo.yaml");
  EXPECT_EQ(fs::path(demo.model).filename(), "demo");
  EXPECT_TRUE(demo.prompt_given);  // demo.yaml's prompts
  EXPECT_EQ(demo.request.prompts.size(), 2u);
  EXPECT_EQ(demo.plan.width, 64);
  EXPECT_EQ(demo.plan.steps, 50);
  EXPECT_EQ(demo.plan.guidance, 4.0f);
  EXPECT_TRUE(demo.plan.cfg);        // a base model: CFG at guidance 4
  EXPECT_EQ(demo.request.seed, 0u);  // demo.yaml's seed over default.yaml's random
  EXPECT_FALSE(demo.seed_was_random);
  EXPECT_EQ(demo.filename_pattern, "demo-{seed}-{index}.png");

  // A model named: default.yaml alone (a random seed), the model's own size.
  s.model = kTinyModel.string();
  const fluxrt::Run named = fluxrt::resolve_run(s);
  EXPECT_EQ(fs::path(named.preset), kConfigs / "default.yaml");
  EXPECT_FALSE(named.prompt_given);
  EXPECT_TRUE(named.seed_was_random);
  EXPECT_EQ(named.plan.width, 1024);
  EXPECT_EQ(named.filename_pattern, "fluxrt-{seed}-{index}.png");

  // "none": no preset at all; a seed is still drawn, names and folder are the built-in ones.
  s.preset = "none";
  s.out_dir.reset();
  const fluxrt::Run bare = fluxrt::resolve_run(s);
  EXPECT_EQ(bare.preset, "");
  EXPECT_TRUE(bare.seed_was_random);
  EXPECT_EQ(bare.out_dir, "outputs");
  EXPECT_EQ(bare.filename_pattern, "fluxrt-{seed}-{index}.png");
}

TEST_F(RunSettingsResolve, EmptyPromptAndRandomSeed) {
  RunSettings s = tiny_settings();
  s.prompt = "";
  s.fields = {{"size", "64x64"}, {"steps", "2"}};  // default.yaml: seed random
  const fluxrt::Run run = fluxrt::resolve_run(s);
  EXPECT_EQ(run.request.prompts, std::vector<std::string>{""});
  EXPECT_TRUE(run.prompt_given);
  EXPECT_TRUE(run.seed_was_random);
  // No prompt anywhere is for the front end to refuse (`fluxrt generate` does); a server takes
  // the run as its requests' defaults.
  s.prompt.reset();
  EXPECT_FALSE(fluxrt::resolve_run(s).prompt_given);
}

TEST_F(RunSettingsResolve, PromptsFile) {
  std::ofstream(tmp_ / "p.txt") << "first prompt\r\n\n   \nsecond\n";
  RunSettings s = tiny_settings();
  s.prompt.reset();
  s.prompts_file = (tmp_ / "p.txt").string();
  const fluxrt::Run run = fluxrt::resolve_run(s);
  EXPECT_EQ(run.request.prompts, (std::vector<std::string>{"first prompt", "second"}));
  EXPECT_TRUE(run.prompt_given);
  EXPECT_EQ(run.plan.images, 2);

  std::ofstream(tmp_ / "empty.txt") << "\n\n";
  s.prompts_file = (tmp_ / "empty.txt").string();
  EXPECT_NE(error_of(s).find("holds no prompt"), std::string::npos) << error_of(s);
  std::ofstream(tmp_ / "bad.txt") << "ok\n\xff\xfe\n";
  s.prompts_file = (tmp_ / "bad.txt").string();
  std::string e = error_of(s);
  EXPECT_NE(e.find("bad.txt:2 is not valid UTF-8"), std::string::npos) << e;
  s.prompts_file = (tmp_ / "missing.txt").string();
  e = error_of(s);
  EXPECT_NE(e.find("missing.txt"), std::string::npos) << e;
  s.prompt = "also a prompt";
  s.prompts_file = (tmp_ / "p.txt").string();
  EXPECT_NE(error_of(s).find("not both"), std::string::npos) << error_of(s);
}

TEST_F(RunSettingsResolve, OneLineErrorsBeforeLoading) {
  std::vector<std::pair<RunSettings, std::string>> cases;
  auto with = [&](auto change, const std::string& must_contain) {
    RunSettings s = tiny_settings();
    change(s);
    cases.push_back({s, must_contain});
  };
  with([](RunSettings& s) { s.fields.push_back({"size", "100x64"}); }, "16");
  with([&](RunSettings& s) { s.model = (tmp_ / "no-such-model").string(); }, "no-such-model");
  with([&](RunSettings& s) { s.reference_images = {(tmp_ / "missing.png").string()}; }, "missing.png");
  with([](RunSettings& s) { s.filename_pattern = "{bogus}"; }, "unknown placeholder {bogus}");
  with(
      [](RunSettings& s) {
        s.fields.push_back({"max_sequence_length", "5000"});
      },
      "--max-sequence-length 5000 must be an integer from 1 to 4096");
  with([](RunSettings& s) { s.fields.push_back({"colour", "red"}); }, "'colour' is not a request field");
  with(
      [](RunSettings& s) {
        s.fields.push_back({"steps", "0"});
      },
      "--steps 0 must be an integer from 1 to 1000");
  with(
      [](RunSettings& s) {
        s.fields.push_back({"guidance", "101"});
      },
      "--guidance 101 must be a number from 0 to 100");
  with([](RunSettings& s) { s.fields.push_back({"batch", "0"}); }, "--batch 0");
  with([](RunSettings& s) { s.dtype = "f16"; }, "--dtype 'f16' must be bf16, f32 or int8");
  with([](RunSettings& s) { s.vae_tiling = "sometimes"; }, "--vae-tiling 'sometimes'");
  with([](RunSettings& s) { s.threads = -1; }, "--threads must be >= 0");
  with(
      [&](RunSettings& s) {
        s.loras = std::vector<fluxrt::Lora>{{(tmp_ / "none.safetensors").string(), 1.0f}};
      },
      "none.safetensors");
  with([&](RunSettings& s) { s.profile = tmp_.string(); }, "is a folder");
  // What klein cannot honour is refused by the model's plan, named by its field-table key.
  with([](RunSettings& s) { s.fields.push_back({"true_cfg", "3"}); }, "true_cfg is not for FLUX.2 klein");
  with([](RunSettings& s) { s.fields.push_back({"strength", "0.5"}); }, "strength is for img2img");
  for (const auto& [settings, must_contain] : cases) {
    const std::string e = error_of(settings);
    EXPECT_NE(e.find(must_contain), std::string::npos) << "want '" << must_contain << "' in: " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }

  // The field at fault, as Error::field() says it.
  RunSettings s = tiny_settings();
  s.fields.push_back({"true_cfg", "3"});
  try {
    fluxrt::resolve_run(s);
    ADD_FAILURE() << "true_cfg accepted on klein";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_EQ(e.field(), "true_cfg");
  }

  // A preset's problems name the file, the line and the key.
  s = tiny_settings();
  std::ofstream(tmp_ / "bad.yaml") << "steps: 2\ncolour: red\n";
  s.preset = (tmp_ / "bad.yaml").string();
  std::string e = error_of(s);
  EXPECT_NE(e.find("bad.yaml:2: 'colour' is not a preset key"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
  // A preset's value checked against the model's own limits, named by file, line and key: the
  // size multiple of the model's VAE, and FLUX.1's T5 reading at most 512 tokens.
  std::ofstream(tmp_ / "odd.yaml") << "size: 100x64\n";
  s = tiny_settings();
  s.fields = {{"steps", "2"}};
  s.preset = (tmp_ / "odd.yaml").string();
  e = error_of(s);
  EXPECT_NE(e.find("odd.yaml:1: size 100x64: width and height must be multiples of 16"), std::string::npos)
      << e;
  std::ofstream(tmp_ / "long.yaml") << "max_sequence_length: 1000\n";
  s = small_settings(kDev);
  s.preset = (tmp_ / "long.yaml").string();
  e = error_of(s);
  EXPECT_NE(e.find("long.yaml:1: max_sequence_length 1000 must be an integer from 1 to 512"),
            std::string::npos)
      << e;
  EXPECT_FALSE(fs::exists(tmp_ / "out"));
}

// FLUX.1: the init image read and its steps planned; true CFG only with a negative prompt.
TEST_F(RunSettingsResolve, Flux1InitImageAndTrueCfgAreCheckedAndPlanned) {
  const fs::path init = fs::path(FLUXRT_TEST_DATA_DIR) / "flux1_pipeline" / "inputs" / "init_64.png";
  ASSERT_TRUE(fs::exists(init));
  RunSettings s = small_settings(kDev);
  s.fields = {{"size", "64x64"}, {"steps", "5"}, {"seed", "21"}, {"strength", "0.6"}, {"true_cfg", "4"}};
  s.init_image = init.string();
  fluxrt::Run run = fluxrt::resolve_run(s);
  EXPECT_EQ(run.init_image, init.string());
  EXPECT_EQ(run.request.init_image_name, "init_64.png");
  ASSERT_TRUE(run.request.init_image.has_value());
  EXPECT_EQ(run.request.init_image->width, 64);
  EXPECT_TRUE(run.engine.vae_encoder);
  EXPECT_EQ(run.plan.steps, 5);
  EXPECT_EQ(run.plan.steps_run, 3);
  EXPECT_EQ(run.plan.strength, std::optional<float>(0.6f));
  EXPECT_FALSE(run.plan.cfg);  // true_cfg without a negative prompt: as in diffusers, a note
  EXPECT_TRUE(has_note(run, "true_cfg 4 has no effect without a negative prompt")) << notes_of(run);

  s.fields.push_back({"negative_prompt", ""});
  run = fluxrt::resolve_run(s);
  EXPECT_TRUE(run.plan.cfg);
  EXPECT_EQ(run.plan.true_cfg, std::optional<float>(4.0f));
  EXPECT_TRUE(run.notes.empty()) << notes_of(run);

  s.init_image = (tmp_ / "missing.png").string();
  std::string e = error_of(s);
  EXPECT_NE(e.find("--init-image"), std::string::npos) << e;
  EXPECT_NE(e.find("missing.png"), std::string::npos) << e;
  s.init_image.reset();
  e = error_of(s);  // strength without an init image
  EXPECT_NE(e.find("needs init_image"), std::string::npos) << e;
}

// Components that do not fit together but fit one at a time: low-memory mode is chosen (with a
// note) unless low_memory was set to false explicitly, which keeps the one-line OutOfMemory error.
TEST_F(RunSettingsResolve, ChoosesLowMemoryWhenTheComponentsDoNotFitTogether) {
  // The smallest RAM limit each mode accepts: weights resident at once + the activation estimate.
  auto threshold = [&](bool low_memory) {
    size_t lo = 1, hi = size_t{1} << 40;  // lo fails, hi passes
    while (hi - lo > 1) {
      const size_t mid = lo + (hi - lo) / 2;
      RunSettings s = tiny_settings();
      s.low_memory = low_memory;
      s.ram_limit_bytes = mid;
      (error_of(s).empty() ? hi : lo) = mid;
    }
    return hi;
  };
  const size_t low = threshold(true), all = threshold(false);
  ASSERT_LT(low, all);

  RunSettings s = tiny_settings();
  s.ram_limit_bytes = low;
  const fluxrt::Run run = fluxrt::resolve_run(s);
  EXPECT_EQ(run.engine.low_memory, std::optional<bool>(true));
  EXPECT_TRUE(has_note(run, "low-memory mode")) << notes_of(run);

  s.ram_limit_bytes = all;  // everything fits: stays all-resident, no note
  const fluxrt::Run resident = fluxrt::resolve_run(s);
  EXPECT_EQ(resident.engine.low_memory, std::optional<bool>(false));
  EXPECT_TRUE(resident.notes.empty()) << notes_of(resident);

  s.ram_limit_bytes = low;
  s.low_memory = false;  // asked for all-resident: refused, one line
  try {
    fluxrt::resolve_run(s);
    ADD_FAILURE() << "all-resident accepted below its limit";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::OutOfMemory);
    EXPECT_NE(std::string(e.what()).find("GiB"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }

  s.ram_limit_bytes = low - 1;  // not even one component at a time
  s.low_memory.reset();
  EXPECT_FALSE(error_of(s).empty());
}
