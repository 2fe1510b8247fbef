#include "tokenizers/bpe_model.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <queue>

#include "core/error.h"
#include "tokenizers/byte_level.h"

namespace fluxrt::tokenizers {

// Ids above this are refused: the id table is dense, and a corrupt file must not make us allocate
// gigabytes.
static constexpr int64_t kMaxTokenId = 1 << 24;

uint64_t hash_bytes(std::string_view bytes) {
  // A multiply-xorshift hash over 8-byte words; tokens are short, so this is mostly one round.
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ULL;
  uint64_t h = 0x243F6A8885A308D3ULL ^ (bytes.size() * kMul);
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    h = (h ^ w) * kMul;
    h ^= h >> 29;
  }
  if (i < bytes.size()) {
    uint64_t w = 0;
    std::memcpy(&w, bytes.data() + i, bytes.size() - i);
    h = (h ^ w) * kMul;
    h ^= h >> 29;
  }
  h *= kMul;
  return h ^ (h >> 32);
}

// ---- StringIdMap ----------------------------------------------------------------------------

void StringIdMap::rehash(size_t slot_count) {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(slot_count, Slot{0, 0, 0, -1});
  const size_t mask = slot_count - 1;
  for (const Slot& slot : old) {
    if (slot.id < 0) continue;
    size_t s = hash_bytes(view(slot.offset, slot.length)) & mask;
    while (slots_[s].id >= 0) s = (s + 1) & mask;
    slots_[s] = slot;
  }
}

void StringIdMap::reserve(size_t count, size_t total_bytes) {
  arena_.reserve(total_bytes);
  size_t want = 16;
  while (want * 3 < count * 4) want <<= 1;  // load factor <= 3/4: the table is 16 bytes a slot
  if (want > slots_.size()) rehash(want);
}

void StringIdMap::prefetch_slot(uint64_t hash) const {
  if (!slots_.empty()) __builtin_prefetch(&slots_[hash & (slots_.size() - 1)]);
}

void StringIdMap::prefetch_key(uint64_t hash) const {
  if (slots_.empty()) return;
  const uint32_t tag = static_cast<uint32_t>(hash >> 32);
  const size_t mask = slots_.size() - 1;
  for (size_t s = hash & mask;; s = (s + 1) & mask) {
    const Slot& slot = slots_[s];
    if (slot.id < 0) return;
    if (slot.tag == tag) {
      __builtin_prefetch(arena_.data() + slot.offset);
      return;
    }
  }
}

std::optional<uint32_t> StringIdMap::insert(std::string_view key, uint64_t h, int32_t id) {
  if ((size_ + 1) * 4 > slots_.size() * 3) rehash(std::max<size_t>(16, slots_.size() * 2));
  const uint32_t tag = static_cast<uint32_t>(h >> 32);
  const size_t mask = slots_.size() - 1;
  size_t s = h & mask;
  while (slots_[s].id >= 0) {
    const Slot& slot = slots_[s];
    if (slot.tag == tag && view(slot.offset, slot.length) == key) return std::nullopt;
    s = (s + 1) & mask;
  }
  const uint32_t offset = static_cast<uint32_t>(arena_.size());
  arena_.append(key);
  slots_[s] = Slot{tag, offset, static_cast<uint32_t>(key.size()), id};
  ++size_;
  return offset;
}

std::optional<int32_t> StringIdMap::find(std::string_view key, uint64_t h) const {
  if (slots_.empty()) return std::nullopt;
  const uint32_t tag = static_cast<uint32_t>(h >> 32);
  const size_t mask = slots_.size() - 1;
  for (size_t s = h & mask;; s = (s + 1) & mask) {
    const Slot& slot = slots_[s];
    if (slot.id < 0) return std::nullopt;
    if (slot.tag == tag && view(slot.offset, slot.length) == key) return slot.id;
  }
}

// ---- BpeModel: tables -------------------------------------------------------------------------

void BpeModel::reserve(size_t tokens, size_t token_bytes, size_t merges) {
  vocab_.reserve(tokens, token_bytes);
  if (tokens > id_to_token_.size()) id_to_token_.resize(tokens);
  size_t want = 16;
  while (want * 3 < merges * 4) want <<= 1;  // load factor <= 3/4
  if (want > merges_.size()) {
    std::vector<MergeSlot> old = std::move(merges_);
    merges_.assign(want, MergeSlot{kEmptyKey, 0, 0});
    for (const MergeSlot& m : old) {
      if (m.key != kEmptyKey) insert_merge(m.key, m.rank, m.id);
    }
  }
}

void BpeModel::add_token(std::string_view token, int32_t id, std::string_view label) {
  add_token_hashed(token, hash_bytes(token), id, label);
}

void BpeModel::add_tokens(const TokenEntry* batch, size_t count, std::string_view label) {
  uint64_t hashes[kBatch];
  for (size_t start = 0; start < count; start += kBatch) {
    const size_t n = std::min(kBatch, count - start);
    for (size_t i = 0; i < n; ++i) {
      hashes[i] = hash_bytes(batch[start + i].token);
      vocab_.prefetch_slot(hashes[i]);
    }
    for (size_t i = 0; i < n; ++i) add_token_hashed(batch[start + i].token, hashes[i], batch[start + i].id, label);
  }
}

void BpeModel::add_token_hashed(std::string_view token, uint64_t hash, int32_t id, std::string_view label) {
  if (id < 0 || id >= kMaxTokenId) fail(ErrorCode::Format, "{}: token id {} out of range", label, id);
  auto offset = vocab_.insert(token, hash, id);
  if (!offset) return;  // duplicate strings keep their first id, like the reference
  if (static_cast<size_t>(id) >= id_to_token_.size()) id_to_token_.resize(std::max<size_t>(id + 1, id_to_token_.size() * 2));
  Span& span = id_to_token_[id];
  if (!span.present) span = Span{*offset, static_cast<uint32_t>(token.size()), true};
  max_id_ = std::max(max_id_, id);
}

std::string_view BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id > max_id_ || !id_to_token_[id].present) return {};
  return vocab_.view(id_to_token_[id].offset, id_to_token_[id].length);
}

static inline uint64_t merge_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

static inline size_t merge_hash(uint64_t key) {
  // The murmur3 finaliser: every key bit reaches the low bits used as the slot index.
  key ^= key >> 33;
  key *= 0xFF51AFD7ED558CCDULL;
  key ^= key >> 33;
  key *= 0xC4CEB9FE1A85EC53ULL;
  return static_cast<size_t>(key ^ (key >> 33));
}

void BpeModel::grow_merges() { reserve(0, 0, std::max<size_t>(16, merge_count_ * 2)); }

void BpeModel::insert_merge(uint64_t key, int32_t rank, int32_t id) {
  const size_t mask = merges_.size() - 1;
  size_t s = merge_hash(key) & mask;
  while (merges_[s].key != kEmptyKey) {
    if (merges_[s].key == key) return;  // a repeated pair keeps its best (first) rank
    s = (s + 1) & mask;
  }
  merges_[s] = MergeSlot{key, rank, id};
}

const BpeModel::MergeSlot* BpeModel::find_merge(int32_t left, int32_t right) const {
  if (left < 0 || right < 0) return nullptr;
  const uint64_t key = merge_key(left, right);
  const size_t mask = merges_.size() - 1;
  for (size_t s = merge_hash(key) & mask;; s = (s + 1) & mask) {
    const MergeSlot& m = merges_[s];
    if (m.key == key) return &m;
    if (m.key == kEmptyKey) return nullptr;
  }
}

void BpeModel::add_merge(std::string_view left, std::string_view right, std::string_view label) {
  MergeEntry entry{left, right};
  add_merges(&entry, 1, label);
}

void BpeModel::add_merges(const MergeEntry* batch, size_t count, std::string_view label) {
  uint64_t left_hash[kBatch], right_hash[kBatch];
  int32_t left_id[kBatch], right_id[kBatch];
  for (size_t start = 0; start < count; start += kBatch) {
    const size_t n = std::min(kBatch, count - start);
    const MergeEntry* merges = batch + start;
    if ((merge_count_ + n) * 4 > merges_.size() * 3) reserve(0, 0, std::max<size_t>(16, (merge_count_ + n) * 2));
    // Three passes over the batch: slots, then the strings they point to, then the lookups.
    for (size_t i = 0; i < n; ++i) {
      left_hash[i] = hash_bytes(merges[i].left);
      right_hash[i] = hash_bytes(merges[i].right);
      vocab_.prefetch_slot(left_hash[i]);
      vocab_.prefetch_slot(right_hash[i]);
    }
    for (size_t i = 0; i < n; ++i) {
      vocab_.prefetch_key(left_hash[i]);
      vocab_.prefetch_key(right_hash[i]);
    }
    for (size_t i = 0; i < n; ++i) {
      auto l = vocab_.find(merges[i].left, left_hash[i]);
      auto r = vocab_.find(merges[i].right, right_hash[i]);
      if (!l || !r) {
        fail(ErrorCode::Format, "{}: merge {} '{} {}' uses a token missing from the vocabulary", label,
             merge_count_ + i, merges[i].left, merges[i].right);
      }
      left_id[i] = *l;
      right_id[i] = *r;
      __builtin_prefetch(&merges_[merge_hash(merge_key(*l, *r)) & (merges_.size() - 1)]);
    }
    for (size_t i = 0; i < n; ++i) record_merge(merges[i].left, merges[i].right, left_id[i], right_id[i], label);
  }
}

void BpeModel::record_merge(std::string_view left, std::string_view right, int32_t left_id, int32_t right_id,
                            std::string_view label) {
  // Vocabularies are usually numbered in merge order (Qwen: merge i makes id 256 + i), so try the id
  // after the previous merge's result first; the compare makes the guess exact.
  std::optional<int32_t> merged;
  const int32_t guess = last_merged_id_ + 1;
  if (guess > 0 && guess <= max_id_ && id_to_token_[guess].present &&
      id_to_token_[guess].length == left.size() + right.size()) {
    std::string_view candidate = vocab_.view(id_to_token_[guess].offset, id_to_token_[guess].length);
    if (candidate.substr(0, left.size()) == left && candidate.substr(left.size()) == right) merged = guess;
  }
  if (!merged) {
    concat_.assign(left);
    concat_.append(right);
    merged = vocab_.find(concat_);
  }
  if (!merged) {
    fail(ErrorCode::Format, "{}: merge {} '{} {}' produces a token missing from the vocabulary", label,
         merge_count_, left, right);
  }
  last_merged_id_ = *merged;
  if ((merge_count_ + 1) * 4 > merges_.size() * 3) grow_merges();
  insert_merge(merge_key(left_id, right_id), static_cast<int32_t>(merge_count_), *merged);
  ++merge_count_;
}

void BpeModel::finalize(std::string_view unk_token, bool ignore_merges, std::string_view label) {
  if (merges_.empty()) merges_.assign(16, MergeSlot{kEmptyKey, 0, 0});
  unk_id_ = -1;
  if (!unk_token.empty()) {
    auto unk = vocab_.find(unk_token);
    if (!unk) fail(ErrorCode::Format, "{}: unk_token '{}' is not in the vocabulary", label, unk_token);
    unk_id_ = *unk;
  }
  ignore_merges_ = ignore_merges;
  std::string symbol;
  const auto& alphabet = byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    symbol.clear();
    append_utf8(symbol, alphabet[b]);
    auto id = vocab_.find(symbol);
    // A byte without a symbol becomes unk, or is dropped when the model has no unk token
    // (what the reference BPE does); -1 never takes part in a merge.
    byte_ids_[b] = id ? *id : unk_id_;
  }
}

void BpeModel::set_end_of_word_suffix(std::string_view suffix, std::string_view label) {
  end_of_word_suffix_.assign(suffix);
  if (suffix.empty()) return;
  std::string symbol;
  const auto& alphabet = byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    symbol.clear();
    append_utf8(symbol, alphabet[b]);
    symbol.append(suffix);
    auto id = vocab_.find(symbol);
    if (!id && unk_id_ < 0) {
      fail(ErrorCode::Format, "{}: end-of-word symbol '{}' is not in the vocabulary", label, symbol);
    }
    end_of_word_byte_ids_[b] = id ? *id : unk_id_;
  }
}

// ---- BpeModel: the merge loop -------------------------------------------------------------------

// Both variants apply, until none is left, the lowest-ranked merge at its leftmost position, which is
// the order the reference (a heap keyed by rank, then position) applies them in.
void BpeModel::merge_small(std::vector<int32_t>& symbols) const {
  while (symbols.size() > 1) {
    int32_t best_rank = INT32_MAX;
    size_t best_pos = 0;
    int32_t best_id = -1;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const MergeSlot* m = find_merge(symbols[i], symbols[i + 1]);
      if (m && m->rank < best_rank) {
        best_rank = m->rank;
        best_pos = i;
        best_id = m->id;
      }
    }
    if (best_id < 0) return;
    symbols[best_pos] = best_id;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best_pos) + 1);
  }
}

void BpeModel::merge_large(std::vector<int32_t>& symbols) const {
  // O(n log n) for long pre-tokens (a page of CJK text is one \p{L}+ run): a doubly linked list of
  // symbols and a min-heap of candidate pairs; stale candidates are skipped when popped.
  const int32_t n = static_cast<int32_t>(symbols.size());
  std::vector<int32_t> prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank, pos, left, right;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t pos) {
    int32_t nx = next[pos];
    if (nx < 0) return;
    if (const MergeSlot* m = find_merge(symbols[pos], symbols[nx])) heap.push({m->rank, pos, symbols[pos], symbols[nx]});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    int32_t nx = next[c.pos];
    // Stale when either side changed since the candidate was pushed (merged ids always differ
    // from their parts, and removed symbols are set to -1).
    if (symbols[c.pos] != c.left || nx < 0 || symbols[nx] != c.right) continue;
    symbols[c.pos] = find_merge(c.left, c.right)->id;
    symbols[nx] = -1;
    next[c.pos] = next[nx];
    if (next[nx] >= 0) prev[next[nx]] = c.pos;
    if (prev[c.pos] >= 0) push(prev[c.pos]);
    push(c.pos);
  }
  size_t out = 0;
  for (int32_t i = 0; i >= 0 && i < n; i = next[i]) symbols[out++] = symbols[i];
  symbols.resize(out);
}

void BpeModel::encode_word(std::string_view bytes, std::vector<int32_t>& out) const {
  if (bytes.empty()) return;
  const bool cacheable = bytes.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(bytes);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  if (ignore_merges_) {
    if (auto whole = vocab_.find(bytes_to_byte_level(bytes) + end_of_word_suffix_)) {
      out.push_back(*whole);
      return;
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(bytes.size());
  bool has_unknown = false;
  for (unsigned char b : bytes) {
    symbols.push_back(byte_ids_[b]);
    has_unknown |= byte_ids_[b] < 0;
  }
  if (!end_of_word_suffix_.empty()) {
    symbols.back() = end_of_word_byte_ids_[static_cast<unsigned char>(bytes.back())];
    has_unknown |= symbols.back() < 0;
  }
  if (symbols.size() <= 24) {
    merge_small(symbols);
  } else {
    merge_large(symbols);
  }
  if (has_unknown) symbols.erase(std::remove(symbols.begin(), symbols.end(), -1), symbols.end());
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity) cache_.emplace(std::string(bytes), std::move(symbols));
  }
}

}  // namespace fluxrt::tokenizers
