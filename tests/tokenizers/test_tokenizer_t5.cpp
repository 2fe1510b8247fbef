// T5 (FLUX.1 tokenizer_2) tokenizer against the reference data: the T5 rows of
// shared/data/tokenizers/reference_vectors.json and the corpus made by
// tools/reference/make_t5_tokenizer_corpus.py (transformers' T5TokenizerFast + diffusers'
// FluxPipeline), from spiece.model and from tokenizer.json, both checked in under tests/data, and
// from the folder transformers 5 saves (tests/data/tokenizers/transformers5/t5: tokenizer.json +
// tokenizer_config.json, no spiece.model; made by make_transformers5_tokenizers.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>
#include <unistd.h>

#include <sentencepiece_processor.h>

#include "core/error.h"
#include "tokenizers/t5_tokenizer.h"
#include "tokenizers/unigram_model.h"

namespace fluxrt::tokenizers {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kT5Dir = fs::path(FLUXRT_TEST_DATA_DIR) / "tokenizers" / "t5";
const fs::path kT5v5Dir = fs::path(FLUXRT_TEST_DATA_DIR) / "tokenizers" / "transformers5" / "t5";

json read_json(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return json::parse(buffer.str());
}

std::vector<int32_t> ids_of(const json& array) { return array.get<std::vector<int32_t>>(); }

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

const T5Tokenizer& from_spiece() {
  static const T5Tokenizer tok = T5Tokenizer::from_spiece_model(kT5Dir / "spiece.model");
  return tok;
}

const T5Tokenizer& from_json() {
  static const T5Tokenizer tok = T5Tokenizer::from_tokenizer_json(kT5Dir / "tokenizer.json");
  return tok;
}

const json& corpus() {
  static const json data = read_json(kT5Dir / "t5_corpus.json");
  return data;
}

template <typename Fn>
void expect_error(ErrorCode code, Fn&& fn, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << "no error: " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << what << ": " << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "multi-line message: " << e.what();
  }
}

// ---- unigram pieces ------------------------------------------------------------------------

TEST(Unigram, ViterbiPicksTheBestScoringSegmentation) {
  UnigramModel model({{"<unk>", 0.0}, {"a", -1.0}, {"b", -1.0}, {"ab", -1.5}, {"abc", -4.0}, {"c", -1.0}}, 0, "test");
  std::vector<int32_t> ids;
  model.encode("ab", ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{3}));  // -1.5 beats -2
  ids.clear();
  model.encode("abc", ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 5}));  // -2.5 beats "abc" -4
  ids.clear();
  model.encode("xa\xC3\xA9\xC3\xA9" "b", ids);  // unknown "x", unknown run "éé" fused
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 0, 2}));
  EXPECT_THROW(UnigramModel({{"a", 0.0}, {"a", -1.0}}, 0, "dup"), Error);
  EXPECT_THROW(UnigramModel({{"a", 0.0}}, 3, "unk"), Error);
}

TEST(Unigram, CorruptCharsmapsFailCleanlyOrNormalize) {
  // Random damage to the real charsmap must give a Format error at load or a normaliser that
  // stays inside its tables (no crash, no hang); a few structural cases are errors for sure.
  EXPECT_THROW(PrecompiledCharsmap("\x01\x00", "short"), Error);
  EXPECT_THROW(PrecompiledCharsmap(std::string("\x00\x01\x00\x00" "abcd", 8), "trie past the end"), Error);
  EXPECT_THROW(PrecompiledCharsmap(std::string("\x03\x00\x00\x00" "abc", 7), "size not a multiple of 4"), Error);
  const std::string good = [] {
    // Build a charsmap by hand: a one-unit trie (root only: nothing matches) and no replacements.
    std::string blob("\x04\x00\x00\x00", 4);
    blob.append(std::string("\x00\x04\x00\x00", 4));
    return blob;
  }();
  PrecompiledCharsmap empty_rules(good, "root only");
  EXPECT_EQ(empty_rules.normalize("caf\xC3\xA9 \xEF\xBC\xA8"), "caf\xC3\xA9 \xEF\xBC\xA8");
  std::mt19937 rng(5);
  std::string text;
  for (int i = 0; i < 64; ++i) text += "Ｈｅｌｌｏ ﬁ ｶﾞ e\u0301 ";
  size_t loaded = 0;
  for (int trial = 0; trial < 200; ++trial) {
    // Flip bytes in a copy of a real blob obtained through a round trip of the JSON file's base64.
    static const std::string real = [] {
      std::ifstream f(kT5Dir / "tokenizer.json", std::ios::binary);
      std::stringstream b;
      b << f.rdbuf();
      // FLUX.1's tokenizer_2: Sequence[Precompiled, Strip, Replace].
      return json::parse(b.str()).at("normalizer").at("normalizers").at(0).at("precompiled_charsmap").get<std::string>();
    }();
    std::string blob;
    {
      // base64 -> bytes (small local decoder; the library's is internal)
      auto value = [](char c) -> int {
        if (c >= 'A' && c <= 'Z') return c - 'A';
        if (c >= 'a' && c <= 'z') return c - 'a' + 26;
        if (c >= '0' && c <= '9') return c - '0' + 52;
        return c == '+' ? 62 : c == '/' ? 63 : -1;
      };
      uint32_t bits = 0;
      int count = 0;
      for (char c : real) {
        const int v = value(c);
        if (v < 0) break;
        bits = (bits << 6) | static_cast<uint32_t>(v);
        count += 6;
        if (count >= 8) {
          count -= 8;
          blob.push_back(static_cast<char>((bits >> count) & 0xFF));
        }
      }
    }
    for (int flips = 0; flips < 5; ++flips) blob[rng() % blob.size()] = static_cast<char>(rng());
    try {
      PrecompiledCharsmap damaged(blob, "damaged");
      (void)damaged.normalize(text);
      ++loaded;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Format);
    }
  }
  EXPECT_GT(loaded, 0u);
}

TEST(T5Tokenizer, RandomUnicodeNeverCrashesAndBothFilesAgree) {
  std::mt19937 rng(11);
  const char32_t ranges[][2] = {{0x20, 0x7E}, {0x80, 0x2FF}, {0x300, 0x36F}, {0x2000, 0x206F}, {0x3000, 0x30FF},
                                {0xFF00, 0xFFEF}, {0x4E00, 0x4E80}, {0x1F300, 0x1F6FF}, {0x1, 0x1F}, {0xE000, 0xE010}};
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      const auto& r = ranges[rng() % std::size(ranges)];
      char32_t cp = r[0] + static_cast<char32_t>(rng() % (r[1] - r[0] + 1));
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
      // UTF-8 by hand (the byte_level helper lives in the library; this keeps the test independent).
      if (cp < 0x80) {
        text.push_back(static_cast<char>(cp));
      } else if (cp < 0x800) {
        text.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        text.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      } else if (cp < 0x10000) {
        text.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        text.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        text.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      } else {
        text.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        text.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        text.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        text.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
    }
    const auto ids = from_spiece().encode(text);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.back(), 1);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < 32100) << id;
    EXPECT_EQ(from_json().encode(text), ids);
  }
}

// ---- loading -------------------------------------------------------------------------------

TEST(T5Tokenizer, BothFilesGiveTheSameVocabulary) {
  const T5Tokenizer& a = from_spiece();
  const T5Tokenizer& b = from_json();
  ASSERT_EQ(a.vocab_size(), 32100u);
  ASSERT_EQ(b.vocab_size(), 32100u);
  for (int32_t id = 0; id < 32100; ++id) ASSERT_EQ(a.id_to_token(id), b.id_to_token(id)) << id;
  EXPECT_EQ(a.token_to_id("<extra_id_0>"), 32099);
  EXPECT_EQ(a.token_to_id("<extra_id_99>"), 32000);
  EXPECT_EQ(b.token_to_id("<extra_id_0>"), 32099);
  EXPECT_EQ(a.token_to_id("\xE2\x96\x81"), 3);
  EXPECT_EQ(a.pad_id(), 0);
  EXPECT_EQ(a.eos_id(), 1);
  EXPECT_EQ(a.unk_id(), 2);
  EXPECT_EQ(b.unk_id(), 2);
  EXPECT_FALSE(a.token_to_id("<no such piece>").has_value());
  EXPECT_EQ(a.id_to_token(-1), "");
  EXPECT_EQ(a.id_to_token(32100), "");
  // The charsmap is the same blob in both files: spot-check the folding.
  for (const char* text : {"\xEF\xBC\xA8\xEF\xBD\x85llo\xE3\x80\x80x", "a\tb\nc", "\xEF\xAC\x81ne", "\xE2\x96\x81"})
    EXPECT_EQ(a.normalize(text), b.normalize(text)) << text;
  EXPECT_EQ(a.normalize("\xEF\xBC\xA8\xEF\xBD\x85llo"), "Hello");  // full-width -> ASCII
  EXPECT_EQ(a.normalize("\xE2\x96\x81"), " ");                     // "▁" -> space
}

TEST(T5Tokenizer, FromDirectoryPrefersSpieceAndFallsBackToTokenizerJson) {
  const fs::path dir = fs::temp_directory_path() / ("fluxrt_t5_dir_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  expect_error(ErrorCode::NotFound, [&] { T5Tokenizer::from_directory(dir); }, "empty folder");
  fs::copy_file(kT5Dir / "tokenizer.json", dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  EXPECT_NE(T5Tokenizer::from_directory(dir).source().find("tokenizer.json"), std::string::npos);
  fs::copy_file(kT5Dir / "spiece.model", dir / "spiece.model", fs::copy_options::overwrite_existing);
  EXPECT_NE(T5Tokenizer::from_directory(dir).source().find("spiece.model"), std::string::npos);
  fs::remove_all(dir);
}

TEST(T5Tokenizer, MalformedFilesAreOneLineErrors) {
  const fs::path dir = fs::temp_directory_path() / ("fluxrt_t5_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const char* name, const std::string& text) {
    std::ofstream(dir / name, std::ios::binary) << text;
    return dir / name;
  };
  expect_error(ErrorCode::NotFound, [&] { T5Tokenizer::from_spiece_model(dir / "missing.model"); }, "missing");
  expect_error(ErrorCode::Format, [&] { T5Tokenizer::from_spiece_model(write("junk.model", "not a proto \xff\xff")); },
               "junk spiece");
  expect_error(ErrorCode::Format, [&] { T5Tokenizer::from_spiece_model(write("empty.model", "")); }, "empty spiece");
  expect_error(ErrorCode::Io, [&] { T5Tokenizer::from_spiece_model(dir); }, "a folder");
  expect_error(ErrorCode::Format, [&] { T5Tokenizer::from_tokenizer_json(write("a.json", "{\"model\": ")); },
               "truncated json");
  expect_error(ErrorCode::Unsupported,
               [&] { T5Tokenizer::from_tokenizer_json(write("b.json", R"({"model": {"type": "BPE", "vocab": {}}})")); },
               "bpe");
  expect_error(ErrorCode::Format,
               [&] {
                 T5Tokenizer::from_tokenizer_json(
                     write("c.json", R"({"model": {"type": "Unigram", "unk_id": 9, "vocab": [["<pad>", 0.0]]}})"));
               },
               "unk outside");
  expect_error(ErrorCode::Format,
               [&] {
                 T5Tokenizer::from_tokenizer_json(write(
                     "d.json",
                     R"({"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0]]},
                         "normalizer": {"type": "Precompiled", "precompiled_charsmap": "AAAA"}})"));
               },
               "bad charsmap");
  expect_error(ErrorCode::Format,
               [&] {
                 T5Tokenizer::from_tokenizer_json(
                     write("e.json", R"({"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], [1, 2]]}})"));
               },
               "bad vocab entry");
  // A Unigram file without <pad> / </s> cannot pad or end a T5 sequence.
  expect_error(ErrorCode::Format,
               [&] {
                 T5Tokenizer::from_tokenizer_json(
                     write("f.json", R"({"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["a", -1.0]]}})"));
               },
               "no pad");
  fs::remove_all(dir);
}

// ---- ids against the references ------------------------------------------------------------

TEST(T5Tokenizer, SharedReferenceVectors) {
  // The T5 rows of shared/data/tokenizers/reference_vectors.json, copied by the corpus script.
  const json doc = read_json(kT5Dir / "reference_vectors_t5.json");
  size_t count = 0;
  for (const json& row : doc.at("t5")) {
    const std::string text = row.at("text");
    EXPECT_EQ(from_spiece().encode(text), ids_of(row.at("ids"))) << text;
    EXPECT_EQ(from_json().encode(text), ids_of(row.at("ids"))) << text;
    ++count;
  }
  EXPECT_EQ(count, 16u);
}

TEST(T5Tokenizer, PublicVectors) {
  // transformers' own T5 tests and docs (section 7 of text-encoders.md).
  EXPECT_EQ(from_spiece().encode("A long paragraph for summarization."),
            (std::vector<int32_t>{71, 307, 8986, 21, 4505, 1635, 1707, 5, 1}));
  EXPECT_EQ(from_spiece().encode("The <extra_id_0> walks in <extra_id_1> park"),
            (std::vector<int32_t>{37, 32099, 10681, 16, 32098, 2447, 1}));
  EXPECT_EQ(from_spiece().encode(""), (std::vector<int32_t>{1}));
}

void check_corpus(const T5Tokenizer& tok, const std::string& what) {
  const json& doc = corpus();
  const int32_t pad = doc.at("pad_id"), eos = doc.at("eos_id");
  size_t valid = 0, invalid = 0;
  for (const json& row : doc.at("cases")) {
    if (row.contains("text_hex")) {
      const std::string bytes = from_hex(row.at("text_hex"));
      expect_error(ErrorCode::InvalidArgument, [&] { tok.encode(bytes); }, what + " invalid UTF-8");
      expect_error(ErrorCode::InvalidArgument, [&] { tok.encode_padded(bytes, 256); }, what + " invalid UTF-8");
      ++invalid;
      continue;
    }
    const std::string text = row.at("text");
    const auto ids = ids_of(row.at("ids"));
    ASSERT_EQ(tok.encode(text), ids) << what << " [" << row.at("category") << "] " << text;
    for (int length : {512, 256}) {
      const size_t real = row.at("real_tokens_" + std::to_string(length));
      PromptEncoding enc = tok.encode_padded(text, length);
      std::vector<int32_t> want(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(real));
      if (ids.size() > real) want.back() = eos;
      want.resize(static_cast<size_t>(length), pad);
      std::vector<int32_t> want_mask(static_cast<size_t>(length), 0);
      std::fill_n(want_mask.begin(), real, 1);
      ASSERT_EQ(enc.input_ids, want) << what << " length " << length << ": " << text;
      ASSERT_EQ(enc.attention_mask, want_mask);
      EXPECT_EQ(enc.num_tokens, static_cast<int32_t>(real));
      EXPECT_EQ(enc.truncated, ids.size() > static_cast<size_t>(length));
    }
    ++valid;
  }
  EXPECT_GE(valid, 300u);
  EXPECT_GE(invalid, 10u);
}

TEST(T5Tokenizer, CorpusFromSpieceModel) { check_corpus(from_spiece(), "spiece.model"); }
TEST(T5Tokenizer, CorpusFromTokenizerJson) { check_corpus(from_json(), "tokenizer.json"); }

TEST(T5Tokenizer, Transformers5FolderWithoutSpieceModel) {
  // transformers 5 rewrites tokenizer.json with the pipeline it runs (normalizer Precompiled alone,
  // pre-tokenizer WhitespaceSplit + Metaspace) and a tokenizer_config.json with
  // extra_special_tokens instead of additional_special_tokens and no added_tokens_decoder.
  ASSERT_FALSE(fs::exists(kT5v5Dir / "spiece.model"));
  const json doc = read_json(kT5v5Dir / "tokenizer.json");
  ASSERT_EQ(doc.at("normalizer").at("type"), "Precompiled");
  ASSERT_FALSE(read_json(kT5v5Dir / "tokenizer_config.json").contains("added_tokens_decoder"));
  const T5Tokenizer tok = T5Tokenizer::from_directory(kT5v5Dir);
  EXPECT_NE(tok.source().find("tokenizer.json"), std::string::npos) << tok.source();
  ASSERT_EQ(tok.vocab_size(), 32100u);
  for (int32_t id = 0; id < 32100; ++id) ASSERT_EQ(tok.id_to_token(id), from_spiece().id_to_token(id)) << id;
  EXPECT_EQ(tok.token_to_id("<extra_id_0>"), 32099);
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.eos_id(), 1);
  EXPECT_EQ(tok.unk_id(), 2);
  check_corpus(tok, "transformers5/t5");
  for (const json& row : corpus().at("cases")) {
    if (!row.contains("text")) continue;
    const std::string text = row.at("text");
    ASSERT_EQ(tok.encode(text), from_spiece().encode(text)) << text;
  }
}

TEST(T5Tokenizer, CorpusCoversTheEdgeCases) {
  // The corpus must keep exercising what differs from plain SentencePiece and what truncates.
  size_t truncated_512 = 0, truncated_256 = 0, sentinels = 0, unknowns = 0, differs_from_json_pipeline = 0;
  for (const json& row : corpus().at("cases")) {
    if (!row.contains("ids")) continue;
    const auto ids = ids_of(row.at("ids"));
    truncated_512 += ids.size() > 512;
    truncated_256 += ids.size() > 256;
    sentinels += std::count_if(ids.begin(), ids.end(), [](int32_t id) { return id >= 32000; }) > 0;
    unknowns += std::count(ids.begin(), ids.end(), 2) > 0;
    differs_from_json_pipeline += row.contains("tokenizer_json_ids");
  }
  EXPECT_GE(truncated_512, 5u);
  EXPECT_GE(truncated_256, 10u);
  EXPECT_GE(sentinels, 10u);
  EXPECT_GE(unknowns, 50u);
  EXPECT_GE(differs_from_json_pipeline, 1u);
}

TEST(T5Tokenizer, PlainSentencePieceAgreesUpToTies) {
  // libsentencepiece on the same model gives the same ids wherever the fast pipeline has nothing
  // of its own to do (no special-token text, no U+0085-style separators, no multi-code-point
  // clusters the charsmap treats differently): a cross-check of the Viterbi and the charsmap.
  // The two break exact score ties differently ("!!!!!!": SentencePiece "!!!!" "!!", `tokenizers`
  // "!!" "!!!!"), so a disagreement must be a different cut of the same pieces' text.
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load((kT5Dir / "spiece.model").string()).ok());
  size_t compared = 0, ties = 0;
  for (const json& row : corpus().at("cases")) {
    if (!row.contains("text")) continue;
    const std::string category = row.at("category");
    if (category != "plain" && category != "digits" && category != "punctuation" && category != "long") continue;
    const std::string text = row.at("text");
    if (text.find('<') != std::string::npos) continue;
    std::vector<int> spm = sp.EncodeAsIds(text);
    std::vector<int32_t> want(spm.begin(), spm.end());
    want.push_back(1);
    const std::vector<int32_t> got = from_spiece().encode(text);
    ++compared;
    if (got == want) continue;
    ++ties;
    auto spelled = [](const std::vector<int32_t>& ids) {
      std::string s;
      for (int32_t id : ids) s += from_spiece().id_to_token(id);
      return s;
    };
    EXPECT_EQ(spelled(got), spelled(want)) << text;
    EXPECT_EQ(got.size(), want.size()) << text;
  }
  EXPECT_GE(compared, 50u);
  EXPECT_LE(ties * 10, compared);
}

// ---- the FLUX.1 pipeline -------------------------------------------------------------------

TEST(T5Prompt, MatchesFluxPipeline) {
  const json doc = read_json(kT5Dir / "t5_flux_pipeline.json");
  size_t count = 0;
  for (const json& row : doc.at("cases")) {
    const std::string prompt = row.at("prompt");
    const int length = row.at("max_sequence_length");
    ASSERT_EQ(from_spiece().encode_padded(prompt, length).input_ids, ids_of(row.at("input_ids")))
        << "length " << length << ": " << prompt;
    ++count;
  }
  EXPECT_GE(count, 40u);
}

TEST(T5Prompt, PaddingTruncationAndBatches) {
  const T5Tokenizer& tok = from_spiece();
  PromptEncoding empty = tok.encode_padded("", kT5MaxSequenceLengthSchnell);
  ASSERT_EQ(empty.input_ids.size(), 256u);
  EXPECT_EQ(empty.input_ids[0], 1);
  EXPECT_EQ(empty.input_ids[1], 0);
  EXPECT_EQ(empty.num_tokens, 1);
  EXPECT_EQ(tok.encode_padded("").input_ids.size(), 512u);  // the diffusers default
  PromptEncoding cut = tok.encode_padded("a b c d e", 4);
  EXPECT_EQ(cut.input_ids, (std::vector<int32_t>{3, 9, 3, 1}));  // transformers' own result
  EXPECT_TRUE(cut.truncated);
  EXPECT_EQ(tok.encode_padded("x", 1).input_ids, (std::vector<int32_t>{1}));
  for (int bad : {0, -3, (1 << 20) + 1})
    expect_error(ErrorCode::InvalidArgument, [&] { tok.encode_padded("x", bad); }, "max_length");
  const std::vector<std::string> prompts = {"a photo of a cat", "", "A cat holding a sign that says hello world"};
  PromptBatch batch = tok.encode_batch(prompts, 16);
  ASSERT_EQ(batch.batch, 3);
  ASSERT_EQ(batch.input_ids.size(), 48u);
  EXPECT_EQ(batch.num_tokens, (std::vector<int32_t>{8, 1, 11}));
  for (size_t row = 0; row < prompts.size(); ++row) {
    PromptEncoding one = tok.encode_padded(prompts[row], 16);
    EXPECT_TRUE(std::equal(one.input_ids.begin(), one.input_ids.end(), batch.input_ids.begin() + 16 * row));
    EXPECT_TRUE(std::equal(one.attention_mask.begin(), one.attention_mask.end(), batch.attention_mask.begin() + 16 * row));
  }
}

TEST(T5Tokenizer, ConcurrentEncodesAgree) {
  const std::string text = corpus().at("cases").at(0).at("text");
  const auto want = from_spiece().encode(text);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) ok[t] += from_spiece().encode(text) == want;
    });
  for (auto& th : threads) th.join();
  for (int v : ok) EXPECT_EQ(v, 50);
}

}  // namespace
}  // namespace fluxrt::tokenizers
