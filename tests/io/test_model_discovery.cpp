// Model discovery: the checked-in tiny models (tools/reference/make_tiny_models.py) resolved as
// folders and files, weight file picking, the errors, and a Hugging Face cache laid out like
// huggingface_hub writes it (blobs + relative symlinks). Which variant a model is: the pipeline
// kinds' (tests/pipelines/test_variant_detection.cpp); `fluxrt info`'s statistics:
// tests/unit/test_inspect_model.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/model_discovery.h"
#include "support/model_files.h"

namespace fs = std::filesystem;
using fluxrt::Error;
using fluxrt::ErrorCode;
using fluxrt::test::make_hub_repo;
using fluxrt::test::message_of;
using fluxrt::test::TempDir;
using fluxrt::test::write_text;
using namespace fluxrt::io;

namespace {

const fs::path kModels = fs::path(FLUXRT_TEST_DATA_DIR) / "models";
const fs::path kKleinFolder = kModels / "flux2-klein-tiny";

void expect_one_line(const std::string& message) { EXPECT_EQ(message.find('\n'), std::string::npos) << message; }

}  // namespace

// ------------------------------------------------------------------------------------------------
// The checked-in tiny models

TEST(ModelDiscovery, TinyKleinPipelineFolder) {
  const ResolvedModel m = resolve_model(kKleinFolder.string(), "/nonexistent-hub");
  EXPECT_EQ(m.source, ModelSource::PipelineFolder);
  EXPECT_EQ(m.pipeline_class, "Flux2KleinPipeline");
  ASSERT_TRUE(m.is_distilled.has_value());
  EXPECT_TRUE(*m.is_distilled);
  ASSERT_EQ(m.components.size(), 5u);
  struct Expect {
    const char* name;
    const char* library;
    const char* class_name;
    const char* weights;  // file name, or "" for none
  };
  const Expect expected[] = {
      {"scheduler", "diffusers", "FlowMatchEulerDiscreteScheduler", ""},
      {"text_encoder", "transformers", "Qwen3ForCausalLM", "model.safetensors"},
      {"tokenizer", "transformers", "Qwen2Tokenizer", ""},
      {"transformer", "diffusers", "Flux2Transformer2DModel", "diffusion_pytorch_model.safetensors"},
      {"vae", "diffusers", "AutoencoderKLFlux2", "diffusion_pytorch_model.safetensors"},
  };
  for (const Expect& e : expected) {
    const ModelComponent* c = m.find(e.name);
    ASSERT_NE(c, nullptr) << e.name;
    EXPECT_EQ(c->library, e.library);
    EXPECT_EQ(c->class_name, e.class_name);
    EXPECT_TRUE(c->present);
    EXPECT_EQ(fs::path(c->folder), kKleinFolder / e.name);
    if (*e.weights)
      EXPECT_EQ(fs::path(c->weights).filename(), e.weights) << e.name;
    else
      EXPECT_TRUE(c->weights.empty()) << e.name;
  }
  EXPECT_EQ(m.transformer(), m.find("transformer"));
}

TEST(ModelDiscovery, WeightFilePicking) {
  TempDir tmp;
  // fp16/bf16 "variant" copies next to the main file are left out.
  const fs::path folder = tmp.path() / "transformer";
  fs::create_directories(folder);
  const fs::path src = kModels / "flux1-dev-tiny-transformer";
  fs::copy_file(src / "config.json", folder / "config.json");
  fs::copy_file(src / "diffusion_pytorch_model.safetensors", folder / "diffusion_pytorch_model.safetensors");
  fs::copy_file(src / "diffusion_pytorch_model.safetensors", folder / "diffusion_pytorch_model.fp16.safetensors");
  ResolvedModel m = resolve_model(folder.string(), "/nonexistent-hub");
  EXPECT_EQ(fs::path(m.transformer()->weights).filename(), "diffusion_pytorch_model.safetensors");

  // Only a variant file: that one.
  fs::remove(folder / "diffusion_pytorch_model.safetensors");
  m = resolve_model(folder.string(), "/nonexistent-hub");
  EXPECT_EQ(fs::path(m.transformer()->weights).filename(), "diffusion_pytorch_model.fp16.safetensors");

  // Shards: the index.
  const fs::path sharded = fs::path(FLUXRT_TEST_DATA_DIR) / "safetensors" / "good" / "sharded";
  if (fs::is_directory(sharded)) {
    m = resolve_model(sharded.string(), "/nonexistent-hub");
    EXPECT_EQ(m.source, ModelSource::ComponentFolder);
    EXPECT_EQ(fs::path(m.components[0].weights).filename(), "model.safetensors.index.json");
  }
}

// ------------------------------------------------------------------------------------------------
// Errors

TEST(ModelDiscovery, NotFoundAndNotAModel) {
  TempDir tmp;
  ErrorCode code{};
  std::string msg = message_of([&] { resolve_model((tmp.path() / "missing" / "x").string(), "/nonexistent-hub"); }, &code);
  EXPECT_EQ(code, ErrorCode::NotFound);
  EXPECT_NE(msg.find("no such file or folder"), std::string::npos) << msg;
  expect_one_line(msg);

  const fs::path empty = tmp.path() / "empty";
  fs::create_directories(empty);
  write_text(empty / "notes.txt", "hello");
  msg = message_of([&] { resolve_model(empty.string(), "/nonexistent-hub"); }, &code);
  EXPECT_EQ(code, ErrorCode::Format);
  EXPECT_NE(msg.find("not a model folder"), std::string::npos) << msg;
  EXPECT_NE(msg.find(empty.string()), std::string::npos) << msg;
  expect_one_line(msg);

  msg = message_of([&] { resolve_model((empty / "notes.txt").string(), "/nonexistent-hub"); }, &code);
  EXPECT_EQ(code, ErrorCode::InvalidArgument);
  expect_one_line(msg);

  const fs::path bad_index = tmp.path() / "bad";
  write_text(bad_index / "model_index.json", "{\"_class_name\": \n oops");
  msg = message_of([&] { resolve_model(bad_index.string(), "/nonexistent-hub"); }, &code);
  EXPECT_EQ(code, ErrorCode::Format);
  EXPECT_NE(msg.find("model_index.json"), std::string::npos) << msg;
  expect_one_line(msg);

  msg = message_of([&] { resolve_model("", "/nonexistent-hub"); }, &code);
  EXPECT_EQ(code, ErrorCode::InvalidArgument);
}

// ------------------------------------------------------------------------------------------------
// Hugging Face cache

TEST(ModelDiscovery, HubCacheRefsMainAndRevisions) {
  TempDir tmp;
  const fs::path hub = tmp.path() / "hub";
  const std::string rev = "0123456789abcdef0123456789abcdef01234567";
  const fs::path snapshot =
      make_hub_repo(hub, "models--black-forest-labs--FLUX.2-klein-4B", kKleinFolder, rev, /*write_ref_main=*/true);
  ASSERT_TRUE(fs::is_symlink(snapshot / "transformer" / "diffusion_pytorch_model.safetensors"));

  const std::vector<std::string> specs = {"black-forest-labs/FLUX.2-klein-4B", "black-forest-labs/FLUX.2-klein-4B@main",
                                         "black-forest-labs/FLUX.2-klein-4B@" + rev};
  for (const std::string& spec : specs) {
    SCOPED_TRACE(spec);
    const ResolvedModel m = resolve_model(spec, hub.string());
    EXPECT_EQ(fs::path(m.path), snapshot);
    EXPECT_EQ(m.repo_id, "black-forest-labs/FLUX.2-klein-4B");
    EXPECT_EQ(m.revision, rev);
    EXPECT_EQ(m.spec, spec);
    EXPECT_EQ(m.source, ModelSource::PipelineFolder);
    ASSERT_NE(m.transformer(), nullptr);
    EXPECT_FALSE(m.transformer()->weights.empty());
  }
  ErrorCode code{};
  std::string msg = message_of([&] { resolve_model("black-forest-labs/FLUX.2-klein-4B@v9", hub.string()); }, &code);
  EXPECT_EQ(code, ErrorCode::NotFound);
  EXPECT_NE(msg.find("no such revision"), std::string::npos) << msg;
  EXPECT_NE(msg.find(rev), std::string::npos) << msg;  // lists the snapshots it has
  expect_one_line(msg);
}

TEST(ModelDiscovery, HubCacheWithoutRefsMain) {
  TempDir tmp;
  const fs::path hub = tmp.path() / "hub";
  const fs::path only = make_hub_repo(hub, "models--org--single", kModels / "flux1-dev-tiny-transformer", "aaaa", false);
  ResolvedModel m = resolve_model("org/single", hub.string());
  EXPECT_EQ(fs::path(m.path), only);
  EXPECT_EQ(m.source, ModelSource::ComponentFolder);
  EXPECT_EQ(m.components[0].class_name, "FluxTransformer2DModel");

  // Several snapshots and no refs/main: the newest one.
  make_hub_repo(hub, "models--org--multi", kModels / "flux1-dev-tiny-transformer", "old", false);
  const fs::path newer = make_hub_repo(hub, "models--org--multi", kModels / "flux1-schnell-tiny-transformer", "new", false);
  fs::last_write_time(hub / "models--org--multi" / "snapshots" / "old",
                      fs::last_write_time(newer) - std::chrono::hours(1));
  m = resolve_model("org/multi", hub.string());
  EXPECT_EQ(fs::path(m.path), newer);

  // refs/main naming a snapshot that is not there (a partial download) also falls back.
  write_text(hub / "models--org--single" / "refs" / "main", "ffff\n");
  EXPECT_EQ(fs::path(resolve_model("org/single", hub.string()).path), only);
}

TEST(ModelDiscovery, HubCacheMissing) {
  TempDir tmp;
  ErrorCode code{};
  const std::string msg = message_of([&] { resolve_model("black-forest-labs/FLUX.2-klein-9B", tmp.path().string()); }, &code);
  EXPECT_EQ(code, ErrorCode::NotFound);
  EXPECT_NE(msg.find("Hugging Face cache"), std::string::npos) << msg;
  EXPECT_NE(msg.find((tmp.path() / "models--black-forest-labs--FLUX.2-klein-9B").string()), std::string::npos) << msg;
  expect_one_line(msg);

  // A repo folder with no snapshot at all.
  fs::create_directories(tmp.path() / "models--org--empty" / "snapshots");
  const std::string empty = message_of([&] { resolve_model("org/empty", tmp.path().string()); }, &code);
  EXPECT_EQ(code, ErrorCode::NotFound);
  EXPECT_NE(empty.find("no snapshot"), std::string::npos) << empty;

  // Not a repo id either: a plain missing path.
  const std::string path_msg = message_of([&] { resolve_model("a/b/c", tmp.path().string()); }, &code);
  EXPECT_NE(path_msg.find("no such file or folder"), std::string::npos) << path_msg;
}

TEST(ModelDiscovery, HubCacheDirFromEnvironment) {
  struct SavedEnv {
    std::string name;
    std::optional<std::string> value;
  };
  std::vector<SavedEnv> saved;
  for (const char* name : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HOME"}) {
    const char* v = std::getenv(name);
    saved.push_back({name, v ? std::optional<std::string>(v) : std::nullopt});
    ::unsetenv(name);
  }
  ::setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(hf_hub_cache_dir(), "/home/someone/.cache/huggingface/hub");
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(hf_hub_cache_dir(), "/xdg/huggingface/hub");
  ::setenv("HF_HOME", "/data/hf", 1);
  EXPECT_EQ(hf_hub_cache_dir(), "/data/hf/hub");
  ::setenv("HUGGINGFACE_HUB_CACHE", "/legacy/hub", 1);
  EXPECT_EQ(hf_hub_cache_dir(), "/legacy/hub");
  ::setenv("HF_HUB_CACHE", "/fast/hub", 1);
  EXPECT_EQ(hf_hub_cache_dir(), "/fast/hub");
  for (const SavedEnv& s : saved) {
    if (s.value)
      ::setenv(s.name.c_str(), s.value->c_str(), 1);
    else
      ::unsetenv(s.name.c_str());
  }
}
