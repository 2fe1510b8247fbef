// Run presets (frontend/presets.h): parsing every key (request fields by their field-table key,
// checked as the flag's value would be), merging a preset over another, the one-line errors naming
// file, line and key, preset lookup by name, the presets shipped in configs/, the `loras:` list and
// `--lora FILE:STRENGTH`, and the size syntax of the field table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "fluxrt/request_fields.h"
#include "fluxrt/run.h"
#include "frontend/presets.h"

namespace fs = std::filesystem;
using fluxrt::Error;
using fluxrt::ErrorCode;
using fluxrt::frontend::parse_preset;
using fluxrt::frontend::Preset;

namespace {

std::string error_of(const std::string& yaml) {
  try {
    parse_preset(yaml, "preset.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The field of the error parse_preset throws ("" for none or an error about no request field).
std::string field_of(const std::string& yaml) {
  try {
    parse_preset(yaml, "preset.yaml");
  } catch (const Error& e) {
    return e.field();
  }
  return "<no error>";
}

}  // namespace

TEST(Presets, ParsesEveryKey) {
  const Preset c = parse_preset(R"(
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
  EXPECT_EQ(c.fields.at("size"), "512x256");
  EXPECT_EQ(c.fields.at("steps"), "8");
  EXPECT_EQ(c.fields.at("guidance"), "3.5");
  EXPECT_EQ(c.fields.at("seed"), "1234567890123");
  EXPECT_EQ(c.fields.at("max_sequence_length"), "256");
  EXPECT_EQ(c.fields.at("batch"), "2");
  EXPECT_EQ(c.fields.at("negative_prompt"), "blurry");
  EXPECT_EQ(c.fields.size(), 7u);
  // Each field's place, for the messages its value may cause later (against the model's limits).
  EXPECT_EQ(c.where.at("steps"), "x.yaml:4: steps");
  EXPECT_EQ(c.where.at("negative_prompt"), "x.yaml:15: negative_prompt");
  EXPECT_EQ(c.dtype, "f32");
  EXPECT_EQ(c.device, "cpu");
  EXPECT_EQ(c.threads, 3);
  EXPECT_EQ(c.low_memory, true);
  EXPECT_EQ(c.out_dir, "my-outputs");
  EXPECT_EQ(c.filename_pattern, "img-{seed}-{index}.png");
  ASSERT_TRUE(c.prompts);
  EXPECT_EQ(*c.prompts, (std::vector<std::string>{"a red fox", ""}));
  EXPECT_EQ(c.source, "x.yaml");

  // Every request field is a preset key, under its field-table key.
  const std::vector<std::string>& keys = fluxrt::frontend::preset_keys();
  EXPECT_EQ(keys.size(), 24u);
  for (const fluxrt::RequestField& f : fluxrt::request_fields())
    EXPECT_NE(std::find(keys.begin(), keys.end(), f.key), keys.end()) << f.key;
}

TEST(Presets, ParsesFlux1AndVaeTilingKeys) {
  const Preset c = parse_preset(
      "init_image: photo.png\nstrength: 0.75\ntrue_cfg: 4\nvae_tiling: on\nmask: m.png\n", "f.yaml");
  EXPECT_EQ(c.init_image, "photo.png");
  EXPECT_EQ(c.mask, "m.png");
  EXPECT_EQ(c.fields.at("strength"), "0.75");
  EXPECT_EQ(c.fields.at("true_cfg"), "4");
  EXPECT_EQ(c.vae_tiling, "on");  // YAML 1.1's boolean spelling stays the word
  EXPECT_EQ(parse_preset("strength: 1\nvae_tiling: off\n", "f.yaml").vae_tiling, "off");
  EXPECT_EQ(parse_preset("vae_tiling: auto\n", "f.yaml").vae_tiling, "auto");

  // Request fields are checked as the flags are (the field table), named by file, line and key.
  std::string e = error_of("strength: 0\n");
  EXPECT_NE(e.find("preset.yaml:1: strength 0 must be a number in (0, 1]"), std::string::npos) << e;
  EXPECT_EQ(field_of("strength: 0\n"), "strength");
  e = error_of("strength: 1.5\n");
  EXPECT_NE(e.find("strength 1.5 must be a number in (0, 1]"), std::string::npos) << e;
  e = error_of("strength: -0.5\n");
  EXPECT_NE(e.find("strength -0.5 must be a number in (0, 1]"), std::string::npos) << e;
  e = error_of("true_cfg: lots\n");
  EXPECT_NE(e.find("preset.yaml:1: true_cfg 'lots' must be a number"), std::string::npos) << e;
  e = error_of("true_cfg: 101\n");  // guidance and true_cfg are in [0, 100]
  EXPECT_NE(e.find("true_cfg 101 must be a number from 0 to 100"), std::string::npos) << e;
  e = error_of("vae_tiling: sometimes\n");
  EXPECT_NE(e.find("'vae_tiling' must be one of auto, on, off, got 'sometimes'"), std::string::npos) << e;
  e = error_of("init_image: \"\"\n");
  EXPECT_NE(e.find("'init_image' must not be empty"), std::string::npos) << e;

  // A preset over another, key by key (demo.yaml over default.yaml; flags over both are
  // resolve_run's, test_run_settings.cpp).
  const Preset over = parse_preset("strength: 0.5\nvae_tiling: off\n", "over.yaml");
  const Preset merged = fluxrt::frontend::merge_presets(c, over);
  EXPECT_EQ(merged.fields.at("strength"), "0.5");
  EXPECT_EQ(merged.where.at("strength"), "over.yaml:1: strength");
  EXPECT_EQ(merged.vae_tiling, "off");
  EXPECT_EQ(merged.init_image, "photo.png");
  EXPECT_EQ(merged.mask, "m.png");
  EXPECT_EQ(merged.fields.at("true_cfg"), "4");
  EXPECT_EQ(merged.where.at("true_cfg"), "f.yaml:3: true_cfg");
  EXPECT_EQ(merged.source, "over.yaml");
}

TEST(Presets, EmptyDocumentNullValuesAndRandomSeed) {
  const Preset empty = parse_preset("", "e.yaml");
  EXPECT_FALSE(empty.model || empty.prompts || empty.dtype || empty.out_dir);
  EXPECT_TRUE(empty.fields.empty());
  const Preset comments = parse_preset("# only a comment\n", "e.yaml");
  EXPECT_TRUE(comments.fields.empty());
  const Preset nulls = parse_preset("steps:\nmodel: ~\nseed: random\nprompts: one prompt\n", "n.yaml");
  EXPECT_EQ(nulls.fields.count("steps"), 0u);  // "key:" with no value leaves the default
  EXPECT_FALSE(nulls.model);
  EXPECT_EQ(nulls.fields.at("seed"), "random");  // drawn when the run is resolved
  EXPECT_EQ(*nulls.prompts, std::vector<std::string>{"one prompt"});
}

TEST(Presets, ErrorsNameFileLineAndKey) {
  std::string e = error_of("steps: 4\nstepz: 4\n");
  EXPECT_NE(e.find("preset.yaml:2"), std::string::npos) << e;
  EXPECT_NE(e.find("'stepz' is not a preset key"), std::string::npos) << e;
  e = error_of("steps: four\n");
  EXPECT_NE(e.find("preset.yaml:1: steps 'four' must be an integer from 1 to 1000"), std::string::npos) << e;
  EXPECT_EQ(field_of("steps: four\n"), "steps");
  e = error_of("steps: 0\n");
  EXPECT_NE(e.find("preset.yaml:1: steps 0 must be an integer from 1 to 1000"), std::string::npos) << e;
  e = error_of("size: 512\n");
  EXPECT_NE(e.find("preset.yaml:1: size '512' must be WIDTHxHEIGHT"), std::string::npos) << e;
  EXPECT_EQ(field_of("size: 512\n"), "size");
  e = error_of("size: [512, 512]\n");
  EXPECT_NE(e.find("'size' must be a single value"), std::string::npos) << e;
  // The bounds every model has: any positive size up to 16384; a model's own multiple (16 for
  // the released VAEs) is checked when the run is resolved against it (test_run_settings.cpp).
  EXPECT_EQ(error_of("size: 100x64\n"), "");
  e = error_of("size: 16385x64\n");
  EXPECT_NE(e.find("preset.yaml:1: size 16385x64: sides must be at most 16384"), std::string::npos) << e;
  e = error_of("guidance: -1\n");
  EXPECT_NE(e.find("guidance -1 must be a number from 0 to 100"), std::string::npos) << e;
  e = error_of("guidance: nan\n");
  EXPECT_NE(e.find("guidance nan must be a number"), std::string::npos) << e;
  e = error_of("batch: 0\n");
  EXPECT_NE(e.find("preset.yaml:1: batch 0 must be an integer from 1 to 256"), std::string::npos) << e;
  e = error_of("max_sequence_length: 5000\n");
  EXPECT_NE(e.find("max_sequence_length 5000 must be an integer from 1 to 4096"), std::string::npos) << e;
  e = error_of("dtype: fp16\n");
  EXPECT_NE(e.find("'dtype' must be one of bf16, f32, int8, got 'fp16'"), std::string::npos) << e;
  e = error_of("low_memory: maybe\n");
  EXPECT_NE(e.find("'low_memory' must be true or false"), std::string::npos) << e;
  e = error_of("threads: -1\n");
  EXPECT_NE(e.find("'threads' must be in [0, 4096], got -1"), std::string::npos) << e;
  e = error_of("seed: -3\n");
  EXPECT_NE(e.find("preset.yaml:1: seed '-3' must be an integer from 0"), std::string::npos) << e;
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
  for (const char* yaml : {"steps: 4\nstepz: 4\n", "steps: 0\n", "- a\n", "steps: [4\n"})
    EXPECT_EQ(error_of(yaml).find('\n'), std::string::npos) << yaml;
}

TEST(Presets, LaterPresetOverridesEarlierOne) {
  const Preset base = parse_preset("steps: 8\nsize: 256x256\nseed: 5\nout: a\nprompts: [p]\n", "base.yaml");
  const Preset over = parse_preset("steps: 2\nout: b\n", "over.yaml");
  const Preset merged = fluxrt::frontend::merge_presets(base, over);
  EXPECT_EQ(merged.fields.at("steps"), "2");
  EXPECT_EQ(merged.out_dir, "b");
  EXPECT_EQ(merged.fields.at("size"), "256x256");  // kept from the base
  EXPECT_EQ(merged.fields.at("seed"), "5");
  EXPECT_EQ(*merged.prompts, std::vector<std::string>{"p"});

  // "seed: random" replaces a fixed seed, and a fixed seed replaces "random".
  const Preset random = parse_preset("seed: random\n", "r.yaml");
  EXPECT_EQ(fluxrt::frontend::merge_presets(base, random).fields.at("seed"), "random");
  EXPECT_EQ(fluxrt::frontend::merge_presets(random, base).fields.at("seed"), "5");
  // An empty preset changes nothing.
  const Preset same = fluxrt::frontend::merge_presets(base, parse_preset("", ""));
  EXPECT_EQ(same.fields, base.fields);
  EXPECT_EQ(same.source, "base.yaml");
}

// The size syntax of the field table (`--size`, `size:`, the server's "size"): WxH of positive
// integers ("x" or "X"), checked against the limits given.
TEST(Presets, SizeFieldTakesWidthxHeight) {
  const fluxrt::RequestField& size = *fluxrt::find_request_field("size");
  fluxrt::GenerateRequest r;
  fluxrt::set_request_field(r, size, std::string("1024x768"), fluxrt::request_limits(), "--size");
  EXPECT_EQ(r.width, 1024);
  EXPECT_EQ(r.height, 768);
  fluxrt::set_request_field(r, size, std::string("64X32"), fluxrt::request_limits(), "--size");
  EXPECT_EQ(r.width, 64);
  EXPECT_EQ(r.height, 32);
  EXPECT_EQ(fluxrt::request_field_text(r, size), "64x32");
  fluxrt::RequestLimits sixteen;  // a model whose sizes are multiples of 16
  sixteen.size_multiple = 16;
  auto expect_refused = [&](const char* bad, const fluxrt::RequestLimits& limits) {
    try {
      fluxrt::set_request_field(r, size, std::string(bad), limits, "--size");
      ADD_FAILURE() << "'" << bad << "' accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << bad;
      EXPECT_EQ(e.field(), "size") << bad;
      EXPECT_EQ(std::string(e.what()).rfind("--size ", 0), 0u) << e.what();
    }
  };
  for (const char* bad : {"", "x", "1024", "1024x", "x768", "0x64", "-64x64", "64x64x64", "64 x 64",
                          "abcxdef", "+64x64", "32768x64"})
    expect_refused(bad, fluxrt::request_limits());
  expect_refused("100x64", sixteen);
  EXPECT_EQ(r.width, 64) << "a refused value left the request as it was";
  // Before a model is known any multiple goes; the model's own is checked against its limits.
  fluxrt::set_request_field(r, size, std::string("100x64"), fluxrt::request_limits(), "--size");
  EXPECT_EQ(r.width, 100);
}

TEST(Presets, FindsPresetsByNameAndPath) {
  const fs::path dir = fs::temp_directory_path() / ("fluxrt_presets_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "mine.yaml")
      << "steps: 3\nmodel: sub/model\ninit_image: sub/init.png\nmask: sub/mask.png\n"
         "loras: [sub/style.safetensors, elsewhere.safetensors]\n";
  fs::create_directories(dir / "sub" / "model");
  std::ofstream(dir / "sub" / "init.png") << "x";
  std::ofstream(dir / "sub" / "mask.png") << "x";
  std::ofstream(dir / "sub" / "style.safetensors") << "x";
  ::setenv("FLUXRT_CONFIG_DIR", dir.c_str(), 1);
  const fs::path found = fluxrt::frontend::find_preset("mine");
  EXPECT_EQ(found, dir / "mine.yaml");
  const Preset c = fluxrt::frontend::load_preset(found);
  EXPECT_EQ(c.fields.at("steps"), "3");
  EXPECT_EQ(c.source, found.string());
  // A relative path that exists beside the preset is made absolute; one that does not stays.
  EXPECT_EQ(fs::path(*c.model), (dir / "sub" / "model").lexically_normal());
  EXPECT_EQ(fs::path(*c.init_image), (dir / "sub" / "init.png").lexically_normal());
  EXPECT_EQ(fs::path(*c.mask), (dir / "sub" / "mask.png").lexically_normal());
  ASSERT_TRUE(c.loras.has_value());
  ASSERT_EQ(c.loras->size(), 2u);
  EXPECT_EQ(fs::path((*c.loras)[0].path), (dir / "sub" / "style.safetensors").lexically_normal());
  EXPECT_EQ((*c.loras)[1].path, "elsewhere.safetensors");
  EXPECT_EQ(fluxrt::frontend::find_preset((dir / "mine.yaml").string()), dir / "mine.yaml");
  EXPECT_EQ(fluxrt::frontend::preset_search_dirs().front(), dir);
  try {
    fluxrt::frontend::find_preset("no-such-preset");
    FAIL() << "expected NotFound";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotFound);
    EXPECT_NE(std::string(e.what()).find("no-such-preset"), std::string::npos);
  }
  EXPECT_THROW(fluxrt::frontend::find_preset("missing.yaml"), Error);
  EXPECT_THROW(fluxrt::frontend::load_preset(dir / "missing.yaml"), Error);
  ::unsetenv("FLUXRT_CONFIG_DIR");
  fs::remove_all(dir);
}

TEST(Presets, ShippedPresetsParse) {
  const fs::path configs = fs::path(FLUXRT_TEST_DATA_DIR).parent_path().parent_path() / "configs";
  int count = 0;
  for (const auto& entry : fs::directory_iterator(configs)) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    EXPECT_NO_THROW(fluxrt::frontend::load_preset(entry.path()));
    ++count;
  }
  EXPECT_GE(count, 4);
  for (const char* name : {"default", "demo", "klein-4b", "klein-base-4b"})
    EXPECT_NO_THROW(fluxrt::frontend::load_preset(configs / (std::string(name) + ".yaml"))) << name;
  // What the resolver applies when no --config is given.
  EXPECT_EQ(fluxrt::frontend::shipped_preset("default"), configs / "default.yaml");
  EXPECT_EQ(fluxrt::frontend::shipped_preset("demo"), configs / "demo.yaml");
  EXPECT_TRUE(fluxrt::frontend::shipped_preset("no-such-preset").empty());
}

TEST(PresetLoras, PresetListAndFlags) {
  const Preset c = parse_preset(
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
    EXPECT_THROW(parse_preset(bad, "p.yaml"), fluxrt::Error) << bad;

  const fluxrt::Lora flag = fluxrt::parse_lora_text("dir/style.safetensors:-0.25");
  EXPECT_EQ(flag.path, "dir/style.safetensors");
  EXPECT_FLOAT_EQ(flag.strength, -0.25f);
  EXPECT_FLOAT_EQ(fluxrt::parse_lora_text("style.safetensors").strength, 1.0f);
  EXPECT_EQ(fluxrt::parse_lora_text("odd:name.safetensors").path, "odd:name.safetensors");
  EXPECT_THROW(fluxrt::parse_lora_text(":0.5"), fluxrt::Error);
}

// Found by fuzz_preset and fuzz_lora_field: a strength past float's range is no strength (it was
// stored as infinity), and what a message quotes from the file is one line.
TEST(PresetLoras, StrengthsFitAFloatAndMessagesStayOneLine) {
  EXPECT_THROW(parse_preset("loras:\n  - {path: a, strength: 1e300}\n", "p.yaml"), fluxrt::Error);
  EXPECT_FLOAT_EQ((*parse_preset("loras:\n  - {path: a, strength: -3e38}\n", "p.yaml").loras)[0].strength,
                  -3e38f);
  const fluxrt::Lora huge = fluxrt::parse_lora_text("style.safetensors:1e300");
  EXPECT_EQ(huge.path, "style.safetensors:1e300");  // as "name:inf": part of the file name
  EXPECT_FLOAT_EQ(huge.strength, 1.0f);
  for (const char* yaml : {"? |\n  two\n  lines\n: 1\n", "\xf0\xf0seed: 1\n", "dtype: |\n  bf\n  16\n",
                           "low_memory: \"\\xff\"\n", "\"\\\xd7\": 1\n"}) {
    std::string message;
    try {
      parse_preset(yaml, "p.yaml");
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_NE(message, "") << yaml;
    EXPECT_EQ(message.find_first_of("\r\n\xf0\xd7"), std::string::npos) << message;
  }
}
