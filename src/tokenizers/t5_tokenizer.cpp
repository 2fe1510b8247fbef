#include "tokenizers/t5_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>

#include "core/error.h"
#include "tokenizers/added_tokens.h"
#include "tokenizers/byte_level.h"
#include "tokenizers/unigram_model.h"

namespace fluxrt::tokenizers {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kT5SentinelCount = 100;  // <extra_id_0> .. <extra_id_99>, T5Tokenizer's extra_ids
constexpr int kMaxLengthLimit = 1 << 20;
constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 "▁"

std::string read_file(const fs::path& path, const char* what) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail(ErrorCode::Io, "{}: is a directory, not a {}", path.string(), what);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCode::NotFound, "{}: cannot open the {}", path.string(), what);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(ErrorCode::Io, "{}: read failed", path.string());
  return text.str();
}

// Rust's char::is_whitespace (Unicode White_Space), which `tokenizers`' WhitespaceSplit uses.
bool is_unicode_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// ---- a minimal protobuf reader for the two fields of spiece.model that the SentencePiece API
// does not expose (normalizer_spec.precompiled_charsmap, trainer_spec.model_type) ----------------

struct ProtoReader {
  std::string_view data;
  size_t pos = 0;
  std::string_view label;

  bool done() const { return pos >= data.size(); }
  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos >= data.size()) fail(ErrorCode::Format, "{}: truncated protobuf", label);
      const auto byte = static_cast<unsigned char>(data[pos++]);
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if (!(byte & 0x80)) return value;
    }
    fail(ErrorCode::Format, "{}: malformed protobuf varint", label);
  }
  // Reads one field; `payload` is set for length-delimited fields, `number` for varints.
  void field(uint32_t& tag, std::string_view& payload, uint64_t& number) {
    const uint64_t key = varint();
    tag = static_cast<uint32_t>(key >> 3);
    payload = {};
    number = 0;
    switch (key & 7) {
      case 0: number = varint(); break;
      case 1: skip(8); break;
      case 5: skip(4); break;
      case 2: {
        const uint64_t size = varint();
        if (size > data.size() - pos) fail(ErrorCode::Format, "{}: protobuf field {} overruns the file", label, tag);
        payload = data.substr(pos, static_cast<size_t>(size));
        pos += static_cast<size_t>(size);
        break;
      }
      default: fail(ErrorCode::Format, "{}: unsupported protobuf wire type {}", label, key & 7);
    }
  }
  void skip(size_t n) {
    if (n > data.size() - pos) fail(ErrorCode::Format, "{}: truncated protobuf", label);
    pos += n;
  }
};

struct SpieceExtras {
  std::string charsmap;
  uint64_t model_type = 1;  // TrainerSpec.ModelType UNIGRAM (the proto default)
};

SpieceExtras read_spiece_extras(std::string_view serialized, std::string_view label) {
  SpieceExtras extras;
  ProtoReader model{serialized, 0, label};
  uint32_t tag;
  std::string_view payload;
  uint64_t number;
  while (!model.done()) {
    model.field(tag, payload, number);
    if (tag == 2 || tag == 3) {  // ModelProto.trainer_spec, ModelProto.normalizer_spec
      ProtoReader inner{payload, 0, label};
      uint32_t inner_tag;
      std::string_view inner_payload;
      uint64_t inner_number;
      while (!inner.done()) {
        inner.field(inner_tag, inner_payload, inner_number);
        if (tag == 2 && inner_tag == 3) extras.model_type = inner_number;                     // model_type
        if (tag == 3 && inner_tag == 2) extras.charsmap = std::string(inner_payload);          // precompiled_charsmap
      }
    }
  }
  return extras;
}

std::string base64_decode(std::string_view text, std::string_view label) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    if (c == '=') break;
    const int v = value(c);
    if (v < 0) fail(ErrorCode::Format, "{}: precompiled_charsmap is not base64", label);
    bits = (bits << 6) | static_cast<uint32_t>(v);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out.push_back(static_cast<char>((bits >> count) & 0xFF));
    }
  }
  return out;
}

// The Precompiled charsmap of a tokenizer.json normalizer (alone or inside a Sequence).
const json* find_precompiled(const json& normalizer) {
  if (!normalizer.is_object()) return nullptr;
  auto type = normalizer.find("type");
  if (type == normalizer.end() || !type->is_string()) return nullptr;
  if (*type == "Precompiled") return &normalizer;
  if (*type == "Sequence") {
    if (auto list = normalizer.find("normalizers"); list != normalizer.end() && list->is_array()) {
      for (const json& item : *list)
        if (const json* found = find_precompiled(item)) return found;
    }
  }
  return nullptr;
}

}  // namespace

struct T5Tokenizer::Impl {
  std::string source;
  std::unique_ptr<UnigramModel> model;
  PrecompiledCharsmap charsmap;
  AddedTokenMatcher specials;
  int32_t pad_id = 0, eos_id = 1;

  void set_special_ids() {
    auto find = [&](const char* content, int32_t fallback) {
      for (const AddedToken& t : specials.tokens())
        if (t.content == content) return t.id;
      const int32_t id = model->piece_to_id(content);
      return id >= 0 ? id : fallback;
    };
    pad_id = find("<pad>", -1);
    eos_id = find("</s>", -1);
    if (pad_id < 0 || eos_id < 0) fail(ErrorCode::Format, "{}: the T5 vocabulary lacks <pad> or </s>", source);
  }

  // One plain-text segment: charsmap, WhitespaceSplit, Metaspace (prepend "▁", split before every
  // "▁"), Unigram per piece.
  void encode_text(std::string_view text, std::vector<int32_t>& out) const {
    const std::string normalized = charsmap.normalize(text);
    std::string word;
    auto flush_word = [&]() {
      if (word.empty()) return;
      if (word.compare(0, kMetaspace.size(), kMetaspace) != 0) word.insert(0, kMetaspace);
      // Split with the delimiter merged into the piece that follows it.
      size_t start = 0;
      while (start < word.size()) {
        size_t next = word.find(kMetaspace, start + kMetaspace.size());
        if (word.compare(start, kMetaspace.size(), kMetaspace) != 0) next = word.find(kMetaspace, start);
        if (next == std::string::npos) next = word.size();
        model->encode(std::string_view(word).substr(start, next - start), out);
        start = next;
      }
      word.clear();
    };
    for (size_t pos = 0; pos < normalized.size();) {
      const size_t at = pos;
      const char32_t cp = next_code_point(normalized, pos);
      if (is_unicode_whitespace(cp)) flush_word();
      else word.append(normalized, at, pos - at);
    }
    flush_word();
  }
};

T5Tokenizer::T5Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
T5Tokenizer::T5Tokenizer(T5Tokenizer&&) noexcept = default;
T5Tokenizer& T5Tokenizer::operator=(T5Tokenizer&&) noexcept = default;
T5Tokenizer::~T5Tokenizer() = default;

T5Tokenizer T5Tokenizer::from_spiece_model(const fs::path& path) {
  const std::string label = path.string();
  const std::string bytes = read_file(path, "SentencePiece model");
  sentencepiece::SentencePieceProcessor processor;
  const auto status = processor.LoadFromSerializedProto(bytes);
  if (!status.ok()) fail(ErrorCode::Format, "{}: not a SentencePiece model ({})", label, status.ToString());
  const SpieceExtras extras = read_spiece_extras(bytes, label);
  if (extras.model_type != 1)
    fail(ErrorCode::Unsupported, "{}: SentencePiece model type {} is not unigram (T5 uses unigram)", label,
         extras.model_type);
  auto impl = std::make_unique<Impl>();
  impl->source = label;
  const int count = processor.GetPieceSize();
  std::vector<std::pair<std::string, double>> pieces;
  pieces.reserve(static_cast<size_t>(count) + kT5SentinelCount);
  int32_t unk = -1;
  std::vector<AddedToken> specials;
  for (int id = 0; id < count; ++id) {
    pieces.emplace_back(processor.IdToPiece(id), static_cast<double>(processor.GetScore(id)));
    if (processor.IsUnknown(id)) unk = id;
    // transformers makes the control pieces and <unk> special tokens matched in the raw text.
    if (processor.IsControl(id) || processor.IsUnknown(id))
      specials.push_back({processor.IdToPiece(id), id, true});
  }
  if (unk < 0) fail(ErrorCode::Format, "{}: the SentencePiece model has no unknown piece", label);
  // T5Tokenizer appends the sentinels in reverse: <extra_id_99> gets the first free id.
  for (int i = kT5SentinelCount - 1; i >= 0; --i) {
    std::string sentinel = "<extra_id_" + std::to_string(i) + ">";
    specials.push_back({sentinel, static_cast<int32_t>(pieces.size()), true});
    pieces.emplace_back(std::move(sentinel), 0.0);
  }
  impl->model = std::make_unique<UnigramModel>(std::move(pieces), unk, label);
  impl->charsmap = PrecompiledCharsmap(extras.charsmap, label);
  impl->specials = AddedTokenMatcher(std::move(specials));
  impl->set_special_ids();
  return T5Tokenizer(std::move(impl));
}

T5Tokenizer T5Tokenizer::from_tokenizer_json(const fs::path& path) {
  const std::string label = path.string();
  const std::string text = read_file(path, "tokenizer.json");
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    fail(ErrorCode::Format, "{}: invalid JSON ({})", label, e.what());
  }
  try {
    const json& model = doc.at("model");
    if (model.at("type") != "Unigram")
      fail(ErrorCode::Unsupported, "{}: model type {} is not Unigram (T5)", label, model.at("type").dump());
    if (model.value("byte_fallback", false))
      fail(ErrorCode::Unsupported, "{}: Unigram byte_fallback is not supported (T5 has none)", label);
    std::vector<std::pair<std::string, double>> pieces;
    for (const json& entry : model.at("vocab")) {
      if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_number())
        fail(ErrorCode::Format, "{}: a Unigram vocab entry is not [piece, score]", label);
      pieces.emplace_back(entry[0].get<std::string>(), entry[1].get<double>());
    }
    const json& unk_json = model.at("unk_id");
    if (!unk_json.is_number_integer()) fail(ErrorCode::Format, "{}: Unigram unk_id is not an integer", label);
    const auto unk = unk_json.get<int64_t>();
    if (unk < 0 || unk >= static_cast<int64_t>(pieces.size()))
      fail(ErrorCode::Format, "{}: unk id {} outside the vocabulary of {}", label, unk, pieces.size());
    auto impl = std::make_unique<Impl>();
    impl->source = label;
    impl->model = std::make_unique<UnigramModel>(std::move(pieces), static_cast<int32_t>(unk), label);
    if (auto normalizer = doc.find("normalizer"); normalizer != doc.end()) {
      if (const json* pre = find_precompiled(*normalizer)) {
        const json& charsmap = pre->at("precompiled_charsmap");
        if (!charsmap.is_null())
          impl->charsmap = PrecompiledCharsmap(base64_decode(charsmap.get<std::string>(), label), label);
      }
    }
    std::vector<AddedToken> specials;
    if (auto added = doc.find("added_tokens"); added != doc.end() && added->is_array()) {
      for (const json& t : *added) {
        AddedToken token;
        token.content = t.at("content").get<std::string>();
        token.id = t.at("id").get<int32_t>();
        token.special = t.value("special", false);
        token.lstrip = t.value("lstrip", false);
        token.rstrip = t.value("rstrip", false);
        token.single_word = t.value("single_word", false);
        if (t.value("normalized", false))
          fail(ErrorCode::Unsupported, "{}: added token \"{}\" is matched after normalisation (not supported)", label,
               token.content);
        if (token.id < 0 || static_cast<size_t>(token.id) >= impl->model->size())
          fail(ErrorCode::Format, "{}: added token \"{}\" has id {} outside the vocabulary", label, token.content,
               token.id);
        specials.push_back(std::move(token));
      }
    }
    impl->specials = AddedTokenMatcher(std::move(specials));
    impl->set_special_ids();
    return T5Tokenizer(std::move(impl));
  } catch (const json::exception& e) {
    fail(ErrorCode::Format, "{}: unexpected tokenizer.json layout ({})", label, e.what());
  }
}

T5Tokenizer T5Tokenizer::from_directory(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / "spiece.model", ec)) return from_spiece_model(dir / "spiece.model");
  if (fs::exists(dir / "tokenizer.json", ec)) return from_tokenizer_json(dir / "tokenizer.json");
  fail(ErrorCode::NotFound, "{}: no spiece.model or tokenizer.json (T5 tokenizer)", dir.string());
}

std::vector<int32_t> T5Tokenizer::encode(std::string_view text) const {
  if (const size_t bad = find_invalid_utf8(text); bad != std::string_view::npos)
    fail(ErrorCode::InvalidArgument, "t5 tokenizer: the prompt is not valid UTF-8 (byte {})", bad);
  std::vector<TextSegment> segments;
  impl_->specials.split(text, segments);
  std::vector<int32_t> ids;
  for (const TextSegment& segment : segments) {
    if (segment.token_id >= 0) ids.push_back(segment.token_id);
    else impl_->encode_text(segment.text, ids);
  }
  ids.push_back(impl_->eos_id);
  return ids;
}

PromptEncoding T5Tokenizer::encode_padded(std::string_view text, int max_length) const {
  if (max_length < 1 || max_length > kMaxLengthLimit)
    fail(ErrorCode::InvalidArgument, "t5 tokenizer: max_length {} outside 1..{}", max_length, kMaxLengthLimit);
  std::vector<int32_t> ids = encode(text);
  const size_t length = static_cast<size_t>(max_length);
  PromptEncoding r;
  r.truncated = ids.size() > length;
  if (r.truncated) {
    // truncation=True with special tokens: the text ids are cut, the appended </s> stays.
    ids.resize(length);
    ids.back() = impl_->eos_id;
  }
  r.num_tokens = static_cast<int32_t>(ids.size());
  r.input_ids = ids;
  r.input_ids.resize(length, impl_->pad_id);
  r.attention_mask.assign(length, 0);
  std::fill_n(r.attention_mask.begin(), ids.size(), 1);
  return r;
}

PromptBatch T5Tokenizer::encode_batch(const std::vector<std::string>& prompts, int max_length) const {
  PromptBatch batch;
  batch.batch = static_cast<int32_t>(prompts.size());
  batch.length = max_length;
  for (const std::string& prompt : prompts) {
    PromptEncoding row = encode_padded(prompt, max_length);
    batch.input_ids.insert(batch.input_ids.end(), row.input_ids.begin(), row.input_ids.end());
    batch.attention_mask.insert(batch.attention_mask.end(), row.attention_mask.begin(), row.attention_mask.end());
    batch.num_tokens.push_back(row.num_tokens);
  }
  return batch;
}

std::string T5Tokenizer::normalize(std::string_view text) const {
  if (const size_t bad = find_invalid_utf8(text); bad != std::string_view::npos)
    fail(ErrorCode::InvalidArgument, "t5 tokenizer: the text is not valid UTF-8 (byte {})", bad);
  return impl_->charsmap.normalize(text);
}

std::optional<int32_t> T5Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& t : impl_->specials.tokens())
    if (t.content == token) return t.id;
  const int32_t id = impl_->model->piece_to_id(token);
  if (id < 0) return std::nullopt;
  return id;
}

std::string_view T5Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->model->size()) return {};
  return impl_->model->piece(id);
}

size_t T5Tokenizer::vocab_size() const { return impl_->model->size(); }
int32_t T5Tokenizer::pad_id() const { return impl_->pad_id; }
int32_t T5Tokenizer::eos_id() const { return impl_->eos_id; }
int32_t T5Tokenizer::unk_id() const { return impl_->model->unk_id(); }
const std::string& T5Tokenizer::source() const { return impl_->source; }

}  // namespace fluxrt::tokenizers
