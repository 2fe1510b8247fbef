// libFuzzer target for the Qwen3 byte-level BPE tokenizer and the FLUX.2-klein chat prompt built
// on it (QwenPromptEncoder). Two tokenizers are loaded once: the genuine Qwen3 vocab.json +
// merges.txt of models/demo (right padding and truncation, as shipped) and the transformers 5
// tokenizer.json folder (mini vocabulary; its regex and normaliser come from the file) with a
// config asking for left padding and truncation, so both sides of the prompt encoder are fuzzed.
// Any bytes must either encode satisfying the invariants below or be refused with a one-line
// fluxrt::Error (InvalidArgument) when the text is not UTF-8 or the length is out of range; a
// crash, a sanitizer report or another exception escaping is a bug.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer_fuzz_input.h"
#include "tokenizers/bpe_tokenizer.h"
#include "tokenizers/qwen_prompt.h"
#include "tokenizers/text_stages.h"

namespace {

namespace fs = std::filesystem;
using namespace fluxrt;
using namespace fluxrt::tokenizers;
using fluxrt::fuzz::check_refusal;

// qwen_prompt.cpp's bound on max_sequence_length (Qwen3's model_max_length).
constexpr int kLongestPrompt = 131072;
constexpr std::string_view kTemplateEnd = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";

struct QwenUnderTest {
  BpeTokenizer tokenizer;
  QwenPromptEncoder prompt;
  bool left = false;   // padding and truncation side
  bool dense = false;  // ids run 0..vocab_size()-1 (the genuine files)
  int32_t im_start = -1;
  std::vector<int32_t> template_end;  // ids of kTemplateEnd: every templated prompt ends with them

  QwenUnderTest(BpeTokenizer tok, bool left_sides, bool dense_ids)
      : tokenizer(std::move(tok)),
        prompt(tokenizer),
        left(left_sides),
        dense(dense_ids),
        im_start(*tokenizer.token_to_id("<|im_start|>")),
        template_end(tokenizer.encode(kTemplateEnd)) {}
};

BpeTokenizer load_left_sided_mini() {
  const fs::path folder = fs::path(FLUXRT_SOURCE_DIR) / "tests/data/tokenizers/transformers5/qwen3";
  nlohmann::json config = nlohmann::json::parse(std::ifstream(folder / "tokenizer_config.json"));
  config["padding_side"] = "left";
  config["truncation_side"] = "left";
  const fs::path dir = fs::temp_directory_path() / ("fluxrt_fuzz_qwen_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json") << config.dump();
  BpeTokenizer tok =
      BpeTokenizer::from_tokenizer_json(folder / "tokenizer.json", dir / "tokenizer_config.json");
  fs::remove_all(dir);
  return tok;
}

// Loaded on first use. Statics rather than heap objects: LeakSanitizer's check at exit runs after
// static destructors, and would report objects only a destroyed static pointed to.
const std::vector<const QwenUnderTest*>& loaded() {
  static const QwenUnderTest genuine(
      BpeTokenizer::from_directory(fs::path(FLUXRT_SOURCE_DIR) / "models/demo/tokenizer"), false, true);
  static const QwenUnderTest mini(load_left_sided_mini(), true, false);
  static const std::vector<const QwenUnderTest*> all = {&genuine, &mini};
  return all;
}

// The mini vocabulary keeps the genuine ids of its added tokens (151643...), hence `dense`.
void check_ids(const QwenUnderTest& q, const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    FUZZ_CHECK(id >= 0 && !q.tokenizer.id_to_token(id).empty());
    FUZZ_CHECK(!q.dense || static_cast<size_t>(id) < q.tokenizer.vocab_size());
  }
}

void check_encode(const QwenUnderTest& q, const std::string& text, bool valid) {
  std::vector<int32_t> ids;
  try {
    ids = q.tokenizer.encode(text);
  } catch (const Error& e) {
    check_refusal(e, !valid);
    return;
  }
  FUZZ_CHECK(valid);
  check_ids(q, ids);
  // Every byte of the text is in some token (the byte-level alphabet is complete), and only the
  // NFC normalisation may change it: per stretch between added tokens, which NFC of both undoes.
  FUZZ_CHECK(fluxrt::fuzz::nfc(q.tokenizer.decode(ids)) == fluxrt::fuzz::nfc(text));
}

void check_prompt(const QwenUnderTest& q, const fluxrt::fuzz::TokenizerFuzzInput& in, bool valid) {
  const bool length_ok = in.max_length >= 1 && in.max_length <= kLongestPrompt;
  PromptEncoding enc;
  try {
    enc = q.prompt.encode(in.text, in.max_length);
  } catch (const Error& e) {
    check_refusal(e, !valid || !length_ok);
    return;
  }
  FUZZ_CHECK(valid && length_ok);
  const std::vector<int32_t> full = q.prompt.encode_unpadded(in.text);
  check_ids(q, full);
  FUZZ_CHECK(full.size() >= 1 + q.template_end.size() && full.front() == q.im_start);
  FUZZ_CHECK(std::equal(q.template_end.rbegin(), q.template_end.rend(), full.rbegin()));

  const size_t length = static_cast<size_t>(in.max_length);
  const size_t kept = std::min(full.size(), length);
  FUZZ_CHECK(enc.input_ids.size() == length && enc.attention_mask.size() == length);
  FUZZ_CHECK(enc.num_tokens == static_cast<int32_t>(kept));
  FUZZ_CHECK(enc.truncated == (full.size() > length));
  // Right: the first `kept` ids at the start; left: the last `kept` ids at the end.
  const size_t first_real = q.left ? length - kept : 0;
  const size_t first_kept = q.left ? full.size() - kept : 0;
  for (size_t i = 0; i < length; ++i) {
    const bool real = i >= first_real && i < first_real + kept;
    FUZZ_CHECK(enc.attention_mask[i] == (real ? 1 : 0));
    FUZZ_CHECK(enc.input_ids[i] == (real ? full[first_kept + (i - first_real)] : q.prompt.pad_id()));
  }
}

// The normaliser against utf8proc_map, every form a tokenizer.json may ask for. Short texts only:
// utf8proc_map is quadratic in a run of combining marks (why normalize_unicode sorts them itself).
void check_normalization(const std::string& text) {
  if (text.size() > 16384) return;
  for (Normalization form :
       {Normalization::Nfc, Normalization::Nfd, Normalization::Nfkc, Normalization::Nfkd}) {
    std::string out;
    const std::string got = normalize_unicode(text, form, out) ? out : text;
    FUZZ_CHECK(got == fluxrt::fuzz::utf8proc_normalized(text, form));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fluxrt::fuzz::TokenizerFuzzInput in =
      fluxrt::fuzz::read_tokenizer_fuzz_input(data, size, kQwenDefaultMaxSequenceLength);
  const bool valid = fluxrt::fuzz::is_valid_utf8(in.text);
  if (valid) check_normalization(in.text);
  for (const QwenUnderTest* q : loaded()) {
    check_encode(*q, in.text, valid);
    check_prompt(*q, in, valid);
  }
  return 0;
}
