#pragma once
// The BPE model proper: the vocabulary (token string <-> id), the merge table ranked by position
// in merges.txt / tokenizer.json, and the merge loop that turns the bytes of one pre-token into ids.
// Symbols are ids throughout: a pre-token starts as one id per byte (the byte-level alphabet makes
// every byte a vocabulary entry) and each merge replaces a pair of ids by the id of their
// concatenation, so no strings are built while encoding.
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fluxrt::tokenizers {

// Hash of a byte string (vocabulary keys, the word cache).
uint64_t hash_bytes(std::string_view bytes);

// Open-addressing map from token string to id. The strings live in one arena and each slot holds
// the offset, length and id itself, so a lookup touches one slot and the arena only: loading
// resolves ~450k strings for the merges, and that is bound by cache misses.
class StringIdMap {
 public:
  void reserve(size_t count, size_t total_bytes);
  // Returns the arena offset of the new key, or nullopt when it is already present (the first id
  // is kept).
  std::optional<uint32_t> insert(std::string_view key, int32_t id) { return insert(key, hash_bytes(key), id); }
  std::optional<int32_t> find(std::string_view key) const { return find(key, hash_bytes(key)); }
  // Forms taking hash_bytes(key), and prefetches: loading issues the memory accesses of a batch of
  // keys before using any of them, which hides most of the cache misses that otherwise dominate.
  std::optional<uint32_t> insert(std::string_view key, uint64_t hash, int32_t id);
  std::optional<int32_t> find(std::string_view key, uint64_t hash) const;
  void prefetch_slot(uint64_t hash) const;
  void prefetch_key(uint64_t hash) const;  // the arena bytes of the first slot whose tag matches
  size_t size() const { return size_; }
  std::string_view view(uint32_t offset, uint32_t length) const { return {arena_.data() + offset, length}; }

 private:
  struct Slot {
    uint32_t tag;     // high hash bits, to skip most string compares
    uint32_t offset;  // into arena_
    uint32_t length;
    int32_t id;  // -1: empty slot
  };
  void rehash(size_t slot_count);
  std::string arena_;
  std::vector<Slot> slots_;  // size is a power of two
  size_t size_ = 0;
};

class BpeModel {
 public:
  BpeModel() = default;
  BpeModel(BpeModel&&) = delete;  // the cache mutex pins it; BpeTokenizer owns it through a pointer

  // Vocabulary entry in model form (byte-level string for byte-level models). Fails with
  // ErrorCode::Format on a negative id or one above 2^24 (no real vocabulary is that large).
  void add_token(std::string_view token, int32_t id, std::string_view label);
  // Merges must be added in rank order. Both sides and their concatenation must be in the
  // vocabulary, as the Hugging Face loader also requires.
  void add_merge(std::string_view left, std::string_view right, std::string_view label);
  // Batched forms (same results, far fewer stalls on cache misses). The views must stay valid
  // during the call only.
  struct TokenEntry {
    std::string_view token;
    int32_t id;
  };
  struct MergeEntry {
    std::string_view left, right;
  };
  static constexpr size_t kBatch = 64;
  void add_tokens(const TokenEntry* batch, size_t count, std::string_view label);
  void add_merges(const MergeEntry* batch, size_t count, std::string_view label);
  // After all tokens: resolves the per-byte start symbols. `unk_token` may be empty.
  void finalize(std::string_view unk_token, bool ignore_merges, std::string_view label);
  // CLIP-style models mark the end of each pre-token: its last symbol starts as that byte's symbol
  // followed by `suffix` ("</w>"), which is a separate vocabulary entry. Call after finalize().
  void set_end_of_word_suffix(std::string_view suffix, std::string_view label);

  // Appends the ids of one pre-token given as raw bytes.
  void encode_word(std::string_view bytes, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const { return vocab_.find(token); }
  // Empty view for ids that have no entry.
  std::string_view id_to_token(int32_t id) const;
  int32_t max_id() const { return max_id_; }
  size_t vocab_size() const { return vocab_.size(); }
  size_t merge_count() const { return merge_count_; }
  void reserve(size_t tokens, size_t token_bytes, size_t merges);

 private:
  struct MergeSlot {
    uint64_t key;  // (left << 32) | right; kEmptyKey when free
    int32_t rank;
    int32_t id;
  };
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};
  const MergeSlot* find_merge(int32_t left, int32_t right) const;
  void insert_merge(uint64_t key, int32_t rank, int32_t id);
  void grow_merges();
  void add_token_hashed(std::string_view token, uint64_t hash, int32_t id, std::string_view label);
  // Resolves the id of left+right (with the sequential-id fast path) and records the merge.
  void record_merge(std::string_view left, std::string_view right, int32_t left_id, int32_t right_id,
                    std::string_view label);
  void merge_small(std::vector<int32_t>& symbols) const;
  void merge_large(std::vector<int32_t>& symbols) const;

  StringIdMap vocab_;
  struct Span {
    uint32_t offset = 0, length = 0;
    bool present = false;
  };
  std::vector<Span> id_to_token_;  // into vocab_'s arena
  int32_t max_id_ = -1;
  int32_t last_merged_id_ = -1;    // for the sequential-id fast path in record_merge
  std::vector<MergeSlot> merges_;  // power-of-two open-addressing table
  size_t merge_count_ = 0;
  std::string concat_;  // scratch for add_merge
  int32_t byte_ids_[256] = {};
  std::string end_of_word_suffix_;          // empty: no end-of-word marking
  int32_t end_of_word_byte_ids_[256] = {};  // byte symbol + suffix, when the suffix is set
  int32_t unk_id_ = -1;
  bool ignore_merges_ = false;

  // Pre-token cache, as in the reference implementation: prompts repeat words.
  static constexpr size_t kCacheCapacity = 10000;
  static constexpr size_t kCacheMaxWordBytes = 64;
  struct ViewHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return hash_bytes(s); }
  };
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, ViewHash, std::equal_to<>> cache_;
};

}  // namespace fluxrt::tokenizers
