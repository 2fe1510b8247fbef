// Run presets (runtime/run_config.h): parsing every key, merging flags over a preset, the
// one-line errors naming file and key, preset lookup by name, and the presets shipped in configs/.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "runtime/run_config.h"

namespace fs = std::filesystem;
using fluxrt::Error;
using fluxrt::ErrorCode;
using fluxrt::runtime::RunConfig;
using fluxrt::runtime::parse_run_config;

namespace {

std::string error_of(const std::string& yaml) {
  try {
    parse_run_config(yaml, "preset.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(RunConfig, ParsesEveryKey) {
  const RunConfig c = parse_run_config(R"(
model: org/name
size: 512x256
steps: 8
guidance: 3.5
seed: 1234567890123
max_sequence_length: 256
dtype: f32
device: cpu
threads: 3
low_memory: true
batch: 2
out: my-outputs
filename: "img-{seed}-{index}.png"
negative_prompt: blurry
prompts:
  - a red fox
  - ""
)",
                                       "x.yaml");
  EXPECT_EQ(c.model, "org/name");
  EXPECT_EQ(c.width, 512);
  EXPECT_EQ(c.height, 256);
  EXPECT_EQ(c.steps, 8);
  EXPECT_FLOAT_EQ(*c.guidance, 3.5f);
  EXPECT_EQ(c.seed, 1234567890123ull);
  EXPECT_FALSE(c.random_seed);
  EXPECT_EQ(c.max_sequence_length, 256);
  EXPECT_EQ(c.dtype, "f32");
  EXPECT_EQ(c.device, "cpu");
  EXPECT_EQ(c.threads, 3);
  EXPECT_EQ(c.low_memory, true);
  EXPECT_EQ(c.batch, 2);
  EXPECT_EQ(c.out_dir, "my-outputs");
  EXPECT_EQ(c.filename_pattern, "img-{seed}-{index}.png");
  EXPECT_EQ(c.negative_prompt, "blurry");
  ASSERT_TRUE(c.prompts);
  EXPECT_EQ(*c.prompts, (std::vector<std::string>{"a red fox", ""}));
  EXPECT_EQ(fluxrt::runtime::run_config_keys().size(), 20u);  // and loras: RunConfigLoras below
}

TEST(RunConfig, ParsesFlux1AndVaeTilingKeys) {
  const RunConfig c = parse_run_config("init_image: photo.png\nstrength: 0.75\ntrue_cfg: 4\nvae_tiling: on\n", "f.yaml");
  EXPECT_EQ(c.init_image, "photo.png");
  EXPECT_FLOAT_EQ(*c.strength, 0.75f);
  EXPECT_FLOAT_EQ(*c.true_cfg, 4.0f);
  EXPECT_EQ(c.vae_tiling, "on");  // YAML 1.1's boolean spelling stays the word
  EXPECT_EQ(parse_run_config("strength: 1\nvae_tiling: off\n", "f.yaml").vae_tiling, "off");
  EXPECT_EQ(parse_run_config("vae_tiling: auto\n", "f.yaml").vae_tiling, "auto");

  std::string e = error_of("strength: 0\n");
  EXPECT_NE(e.find("preset.yaml:1: 'strength' must be in (0, 1], got 0"), std::string::npos) << e;
  e = error_of("strength: 1.5\n");
  EXPECT_NE(e.find("'strength' must be in (0, 1]"), std::string::npos) << e;
  e = error_of("strength: -0.5\n");
  EXPECT_NE(e.find("'strength' must not be negative"), std::string::npos) << e;
  e = error_of("true_cfg: lots\n");
  EXPECT_NE(e.find("'true_cfg' must be a number"), std::string::npos) << e;
  e = error_of("vae_tiling: sometimes\n");
  EXPECT_NE(e.find("'vae_tiling' must be one of auto, on, off, got 'sometimes'"), std::string::npos) << e;
  e = error_of("init_image: \"\"\n");
  EXPECT_NE(e.find("'init_image' must not be empty"), std::string::npos) << e;

  // Flags over the preset, key by key.
  RunConfig flags;
  flags.strength = 0.5f;
  flags.vae_tiling = "off";
  const RunConfig merged = fluxrt::runtime::merge_run_config(c, flags);
  EXPECT_FLOAT_EQ(*merged.strength, 0.5f);
  EXPECT_EQ(merged.vae_tiling, "off");
  EXPECT_EQ(merged.init_image, "photo.png");
  EXPECT_FLOAT_EQ(*merged.true_cfg, 4.0f);
}

TEST(RunConfig, EmptyDocumentNullValuesAndRandomSeed) {
  const RunConfig empty = parse_run_config("", "e.yaml");
  EXPECT_FALSE(empty.model || empty.width || empty.steps || empty.seed || empty.prompts);
  const RunConfig comments = parse_run_config("# only a comment\n", "e.yaml");
  EXPECT_FALSE(comments.steps);
  const RunConfig nulls = parse_run_config("steps:\nmodel: ~\nseed: random\nprompts: one prompt\n", "n.yaml");
  EXPECT_FALSE(nulls.steps);
  EXPECT_FALSE(nulls.model);
  EXPECT_TRUE(nulls.random_seed);
  EXPECT_FALSE(nulls.seed);
  EXPECT_EQ(*nulls.prompts, std::vector<std::string>{"one prompt"});
}

TEST(RunConfig, ErrorsNameFileLineAndKey) {
  std::string e = error_of("steps: 4\nstepz: 4\n");
  EXPECT_NE(e.find("preset.yaml:2"), std::string::npos) << e;
  EXPECT_NE(e.find("'stepz' is not a preset key"), std::string::npos) << e;
  e = error_of("steps: four\n");
  EXPECT_NE(e.find("preset.yaml:1: 'steps' must be an integer, got 'four'"), std::string::npos) << e;
  e = error_of("steps: 0\n");
  EXPECT_NE(e.find("'steps' must be in [1, 1000]"), std::string::npos) << e;
  e = error_of("size: 512\n");
  EXPECT_NE(e.find("'size' must be WxH"), std::string::npos) << e;
  e = error_of("size: [512, 512]\n");
  EXPECT_NE(e.find("'size' must be a single value"), std::string::npos) << e;
  e = error_of("guidance: -1\n");
  EXPECT_NE(e.find("'guidance' must not be negative"), std::string::npos) << e;
  e = error_of("guidance: nan\n");
  EXPECT_NE(e.find("'guidance' must be a number"), std::string::npos) << e;
  e = error_of("dtype: fp16\n");
  EXPECT_NE(e.find("'dtype' must be one of bf16, f32, got 'fp16'"), std::string::npos) << e;
  e = error_of("low_memory: maybe\n");
  EXPECT_NE(e.find("'low_memory' must be true or false"), std::string::npos) << e;
  e = error_of("seed: -3\n");
  EXPECT_NE(e.find("'seed' must be an integer"), std::string::npos) << e;
  e = error_of("prompts: []\n");
  EXPECT_NE(e.find("'prompts' must hold at least one prompt"), std::string::npos) << e;
  e = error_of("prompts: {a: b}\n");
  EXPECT_NE(e.find("'prompts' must be a string or a list"), std::string::npos) << e;
  e = error_of("- a\n- b\n");
  EXPECT_NE(e.find("a preset must be a map"), std::string::npos) << e;
  e = error_of("steps: [4\n");
  EXPECT_NE(e.find("invalid YAML"), std::string::npos) << e;
  e = error_of("out: \"\"\n");
  EXPECT_NE(e.find("'out' must not be empty"), std::string::npos) << e;
}

TEST(RunConfig, FlagsOverridePreset) {
  const RunConfig preset = parse_run_config("steps: 8\nsize: 256x256\nseed: 5\nout: a\nprompts: [p]\n", "p.yaml");
  RunConfig flags;
  flags.steps = 2;
  flags.out_dir = "b";
  const RunConfig merged = fluxrt::runtime::merge_run_config(preset, flags);
  EXPECT_EQ(merged.steps, 2);
  EXPECT_EQ(merged.out_dir, "b");
  EXPECT_EQ(merged.width, 256);  // kept from the preset
  EXPECT_EQ(merged.seed, 5u);
  EXPECT_EQ(*merged.prompts, std::vector<std::string>{"p"});

  // An explicit seed replaces "seed: random", and "random" replaces a fixed seed.
  const RunConfig random_preset = parse_run_config("seed: random\n", "r.yaml");
  RunConfig seed_flag;
  seed_flag.seed = 9;
  const RunConfig fixed = fluxrt::runtime::merge_run_config(random_preset, seed_flag);
  EXPECT_EQ(fixed.seed, 9u);
  EXPECT_FALSE(fixed.random_seed);
  const RunConfig random = fluxrt::runtime::merge_run_config(preset, random_preset);
  EXPECT_FALSE(random.seed);
  EXPECT_TRUE(random.random_seed);
}

TEST(RunConfig, ParseSize) {
  int w = 0, h = 0;
  fluxrt::runtime::parse_size("1024x768", "--size", &w, &h);
  EXPECT_EQ(w, 1024);
  EXPECT_EQ(h, 768);
  fluxrt::runtime::parse_size("64X32", "--size", &w, &h);
  EXPECT_EQ(w, 64);
  EXPECT_EQ(h, 32);
  for (const char* bad : {"", "x", "1024", "1024x", "x768", "0x64", "-64x64", "64x64x64", "64 x 64", "abcxdef"})
    EXPECT_THROW(fluxrt::runtime::parse_size(bad, "--size", &w, &h), Error) << bad;
}

TEST(RunConfig, FindsPresetsByNameAndPath) {
  const fs::path dir = fs::temp_directory_path() / ("fluxrt_presets_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "mine.yaml") << "steps: 3\nmodel: sub/model\ninit_image: sub/init.png\n";
  fs::create_directories(dir / "sub" / "model");
  std::ofstream(dir / "sub" / "init.png") << "x";
  ::setenv("FLUXRT_CONFIG_DIR", dir.c_str(), 1);
  const fs::path found = fluxrt::runtime::find_preset("mine");
  EXPECT_EQ(found, dir / "mine.yaml");
  const RunConfig c = fluxrt::runtime::load_run_config(found);
  EXPECT_EQ(c.steps, 3);
  // A relative model path that exists beside the preset is made absolute.
  EXPECT_EQ(fs::path(*c.model), (dir / "sub" / "model").lexically_normal());
  EXPECT_EQ(fs::path(*c.init_image), (dir / "sub" / "init.png").lexically_normal());
  EXPECT_EQ(fluxrt::runtime::find_preset((dir / "mine.yaml").string()), dir / "mine.yaml");
  try {
    fluxrt::runtime::find_preset("no-such-preset");
    FAIL() << "expected NotFound";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotFound);
    EXPECT_NE(std::string(e.what()).find("no-such-preset"), std::string::npos);
  }
  EXPECT_THROW(fluxrt::runtime::find_preset("missing.yaml"), Error);
  ::unsetenv("FLUXRT_CONFIG_DIR");
  fs::remove_all(dir);
}

TEST(RunConfig, ShippedPresetsParse) {
  const fs::path configs = fs::path(FLUXRT_TEST_DATA_DIR).parent_path().parent_path() / "configs";
  int count = 0;
  for (const auto& entry : fs::directory_iterator(configs)) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    EXPECT_NO_THROW(fluxrt::runtime::load_run_config(entry.path()));
    ++count;
  }
  EXPECT_GE(count, 4);
  for (const char* name : {"default", "demo", "klein-4b", "klein-base-4b"})
    EXPECT_NO_THROW(fluxrt::runtime::load_run_config(configs / (std::string(name) + ".yaml"))) << name;
}

TEST(RunConfigLoras, PresetListAndFlags) {
  const fluxrt::runtime::RunConfig c = fluxrt::runtime::parse_run_config(
      "loras:\n  - {path: a.safetensors, strength: -0.5}\n  - b.safetensors\n  - path: c.safetensors\n",
      "p.yaml");
  ASSERT_TRUE(c.loras.has_value());
  ASSERT_EQ(c.loras->size(), 3u);
  EXPECT_EQ((*c.loras)[0].path, "a.safetensors");
  EXPECT_FLOAT_EQ((*c.loras)[0].strength, -0.5f);
  EXPECT_EQ((*c.loras)[1].path, "b.safetensors");
  EXPECT_FLOAT_EQ((*c.loras)[1].strength, 1.0f);
  EXPECT_EQ((*c.loras)[2].path, "c.safetensors");
  for (const char* bad : {"loras: x.safetensors\n", "loras:\n  - {path: a, weight: 2}\n",
                          "loras:\n  - {strength: 2}\n", "loras:\n  - {path: a, strength: lots}\n"})
    EXPECT_THROW(fluxrt::runtime::parse_run_config(bad, "p.yaml"), fluxrt::Error) << bad;

  const auto flag = fluxrt::runtime::parse_lora_flag("dir/style.safetensors:-0.25");
  EXPECT_EQ(flag.path, "dir/style.safetensors");
  EXPECT_FLOAT_EQ(flag.strength, -0.25f);
  EXPECT_FLOAT_EQ(fluxrt::runtime::parse_lora_flag("style.safetensors").strength, 1.0f);
  EXPECT_EQ(fluxrt::runtime::parse_lora_flag("odd:name.safetensors").path, "odd:name.safetensors");
  EXPECT_THROW(fluxrt::runtime::parse_lora_flag(":0.5"), fluxrt::Error);
}
