// CLIP BPE tokenizer (FLUX.1 `tokenizer/`) against transformers' CLIPTokenizer: the CLIP rows of
// shared/data/tokenizers/reference_vectors.json and the corpus and pipeline encodings made by
// tools/reference/make_clip_tokenizer_corpus.py (all checked in under tests/data/tokenizers/clip/).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "core/error.h"
#include "tokenizers/clip_tokenizer.h"

namespace fluxrt::tokenizers {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kClipDir = fs::path(FLUXRT_TEST_DATA_DIR) / "tokenizers" / "clip";

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

json read_json(const fs::path& path) { return json::parse(read_text(path)); }

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

const ClipTokenizer& clip() {
  static const ClipTokenizer tokenizer = ClipTokenizer::from_directory(kClipDir);
  return tokenizer;
}

const json& corpus() {
  static const json data = read_json(kClipDir / "clip_corpus.json");
  return data;
}

std::vector<int32_t> with_markers(const std::vector<int32_t>& ids) {
  std::vector<int32_t> out{49406};
  out.insert(out.end(), ids.begin(), ids.end());
  out.push_back(49407);
  return out;
}

// "15.0.0" < "16.0" compares the dotted numbers.
bool version_less(std::string_view a, std::string_view b) {
  auto parts = [](std::string_view v) {
    std::vector<int> out;
    size_t pos = 0;
    while (pos < v.size()) {
      size_t dot = v.find('.', pos);
      if (dot == std::string_view::npos) dot = v.size();
      out.push_back(std::stoi(std::string(v.substr(pos, dot - pos))));
      pos = dot + 1;
    }
    while (out.size() < 3) out.push_back(0);
    return out;
  };
  return parts(a) < parts(b);
}

void expect_error(ErrorCode code, const std::function<void()>& body) {
  try {
    body();
    ADD_FAILURE() << "expected fluxrt::Error " << error_code_name(code);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one-line message: " << e.what();
  }
}

TEST(ClipTokenizer, LoadsTheGenuineFiles) {
  const ClipTokenizer& tok = clip();
  EXPECT_EQ(tok.vocab_size(), 49408u);
  EXPECT_EQ(tok.merge_count(), 48894u);
  EXPECT_EQ(tok.bos_id(), 49406);
  EXPECT_EQ(tok.eos_id(), 49407);
  EXPECT_EQ(tok.pad_id(), 49407);  // FLUX.1's tokenizer_config: pad_token "<|endoftext|>"
  EXPECT_EQ(tok.token_to_id("a</w>"), 320);
  EXPECT_EQ(tok.id_to_token(2368), "cat</w>");
  EXPECT_EQ(tok.id_to_token(49406), "<|startoftext|>");
  EXPECT_TRUE(tok.id_to_token(49408).empty());
}

TEST(ClipTokenizer, ReferenceVectors) {
  const json data = read_json(kClipDir / "reference_vectors_clip.json");
  ASSERT_GE(data["clip"].size(), 10u);
  for (const json& row : data["clip"]) {
    const std::string text = row["text"];
    EXPECT_EQ(with_markers(clip().encode(text)), row["ids"].get<std::vector<int32_t>>()) << text;
  }
}

TEST(ClipTokenizer, CorpusMatchesTransformers) {
  const json& data = corpus();
  ASSERT_EQ(data["max_length"], kClipMaxLength);
  size_t checked = 0, invalid = 0, newer_unicode = 0;
  for (const json& row : data["cases"]) {
    if (row.contains("text_hex")) {
      const std::string raw = from_hex(row["text_hex"]);
      expect_error(ErrorCode::InvalidArgument, [&] { clip().encode(raw); });
      expect_error(ErrorCode::InvalidArgument, [&] { clip().encode_padded(raw); });
      ++invalid;
      continue;
    }
    const std::string text = row["text"];
    if (row.contains("unicode") && version_less(clip_unicode_version(), row["unicode"].get<std::string>())) {
      ++newer_unicode;  // characters our Unicode tables do not know yet
      continue;
    }
    const auto expected = row["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(clip().encode(text), expected) << row["category"] << ": " << text;
    const size_t kept = row["kept_77"];
    std::vector<int32_t> padded{49406};
    padded.insert(padded.end(), expected.begin(), expected.begin() + static_cast<std::ptrdiff_t>(kept));
    padded.push_back(49407);
    padded.resize(kClipMaxLength, 49407);
    bool truncated = true;
    EXPECT_EQ(clip().encode_padded(text, kClipMaxLength, truncated), padded) << text;
    EXPECT_EQ(truncated, expected.size() > kept) << text;
    ++checked;
  }
  EXPECT_GE(checked, 300u);
  EXPECT_GT(invalid, 0u);
  if (newer_unicode > 0) {
    std::printf("note: %zu rows need Unicode tables newer than %s and were not compared\n", newer_unicode,
                std::string(clip_unicode_version()).c_str());
  }
}

TEST(ClipTokenizer, FluxPipelineInputIds) {
  const json data = read_json(kClipDir / "clip_flux_pipeline.json");
  ASSERT_GE(data["cases"].size(), 50u);
  for (const json& row : data["cases"]) {
    const std::string prompt = row["prompt"];
    EXPECT_EQ(clip().encode_padded(prompt), row["input_ids"].get<std::vector<int32_t>>()) << prompt;
  }
}

TEST(ClipTokenizer, DecodeLikeTransformers) {
  for (const json& row : corpus()["decode"]) {
    const auto ids = row["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(clip().decode(ids), row["text"].get<std::string>());
  }
  const std::vector<int32_t> unknown{320, 49408};
  expect_error(ErrorCode::InvalidArgument, [&] { clip().decode(unknown); });
}

TEST(ClipTokenizer, Normalisation) {
  EXPECT_EQ(clip_normalize("  A\tPhoto\n\nOF  a\u00a0Cat "), " a photo of a cat ");
  EXPECT_EQ(clip_normalize("\u03a3\u0391\u03a3"), "\u03c3\u03b1\u03c3");  // no final sigma
  EXPECT_EQ(clip_normalize("\u0130"), "i\u0307");                          // full lower case of dotted I
  EXPECT_EQ(clip_normalize("Cafe\u0301"), "caf\u00e9");                    // NFC before lower-casing
  EXPECT_EQ(clip_normalize("a\u200bb\u180ec"), "a\u200bb\u180ec");         // not White_Space: kept
  EXPECT_EQ(clip_normalize("a\u0085\u2028\u3000b"), "a b");
}

TEST(ClipTokenizer, PaddingAndTruncation) {
  const ClipTokenizer& tok = clip();
  const auto empty = tok.encode_padded("");
  ASSERT_EQ(empty.size(), 77u);
  EXPECT_EQ(empty[0], 49406);
  for (size_t i = 1; i < empty.size(); ++i) EXPECT_EQ(empty[i], 49407);
  bool truncated = false;
  const auto short_row = tok.encode_padded("a photo of a cat", 5, truncated);
  EXPECT_EQ(short_row, (std::vector<int32_t>{49406, 320, 1125, 539, 49407}));
  EXPECT_TRUE(truncated);
  EXPECT_EQ(tok.encode_padded("cat", 2), (std::vector<int32_t>{49406, 49407}));
  expect_error(ErrorCode::InvalidArgument, [&] { tok.encode_padded("cat", 1); });
  expect_error(ErrorCode::InvalidArgument, [&] { tok.encode_padded("cat", -3); });
}

TEST(ClipTokenizer, ThreadSafe) {
  std::vector<std::string> prompts;
  for (const json& row : corpus()["cases"]) {
    if (row.contains("text")) prompts.push_back(row["text"]);
  }
  std::vector<std::vector<int32_t>> expected;
  for (const std::string& p : prompts) expected.push_back(clip().encode(p));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < prompts.size(); i += 2) mismatches[t] += clip().encode(prompts[i]) != expected[i];
    });
  }
  for (auto& thread : threads) thread.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(ClipTokenizer, WithoutConfigUsesTheClipDefaults) {
  const ClipTokenizer tok = ClipTokenizer::from_files(kClipDir / "vocab.json", kClipDir / "merges.txt");
  EXPECT_EQ(tok.bos_id(), 49406);
  EXPECT_EQ(tok.eos_id(), 49407);
  EXPECT_EQ(tok.pad_id(), 49407);
  EXPECT_EQ(tok.encode("A photo of a cat"), clip().encode("A photo of a cat"));
}

TEST(ClipTokenizer, BadFilesFailWithOneLine) {
  const fs::path tmp = fs::temp_directory_path() / ("fluxrt_clip_tok_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  expect_error(ErrorCode::NotFound, [&] { ClipTokenizer::from_directory(tmp / "missing"); });
  expect_error(ErrorCode::NotFound, [&] { ClipTokenizer::from_directory(tmp); });
  auto write = [&](const char* name, const std::string& text) { std::ofstream(tmp / name, std::ios::binary) << text; };
  // A merge whose parts are not in the vocabulary.
  write("vocab.json", read_text(kClipDir / "vocab.json"));
  write("merges.txt", "#version: 0.2\nqq zz\n");
  expect_error(ErrorCode::Format, [&] { ClipTokenizer::from_directory(tmp); });
  write("merges.txt", "#version: 0.2\ni n t\n");
  expect_error(ErrorCode::Format, [&] { ClipTokenizer::from_directory(tmp); });
  write("merges.txt", read_text(kClipDir / "merges.txt"));
  write("tokenizer_config.json", R"({"tokenizer_class": "T5Tokenizer"})");
  expect_error(ErrorCode::Unsupported, [&] { ClipTokenizer::from_directory(tmp); });
  write("tokenizer_config.json", R"({"tokenizer_class": "CLIPTokenizer", "pad_token": "<|nosuchtoken|>"})");
  expect_error(ErrorCode::Format, [&] { ClipTokenizer::from_directory(tmp); });
  write("tokenizer_config.json", "{not json");
  expect_error(ErrorCode::Format, [&] { ClipTokenizer::from_directory(tmp); });
  write("vocab.json", R"({"a": 0, "b": )");
  expect_error(ErrorCode::Format, [&] { ClipTokenizer::from_directory(tmp); });
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace fluxrt::tokenizers
