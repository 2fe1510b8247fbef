#include "tokenizers/unigram_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <utf8proc.h>

#include "core/error.h"
#include "tokenizers/byte_level.h"

namespace fluxrt::tokenizers {
namespace {

// `tokenizers` and SentencePiece both score an unknown character at (lowest piece score - 10).
constexpr double kUnknownPenalty = 10.0;

size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  return 4;
}

// Darts-clone double-array unit layout (the format SentencePiece writes into the charsmap).
inline bool unit_has_leaf(uint32_t unit) { return ((unit >> 8) & 1) != 0; }
inline uint32_t unit_value(uint32_t unit) { return unit & ((1u << 31) - 1); }
inline uint32_t unit_label(uint32_t unit) { return unit & ((1u << 31) | 0xFF); }
inline uint32_t unit_offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

}  // namespace

// ---- Unigram --------------------------------------------------------------------------------

UnigramModel::UnigramModel(std::vector<std::pair<std::string, double>> pieces, int32_t unk_id, std::string_view label)
    : pieces_(std::move(pieces)), unk_id_(unk_id) {
  if (pieces_.empty()) fail(ErrorCode::Format, "{}: the unigram vocabulary is empty", label);
  if (unk_id < 0 || static_cast<size_t>(unk_id) >= pieces_.size())
    fail(ErrorCode::Format, "{}: unk id {} outside the vocabulary of {}", label, unk_id, pieces_.size());
  double min_score = std::numeric_limits<double>::infinity();
  trie_.emplace_back();
  ids_.reserve(pieces_.size());
  for (size_t id = 0; id < pieces_.size(); ++id) {
    const std::string& piece = pieces_[id].first;
    if (piece.empty()) fail(ErrorCode::Format, "{}: unigram piece {} is empty", label, id);
    if (find_invalid_utf8(piece) != std::string_view::npos)
      fail(ErrorCode::Format, "{}: unigram piece {} is not valid UTF-8", label, id);
    if (!std::isfinite(pieces_[id].second)) fail(ErrorCode::Format, "{}: unigram piece {} has no finite score", label, id);
    if (!ids_.emplace(std::string_view(piece), static_cast<int32_t>(id)).second)
      fail(ErrorCode::Format, "{}: unigram piece \"{}\" appears twice", label, piece);
    min_score = std::min(min_score, pieces_[id].second);
    int32_t node = 0;
    for (unsigned char byte : piece) {
      int32_t next = child(node, byte);
      if (next < 0) {
        next = static_cast<int32_t>(trie_.size());
        auto& kids = trie_[static_cast<size_t>(node)].children;
        kids.insert(std::lower_bound(kids.begin(), kids.end(), std::make_pair(byte, int32_t{-1})),
                    std::make_pair(byte, next));
        trie_.emplace_back();
      }
      node = next;
    }
    trie_[static_cast<size_t>(node)].piece = static_cast<int32_t>(id);
  }
  unk_score_ = min_score - kUnknownPenalty;
}

int32_t UnigramModel::child(int32_t node, unsigned char byte) const {
  const auto& kids = trie_[static_cast<size_t>(node)].children;
  auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(byte, int32_t{-1}));
  return it != kids.end() && it->first == byte ? it->second : -1;
}

int32_t UnigramModel::piece_to_id(std::string_view piece) const {
  auto it = ids_.find(piece);
  return it == ids_.end() ? -1 : it->second;
}

void UnigramModel::encode(std::string_view word, std::vector<int32_t>& out) const {
  const size_t n = word.size();
  if (n == 0) return;
  struct Best {
    double score = 0;
    int64_t start = -1;  // -1: not reached yet
    int32_t id = -1;
  };
  std::vector<Best> best(n + 1);
  best[0].start = 0;
  for (size_t start = 0; start < n;) {
    const size_t char_len = std::min(utf8_length(static_cast<unsigned char>(word[start])), n - start);
    const double base = best[start].score;
    bool single_char_piece = false;
    // Every piece that is a prefix of word[start..], shortest first; ties keep the earlier one.
    int32_t node = 0;
    for (size_t end = start; end < n; ++end) {
      node = child(node, static_cast<unsigned char>(word[end]));
      if (node < 0) break;
      const int32_t id = trie_[static_cast<size_t>(node)].piece;
      if (id < 0) continue;
      Best& target = best[end + 1];
      const double candidate = base + pieces_[static_cast<size_t>(id)].second;
      if (target.start < 0 || candidate > target.score) target = {candidate, static_cast<int64_t>(start), id};
      if (end + 1 - start == char_len) single_char_piece = true;
    }
    if (!single_char_piece) {
      Best& target = best[start + char_len];
      const double candidate = base + unk_score_;
      if (target.start < 0 || candidate > target.score) target = {candidate, static_cast<int64_t>(start), unk_id_};
    }
    start += char_len;
  }
  // Backtrack, then emit in order; runs of unknowns become one unknown token.
  std::vector<int32_t> reversed;
  for (size_t end = n; end > 0;) {
    const Best& b = best[end];
    reversed.push_back(b.id);
    end = static_cast<size_t>(b.start);
  }
  bool previous_unknown = false;
  for (auto it = reversed.rbegin(); it != reversed.rend(); ++it) {
    const bool unknown = *it == unk_id_;
    if (!(unknown && previous_unknown)) out.push_back(*it);
    previous_unknown = unknown;
  }
}

// ---- precompiled charsmap -------------------------------------------------------------------

PrecompiledCharsmap::PrecompiledCharsmap(std::string blob, std::string_view label) : blob_(std::move(blob)) {
  if (blob_.empty()) return;  // no normalisation rules
  if (blob_.size() < 4) fail(ErrorCode::Format, "{}: precompiled charsmap of {} bytes", label, blob_.size());
  uint32_t trie_bytes = 0;
  for (int i = 3; i >= 0; --i) trie_bytes = (trie_bytes << 8) | static_cast<unsigned char>(blob_[static_cast<size_t>(i)]);
  if (trie_bytes == 0 || trie_bytes % 4 != 0 || trie_bytes > blob_.size() - 4)
    fail(ErrorCode::Format, "{}: precompiled charsmap trie size {} does not fit its {} bytes", label, trie_bytes,
         blob_.size());
  units_.resize(trie_bytes / 4);
  for (size_t i = 0; i < units_.size(); ++i) {
    const auto* p = reinterpret_cast<const unsigned char*>(blob_.data()) + 4 + 4 * i;
    units_[i] = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
                (static_cast<uint32_t>(p[3]) << 24);
  }
  replacements_ = std::string_view(blob_).substr(4 + trie_bytes);
  if (find_invalid_utf8(replacements_) != std::string_view::npos)
    fail(ErrorCode::Format, "{}: precompiled charsmap replacements are not valid UTF-8", label);
}

bool PrecompiledCharsmap::first_match(std::string_view key, std::string_view& replacement) const {
  size_t node = unit_offset(units_[0]);
  for (unsigned char c : key) {
    if (c == 0) return false;  // keys are NUL-terminated in the trie
    node ^= c;
    if (node >= units_.size()) return false;
    const uint32_t unit = units_[node];
    if (unit_label(unit) != c) return false;
    node ^= unit_offset(unit);
    if (node >= units_.size()) return false;
    if (unit_has_leaf(unit)) {
      const size_t start = unit_value(units_[node]);
      if (start >= replacements_.size()) return false;  // a malformed blob never matches
      const size_t end = replacements_.find('\0', start);
      replacement = replacements_.substr(start, (end == std::string_view::npos ? replacements_.size() : end) - start);
      return true;
    }
  }
  return false;
}

std::string PrecompiledCharsmap::normalize(std::string_view text) const {
  if (units_.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  std::string_view replacement;
  auto emit_cluster = [&](std::string_view cluster) {
    if (cluster.size() < 6 && first_match(cluster, replacement)) {
      out.append(replacement);
      return;
    }
    for (size_t pos = 0; pos < cluster.size();) {
      const size_t len = std::min(utf8_length(static_cast<unsigned char>(cluster[pos])), cluster.size() - pos);
      const std::string_view one = cluster.substr(pos, len);
      if (first_match(one, replacement)) out.append(replacement);
      else out.append(one);
      pos += len;
    }
  };
  // Extended grapheme clusters (UAX #29), as the unicode-segmentation crate yields them.
  size_t cluster_start = 0;
  utf8proc_int32_t state = 0;
  utf8proc_int32_t previous = -1;
  for (size_t pos = 0; pos < text.size();) {
    const size_t at = pos;
    const char32_t cp = next_code_point(text, pos);
    if (previous >= 0 && utf8proc_grapheme_break_stateful(previous, static_cast<utf8proc_int32_t>(cp), &state)) {
      emit_cluster(text.substr(cluster_start, at - cluster_start));
      cluster_start = at;
    }
    previous = static_cast<utf8proc_int32_t>(cp);
  }
  if (cluster_start < text.size()) emit_cluster(text.substr(cluster_start));
  return out;
}

}  // namespace fluxrt::tokenizers
