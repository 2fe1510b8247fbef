#include "tokenizers/clip_tokenizer.h"

#include <utf8proc.h>

#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "tokenizers/added_tokens.h"
#include "tokenizers/bpe_model.h"
#include "tokenizers/bpe_tokenizer.h"
#include "tokenizers/byte_level.h"
#include "tokenizers/text_stages.h"
#include "tokenizers/tokenizer_files.h"

namespace fluxrt::tokenizers {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kDefaultBos = "<|startoftext|>";
constexpr std::string_view kDefaultEos = "<|endoftext|>";
constexpr std::string_view kEndOfWord = "</w>";

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

enum class CharClass { Space, Letter, Number, Other };

// The classes of the CLIP pre-tokenizer regex: \s (Oniguruma's, the White_Space property),
// \p{L}, \p{N}, and the rest. Categories come from utf8proc, the same tables as the lower-casing,
// so both stages agree on which Unicode version they know (PCRE2 10.42 is a version behind).
CharClass classify(char32_t c) {
  if (c < 0x80) {
    if (is_white_space(c)) return CharClass::Space;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return CharClass::Letter;
    if (c >= '0' && c <= '9') return CharClass::Number;
    return CharClass::Other;
  }
  if (is_white_space(c)) return CharClass::Space;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return CharClass::Letter;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return CharClass::Number;
    default:
      return CharClass::Other;
  }
}

// The pre-tokenizer of transformers' CLIPTokenizer: a Split on
//   <\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
// keeping the matches only (what lies between them is white space), then the ByteLevel GPT-2 split
// of each match. That second split leaves letter runs, digits, contractions and symbol runs whole
// (none of its alternatives can cut them) and splits the two special-token spellings into
// "<|", the name, "|>". Written out rather than run through a regex engine so that the character
// classes come from the same Unicode tables as the normaliser.
void split_clip_words(std::string_view text, std::vector<std::string_view>& words) {
  static constexpr std::string_view kSpecialNames[] = {"startoftext", "endoftext"};
  static constexpr std::string_view kContractions[] = {"s", "t", "re", "ve", "m", "ll", "d"};
  size_t pos = 0;
  while (pos < text.size()) {
    const std::string_view rest = text.substr(pos);
    if (rest.size() > 4 && rest[0] == '<' && rest[1] == '|') {
      bool matched = false;
      for (std::string_view name : kSpecialNames) {
        if (rest.substr(2, name.size()) == name && rest.substr(2 + name.size(), 2) == "|>") {
          words.push_back(rest.substr(0, 2));
          words.push_back(rest.substr(2, name.size()));
          words.push_back(rest.substr(2 + name.size(), 2));
          pos += name.size() + 4;
          matched = true;
          break;
        }
      }
      if (matched) continue;
    }
    if (rest[0] == '\'') {
      bool matched = false;
      for (std::string_view tail : kContractions) {
        if (rest.substr(1, tail.size()) == tail) {
          words.push_back(rest.substr(0, tail.size() + 1));
          pos += tail.size() + 1;
          matched = true;
          break;
        }
      }
      if (matched) continue;
    }
    size_t next = pos;
    const CharClass first = classify(next_code_point(text, next));
    if (first == CharClass::Space) {
      pos = next;
      continue;
    }
    if (first != CharClass::Number) {  // letters and symbols run on; a digit is a piece of its own
      size_t probe = next;
      while (probe < text.size() && classify(next_code_point(text, probe)) == first) next = probe;
    }
    words.push_back(text.substr(pos, next - pos));
    pos = next;
  }
}

// pad_token from special_tokens_map.json, for folders whose tokenizer_config.json lacks it.
std::optional<std::string> special_map_token(const fs::path& path, const char* key) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  const FileText file(path);
  const nlohmann::json doc = parse_small_json(file.text(), path.string());
  return doc.is_object() ? get_token_string(doc, key) : std::nullopt;
}

TokenizerConfig read_clip_config(const fs::path& path) {
  if (path.empty()) return {};
  TokenizerConfig config = read_tokenizer_config(path);
  if (!config.tokenizer_class.empty() && config.tokenizer_class.rfind("CLIPTokenizer", 0) != 0) {
    fail(ErrorCode::Unsupported, "{}: tokenizer_class '{}' is not a CLIP tokenizer", path.string(),
         config.tokenizer_class);
  }
  return config;
}

}  // namespace

std::string clip_normalize(std::string_view text) {
  std::string composed;
  if (normalize_unicode(text, Normalization::Nfc, composed)) text = composed;
  std::string out;
  out.reserve(text.size());
  bool in_space = false;
  size_t pos = 0;
  while (pos < text.size()) {
    const char32_t c = next_code_point(text, pos);
    if (is_white_space(c)) {
      if (!in_space) out.push_back(' ');
      in_space = true;
      continue;
    }
    in_space = false;
    if (c < 0x80) {
      out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c));
    } else if (c == 0x130) {
      // The one character whose full lower case (Rust's char::to_lowercase, used by the reference)
      // is two characters: "i" + COMBINING DOT ABOVE. utf8proc only has the simple mapping.
      out.append("i\xCC\x87");
    } else {
      append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    }
  }
  return out;
}

std::string_view clip_unicode_version() { return utf8proc_unicode_version(); }

struct ClipTokenizer::Impl {
  std::string source;
  BpeModel model;
  AddedTokenMatcher raw_matcher;         // normalized=false added tokens, cut from the raw text
  AddedTokenMatcher normalized_matcher;  // normalized=true ones, cut from the normalised text
  std::unordered_map<int32_t, std::string> added_by_id;
  int32_t bos_id = -1, eos_id = -1, pad_id = -1;
  size_t vocab_size = 0;

  void encode_plain(std::string_view normalized, std::vector<std::string_view>& words,
                    std::vector<int32_t>& out) const {
    words.clear();
    split_clip_words(normalized, words);
    for (std::string_view word : words) model.encode_word(word, out);
  }

  // The rest of loading, the same for both layouts once `model` holds the vocabulary and merges:
  // unk, the end-of-word symbols, the special and added tokens.
  void finish(const TokenizerConfig& config, const fs::path& config_path, std::string_view unk,
              std::vector<AddedToken> added);
};

ClipTokenizer::ClipTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClipTokenizer::ClipTokenizer(ClipTokenizer&&) noexcept = default;
ClipTokenizer& ClipTokenizer::operator=(ClipTokenizer&&) noexcept = default;
ClipTokenizer::~ClipTokenizer() = default;

void ClipTokenizer::Impl::finish(const TokenizerConfig& config, const fs::path& config_path,
                                 std::string_view unk, std::vector<AddedToken> added) {
  const std::string& label = source;
  // transformers' CLIPTokenizer defaults: unk = eos = pad = "<|endoftext|>".
  const std::string bos = config.bos_token.value_or(std::string(kDefaultBos));
  const std::string eos = config.eos_token.value_or(std::string(kDefaultEos));
  std::string pad = config.pad_token.value_or("");
  if (pad.empty() && !config_path.empty()) {
    pad = special_map_token(config_path.parent_path() / "special_tokens_map.json", "pad_token").value_or("");
  }
  if (pad.empty()) pad = eos;
  model.finalize(unk, false, label);
  model.set_end_of_word_suffix(kEndOfWord, label);

  for (const std::string& special : {bos, eos, pad}) {
    bool listed = false;
    for (const AddedToken& token : added) listed |= token.content == special;
    if (listed) continue;
    auto id = model.token_to_id(special);
    if (!id) fail(ErrorCode::Format, "{}: special token '{}' is not in the vocabulary", label, special);
    added.push_back(AddedToken{special, *id, true, false, false, false, false});
  }
  std::vector<AddedToken> raw, normalized;
  size_t extra_ids = 0;
  for (const AddedToken& token : added) {
    if (token.lstrip || token.rstrip || token.single_word) {
      fail(ErrorCode::Unsupported, "{}: added token '{}' with lstrip/rstrip/single_word is not supported", label,
           token.content);
    }
    (token.normalized ? normalized : raw).push_back(token);
    if (added_by_id.emplace(token.id, token.content).second && model.id_to_token(token.id).empty()) {
      ++extra_ids;
    }
  }
  raw_matcher = AddedTokenMatcher(std::move(raw));
  normalized_matcher = AddedTokenMatcher(std::move(normalized));
  vocab_size = model.vocab_size() + extra_ids;
  auto id_of = [&](const std::string& token) {
    for (const AddedToken& a : added) {
      if (a.content == token) return a.id;
    }
    fail(ErrorCode::Format, "{}: special token '{}' has no id", label, token);
  };
  bos_id = id_of(bos);
  eos_id = id_of(eos);
  pad_id = id_of(pad);
}

ClipTokenizer ClipTokenizer::from_files(const fs::path& vocab_json, const fs::path& merges_txt,
                                        const fs::path& config_path) {
  auto impl = std::make_unique<Impl>();
  impl->source = vocab_json.parent_path().string();
  const TokenizerConfig config = read_clip_config(config_path);
  read_vocab_and_merges(vocab_json, merges_txt, impl->model);
  impl->finish(config, config_path, config.unk_token.value_or(std::string(kDefaultEos)), config.added_tokens);
  return ClipTokenizer(std::move(impl));
}

ClipTokenizer ClipTokenizer::from_tokenizer_json(const fs::path& tokenizer_json,
                                                 const fs::path& config_path) {
  auto impl = std::make_unique<Impl>();
  const std::string label = tokenizer_json.string();
  impl->source = label;
  const TokenizerConfig config = read_clip_config(config_path);
  const FileText file(tokenizer_json);
  // transformers writes CLIP's tokenizer.json indented: about 25 bytes per vocabulary entry (9 of
  // them the token) and 48 per merge, one of each per 73 bytes. Only sizes the tables; they grow.
  const size_t per_entry = file.text().size() / 70;
  impl->model.reserve(per_entry, per_entry * 9, per_entry);
  const BpeJsonFile parts = read_bpe_tokenizer_json(file.text(), label, impl->model);
  // transformers 5 takes only the vocabulary and merges from the file and rebuilds the CLIP
  // pipeline around them (CLIPTokenizer.__init__: NFC + white space + lower case, the CLIP split,
  // byte level, "</w>", no dropout), so the file's normalizer, pre-tokenizer, post-processor and
  // dropout are not read here either. A vocabulary built for another word-boundary scheme would
  // not work with that pipeline: refused rather than silently mis-encoded.
  if (parts.end_of_word_suffix.value_or(std::string(kEndOfWord)) != kEndOfWord) {
    fail(ErrorCode::Unsupported, "{}: BPE end_of_word_suffix '{}' is not CLIP's '{}'", label,
         *parts.end_of_word_suffix, kEndOfWord);
  }
  if (!parts.continuing_subword_prefix.value_or("").empty()) {
    fail(ErrorCode::Unsupported, "{}: BPE continuing_subword_prefix '{}' is not supported by CLIP", label,
         *parts.continuing_subword_prefix);
  }
  // The added tokens of the file (with their normalized flags), then any the config adds.
  std::vector<AddedToken> added = parse_added_tokens(parts.raw_added_tokens, label);
  for (const AddedToken& token : config.added_tokens) {
    bool known = false;
    for (const AddedToken& existing : added) known |= existing.id == token.id;
    if (!known) added.push_back(token);
  }
  // unk: the config's (what transformers passes to BPE), else the file's, else the default.
  const std::string unk = config.unk_token.value_or(parts.unk_token.value_or(std::string(kDefaultEos)));
  impl->finish(config, config_path, unk, std::move(added));
  return ClipTokenizer(std::move(impl));
}

ClipTokenizer ClipTokenizer::from_directory(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(ErrorCode::NotFound, "{}: tokenizer folder not found", dir.string());
  const fs::path config = dir / "tokenizer_config.json";
  const fs::path config_arg = fs::exists(config, ec) ? config : fs::path();
  // tokenizer.json first, as transformers 5 does when a folder has both (published repos do);
  // what it saves has only tokenizer.json, older folders only vocab.json + merges.txt.
  if (fs::exists(dir / "tokenizer.json", ec)) return from_tokenizer_json(dir / "tokenizer.json", config_arg);
  if (fs::exists(dir / "vocab.json", ec) && fs::exists(dir / "merges.txt", ec)) {
    return from_files(dir / "vocab.json", dir / "merges.txt", config_arg);
  }
  fail(ErrorCode::NotFound, "{}: no CLIP tokenizer: needs tokenizer.json, or vocab.json + merges.txt",
       dir.string());
}

std::vector<int32_t> ClipTokenizer::encode(std::string_view text) const {
  const Impl& s = *impl_;
  const size_t bad = find_invalid_utf8(text);
  if (bad != std::string_view::npos) {
    fail(ErrorCode::InvalidArgument, "CLIP tokenizer ({}): input text is not valid UTF-8 (byte {} of {})", s.source,
         bad, text.size());
  }
  std::vector<int32_t> out;
  std::vector<TextSegment> segments, inner;
  std::vector<std::string_view> words;
  if (s.raw_matcher.empty()) {
    segments.push_back({text, -1});
  } else {
    s.raw_matcher.split(text, segments);
  }
  for (const TextSegment& segment : segments) {
    if (segment.token_id >= 0) {
      out.push_back(segment.token_id);
      continue;
    }
    const std::string normalized = clip_normalize(segment.text);
    inner.clear();
    if (s.normalized_matcher.empty()) {
      if (!normalized.empty()) inner.push_back({normalized, -1});
    } else {
      s.normalized_matcher.split(normalized, inner);
    }
    for (const TextSegment& part : inner) {
      if (part.token_id >= 0) {
        out.push_back(part.token_id);
      } else {
        s.encode_plain(part.text, words, out);
      }
    }
  }
  return out;
}

std::vector<int32_t> ClipTokenizer::encode_padded(std::string_view text, int max_length) const {
  bool truncated = false;
  return encode_padded(text, max_length, truncated);
}

std::vector<int32_t> ClipTokenizer::encode_padded(std::string_view text, int max_length, bool& truncated) const {
  if (max_length < 2) {
    fail(ErrorCode::InvalidArgument, "CLIP tokenizer: max_length {} leaves no room for the start and end tokens",
         max_length);
  }
  // Checked before the row is allocated: a garbage length would otherwise ask for gigabytes.
  if (max_length > kClipMaxLengthLimit) {
    fail(ErrorCode::InvalidArgument, "CLIP tokenizer: max_length {} is above the limit of {}", max_length,
         kClipMaxLengthLimit);
  }
  std::vector<int32_t> ids = encode(text);
  const size_t room = static_cast<size_t>(max_length) - 2;
  truncated = ids.size() > room;
  if (truncated) ids.resize(room);
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(max_length));
  out.push_back(impl_->bos_id);
  out.insert(out.end(), ids.begin(), ids.end());
  out.push_back(impl_->eos_id);
  out.resize(static_cast<size_t>(max_length), impl_->pad_id);
  return out;
}

std::string ClipTokenizer::decode(std::span<const int32_t> ids) const {
  const Impl& s = *impl_;
  std::string bytes;
  for (int32_t id : ids) {
    if (auto it = s.added_by_id.find(id); it != s.added_by_id.end()) {
      bytes += it->second;
      continue;
    }
    std::string_view token = s.model.id_to_token(id);
    if (token.empty()) fail(ErrorCode::InvalidArgument, "CLIP tokenizer ({}): cannot decode unknown id {}", s.source, id);
    const size_t before = bytes.size();
    if (!byte_level_to_bytes(token, bytes)) {
      bytes.resize(before);
      bytes += token;
    }
  }
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    if (std::string_view(bytes).substr(i, kEndOfWord.size()) == kEndOfWord) {
      out.push_back(' ');
      i += kEndOfWord.size();
    } else {
      out.push_back(bytes[i++]);
    }
  }
  // Python's str.strip(): ASCII white space is what can end up at the edges here.
  constexpr std::string_view kStrip = " \t\n\r\v\f";
  const size_t first = out.find_first_not_of(kStrip);
  if (first == std::string::npos) return {};
  return out.substr(first, out.find_last_not_of(kStrip) - first + 1);
}

int32_t ClipTokenizer::bos_id() const { return impl_->bos_id; }
int32_t ClipTokenizer::eos_id() const { return impl_->eos_id; }
int32_t ClipTokenizer::pad_id() const { return impl_->pad_id; }

std::optional<int32_t> ClipTokenizer::token_to_id(std::string_view token) const {
  for (const auto& [id, content] : impl_->added_by_id) {
    if (content == token) return id;
  }
  return impl_->model.token_to_id(token);
}

std::string_view ClipTokenizer::id_to_token(int32_t id) const {
  if (auto it = impl_->added_by_id.find(id); it != impl_->added_by_id.end()) return it->second;
  return impl_->model.id_to_token(id);
}

size_t ClipTokenizer::vocab_size() const { return impl_->vocab_size; }
size_t ClipTokenizer::merge_count() const { return impl_->model.merge_count(); }
const std::string& ClipTokenizer::source() const { return impl_->source; }

}  // namespace fluxrt::tokenizers
