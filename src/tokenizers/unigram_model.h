#pragma once
// SentencePiece-style Unigram segmentation as the Hugging Face `tokenizers` Unigram model runs it
// (T5): Viterbi over the piece log-probabilities, a character with no piece becomes the unknown
// token at (lowest score - 10), consecutive unknowns fuse into one, no byte fallback. And the
// SentencePiece "precompiled charsmap" normaliser (a Darts double-array trie of replacement rules)
// applied the way `tokenizers`' Precompiled normaliser applies it, which is what transformers uses.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fluxrt::tokenizers {

class UnigramModel {
 public:
  // `pieces[id]` = (piece text, score). Every piece takes part in the search, control pieces
  // included, as in `tokenizers` (so "<pad>" produced by normalisation matches id 0). `label` names
  // the source file in errors (duplicate or empty pieces, bad unk id: ErrorCode::Format).
  UnigramModel(std::vector<std::pair<std::string, double>> pieces, int32_t unk_id, std::string_view label);

  // Appends the ids of one pre-token (non-empty UTF-8).
  void encode(std::string_view word, std::vector<int32_t>& out) const;

  size_t size() const { return pieces_.size(); }
  const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)].first; }
  double score(int32_t id) const { return pieces_[static_cast<size_t>(id)].second; }
  int32_t unk_id() const { return unk_id_; }
  // -1 when absent.
  int32_t piece_to_id(std::string_view piece) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int32_t piece = -1;
  };
  int32_t child(int32_t node, unsigned char byte) const;

  std::vector<std::pair<std::string, double>> pieces_;
  std::unordered_map<std::string_view, int32_t> ids_;  // views into pieces_
  std::vector<Node> trie_;
  int32_t unk_id_ = 0;
  double unk_score_ = 0;
};

class PrecompiledCharsmap {
 public:
  PrecompiledCharsmap() = default;
  // The raw blob: u32 trie size in bytes (little endian), the trie units, then the NUL-separated
  // replacement strings. ErrorCode::Format naming `label` when it is inconsistent.
  PrecompiledCharsmap(std::string blob, std::string_view label);

  bool empty() const { return units_.empty(); }
  // `tokenizers`' rule: per extended grapheme cluster, a cluster shorter than 6 bytes is replaced
  // by the rule of its SHORTEST matching prefix when one exists (whatever follows that prefix in the
  // cluster is dropped, a quirk kept for compatibility); otherwise each code point is replaced by
  // its own shortest-prefix rule or kept. `text` must be valid UTF-8.
  std::string normalize(std::string_view text) const;
  const std::string& blob() const { return blob_; }

 private:
  // Replacement of the shortest rule matching a prefix of `key`, or false.
  bool first_match(std::string_view key, std::string_view& replacement) const;

  std::string blob_;
  std::vector<uint32_t> units_;
  std::string_view replacements_;  // into blob_
};

}  // namespace fluxrt::tokenizers
