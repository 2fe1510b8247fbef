// libFuzzer target for the CLIP BPE tokenizer (FLUX.1's `tokenizer/`). The genuine CLIP-L
// vocabulary is loaded once in both layouts the repository ships: vocab.json + merges.txt with
// tokenizer_config.json (tests/data/tokenizers/clip) and the tokenizer.json transformers 5 writes
// from it (tests/data/tokenizers/transformers5/clip). Any bytes must either encode, identically in
// both layouts and satisfying the invariants below, or be refused with a one-line fluxrt::Error
// (InvalidArgument) when the text is not UTF-8 or the length is out of range; a crash, a sanitizer
// report or another exception escaping is a bug.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "tokenizer_fuzz_input.h"
#include "tokenizers/clip_tokenizer.h"

namespace {

namespace fs = std::filesystem;
using namespace fluxrt;
using namespace fluxrt::tokenizers;
using fluxrt::fuzz::check_refusal;

const ClipTokenizer& from_vocab_merges() {
  static const ClipTokenizer tok =
      ClipTokenizer::from_directory(fs::path(FLUXRT_SOURCE_DIR) / "tests/data/tokenizers/clip");
  return tok;
}

const ClipTokenizer& from_tokenizer_json() {
  static const ClipTokenizer tok =
      ClipTokenizer::from_directory(fs::path(FLUXRT_SOURCE_DIR) / "tests/data/tokenizers/transformers5/clip");
  return tok;
}

// What survives of the text in the tokens: pieces are the normalised text minus its white space,
// and decoding turns each end-of-word marker into a space. NFC on both sides because the added
// tokens are cut out before normalising, so NFC never sees a character next to one.
std::string comparable(std::string_view text) {
  return fluxrt::fuzz::nfc(fluxrt::fuzz::without_white_space(text));
}

std::vector<int32_t> check_encode(const std::string& text, bool valid) {
  std::vector<int32_t> ids;
  try {
    ids = from_vocab_merges().encode(text);
  } catch (const Error& e) {
    check_refusal(e, !valid);
    // The other layout must refuse it the same way.
    try {
      from_tokenizer_json().encode(text);
    } catch (const Error& other) {
      check_refusal(other, !valid);
      return {};
    }
    fluxrt::fuzz::invariant_failed("one layout refused a text the other accepted");
  }
  FUZZ_CHECK(valid);
  FUZZ_CHECK(from_tokenizer_json().encode(text) == ids);
  const ClipTokenizer& tok = from_vocab_merges();
  for (int32_t id : ids) {
    FUZZ_CHECK(id >= 0 && static_cast<size_t>(id) < tok.vocab_size() && !tok.id_to_token(id).empty());
  }
  FUZZ_CHECK(comparable(tok.decode(ids)) == comparable(clip_normalize(text)));
  return ids;
}

void check_padded(const std::string& text, int max_length, bool valid, const std::vector<int32_t>& ids) {
  const ClipTokenizer& tok = from_vocab_merges();
  bool truncated = false;
  std::vector<int32_t> padded;
  try {
    padded = tok.encode_padded(text, max_length, truncated);
  } catch (const Error& e) {
    check_refusal(e, !valid || max_length < 2 || max_length > kClipMaxLengthLimit);
    return;
  }
  FUZZ_CHECK(valid && max_length >= 2 && max_length <= kClipMaxLengthLimit);
  // [BOS, the first max_length - 2 ids, EOS, pads]
  const size_t length = static_cast<size_t>(max_length);
  const size_t kept = std::min(ids.size(), length - 2);
  FUZZ_CHECK(padded.size() == length);
  FUZZ_CHECK(truncated == (ids.size() > length - 2));
  FUZZ_CHECK(padded[0] == tok.bos_id() && padded[kept + 1] == tok.eos_id());
  FUZZ_CHECK(std::equal(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(kept), padded.begin() + 1));
  for (size_t i = kept + 2; i < length; ++i) FUZZ_CHECK(padded[i] == tok.pad_id());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fluxrt::fuzz::TokenizerFuzzInput in =
      fluxrt::fuzz::read_tokenizer_fuzz_input(data, size, kClipMaxLength);
  const bool valid = fluxrt::fuzz::is_valid_utf8(in.text);
  const std::vector<int32_t> ids = check_encode(in.text, valid);
  check_padded(in.text, in.max_length, valid, ids);
  return 0;
}
