#pragma once
// Internal state of BpeTokenizer, shared by bpe_tokenizer.cpp (encoding) and tokenizer_files.cpp
// (loading). Not part of the public interface.
#include <memory>
#include <unordered_map>

#include "tokenizers/added_tokens.h"
#include "tokenizers/bpe_model.h"
#include "tokenizers/bpe_tokenizer.h"
#include "tokenizers/text_stages.h"

namespace fluxrt::tokenizers {

struct BpeTokenizer::Impl {
  std::string source;
  TokenizerConfig config;
  BpeModel model;
  Normalization normalization = Normalization::Nfc;
  std::unique_ptr<RegexSplitter> splitter;  // null: each text segment is one pre-token
  std::vector<AddedToken> added;
  AddedTokenMatcher raw_matcher;         // added tokens with normalized=false, matched first
  AddedTokenMatcher normalized_matcher;  // normalized=true, matched in normalised text
  std::unordered_map<int32_t, std::string> added_by_id;
  size_t vocab_size = 0;

  // Called by the loaders once model, normalisation, splitter and `added` are set.
  void finish_added_tokens();
};

}  // namespace fluxrt::tokenizers
