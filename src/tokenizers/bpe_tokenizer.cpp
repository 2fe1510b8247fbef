#include "tokenizers/bpe_tokenizer.h"

#include "core/error.h"
#include "tokenizers/bpe_tokenizer_impl.h"
#include "tokenizers/byte_level.h"

namespace fluxrt::tokenizers {

void BpeTokenizer::Impl::finish_added_tokens() {
  std::vector<AddedToken> raw, normalized;
  added_by_id.clear();
  size_t extra_ids = 0;
  for (const AddedToken& token : added) {
    (token.normalized ? normalized : raw).push_back(token);
    if (added_by_id.emplace(token.id, token.content).second && model.id_to_token(token.id).empty()) ++extra_ids;
  }
  raw_matcher = AddedTokenMatcher(std::move(raw));
  normalized_matcher = AddedTokenMatcher(std::move(normalized));
  vocab_size = model.vocab_size() + extra_ids;
}

BpeTokenizer::BpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;
BpeTokenizer::~BpeTokenizer() = default;

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  encode(text, ids);
  return ids;
}

void BpeTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  const Impl& s = *impl_;
  size_t bad = find_invalid_utf8(text);
  if (bad != std::string_view::npos) {
    fail(ErrorCode::InvalidArgument, "tokenizer ({}): input text is not valid UTF-8 (byte {} of {})", s.source,
         bad, text.size());
  }
  std::vector<TextSegment> segments;
  if (s.raw_matcher.empty()) {
    segments.push_back({text, -1});
  } else {
    s.raw_matcher.split(text, segments);
  }
  std::vector<std::string_view> pieces;
  std::vector<TextSegment> inner;
  std::string normalized;
  auto encode_plain = [&](std::string_view plain) {
    pieces.clear();
    if (s.splitter) {
      s.splitter->split(plain, pieces);
    } else {
      pieces.push_back(plain);
    }
    for (std::string_view piece : pieces) s.model.encode_word(piece, out);
  };
  for (const TextSegment& segment : segments) {
    if (segment.token_id >= 0) {
      out.push_back(segment.token_id);
      continue;
    }
    std::string_view plain = segment.text;
    if (normalize_unicode(plain, s.normalization, normalized)) plain = normalized;
    if (s.normalized_matcher.empty()) {
      encode_plain(plain);
      continue;
    }
    inner.clear();
    s.normalized_matcher.split(plain, inner);
    for (const TextSegment& part : inner) {
      if (part.token_id >= 0) {
        out.push_back(part.token_id);
      } else {
        encode_plain(part.text);
      }
    }
  }
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  const Impl& s = *impl_;
  std::string out;
  for (int32_t id : ids) {
    if (auto it = s.added_by_id.find(id); it != s.added_by_id.end()) {
      out += it->second;
      continue;
    }
    std::string_view token = s.model.id_to_token(id);
    if (token.empty()) fail(ErrorCode::InvalidArgument, "tokenizer ({}): cannot decode unknown id {}", s.source, id);
    size_t before = out.size();
    if (!byte_level_to_bytes(token, out)) {
      out.resize(before);
      out += token;  // not a byte-level string: emit it as written
    }
  }
  return out;
}

std::optional<int32_t> BpeTokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& added : impl_->added) {
    if (added.content == token) return added.id;
  }
  return impl_->model.token_to_id(token);
}

std::string_view BpeTokenizer::id_to_token(int32_t id) const {
  if (auto it = impl_->added_by_id.find(id); it != impl_->added_by_id.end()) return it->second;
  return impl_->model.id_to_token(id);
}

size_t BpeTokenizer::vocab_size() const { return impl_->vocab_size; }
size_t BpeTokenizer::merge_count() const { return impl_->model.merge_count(); }
const std::vector<AddedToken>& BpeTokenizer::added_tokens() const { return impl_->added; }
const TokenizerConfig& BpeTokenizer::config() const { return impl_->config; }
const std::string& BpeTokenizer::source() const { return impl_->source; }

}  // namespace fluxrt::tokenizers
