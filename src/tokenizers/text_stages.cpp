#include "tokenizers/text_stages.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "tokenizers/byte_level.h"

namespace fluxrt::tokenizers {

// What utf8proc_map does (decompose, put each run of combining marks in canonical order, compose),
// except the ordering: utf8proc's exchange sort is quadratic in the length of a run, so a prompt of
// 32000 alternating marks took 1.8 s and 200000 took 70 s (found by fuzz_qwen_tokenizer). A
// stable sort by combining class gives the same order in n log n.
static std::string normalize_with_utf8proc(std::string_view text, utf8proc_option_t options) {
  std::vector<utf8proc_int32_t> code_points;
  code_points.reserve(text.size());
  // The longest decomposition is 18 code points (U+FDFA under NFKD); room for later Unicode versions.
  constexpr utf8proc_ssize_t kDecompositionRoom = 64;
  utf8proc_int32_t one[kDecompositionRoom];
  int boundclass = 0;  // only read with UTF8PROC_CHARBOUND
  for (size_t pos = 0; pos < text.size();) {
    const auto cp = static_cast<utf8proc_int32_t>(next_code_point(text, pos));
    const utf8proc_ssize_t n = utf8proc_decompose_char(cp, one, kDecompositionRoom, options, &boundclass);
    if (n < 0 || n > kDecompositionRoom) {
      fail(ErrorCode::Internal, "tokenizer: Unicode normalisation failed at U+{:04X}",
           static_cast<uint32_t>(cp));
    }
    code_points.insert(code_points.end(), one, one + n);
  }
  const auto combining_class = [](utf8proc_int32_t cp) { return utf8proc_get_property(cp)->combining_class; };
  for (auto run = code_points.begin(); run != code_points.end();) {
    if (combining_class(*run) == 0) {
      ++run;
      continue;
    }
    auto end = std::find_if(run + 1, code_points.end(),
                            [&](utf8proc_int32_t cp) { return combining_class(cp) == 0; });
    if (end - run > 1) {
      std::stable_sort(run, end, [&](utf8proc_int32_t a, utf8proc_int32_t b) {
        return combining_class(a) < combining_class(b);
      });
    }
    run = end;
  }
  // Composes (when asked) and writes UTF-8 over the buffer, which has 4 bytes per code point.
  const utf8proc_ssize_t bytes =
      utf8proc_reencode(code_points.data(), static_cast<utf8proc_ssize_t>(code_points.size()), options);
  if (bytes < 0)
    fail(ErrorCode::InvalidArgument, "tokenizer: Unicode normalisation failed: {}", utf8proc_errmsg(bytes));
  return std::string(reinterpret_cast<const char*>(code_points.data()), static_cast<size_t>(bytes));
}

bool normalize_unicode(std::string_view text, Normalization form, std::string& out) {
  if (form == Normalization::None) return false;
  // Every code point below U+0300 is stable under NFC (U+0300 is the first combining mark), and in
  // UTF-8 those are exactly the lead bytes below 0xCC. NFD splits Latin-1 letters (U+00C9 -> E +
  // U+0301) and NFKC/NFKD fold Latin-1 symbols (U+00A0, U+00B2, ...), so their fast path is ASCII.
  const unsigned char limit = form == Normalization::Nfc ? 0xCC : 0x80;
  bool needs_work = false;
  for (unsigned char c : text) {
    if (c >= limit) {
      needs_work = true;
      break;
    }
  }
  if (!needs_work) return false;
  int options = UTF8PROC_STABLE;
  switch (form) {
    case Normalization::Nfc: options |= UTF8PROC_COMPOSE; break;
    case Normalization::Nfd: options |= UTF8PROC_DECOMPOSE; break;
    case Normalization::Nfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case Normalization::Nfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    case Normalization::None: break;
  }
  std::string normalized = normalize_with_utf8proc(text, static_cast<utf8proc_option_t>(options));
  if (normalized == text) return false;
  out = std::move(normalized);
  return true;
}

struct RegexSplitter::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
};

RegexSplitter::RegexSplitter(std::string_view pattern, std::string_view label)
    : impl_(std::make_unique<Impl>()), pattern_(pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  // UCP makes \s, \d, \w and the POSIX classes Unicode-aware, as they are in Oniguruma.
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    fail(ErrorCode::Unsupported, "{}: pre-tokenizer regex does not compile at offset {}: {}", label,
         error_offset, reinterpret_cast<const char*>(message));
  }
  // Without JIT (some hardened kernels forbid executable memory) the interpreter gives the same
  // matches, only slower.
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

RegexSplitter::~RegexSplitter() {
  if (impl_ && impl_->code) pcre2_code_free(impl_->code);
}

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  if (text.empty()) return;
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  if (!match) fail(ErrorCode::OutOfMemory, "tokenizer: cannot allocate regex match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t size = text.size();
  size_t pos = 0;       // where the next search starts
  size_t gap_start = 0;  // start of text not yet emitted
  while (pos < size) {
    int rc = impl_->jit ? pcre2_jit_match(impl_->code, subject, size, pos, PCRE2_NO_UTF_CHECK, match, nullptr)
                        : pcre2_match(impl_->code, subject, size, pos, PCRE2_NO_UTF_CHECK, match, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(match);
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      fail(ErrorCode::Internal, "tokenizer: regex match failed: {}", reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    size_t start = ovector[0], end = ovector[1];
    if (end == start) {
      // An empty match consumes nothing; step over one character, which stays in the gap.
      pos = start + 1;
      while (pos < size && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (start > gap_start) pieces.push_back(text.substr(gap_start, start - gap_start));
    pieces.push_back(text.substr(start, end - start));
    pos = gap_start = end;
  }
  if (gap_start < size) pieces.push_back(text.substr(gap_start));
  pcre2_match_data_free(match);
}

}  // namespace fluxrt::tokenizers
