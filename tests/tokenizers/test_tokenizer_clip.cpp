// CLIP BPE tokenizer (FLUX.1 `tokenizer/`) against transformers' CLIPTokenizer: the CLIP rows of
// shared/data/tokenizers/reference_vectors.json and the corpus and pipeline encodings made by
// tools/reference/make_clip_tokenizer_corpus.py (all checked in under tests/data/tokenizers/clip/),
// from vocab.json + merges.txt and from the tokenizer.json transformers 5 saves
// (tests/data/tokenizers/transformers5/clip/, made by make_transformers5_tokenizers.py).
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
// The same tokenizer as transformers 5 saves it: tokenizer.json + tokenizer_config.json only.
const fs::path kClip5Dir = fs::path(FLUXRT_TEST_DATA_DIR) / "tokenizers" / "transformers5" / "clip";

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

const ClipTokenizer& clip5() {
  static const ClipTokenizer tokenizer = ClipTokenizer::from_directory(kClip5Dir);
  return tokenizer;
}

const json& corpus() {
  static const json data = read_json(kClipDir / "clip_corpus.json");
  return data;
}

// A scratch folder removed at the end of the test.
struct TempDir {
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("fluxrt_clip_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
  }
  fs::path path;
};

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

TEST(ClipTokenizer, MaxLengthAboveTheLimitIsRefused) {
  // fuzz_clip_tokenizer asked for max_length 2^31-1: the row was reserved and filled with pads
  // (8 GiB) before anything looked at the number. Like T5's, the length is now bounded.
  const ClipTokenizer& tok = clip();
  EXPECT_EQ(tok.encode_padded("cat", kClipMaxLengthLimit).size(), static_cast<size_t>(kClipMaxLengthLimit));
  expect_error(ErrorCode::InvalidArgument, [&] { tok.encode_padded("cat", kClipMaxLengthLimit + 1); });
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

// ---- the transformers 5 layout: tokenizer.json + tokenizer_config.json, nothing else -------------

TEST(ClipTokenizer, Transformers5FolderHasOnlyTheNewFiles) {
  // What the fixture must keep showing: no vocab.json / merges.txt / special_tokens_map.json, and
  // a config without added_tokens_decoder (the added tokens are only in tokenizer.json).
  EXPECT_TRUE(fs::exists(kClip5Dir / "tokenizer.json"));
  EXPECT_FALSE(fs::exists(kClip5Dir / "vocab.json"));
  EXPECT_FALSE(fs::exists(kClip5Dir / "merges.txt"));
  EXPECT_FALSE(fs::exists(kClip5Dir / "special_tokens_map.json"));
  EXPECT_FALSE(read_json(kClip5Dir / "tokenizer_config.json").contains("added_tokens_decoder"));
  const ClipTokenizer& tok = clip5();
  EXPECT_NE(tok.source().find("tokenizer.json"), std::string::npos) << tok.source();
  EXPECT_EQ(tok.vocab_size(), clip().vocab_size());
  EXPECT_EQ(tok.merge_count(), clip().merge_count());
  EXPECT_EQ(tok.bos_id(), 49406);
  EXPECT_EQ(tok.eos_id(), 49407);
  EXPECT_EQ(tok.pad_id(), 49407);
  for (int32_t id = 0; id < 49410; ++id) ASSERT_EQ(tok.id_to_token(id), clip().id_to_token(id)) << id;
}

TEST(ClipTokenizer, Transformers5FolderGivesTheSameIdsOnTheWholeCorpus) {
  size_t checked = 0;
  for (const json& row : corpus()["cases"]) {
    if (row.contains("text_hex")) {
      const std::string raw = from_hex(row["text_hex"]);
      expect_error(ErrorCode::InvalidArgument, [&] { clip5().encode(raw); });
      continue;
    }
    const std::string text = row["text"];
    const auto ids = clip5().encode(text);
    // Identical to the separate-file tokenizer on every row, including those whose reference ids
    // need newer Unicode tables than ours (both loaders share the same pipeline).
    ASSERT_EQ(ids, clip().encode(text)) << row["category"] << ": " << text;
    if (!row.contains("unicode") ||
        !version_less(clip_unicode_version(), row["unicode"].get<std::string>())) {
      EXPECT_EQ(ids, row["ids"].get<std::vector<int32_t>>()) << text;
    }
    EXPECT_EQ(clip5().encode_padded(text), clip().encode_padded(text)) << text;
    ++checked;
  }
  EXPECT_GE(checked, 500u);
  const json pipeline = read_json(kClipDir / "clip_flux_pipeline.json");
  ASSERT_GE(pipeline["cases"].size(), 50u);
  for (const json& row : pipeline["cases"]) {
    const std::string prompt = row["prompt"];
    EXPECT_EQ(clip5().encode_padded(prompt), row["input_ids"].get<std::vector<int32_t>>()) << prompt;
  }
  for (const json& row : corpus()["decode"]) {
    EXPECT_EQ(clip5().decode(row["ids"].get<std::vector<int32_t>>()), row["text"].get<std::string>());
  }
}

TEST(ClipTokenizer, TokenizerJsonIsPreferredWhenBothLayoutsAreThere) {
  // Published repos carry both; transformers 5 reads tokenizer.json then, and so do we.
  TempDir dir("both");
  for (const char* name : {"vocab.json", "merges.txt", "tokenizer_config.json"}) {
    fs::copy_file(kClipDir / name, dir.path / name);
  }
  fs::copy_file(kClip5Dir / "tokenizer.json", dir.path / "tokenizer.json");
  const ClipTokenizer tok = ClipTokenizer::from_directory(dir.path);
  EXPECT_NE(tok.source().find("tokenizer.json"), std::string::npos) << tok.source();
  EXPECT_EQ(tok.encode("A photo of a cat, it's <|StartOfText|>"),
            clip().encode("A photo of a cat, it's <|StartOfText|>"));
}

TEST(ClipTokenizer, TokenizerJsonVariants) {
  // Older `tokenizers` wrote merges as "left right" strings, and a file may list merges before
  // the vocabulary; no tokenizer_config.json leaves the CLIP defaults.
  json doc = read_json(kClip5Dir / "tokenizer.json");
  json strings = json::array();
  for (const json& pair : doc["model"]["merges"]) {
    strings.push_back(pair[0].get<std::string>() + " " + pair[1].get<std::string>());
  }
  json model = json::object();
  model["type"] = "BPE";
  model["merges"] = strings;  // nlohmann keeps keys sorted: "merges" is written before "vocab"
  model["vocab"] = doc["model"]["vocab"];
  model["unk_token"] = "<|endoftext|>";
  model["end_of_word_suffix"] = "</w>";
  doc["model"] = model;
  TempDir dir("variants");
  dir.write("tokenizer.json", doc.dump());
  const ClipTokenizer legacy = ClipTokenizer::from_tokenizer_json(dir.path / "tokenizer.json");
  EXPECT_EQ(legacy.merge_count(), clip().merge_count());
  EXPECT_EQ(legacy.pad_id(), 49407);
  size_t checked = 0;
  for (const json& row : corpus()["cases"]) {
    if (!row.contains("text") || checked++ % 4 != 0) continue;
    const std::string text = row["text"];
    ASSERT_EQ(legacy.encode(text), clip().encode(text)) << text;
  }
  // The added tokens' normalized flags come from the file: "<|startoftext|>" is normalized=true,
  // so "<|StartOfText|>" (lower-cased first) is that token; with normalized=false it is text.
  EXPECT_EQ(legacy.encode("<|StartOfText|>"), std::vector<int32_t>{49406});
  for (json& added : doc["added_tokens"]) {
    if (added["content"] == "<|startoftext|>") added["normalized"] = false;
  }
  dir.write("tokenizer.json", doc.dump());
  const ClipTokenizer raw = ClipTokenizer::from_tokenizer_json(dir.path / "tokenizer.json");
  EXPECT_EQ(raw.encode("<|startoftext|>"), std::vector<int32_t>{49406});
  EXPECT_NE(raw.encode("<|StartOfText|>"), std::vector<int32_t>{49406});
}

TEST(ClipTokenizer, MalformedTokenizerJsonFailsWithOneLine) {
  TempDir dir("badjson");
  const std::string good = read_text(kClip5Dir / "tokenizer.json");
  auto expect_file_error = [&](ErrorCode code, const std::string& text, const char* what) {
    dir.write("tokenizer.json", text);
    SCOPED_TRACE(what);
    expect_error(code, [&] { ClipTokenizer::from_directory(dir.path); });
  };
  expect_file_error(ErrorCode::Format, "", "empty file");
  expect_file_error(ErrorCode::Format, good.substr(0, good.size() / 2), "cut in half");
  expect_file_error(ErrorCode::Format, "{}", "no model");
  expect_file_error(ErrorCode::Format, R"({"model": {"type": "BPE"}})", "no vocabulary");
  expect_file_error(ErrorCode::Unsupported, R"({"model": {"type": "Unigram", "vocab": []}})", "not BPE");
  // The special tokens (and unk) must be in the vocabulary.
  expect_file_error(ErrorCode::Format, R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})",
                    "no special tokens");
  json doc = json::parse(good);
  auto with = [&](const std::function<void(json&)>& edit) {
    json copy = doc;
    edit(copy);
    return copy.dump();
  };
  expect_file_error(ErrorCode::Unsupported, with([](json& d) { d["model"]["end_of_word_suffix"] = "@@"; }),
                    "another end-of-word suffix");
  expect_file_error(ErrorCode::Unsupported, with([](json& d) { d["model"]["end_of_word_suffix"] = ""; }),
                    "no end-of-word suffix");
  expect_file_error(ErrorCode::Unsupported,
                    with([](json& d) { d["model"]["continuing_subword_prefix"] = "##"; }),
                    "a subword prefix");
  expect_file_error(ErrorCode::Format, with([](json& d) {
                      d["model"]["merges"][0] = json::array({"i", "n", "x"});
                    }),
                    "a merge of three");
  expect_file_error(ErrorCode::Format, with([](json& d) { d["model"]["merges"][0] = "in"; }),
                    "a merge without a space");
  expect_file_error(ErrorCode::Format, with([](json& d) {
                      d["model"]["merges"][0] = json::array({"qq", "zz"});
                    }),
                    "a merge of unknown tokens");
  expect_file_error(ErrorCode::Format, with([](json& d) { d["model"]["vocab"]["a</w>"] = -4; }),
                    "a negative id");
  expect_file_error(ErrorCode::Format, with([](json& d) { d["added_tokens"] = json::object(); }),
                    "added_tokens not a list");
  expect_file_error(ErrorCode::Format, with([](json& d) { d["added_tokens"][0].erase("id"); }),
                    "an added token without an id");
  expect_file_error(ErrorCode::Unsupported, with([](json& d) { d["added_tokens"][0]["lstrip"] = true; }),
                    "an lstrip added token");
  dir.write("tokenizer.json", good);
  dir.write("tokenizer_config.json", R"({"tokenizer_class": "T5Tokenizer"})");
  expect_error(ErrorCode::Unsupported, [&] { ClipTokenizer::from_directory(dir.path); });
  dir.write("tokenizer_config.json",
            R"({"tokenizer_class": "CLIPTokenizer", "unk_token": "<|nosuchtoken|>"})");
  expect_error(ErrorCode::Format, [&] { ClipTokenizer::from_directory(dir.path); });
  fs::remove(dir.path / "tokenizer_config.json");
  fs::remove(dir.path / "tokenizer.json");
  fs::create_directories(dir.path / "tokenizer.json");  // a folder where the file should be
  expect_error(ErrorCode::Io, [&] { ClipTokenizer::from_directory(dir.path); });
}

TEST(ClipTokenizer, FolderWithNeitherLayoutNamesBoth) {
  TempDir dir("empty");
  dir.write("merges.txt", read_text(kClipDir / "merges.txt"));  // half of the old layout is not enough
  try {
    ClipTokenizer::from_directory(dir.path);
    ADD_FAILURE() << "loaded a folder without tokenizer files";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.code(), ErrorCode::NotFound) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find(dir.path.string()), std::string::npos) << message;
    EXPECT_NE(message.find("tokenizer.json"), std::string::npos) << message;
    EXPECT_NE(message.find("vocab.json + merges.txt"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace fluxrt::tokenizers
