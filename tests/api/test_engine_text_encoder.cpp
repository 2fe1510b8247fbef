// EngineOptions::text_encoder: one file in place of the folder's large text encoder (klein's
// Qwen3, FLUX.1's T5). A BF16 GGUF of the folder's own encoder (tools/reference/
// make_tiny_encoder_gguf.py, llama.cpp's names) and the folder's own .safetensors must give the
// folder's images bit for bit, resident and in low-memory mode; a folder without that encoder then
// works; a wrong or missing file fails when the engine opens, with one line.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>

#include "fluxrt/engine.h"

namespace fs = std::filesystem;

namespace {

const fs::path kData = FLUXRT_TEST_DATA_DIR;
const fs::path kKlein = kData / "models" / "flux2-klein-tiny";
const fs::path kDev = kData / "models" / "flux1-dev-tiny";
const fs::path kQwenGguf = kData / "gguf" / "klein-tiny-qwen3-bf16.gguf";
const fs::path kT5Gguf = kData / "gguf" / "flux1-tiny-t5-bf16.gguf";

fluxrt::GenerateRequest small_request() {
  fluxrt::GenerateRequest r;
  r.prompts = {"a red circle", ""};
  r.width = 64;
  r.height = 64;
  r.steps = 2;
  r.seed = 11;
  return r;
}

fluxrt::EngineOptions with_text_encoder(const fs::path& file, bool low_memory = false) {
  fluxrt::EngineOptions o;
  o.text_encoder = file.string();
  o.low_memory = low_memory;
  return o;
}

void expect_same_images(const fluxrt::GenerateResult& a, const fluxrt::GenerateResult& b) {
  ASSERT_EQ(a.images.size(), b.images.size());
  for (size_t i = 0; i < a.images.size(); ++i)
    EXPECT_EQ(a.images[i].image.rgb, b.images[i].image.rgb) << "image " << i;
}

// `folder` with every entry but `skip` linked into a fresh temporary folder.
fs::path folder_without(const fs::path& folder, const std::string& skip) {
  const fs::path out =
      fs::temp_directory_path() / ("fluxrt_no_" + skip + "_" + std::to_string(std::random_device{}()));
  fs::create_directories(out);
  for (const auto& entry : fs::directory_iterator(folder))
    if (entry.path().filename() != skip)
      fs::create_symlink(fs::absolute(entry.path()), out / entry.path().filename());
  return out;
}

fluxrt::ErrorCode code_of(const std::function<void()>& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const fluxrt::Error& e) {
    if (message) *message = e.what();
    return e.code();
  }
  ADD_FAILURE() << "no fluxrt::Error thrown";
  return fluxrt::ErrorCode::Internal;
}

TEST(EngineTextEncoder, KleinQwen3FromGgufOrSafetensorsIsTheFolders) {
  const fluxrt::GenerateResult folder = fluxrt::Engine(kKlein.string()).generate(small_request());
  expect_same_images(fluxrt::Engine(kKlein.string(), with_text_encoder(kQwenGguf)).generate(small_request()),
                     folder);
  expect_same_images(fluxrt::Engine(kKlein.string(), with_text_encoder(kQwenGguf, /*low_memory=*/true))
                         .generate(small_request()),
                     folder);
  const fs::path safetensors = kKlein / "text_encoder" / "model.safetensors";
  expect_same_images(
      fluxrt::Engine(kKlein.string(), with_text_encoder(safetensors)).generate(small_request()), folder);
  const fs::path bare = folder_without(kKlein, "text_encoder");
  expect_same_images(fluxrt::Engine(bare.string(), with_text_encoder(kQwenGguf)).generate(small_request()),
                     folder);
  EXPECT_EQ(code_of([&] { fluxrt::Engine e(bare.string()); }), fluxrt::ErrorCode::NotFound)
      << "without --text-encoder the folder's own is needed";
  fs::remove_all(bare);
}

TEST(EngineTextEncoder, Flux1T5FromGgufOrSafetensorsIsTheFolders) {
  const fluxrt::GenerateResult folder = fluxrt::Engine(kDev.string()).generate(small_request());
  expect_same_images(fluxrt::Engine(kDev.string(), with_text_encoder(kT5Gguf)).generate(small_request()),
                     folder);
  expect_same_images(fluxrt::Engine(kDev.string(), with_text_encoder(kT5Gguf, /*low_memory=*/true))
                         .generate(small_request()),
                     folder);
  const fs::path bare = folder_without(kDev, "text_encoder_2");
  expect_same_images(fluxrt::Engine(bare.string(), with_text_encoder(kT5Gguf)).generate(small_request()),
                     folder);
  fs::remove_all(bare);
}

// The GGUF-only set-up users run: a quantized transformer file, a GGUF text encoder and a folder
// for the tokenizer, VAE and scheduler.
TEST(EngineTextEncoder, GgufTransformerWithGgufTextEncoder) {
  const std::string transformer = (kData / "gguf" / "flux2-klein-tiny-q8_0.gguf").string();
  fluxrt::EngineOptions plain;
  plain.components = kKlein.string();
  fluxrt::EngineOptions both = with_text_encoder(kQwenGguf);
  both.components = kKlein.string();
  expect_same_images(fluxrt::Engine(transformer, both).generate(small_request()),
                     fluxrt::Engine(transformer, plain).generate(small_request()));
}

TEST(EngineTextEncoder, WrongOrMissingFilesFailWhenTheEngineOpens) {
  std::string message;
  // klein given a T5, FLUX.1 given a Qwen3: refused before any request, low-memory mode included.
  EXPECT_EQ(code_of([&] { fluxrt::Engine e(kKlein.string(), with_text_encoder(kT5Gguf, true)); }, &message),
            fluxrt::ErrorCode::Unsupported);
  EXPECT_NE(message.find("not qwen3"), std::string::npos) << message;
  EXPECT_EQ(code_of([&] { fluxrt::Engine e(kDev.string(), with_text_encoder(kQwenGguf, true)); }, &message),
            fluxrt::ErrorCode::Unsupported);
  EXPECT_NE(message.find("not t5encoder"), std::string::npos) << message;
  // A Qwen3 of another width than the transformer reads (the goldens' GQA model: hidden 32).
  EXPECT_EQ(code_of(
                [&] {
                  fluxrt::Engine e(kKlein.string(),
                                   with_text_encoder(kData / "gguf" / "qwen3-gqa-q8_0.gguf"));
                },
                &message),
            fluxrt::ErrorCode::Unsupported);
  EXPECT_NE(message.find("does not fit the transformer"), std::string::npos) << message;
  EXPECT_EQ(
      code_of([&] { fluxrt::Engine e(kKlein.string(), with_text_encoder(kData / "gguf" / "missing.gguf")); },
              &message),
      fluxrt::ErrorCode::NotFound);
  EXPECT_NE(message.find("missing.gguf"), std::string::npos) << message;
}

}  // namespace
