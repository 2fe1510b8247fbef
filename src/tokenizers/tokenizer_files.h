#pragma once
// Reading the files of byte-level BPE tokenizers (tokenizer_files.cpp), shared by BpeTokenizer (Qwen)
// and ClipTokenizer, which differ in their pipelines but not in how a vocabulary, its merges and
// the added tokens are stored. Not part of the public interface.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizers/added_tokens.h"

namespace fluxrt::tokenizers {

class BpeModel;

// A read-only view of a whole file: mapped when possible, which saves zero-filling and copying an
// 11 MB buffer; read into memory otherwise (empty files, pipes, file systems without mmap).
// ErrorCode::NotFound when it cannot be opened, ErrorCode::Io for a folder or a failed read.
class FileText {
 public:
  explicit FileText(const std::filesystem::path& path);
  ~FileText();
  FileText(const FileText&) = delete;
  FileText& operator=(const FileText&) = delete;
  std::string_view text() const { return view_; }

 private:
  void* map_ = nullptr;
  std::string copy_;
  std::string_view view_;
};

// nlohmann::json for the small files and subtrees; ErrorCode::Format naming `label` when malformed.
nlohmann::json parse_small_json(std::string_view text, const std::string& label);

// A special token as these files write it: a string, or an object with a string "content"
// (older tokenizer_config.json / special_tokens_map.json). nullopt when absent, null or neither.
std::optional<std::string> get_token_string(const nlohmann::json& obj, const char* key);

// vocab.json + merges.txt into `model` (tokens, then merges in rank order); not finalized.
void read_vocab_and_merges(const std::filesystem::path& vocab_json, const std::filesystem::path& merges_txt,
                           BpeModel& model);

// The parts of a tokenizer.json with a BPE model besides the vocabulary and merges, which
// read_bpe_tokenizer_json streams into the model. The raw_* views are JSON text inside the file
// (they live as long as its FileText), for parse_small_json; "null" / "[]" when absent.
struct BpeJsonFile {
  std::string_view raw_added_tokens = "[]";
  std::string_view raw_normalizer = "null";
  std::string_view raw_pre_tokenizer = "null";
  std::string_view raw_post_processor = "null";
  std::optional<std::string> unk_token;                  // nullopt: null or absent
  std::optional<std::string> end_of_word_suffix;         // likewise
  std::optional<std::string> continuing_subword_prefix;  // likewise
  bool ignore_merges = false;
  bool dropout = false;  // a dropout other than null / 0
};

// Reads `text` (a tokenizer.json) into `model` (not finalized). ErrorCode::Format when it is not
// JSON or has no model.vocab, ErrorCode::Unsupported when the model is not BPE.
BpeJsonFile read_bpe_tokenizer_json(std::string_view text, const std::string& label, BpeModel& model);

// The "added_tokens" array of a tokenizer.json (BpeJsonFile::raw_added_tokens), with their flags.
std::vector<AddedToken> parse_added_tokens(std::string_view raw, const std::string& label);

}  // namespace fluxrt::tokenizers
