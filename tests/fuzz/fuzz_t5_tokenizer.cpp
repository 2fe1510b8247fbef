// libFuzzer target for the T5 SentencePiece unigram tokenizer (FLUX.1's `tokenizer_2/`). The
// genuine T5 v1.1 vocabulary is loaded once from each file the repository ships: spiece.model and
// the published tokenizer.json (tests/data/tokenizers/t5) and the tokenizer.json transformers 5
// writes (tests/data/tokenizers/transformers5/t5), which t5_tokenizer.h says load into the same
// pipeline. Any bytes must either encode, identically from all three, satisfying the invariants
// below, or be refused with a one-line fluxrt::Error (InvalidArgument) when the text is not UTF-8
// or the length is out of range; a crash, a sanitizer report or another exception escaping is a bug.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "tokenizer_fuzz_input.h"
#include "tokenizers/t5_tokenizer.h"

namespace {

namespace fs = std::filesystem;
using namespace fluxrt;
using namespace fluxrt::tokenizers;
using fluxrt::fuzz::check_refusal;

constexpr int kLongestMaxLength = 1 << 20;  // t5_tokenizer.cpp's bound on max_length
constexpr std::string_view kMetaspace = "\xE2\x96\x81";

// Loaded on first use, as statics (see fuzz_qwen_tokenizer.cpp on LeakSanitizer at exit).
const std::vector<const T5Tokenizer*>& loaded() {
  static const fs::path data = fs::path(FLUXRT_SOURCE_DIR) / "tests/data/tokenizers";
  static const T5Tokenizer spiece = T5Tokenizer::from_spiece_model(data / "t5/spiece.model");
  static const T5Tokenizer published = T5Tokenizer::from_tokenizer_json(data / "t5/tokenizer.json");
  static const T5Tokenizer saved = T5Tokenizer::from_tokenizer_json(data / "transformers5/t5/tokenizer.json");
  static const std::vector<const T5Tokenizer*> all = {&spiece, &published, &saved};
  return all;
}

std::string without_metaspace(std::string text) {
  for (size_t at; (at = text.find(kMetaspace)) != std::string::npos;) text.erase(at, kMetaspace.size());
  return text;
}

// The ids that a special token cut out of the raw text can produce: <pad>, </s>, <unk> and the
// sentinels <extra_id_N> (the top 100 ids).
bool is_special(const T5Tokenizer& tok, int32_t id) {
  return id == tok.pad_id() || id == tok.eos_id() || id == tok.unk_id() ||
         static_cast<size_t>(id) + 100 >= tok.vocab_size();
}

std::vector<int32_t> check_encode(const std::string& text, bool valid) {
  const T5Tokenizer& tok = *loaded().front();
  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text);
  } catch (const Error& e) {
    check_refusal(e, !valid);
    for (const T5Tokenizer* other : loaded()) {
      try {
        other->encode(text);
        fluxrt::fuzz::invariant_failed("one T5 file refused a text another accepted");
      } catch (const Error& again) {
        check_refusal(again, !valid);
      }
    }
    return {};
  }
  FUZZ_CHECK(valid);
  for (const T5Tokenizer* other : loaded()) FUZZ_CHECK(other->encode(text) == ids);
  FUZZ_CHECK(!ids.empty() && ids.back() == tok.eos_id());
  bool plain = true;  // no special token and no unknown character
  std::string pieces;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    FUZZ_CHECK(id >= 0 && static_cast<size_t>(id) < tok.vocab_size() && !tok.id_to_token(id).empty());
    if (i + 1 < ids.size()) {
      plain = plain && !is_special(tok, id);
      pieces.append(tok.id_to_token(id));
    }
  }
  // Without special tokens the text is one stretch: normalised, split on white space, each word
  // prefixed with "▁" and cut into pieces; without unknowns the pieces spell it all.
  if (plain) {
    FUZZ_CHECK(without_metaspace(pieces) ==
               without_metaspace(fluxrt::fuzz::without_white_space(tok.normalize(text))));
  }
  return ids;
}

void check_padded(const std::string& text, int max_length, bool valid, const std::vector<int32_t>& ids) {
  const T5Tokenizer& tok = *loaded().front();
  const bool length_ok = max_length >= 1 && max_length <= kLongestMaxLength;
  PromptEncoding enc;
  try {
    enc = tok.encode_padded(text, max_length);
  } catch (const Error& e) {
    check_refusal(e, !valid || !length_ok);
    return;
  }
  FUZZ_CHECK(valid && length_ok);
  // The ids cut to max_length - 1 and </s> appended again when too long; pads (0) on the right.
  const size_t length = static_cast<size_t>(max_length);
  const size_t kept = std::min(ids.size(), length);
  FUZZ_CHECK(enc.input_ids.size() == length && enc.attention_mask.size() == length);
  FUZZ_CHECK(enc.num_tokens == static_cast<int32_t>(kept) && enc.truncated == (ids.size() > length));
  FUZZ_CHECK(enc.input_ids[kept - 1] == tok.eos_id());
  FUZZ_CHECK(
      std::equal(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(kept - 1), enc.input_ids.begin()));
  for (size_t i = 0; i < length; ++i) {
    FUZZ_CHECK(enc.attention_mask[i] == (i < kept ? 1 : 0));
    if (i >= kept) FUZZ_CHECK(enc.input_ids[i] == tok.pad_id());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fluxrt::fuzz::TokenizerFuzzInput in =
      fluxrt::fuzz::read_tokenizer_fuzz_input(data, size, kT5MaxSequenceLengthDev);
  const bool valid = fluxrt::fuzz::is_valid_utf8(in.text);
  const std::vector<int32_t> ids = check_encode(in.text, valid);
  check_padded(in.text, in.max_length, valid, ids);
  return 0;
}
