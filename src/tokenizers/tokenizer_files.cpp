// Loading BpeTokenizer from tokenizer.json or from vocab.json + merges.txt + tokenizer_config.json,
// and the readers of those files that ClipTokenizer shares (tokenizer_files.h).
#include "tokenizers/tokenizer_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizers/bpe_tokenizer.h"
#include "tokenizers/bpe_tokenizer_impl.h"
#include "tokenizers/json_reader.h"

namespace fluxrt::tokenizers {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Values in these files are loosely typed across versions; read them defensively.
bool get_bool(const json& obj, const char* key, bool fallback) {
  auto it = obj.find(key);
  return (it != obj.end() && it->is_boolean()) ? it->get<bool>() : fallback;
}

AddedToken parse_added_token(const json& obj, int64_t id, const std::string& label) {
  if (!obj.is_object()) fail(ErrorCode::Format, "{}: added token {} is not an object", label, id);
  auto content = obj.find("content");
  if (content == obj.end() || !content->is_string()) {
    fail(ErrorCode::Format, "{}: added token {} has no string 'content'", label, id);
  }
  if (id < 0 || id >= (int64_t{1} << 24)) fail(ErrorCode::Format, "{}: added token id {} out of range", label, id);
  AddedToken token;
  token.content = content->get<std::string>();
  token.id = static_cast<int32_t>(id);
  token.special = get_bool(obj, "special", false);
  token.lstrip = get_bool(obj, "lstrip", false);
  token.rstrip = get_bool(obj, "rstrip", false);
  token.single_word = get_bool(obj, "single_word", false);
  // The reference's default: special tokens are matched in raw text, others after normalisation.
  token.normalized = get_bool(obj, "normalized", !token.special);
  return token;
}

// Streams the entries into the model in batches (BpeModel::add_tokens / add_merges prefetch a batch
// at a time). Strings with escapes live in the reader's buffer until the next read, so they are
// copied into `stable` slots that live as long as the batch.
class BatchStrings {
 public:
  // Slots are fixed up front: resizing would move short (inline) strings and break earlier views.
  BatchStrings() : stable_(2 * BpeModel::kBatch) {}
  std::string_view keep(const JsonReader& reader, std::string_view view, size_t slot) {
    if (reader.in_input(view)) return view;
    stable_.at(slot).assign(view);
    return stable_[slot];
  }

 private:
  std::vector<std::string> stable_;
};

void parse_vocab_object(JsonReader& reader, BpeModel& model, const std::string& label) {
  reader.begin_object();
  std::string_view key;
  std::vector<BpeModel::TokenEntry> batch;
  batch.reserve(BpeModel::kBatch);
  BatchStrings strings;
  while (reader.next_key(key)) {
    int64_t id = reader.read_int();
    if (id < 0 || id >= (int64_t{1} << 24)) fail(ErrorCode::Format, "{}: token id {} out of range", label, id);
    batch.push_back({strings.keep(reader, key, batch.size()), static_cast<int32_t>(id)});
    if (batch.size() == BpeModel::kBatch) {
      model.add_tokens(batch.data(), batch.size(), label);
      batch.clear();
    }
  }
  model.add_tokens(batch.data(), batch.size(), label);
}

void parse_merges_array(JsonReader& reader, BpeModel& model, const std::string& label) {
  reader.begin_array();
  std::vector<BpeModel::MergeEntry> batch;
  batch.reserve(BpeModel::kBatch);
  BatchStrings strings;
  while (reader.next_element()) {
    const size_t slot = batch.size() * 2;
    if (reader.peek() == '[') {  // current format: ["left", "right"]
      reader.begin_array();
      if (!reader.next_element()) reader.error("empty merge pair");
      std::string_view left = strings.keep(reader, reader.read_string(), slot);
      if (!reader.next_element()) reader.error("merge pair with one entry");
      std::string_view right = strings.keep(reader, reader.read_string_alt(), slot + 1);
      if (reader.next_element()) reader.error("merge pair with more than two entries");
      batch.push_back({left, right});
    } else {  // older format: "left right"
      std::string_view merge = strings.keep(reader, reader.read_string(), slot);
      size_t space = merge.find(' ');
      if (space == std::string_view::npos || merge.find(' ', space + 1) != std::string_view::npos) {
        reader.error("a merge string must have exactly one space");
      }
      batch.push_back({merge.substr(0, space), merge.substr(space + 1)});
    }
    if (batch.size() == BpeModel::kBatch) {
      model.add_merges(batch.data(), batch.size(), label);
      batch.clear();
    }
  }
  model.add_merges(batch.data(), batch.size(), label);
}

Normalization parse_normalizer(const json& spec, const std::string& label) {
  if (spec.is_null()) return Normalization::None;
  std::string type = spec.value("type", "");
  if (type == "NFC") return Normalization::Nfc;
  if (type == "NFD") return Normalization::Nfd;
  if (type == "NFKC") return Normalization::Nfkc;
  if (type == "NFKD") return Normalization::Nfkd;
  if (type == "Sequence") {
    const json& list = spec.value("normalizers", json::array());
    if (list.empty()) return Normalization::None;
    if (list.size() == 1) return parse_normalizer(list[0], label);
  }
  fail(ErrorCode::Unsupported, "{}: normalizer '{}' is not supported (NFC/NFD/NFKC/NFKD or none)", label,
       spec.dump().substr(0, 120));
}

// Fills the splitter; fails unless the chain is [Split(regex, Isolated)] ByteLevel.
void parse_pre_tokenizer(const json& spec, BpeTokenizer::Impl& impl, const std::string& label) {
  std::vector<json> chain;
  if (spec.is_object() && spec.value("type", "") == "Sequence") {
    for (const json& item : spec.value("pretokenizers", json::array())) chain.push_back(item);
  } else if (!spec.is_null()) {
    chain.push_back(spec);
  }
  std::optional<std::string> pattern;
  bool byte_level = false;
  for (const json& item : chain) {
    std::string type = item.is_object() ? item.value("type", "") : "";
    if (type == "Split" && !byte_level && !pattern) {
      if (item.value("behavior", "") != "Isolated" || get_bool(item, "invert", false)) {
        fail(ErrorCode::Unsupported, "{}: only Split pre-tokenizers with behavior Isolated are supported", label);
      }
      const json& p = item.value("pattern", json::object());
      if (p.contains("Regex") && p["Regex"].is_string()) {
        pattern = p["Regex"].get<std::string>();
      } else if (p.contains("String") && p["String"].is_string()) {
        pattern = "\\Q" + p["String"].get<std::string>() + "\\E";
      } else {
        fail(ErrorCode::Format, "{}: Split pre-tokenizer without a pattern", label);
      }
    } else if (type == "ByteLevel" && !byte_level) {
      if (get_bool(item, "add_prefix_space", false)) {
        fail(ErrorCode::Unsupported, "{}: ByteLevel add_prefix_space=true is not supported", label);
      }
      if (get_bool(item, "use_regex", true)) {
        if (pattern) fail(ErrorCode::Unsupported, "{}: two regex splits in one pre-tokenizer", label);
        pattern = std::string(kGpt2SplitPattern);
      }
      byte_level = true;
    } else {
      fail(ErrorCode::Unsupported, "{}: pre-tokenizer '{}' is not supported (expected Split + ByteLevel)", label,
           item.dump().substr(0, 120));
    }
  }
  if (!byte_level) fail(ErrorCode::Unsupported, "{}: only byte-level BPE tokenizers are supported", label);
  if (pattern) impl.splitter = std::make_unique<RegexSplitter>(*pattern, label);
}

void check_post_processor(const json& spec, const std::string& label) {
  if (spec.is_null()) return;
  std::string type = spec.value("type", "");
  if (type == "ByteLevel") return;  // only adjusts offsets
  if (type == "TemplateProcessing") {
    const json& single = spec.value("single", json::array());
    if (single.size() == 1 && single[0].contains("Sequence")) return;  // "$A": adds nothing
  }
  fail(ErrorCode::Unsupported, "{}: post-processor that adds tokens is not supported: {}", label,
       spec.dump().substr(0, 120));
}

void merge_config_added_tokens(BpeTokenizer::Impl& impl) {
  for (const AddedToken& token : impl.config.added_tokens) {
    bool known = false;
    for (const AddedToken& existing : impl.added) known |= existing.id == token.id;
    if (!known) impl.added.push_back(token);
  }
}

}  // namespace

FileText::FileText(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(ErrorCode::NotFound, "{}: cannot open tokenizer file", path.string());
  struct stat info {};
  if (::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_size > 0) {
    void* map =
        ::mmap(nullptr, static_cast<size_t>(info.st_size), PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (map != MAP_FAILED) {
      map_ = map;
      view_ = std::string_view(static_cast<const char*>(map), static_cast<size_t>(info.st_size));
      ::close(fd);
      return;
    }
  }
  if (S_ISDIR(info.st_mode)) {
    ::close(fd);
    fail(ErrorCode::Io, "{}: is a directory, not a tokenizer file", path.string());
  }
  char chunk[1 << 16];
  while (true) {
    const ssize_t got = ::read(fd, chunk, sizeof(chunk));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      ::close(fd);
      fail(ErrorCode::Io, "{}: read failed: {}", path.string(), std::strerror(errno));
    }
    if (got == 0) break;
    copy_.append(chunk, static_cast<size_t>(got));
  }
  ::close(fd);
  view_ = copy_;
}

FileText::~FileText() {
  if (map_) ::munmap(map_, view_.size());
}

json parse_small_json(std::string_view text, const std::string& label) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail(ErrorCode::Format, "{}: malformed JSON: {}", label, e.what());
  }
}

std::optional<std::string> get_token_string(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return std::nullopt;
}

TokenizerConfig read_tokenizer_config(const fs::path& path) {
  const std::string label = path.string();
  const FileText file(path);
  json doc = parse_small_json(file.text(), label);
  if (!doc.is_object()) fail(ErrorCode::Format, "{}: expected a JSON object", label);
  TokenizerConfig config;
  if (auto it = doc.find("tokenizer_class"); it != doc.end() && it->is_string()) config.tokenizer_class = *it;
  config.pad_token = get_token_string(doc, "pad_token");
  config.eos_token = get_token_string(doc, "eos_token");
  config.bos_token = get_token_string(doc, "bos_token");
  config.unk_token = get_token_string(doc, "unk_token");
  if (auto it = doc.find("padding_side"); it != doc.end() && it->is_string()) config.padding_side = *it;
  if (auto it = doc.find("truncation_side"); it != doc.end() && it->is_string()) config.truncation_side = *it;
  if (auto it = doc.find("added_tokens_decoder"); it != doc.end() && it->is_object()) {
    for (const auto& [key, value] : it->items()) {
      char* end = nullptr;
      long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0') fail(ErrorCode::Format, "{}: added token key '{}' is not an id", label, key);
      config.added_tokens.push_back(parse_added_token(value, id, label));
    }
    std::sort(config.added_tokens.begin(), config.added_tokens.end(),
              [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
  }
  return config;
}

BpeJsonFile read_bpe_tokenizer_json(std::string_view text, const std::string& label, BpeModel& model) {
  JsonReader reader(text, label);
  BpeJsonFile file;
  bool have_model = false, have_vocab = false;
  std::string_view deferred_merges;
  auto optional_string = [&]() -> std::optional<std::string> {
    if (reader.consume_null()) return std::nullopt;
    return std::string(reader.read_string());
  };
  reader.begin_object();
  std::string_view key;
  while (reader.next_key(key)) {
    if (key == "added_tokens") {
      file.raw_added_tokens = reader.raw_value();
    } else if (key == "normalizer") {
      file.raw_normalizer = reader.raw_value();
    } else if (key == "pre_tokenizer") {
      file.raw_pre_tokenizer = reader.raw_value();
    } else if (key == "post_processor") {
      file.raw_post_processor = reader.raw_value();
    } else if (key == "model") {
      have_model = true;
      reader.begin_object();
      std::string_view model_key;
      while (reader.next_key(model_key)) {
        if (model_key == "type") {
          std::string_view type = reader.read_string();
          if (type != "BPE") fail(ErrorCode::Unsupported, "{}: model type '{}' is not BPE", label, type);
        } else if (model_key == "vocab") {
          parse_vocab_object(reader, model, label);
          have_vocab = true;
        } else if (model_key == "merges") {
          if (have_vocab) {
            parse_merges_array(reader, model, label);
          } else {
            deferred_merges = reader.raw_value();  // merges need the vocabulary to resolve ids
          }
        } else if (model_key == "unk_token") {
          file.unk_token = optional_string();
        } else if (model_key == "end_of_word_suffix") {
          file.end_of_word_suffix = optional_string();
        } else if (model_key == "continuing_subword_prefix") {
          file.continuing_subword_prefix = optional_string();
        } else if (model_key == "ignore_merges") {
          file.ignore_merges = reader.read_bool();
        } else if (model_key == "dropout") {
          std::string_view value = reader.raw_value();
          file.dropout = value != "null" && value != "0" && value != "0.0";
        } else {
          reader.raw_value();  // fuse_unk, byte_fallback: no effect with a complete byte alphabet
        }
      }
    } else {
      reader.raw_value();
    }
  }
  if (!have_model || !have_vocab) fail(ErrorCode::Format, "{}: no model.vocab", label);
  if (!deferred_merges.empty()) {
    JsonReader merges_reader(deferred_merges, label);
    parse_merges_array(merges_reader, model, label);
  }
  return file;
}

std::vector<AddedToken> parse_added_tokens(std::string_view raw, const std::string& label) {
  json added = parse_small_json(raw, label);
  if (!added.is_array()) fail(ErrorCode::Format, "{}: added_tokens is not an array", label);
  std::vector<AddedToken> tokens;
  for (const json& token : added) {
    auto id = token.is_object() ? token.find("id") : token.end();
    if (id == token.end() || !id->is_number_integer()) fail(ErrorCode::Format, "{}: added token without an id", label);
    tokens.push_back(parse_added_token(token, id->get<int64_t>(), label));
  }
  return tokens;
}

void read_vocab_and_merges(const fs::path& vocab_json, const fs::path& merges_txt, BpeModel& model) {
  const std::string vocab_label = vocab_json.string();
  const FileText vocab_file(vocab_json);
  const std::string_view vocab_text = vocab_file.text();
  const std::string merges_label = merges_txt.string();
  const FileText merges_file(merges_txt);
  const std::string_view merges_text = merges_file.text();
  // About 18 bytes of vocab.json per entry and 11 bytes of merges.txt per merge.
  model.reserve(vocab_text.size() / 17, vocab_text.size(), merges_text.size() / 10);
  {
    JsonReader reader(vocab_text, vocab_label);
    parse_vocab_object(reader, model, vocab_label);
    if (reader.peek() != '\0') reader.error("trailing data after the vocabulary object");
  }
  // merges.txt: an optional "#version" first line, then "left right" per line.
  std::vector<BpeModel::MergeEntry> batch;
  batch.reserve(BpeModel::kBatch);
  size_t pos = 0, line_number = 0;
  while (pos < merges_text.size()) {
    size_t end = merges_text.find('\n', pos);
    if (end == std::string_view::npos) end = merges_text.size();
    std::string_view line(merges_text.data() + pos, end - pos);
    pos = end + 1;
    ++line_number;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (line.empty() || (line_number == 1 && line.rfind("#version", 0) == 0)) continue;
    size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos) {
      fail(ErrorCode::Format, "{}: line {} is not 'left right'", merges_label, line_number);
    }
    batch.push_back({line.substr(0, space), line.substr(space + 1)});
    if (batch.size() == BpeModel::kBatch) {
      model.add_merges(batch.data(), batch.size(), merges_label);
      batch.clear();
    }
  }
  model.add_merges(batch.data(), batch.size(), merges_label);
}

BpeTokenizer BpeTokenizer::from_tokenizer_json(const fs::path& tokenizer_json, const fs::path& config) {
  auto impl = std::make_unique<Impl>();
  const std::string label = tokenizer_json.string();
  impl->source = label;
  if (!config.empty()) impl->config = read_tokenizer_config(config);
  const FileText file(tokenizer_json);
  const std::string_view text = file.text();
  // Qwen's tokenizer.json has about 75 bytes per vocabulary entry plus its merge; the tables take a
  // load factor up to 3/4, so this estimate leaves room without doubling their size.
  impl->model.reserve(text.size() / 72, text.size() / 8, text.size() / 72);
  const BpeJsonFile parts = read_bpe_tokenizer_json(text, label, impl->model);
  if (parts.end_of_word_suffix.value_or("") != "") {
    fail(ErrorCode::Unsupported, "{}: BPE end_of_word_suffix is not supported", label);
  }
  if (parts.continuing_subword_prefix.value_or("") != "") {
    fail(ErrorCode::Unsupported, "{}: BPE continuing_subword_prefix is not supported", label);
  }
  if (parts.dropout) fail(ErrorCode::Unsupported, "{}: BPE dropout is not supported", label);
  impl->model.finalize(parts.unk_token.value_or(""), parts.ignore_merges, label);

  impl->normalization = parse_normalizer(parse_small_json(parts.raw_normalizer, label), label);
  parse_pre_tokenizer(parse_small_json(parts.raw_pre_tokenizer, label), *impl, label);
  check_post_processor(parse_small_json(parts.raw_post_processor, label), label);
  impl->added = parse_added_tokens(parts.raw_added_tokens, label);
  merge_config_added_tokens(*impl);
  impl->finish_added_tokens();
  return BpeTokenizer(std::move(impl));
}

BpeTokenizer BpeTokenizer::from_vocab_merges(const fs::path& vocab_json, const fs::path& merges_txt,
                                             const fs::path& config) {
  auto impl = std::make_unique<Impl>();
  impl->source = vocab_json.parent_path().string();
  if (!config.empty()) {
    impl->config = read_tokenizer_config(config);
    const std::string& cls = impl->config.tokenizer_class;
    // vocab.json + merges.txt do not say how text is split; that is implied by the class.
    if (!cls.empty() && cls.rfind("Qwen2Tokenizer", 0) != 0) {
      fail(ErrorCode::Unsupported,
           "{}: tokenizer_class '{}' is not a Qwen2 tokenizer; only Qwen2 is read from "
           "vocab.json + merges.txt",
           config.string(), cls);
    }
  }
  read_vocab_and_merges(vocab_json, merges_txt, impl->model);
  impl->model.finalize({}, false, vocab_json.string());
  impl->normalization = Normalization::Nfc;
  impl->splitter = std::make_unique<RegexSplitter>(kQwen2SplitPattern, vocab_json.string());
  merge_config_added_tokens(*impl);
  impl->finish_added_tokens();
  return BpeTokenizer(std::move(impl));
}

BpeTokenizer BpeTokenizer::from_directory(const fs::path& dir) {
  const fs::path config = dir / "tokenizer_config.json";
  const fs::path config_arg = fs::exists(config) ? config : fs::path();
  if (fs::exists(dir / "tokenizer.json")) return from_tokenizer_json(dir / "tokenizer.json", config_arg);
  if (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt")) {
    return from_vocab_merges(dir / "vocab.json", dir / "merges.txt", config_arg);
  }
  fail(ErrorCode::NotFound, "{}: no tokenizer.json and no vocab.json + merges.txt", dir.string());
}

}  // namespace fluxrt::tokenizers
