// Qwen2/Qwen3 byte-level BPE tokenizer and the FLUX.2-klein prompt encoding, against the reference
// data: llama.cpp's Qwen2 vectors, shared/data/tokenizers/reference_vectors.json and the corpus made
// by tools/reference/make_tokenizer_corpus.py (transformers + tokenizers + the diffusers pipeline).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <random>
#include <thread>
#include <unistd.h>

#include "core/error.h"
#include "tokenizers/bpe_tokenizer.h"
#include "tokenizers/byte_level.h"
#include "tokenizers/qwen_prompt.h"
#include "tokenizers/text_stages.h"

namespace fluxrt::tokenizers {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The genuine Qwen3 tokenizer files, as checked in with the tiny klein model (identical to
// shared/data/tokenizers/qwen3, which a CI checkout does not have).
const fs::path kQwenDir = fs::path(FLUXRT_TEST_DATA_DIR) / "models" / "flux2-klein-tiny" / "tokenizer";
const fs::path kDataDir = fs::path(FLUXRT_TEST_DATA_DIR) / "tokenizers";

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

json read_json(const fs::path& path) { return json::parse(read_text(path)); }

std::vector<int32_t> ids_of(const json& array) { return array.get<std::vector<int32_t>>(); }

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// Shared across tests: loading takes a noticeable fraction of a second in debug builds.
const BpeTokenizer& qwen() {
  static const BpeTokenizer tokenizer = BpeTokenizer::from_directory(kQwenDir);
  return tokenizer;
}

const json& corpus() {
  static const json data = read_json(kDataDir / "qwen3_corpus.json");
  return data;
}

// ---- byte level and UTF-8 ----------------------------------------------------------------------

TEST(ByteLevel, Gpt2Alphabet) {
  const auto& table = byte_to_unicode();
  EXPECT_EQ(table[' '], char32_t{0x120});
  EXPECT_EQ(table['\n'], char32_t{0x10A});
  EXPECT_EQ(table['!'], char32_t{'!'});
  EXPECT_EQ(table[0], char32_t{0x100});
  EXPECT_EQ(table[0xAD], char32_t{0x143});  // the last of the 68 remapped bytes
  for (int b = 0; b < 256; ++b) EXPECT_EQ(unicode_to_byte(table[b]), b);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string back;
  ASSERT_TRUE(byte_level_to_bytes(bytes_to_byte_level(all), back));
  EXPECT_EQ(back, all);
  EXPECT_FALSE(byte_level_to_bytes("\xE4\xB8\x80", back));  // U+4E00 is outside the alphabet
}

TEST(ByteLevel, Utf8Validation) {
  EXPECT_EQ(find_invalid_utf8(""), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("plain ascii text, long enough for the fast path"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("caf\xC3\xA9 \xE6\x9D\xB1 \xF0\x9F\x9A\x80"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("abc\xC3"), 3u);                   // truncated
  EXPECT_EQ(find_invalid_utf8("\xC0\xAF"), 0u);                  // overlong
  EXPECT_EQ(find_invalid_utf8("xx\xED\xA0\x80"), 2u);            // surrogate
  EXPECT_EQ(find_invalid_utf8("\xF4\x90\x80\x80"), 0u);          // above U+10FFFF
  EXPECT_EQ(find_invalid_utf8("12345678\x80"), 8u);              // stray continuation after the fast path
  EXPECT_EQ(find_invalid_utf8(std::string_view("a\0b", 3)), std::string_view::npos);  // NUL is valid
}

TEST(TextStages, NfcComposes) {
  std::string out;
  EXPECT_FALSE(normalize_unicode("already composed: caf\xC3\xA9", Normalization::Nfc, out));
  ASSERT_TRUE(normalize_unicode("cafe\xCC\x81", Normalization::Nfc, out));
  EXPECT_EQ(out, "caf\xC3\xA9");
  ASSERT_TRUE(normalize_unicode("\xE2\x84\xAB", Normalization::Nfc, out));  // U+212B ANGSTROM SIGN
  EXPECT_EQ(out, "\xC3\x85");
}

TEST(TextStages, Qwen2SplitPieces) {
  RegexSplitter splitter(kQwen2SplitPattern, "test");
  std::vector<std::string_view> pieces;
  splitter.split("Hello  world's 123!!\n\n  x", pieces);
  std::vector<std::string> got(pieces.begin(), pieces.end());
  std::vector<std::string> want = {"Hello", " ", " world", "'s", " ", "1", "2", "3", "!!\n\n", " ", " x"};
  EXPECT_EQ(got, want);
}

// ---- loading -------------------------------------------------------------------------------------

TEST(QwenTokenizer, LoadsVocabAndMerges) {
  const BpeTokenizer& tok = qwen();
  EXPECT_EQ(tok.vocab_size(), 151669u);
  EXPECT_EQ(tok.merge_count(), 151387u);
  EXPECT_EQ(tok.added_tokens().size(), 26u);
  EXPECT_EQ(tok.token_to_id("<|endoftext|>"), 151643);
  EXPECT_EQ(tok.token_to_id("<|im_start|>"), 151644);
  EXPECT_EQ(tok.token_to_id("</think>"), 151668);
  EXPECT_EQ(tok.token_to_id("\xC4\x8A"), 198);  // "Ċ" = "\n"
  EXPECT_EQ(tok.id_to_token(151667), "<think>");
  EXPECT_EQ(tok.config().pad_token, "<|endoftext|>");
  EXPECT_FALSE(tok.config().padding_side.has_value());
}

TEST(QwenTokenizer, MissingFilesAreNotFound) {
  try {
    BpeTokenizer::from_directory(kDataDir / "no_such_folder");
    FAIL() << "loaded a missing folder";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotFound);
  }
}

TEST(QwenTokenizer, MalformedFilesAreFormatErrors) {
  const fs::path dir = fs::temp_directory_path() / ("fluxrt_tok_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const char* name, const std::string& text) { std::ofstream(dir / name, std::ios::binary) << text; };
  auto expect_code = [&](ErrorCode code) {
    try {
      BpeTokenizer::from_directory(dir);
      ADD_FAILURE() << "loaded a malformed tokenizer";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(dir.string()), std::string::npos) << e.what();
    }
  };
  write("vocab.json", "{\"a\": 0, \"b\": ");
  write("merges.txt", "#version: 0.2\n");
  expect_code(ErrorCode::Format);  // truncated JSON
  write("vocab.json", "{\"a\": 0, \"b\": 1}");
  write("merges.txt", "#version: 0.2\na b\n");
  expect_code(ErrorCode::Format);  // merge result "ab" missing
  write("merges.txt", "a b c\n");
  expect_code(ErrorCode::Format);
  write("tokenizer.json", "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}");
  expect_code(ErrorCode::Unsupported);
  write("tokenizer.json", "[1, 2");
  expect_code(ErrorCode::Format);
  write("tokenizer.json", "");
  expect_code(ErrorCode::Format);
  fs::remove(dir / "tokenizer.json");
  fs::create_directories(dir / "tokenizer.json");  // a folder where the file should be
  expect_code(ErrorCode::Io);
  fs::remove_all(dir);
}

// ---- ids against the references ----------------------------------------------------------------

TEST(QwenTokenizer, LlamaCppVectors) {
  const std::string inputs = read_text(kDataDir / "qwen3_llamacpp" / "ggml-vocab-qwen2.gguf.inp");
  std::istringstream outputs(read_text(kDataDir / "qwen3_llamacpp" / "ggml-vocab-qwen2.gguf.out"));
  const std::string separator = "\n__ggml_vocab_test__\n";
  size_t pos = 0, count = 0;
  std::string line;
  while (pos < inputs.size()) {
    size_t end = inputs.find(separator, pos);
    ASSERT_NE(end, std::string::npos);
    std::string text = inputs.substr(pos, end - pos);
    pos = end + separator.size();
    ASSERT_TRUE(std::getline(outputs, line));
    std::istringstream fields(line);
    std::vector<int32_t> want;
    for (int32_t id; fields >> id;) want.push_back(id);
    EXPECT_EQ(qwen().encode(text), want) << "text: " << text;
    ++count;
  }
  EXPECT_EQ(count, 46u);
}

TEST(QwenTokenizer, SharedReferenceVectors) {
  const json doc = read_json(kDataDir / "reference_vectors.json");
  QwenPromptEncoder encoder(qwen());
  size_t count = 0;
  for (const json& row : doc.at("qwen3")) {
    const auto want = ids_of(row.at("ids"));
    if (row.contains("prompt")) {
      const std::string prompt = row.at("prompt");
      EXPECT_EQ(render_qwen3_user_prompt(prompt), row.at("text").get<std::string>());
      EXPECT_EQ(encoder.encode_unpadded(prompt), want) << "prompt: " << prompt;
    } else {
      EXPECT_EQ(qwen().encode(row.at("text").get<std::string>()), want) << "text: " << row.at("text");
    }
    ++count;
  }
  EXPECT_EQ(count, 50u);
}

void check_corpus(const BpeTokenizer& tok, const std::string& what) {
  QwenPromptEncoder encoder(tok);
  const json& doc = corpus();
  const int32_t pad = doc.at("pad_id");
  EXPECT_EQ(encoder.pad_id(), pad);
  size_t valid = 0, invalid = 0;
  for (const json& row : doc.at("cases")) {
    if (row.contains("text_hex")) {
      const std::string bytes = from_hex(row.at("text_hex"));
      for (int attempt = 0; attempt < 2; ++attempt) {
        try {
          if (attempt == 0) {
            tok.encode(bytes);
          } else {
            encoder.encode(bytes);
          }
          ADD_FAILURE() << what << ": invalid UTF-8 accepted: " << row.at("text_hex");
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
        }
      }
      ++invalid;
      continue;
    }
    const std::string text = row.at("text");
    const auto chat = ids_of(row.at("chat_ids"));
    ASSERT_EQ(tok.encode(text), ids_of(row.at("ids"))) << what << " [" << row.at("category") << "] " << text;
    ASSERT_EQ(encoder.encode_unpadded(text), chat) << what << " chat: " << text;
    for (int length : {512, 256}) {
      const size_t real = row.at("real_tokens_" + std::to_string(length));
      PromptEncoding enc = encoder.encode(text, length);
      std::vector<int32_t> want_ids(chat.begin(), chat.begin() + real);
      want_ids.resize(length, pad);
      std::vector<int32_t> want_mask(length, 0);
      std::fill(want_mask.begin(), want_mask.begin() + real, 1);
      ASSERT_EQ(enc.input_ids, want_ids) << what << " length " << length << ": " << text;
      ASSERT_EQ(enc.attention_mask, want_mask);
      EXPECT_EQ(enc.num_tokens, static_cast<int32_t>(real));
      EXPECT_EQ(enc.truncated, chat.size() > static_cast<size_t>(length));
    }
    ++valid;
  }
  EXPECT_GE(valid, 300u);
  EXPECT_GE(invalid, 10u);
}

TEST(QwenTokenizer, CorpusFromVocabAndMerges) { check_corpus(qwen(), "vocab.json+merges.txt"); }

TEST(QwenTokenizer, CorpusFromFullTokenizerJson) {
  // The 11 MB tokenizer.json is not checked in; make_tokenizer_corpus.py --tokenizer-json DIR writes it.
  const char* dir = std::getenv("FLUXRT_QWEN_TOKENIZER_JSON");
  if (!dir || !*dir) GTEST_SKIP() << "set FLUXRT_QWEN_TOKENIZER_JSON to a folder with the full tokenizer.json";
  BpeTokenizer tok = BpeTokenizer::from_directory(dir);
  EXPECT_EQ(tok.vocab_size(), 151669u);
  check_corpus(tok, "tokenizer.json");
}

TEST(QwenTokenizer, DecodeInvertsEncode) {
  for (const json& row : corpus().at("cases")) {
    if (!row.contains("text")) continue;
    const std::string text = row.at("text");
    std::string normalized;
    const bool changed = normalize_unicode(text, Normalization::Nfc, normalized);
    EXPECT_EQ(qwen().decode(qwen().encode(text)), changed ? normalized : text);
  }
  EXPECT_THROW(qwen().decode(std::vector<int32_t>{-1}), Error);
  EXPECT_THROW(qwen().decode(std::vector<int32_t>{999999}), Error);
}

// ---- the FLUX.2-klein pipeline -------------------------------------------------------------------

TEST(QwenPrompt, MatchesDiffusersPipeline) {
  const json doc = read_json(kDataDir / "qwen3_klein_pipeline.json");
  QwenPromptEncoder encoder(qwen());
  size_t count = 0;
  for (const json& row : doc.at("cases")) {
    const std::string prompt = row.at("prompt");
    const int length = row.at("max_sequence_length");
    PromptEncoding enc = encoder.encode(prompt, length);
    ASSERT_EQ(enc.input_ids, ids_of(row.at("input_ids"))) << "length " << length << ": " << prompt;
    ASSERT_EQ(enc.attention_mask, ids_of(row.at("attention_mask"))) << prompt;
    ++count;
  }
  EXPECT_GE(count, 40u);
}

TEST(QwenPrompt, TemplateAndDefaults) {
  QwenPromptEncoder encoder(qwen());
  EXPECT_EQ(render_qwen3_user_prompt("x"),
            "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  PromptEncoding empty = encoder.encode("");
  ASSERT_EQ(empty.input_ids.size(), 512u);  // the diffusers default
  EXPECT_EQ(empty.num_tokens, 12);
  EXPECT_EQ(empty.input_ids[12], 151643);
  EXPECT_EQ(empty.attention_mask[11], 1);
  EXPECT_EQ(empty.attention_mask[12], 0);
  EXPECT_FALSE(empty.truncated);
  EXPECT_EQ(encoder.encode("", 256).input_ids.size(), 256u);
  EXPECT_EQ(encoder.encode("a b c", 3).input_ids, (std::vector<int32_t>{151644, 872, 198}));
  EXPECT_TRUE(encoder.encode("a b c", 3).truncated);
  for (int bad : {0, -1, 1 << 30}) {
    try {
      encoder.encode("x", bad);
      ADD_FAILURE() << "accepted max_sequence_length " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    }
  }
}

TEST(QwenPrompt, BatchStacksRows) {
  QwenPromptEncoder encoder(qwen());
  const std::vector<std::string> prompts = {"a photo of a cat", "", "A cat holding a sign that says hello world"};
  PromptBatch batch = encoder.encode_batch(prompts, 256);
  ASSERT_EQ(batch.batch, 3);
  ASSERT_EQ(batch.length, 256);
  ASSERT_EQ(batch.input_ids.size(), 3u * 256u);
  for (size_t row = 0; row < prompts.size(); ++row) {
    PromptEncoding one = encoder.encode(prompts[row], 256);
    EXPECT_TRUE(std::equal(one.input_ids.begin(), one.input_ids.end(), batch.input_ids.begin() + row * 256));
    EXPECT_TRUE(std::equal(one.attention_mask.begin(), one.attention_mask.end(), batch.attention_mask.begin() + row * 256));
    EXPECT_EQ(batch.num_tokens[row], one.num_tokens);
  }
  EXPECT_EQ(batch.num_tokens, (std::vector<int32_t>{17, 12, 21}));
}

TEST(QwenPrompt, PaddingAndTruncationSidesFromConfig) {
  const json doc = read_json(kDataDir / "qwen3_padding_sides.json");
  const fs::path dir = fs::temp_directory_path() / ("fluxrt_tok_sides_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  size_t count = 0;
  for (const char* padding : {"left", "right"}) {
    for (const char* truncation : {"left", "right"}) {
      json config = read_json(kQwenDir / "tokenizer_config.json");
      config["padding_side"] = padding;
      config["truncation_side"] = truncation;
      std::ofstream(dir / "tokenizer_config.json") << config.dump();
      BpeTokenizer tok = BpeTokenizer::from_vocab_merges(kQwenDir / "vocab.json", kQwenDir / "merges.txt",
                                                         dir / "tokenizer_config.json");
      QwenPromptEncoder encoder(tok);
      for (const json& row : doc.at("cases")) {
        if (row.at("padding_side") != padding || row.at("truncation_side") != truncation) continue;
        PromptEncoding enc = encoder.encode(row.at("prompt").get<std::string>(), row.at("max_sequence_length"));
        EXPECT_EQ(enc.input_ids, ids_of(row.at("input_ids"))) << padding << "/" << truncation << ": " << row.at("prompt");
        EXPECT_EQ(enc.attention_mask, ids_of(row.at("attention_mask")));
        ++count;
      }
    }
  }
  json config = read_json(kQwenDir / "tokenizer_config.json");
  config["padding_side"] = "middle";
  std::ofstream(dir / "tokenizer_config.json") << config.dump();
  BpeTokenizer odd = BpeTokenizer::from_vocab_merges(kQwenDir / "vocab.json", kQwenDir / "merges.txt",
                                                     dir / "tokenizer_config.json");
  EXPECT_THROW(QwenPromptEncoder{odd}, Error);
  fs::remove_all(dir);
  EXPECT_EQ(count, 18u);
}

// ---- tokenizer.json parser on small files written by the `tokenizers` package ---------------------

TEST(QwenTokenizer, MiniTokenizerJsonBothMergeFormats) {
  const json expected = read_json(kDataDir / "qwen3_mini_expected.json");
  for (const char* name : {"qwen3_mini_tokenizer.json", "qwen3_mini_tokenizer_legacy.json"}) {
    BpeTokenizer tok = BpeTokenizer::from_tokenizer_json(kDataDir / name);
    EXPECT_EQ(tok.added_tokens().size(), 26u);
    EXPECT_GT(tok.merge_count(), 1000u);
    size_t count = 0;
    for (const json& row : expected.at("cases")) {
      const std::string text = row.at("text");
      ASSERT_EQ(tok.encode(text), ids_of(row.at("ids"))) << name << ": " << text;
      ++count;
    }
    EXPECT_GE(count, 300u);
  }
}

// A hand-made tokenizer.json covering what the generated files do not: merges before the vocabulary,
// every string \u-escaped (ASCII-only dump, surrogate pairs included), lstrip on an added token and
// an added token matched after NFC.
TEST(QwenTokenizer, HandMadeTokenizerJson) {
  json vocab = json::object();
  const auto& alphabet = byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    append_utf8(symbol, alphabet[b]);
    vocab[symbol] = b;
  }
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  vocab["\xC4\xA0" "a"] = 258;       // "Ġa"
  vocab["\xF0\x9F\x9A\x80"] = 259;  // 🚀 (not reachable by merges; only looked up)
  json doc = {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 300}, {"content", "<x>"}, {"lstrip", true}, {"rstrip", false}, {"normalized", false}, {"special", true}},
        {{"id", 301}, {"content", "\xC3\xA9"}, {"normalized", true}, {"special", false}}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", std::string(kQwen2SplitPattern)}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}}},
      {"post_processor", nullptr},
      {"model",
       {{"type", "BPE"}, {"merges", {"a b", "ab c", "\xC4\xA0" " a"}}, {"vocab", vocab}, {"unk_token", nullptr}, {"dropout", nullptr}}}};
  const fs::path file = fs::temp_directory_path() / ("fluxrt_tok_hand_" + std::to_string(::getpid()) + ".json");
  std::ofstream(file, std::ios::binary) << doc.dump(-1, ' ', /*ensure_ascii=*/true);
  BpeTokenizer tok = BpeTokenizer::from_tokenizer_json(file);
  fs::remove(file);
  EXPECT_EQ(tok.merge_count(), 3u);
  EXPECT_EQ(tok.vocab_size(), 262u);
  EXPECT_EQ(tok.token_to_id("\xF0\x9F\x9A\x80"), 259);
  EXPECT_EQ(tok.token_to_id("\""), '"');
  EXPECT_EQ(tok.token_to_id("\\"), '\\');
  EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{257}));
  EXPECT_EQ(tok.encode(" abc"), (std::vector<int32_t>{32, 257}));  // a+b (rank 0) beats Ġ+a (rank 2)
  EXPECT_EQ(tok.encode("x <x>y"), (std::vector<int32_t>{'x', 300, 'y'}));  // lstrip eats the space
  EXPECT_EQ(tok.encode("e\xCC\x81!"), (std::vector<int32_t>{301, '!'}));  // NFC, then the added token
  EXPECT_EQ(tok.decode(std::vector<int32_t>{32, 257, 300}), " abc<x>");
  EXPECT_THROW(tok.encode("\xFF"), Error);
}

// ---- the transformers 5 layout: tokenizer.json, tokenizer_config.json, chat_template.jinja ---------

// transformers5/qwen3 is the mini tokenizer saved by transformers 5 with the genuine Qwen3 config
// (make_transformers5_tokenizers.py): no added_tokens_decoder (the added tokens are in
// tokenizer.json), the chat template in its own file, new keys (backend, extra_special_tokens,
// is_local) and null bos/unk tokens.
TEST(QwenTokenizer, Transformers5FolderLoads) {
  const fs::path dir = kDataDir / "transformers5" / "qwen3";
  ASSERT_TRUE(fs::exists(dir / "chat_template.jinja"));
  const json config = read_json(dir / "tokenizer_config.json");
  ASSERT_FALSE(config.contains("added_tokens_decoder"));
  ASSERT_FALSE(config.contains("chat_template"));
  ASSERT_TRUE(config.contains("extra_special_tokens"));
  BpeTokenizer tok = BpeTokenizer::from_directory(dir);
  BpeTokenizer mini = BpeTokenizer::from_tokenizer_json(kDataDir / "qwen3_mini_tokenizer.json");
  EXPECT_EQ(tok.added_tokens().size(), 26u);
  EXPECT_EQ(tok.vocab_size(), mini.vocab_size());
  EXPECT_EQ(tok.merge_count(), mini.merge_count());
  EXPECT_EQ(tok.config().tokenizer_class, "Qwen2Tokenizer");
  EXPECT_EQ(tok.config().pad_token, "<|endoftext|>");
  EXPECT_EQ(tok.config().eos_token, "<|im_end|>");
  EXPECT_FALSE(tok.config().bos_token.has_value());
  EXPECT_FALSE(tok.config().unk_token.has_value());
  const json expected = read_json(kDataDir / "qwen3_mini_expected.json");
  size_t count = 0;
  for (const json& row : expected.at("cases")) {
    const std::string text = row.at("text");
    const auto ids = tok.encode(text);
    ASSERT_EQ(ids, ids_of(row.at("ids"))) << text;
    ASSERT_EQ(ids, mini.encode(text)) << text;
    ++count;
  }
  EXPECT_GE(count, 300u);
  // The prompt encoder needs the chat-template tokens and the pad token from the new config.
  QwenPromptEncoder encoder(tok), mini_encoder(mini);
  EXPECT_EQ(encoder.pad_id(), *mini.token_to_id("<|endoftext|>"));
  EXPECT_EQ(encoder.encode("A cat holding a sign", 64).input_ids,
            mini_encoder.encode("A cat holding a sign", 64).input_ids);
}

TEST(QwenTokenizer, ConfigWithMissingOrUnknownFields) {
  // A tokenizer_config.json may lack every field or carry keys this reader has never seen.
  const fs::path dir = fs::temp_directory_path() / ("fluxrt_tok_cfg_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(kDataDir / "transformers5" / "qwen3" / "tokenizer.json", dir / "tokenizer.json",
                fs::copy_options::overwrite_existing);
  const std::vector<int32_t> want =
      BpeTokenizer::from_directory(kDataDir / "transformers5" / "qwen3").encode("a photo");
  for (const char* text :
       {"{}", R"({"backend": "tokenizers", "pad_token": null, "future_field": {"x": [1, 2]},
                                    "extra_special_tokens": {"image_token": "<|image_pad|>"}, "model_max_length": 1e30})"}) {
    std::ofstream(dir / "tokenizer_config.json") << text;
    BpeTokenizer tok = BpeTokenizer::from_directory(dir);
    EXPECT_EQ(tok.encode("a photo"), want) << text;
    EXPECT_FALSE(tok.config().pad_token.has_value()) << text;
    QwenPromptEncoder encoder(tok);  // pad falls back to "<|endoftext|>"
    EXPECT_EQ(encoder.pad_id(), *tok.token_to_id("<|endoftext|>"));
  }
  fs::remove_all(dir);
}

// ---- robustness ------------------------------------------------------------------------------------

TEST(QwenTokenizer, LongRunsDoNotBlowUp) {
  // One pre-token of 200 kB (takes the heap-based merge path) and a 200 kB whitespace run.
  const std::string letters(200000, 'a');
  const auto ids = qwen().encode(letters);
  EXPECT_EQ(qwen().decode(ids), letters);
  const std::string spaces(200000, ' ');
  EXPECT_EQ(qwen().decode(qwen().encode(spaces)), spaces);
  std::string cjk;
  for (int i = 0; i < 20000; ++i) cjk += "\xE7\x8C\xAB";  // 猫
  EXPECT_EQ(qwen().decode(qwen().encode(cjk)), cjk);
}

TEST(QwenTokenizer, RandomBytesNeverCrash) {
  // Random byte strings, biased towards UTF-8 lead/continuation bytes and pieces of special tokens:
  // each one either encodes (and then decodes back to its NFC form) or is rejected as invalid UTF-8.
  std::mt19937 rng(1234);
  const std::vector<std::string> fragments = {"<|im_end|>", "<|im_", "<think>", "\xCC\x81", "\xE2\x80\x8D",
                                              "\xF0\x9F", "\x80", " ", "\n", "'s", "1", "a"};
  size_t accepted = 0, rejected = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    const int parts = static_cast<int>(rng() % 12);
    for (int i = 0; i < parts; ++i) {
      if (rng() % 3 == 0) {
        text += fragments[rng() % fragments.size()];
      } else {
        text.push_back(static_cast<char>(rng() % 256));
      }
    }
    try {
      const auto ids = qwen().encode(text);
      std::string normalized;
      const bool changed = normalize_unicode(text, Normalization::Nfc, normalized);
      EXPECT_EQ(qwen().decode(ids), changed ? normalized : text);
      ++accepted;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_NE(find_invalid_utf8(text), std::string_view::npos);
      ++rejected;
    }
  }
  EXPECT_GT(accepted, 100u);
  EXPECT_GT(rejected, 100u);
}

TEST(QwenTokenizer, ConcurrentEncodeIsConsistent) {
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> want;
  for (const json& row : corpus().at("cases")) {
    if (!row.contains("text")) continue;
    texts.push_back(row.at("text"));
    want.push_back(ids_of(row.at("ids")));
  }
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < texts.size() * 2; i += 3) {
        size_t k = i % texts.size();
        if (qwen().encode(texts[k]) != want[k]) ++mismatches[t];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

}  // namespace
}  // namespace fluxrt::tokenizers
