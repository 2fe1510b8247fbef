// Unicode normalisation in front of the BPE tokenizers (text_stages.cpp): the results utf8proc's
// own normaliser gives, in time linear in the text whatever its combining marks.
#include <gtest/gtest.h>
#include <utf8proc.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "tokenizers/text_stages.h"

namespace fluxrt::tokenizers {
namespace {

std::string utf8proc_reference(const std::string& text, Normalization form) {
  int options = UTF8PROC_STABLE;
  if (form == Normalization::Nfc || form == Normalization::Nfkc) options |= UTF8PROC_COMPOSE;
  if (form == Normalization::Nfd || form == Normalization::Nfkd) options |= UTF8PROC_DECOMPOSE;
  if (form == Normalization::Nfkc || form == Normalization::Nfkd) options |= UTF8PROC_COMPAT;
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &mapped,
                                          static_cast<utf8proc_option_t>(options));
  EXPECT_GE(n, 0);
  std::string out(reinterpret_cast<const char*>(mapped), n < 0 ? 0 : static_cast<size_t>(n));
  std::free(mapped);
  return out;
}

std::string normalized(const std::string& text, Normalization form) {
  std::string out;
  return normalize_unicode(text, form, out) ? out : text;
}

TEST(TextNormalization, MatchesUtf8procOnEveryForm) {
  // Marks out of canonical order, marks split between runs, precomposed letters followed by more
  // marks, Hangul syllables and jamo, a non-starter that decomposes (U+0344), a starter whose
  // decomposition is two marks (U+0F73), compatibility forms, the longest decomposition (U+FDFA),
  // and a mark directly after an ASCII letter (the fast path's boundary).
  const std::string texts[] = {
      "a\xCC\x81\xCC\xA3 e\xCC\xA3\xCC\x81",
      "\xC3\xA9\xCC\xA3\xCC\x81\xCC\xA3 x",
      "\xED\x95\x9C\xEA\xB8\x80 \xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB",
      "\xCD\x84\xCC\xA3 \xE0\xBD\xB3\xE0\xBD\xB1\xE0\xBD\xB3",
      "\xEF\xAC\x81 x\xC2\xB2 \xE2\x91\xA0 \xEF\xBC\xA1 \xEF\xB7\xBA",
      ">\xCC\xB8 A\xCC\x8A\xCC\xA5",
  };
  for (const std::string& text : texts) {
    for (Normalization form :
         {Normalization::Nfc, Normalization::Nfd, Normalization::Nfkc, Normalization::Nfkd}) {
      EXPECT_EQ(normalized(text, form), utf8proc_reference(text, form))
          << text << " form " << static_cast<int>(form);
    }
  }
}

TEST(TextNormalization, NfdDecomposesLatin1Letters) {
  // The shortcut for text without code points from U+0300 on holds for NFC only: NFD splits
  // letters such as U+00C9 and U+0130 into letter + mark (found by fuzz_qwen_tokenizer).
  EXPECT_EQ(normalized("\xC3\x89t\xC3\xA9 \xC4\xB0", Normalization::Nfd), "E\xCC\x81te\xCC\x81 I\xCC\x87");
  EXPECT_EQ(normalized("\xC3\x89t\xC3\xA9", Normalization::Nfc), "\xC3\x89t\xC3\xA9");
}

TEST(TextNormalization, LongRunsOfMarksTakeLinearTime) {
  // A letter and 200000 marks alternating between combining classes 230 (U+0301) and 220
  // (U+0323). utf8proc_map orders them with an exchange sort: about 70 s on the machine where
  // fuzz_qwen_tokenizer found it, and 1.8 s for the 32000 characters the server accepts. In
  // canonical order the 220s come first and the first one composes with the "a" (U+1EA1).
  constexpr int kPairs = 100000;
  std::string text = "a";
  for (int i = 0; i < kPairs; ++i) text += "\xCC\x81\xCC\xA3";
  std::string want = "\xE1\xBA\xA1";
  for (int i = 1; i < kPairs; ++i) want += "\xCC\xA3";
  for (int i = 0; i < kPairs; ++i) want += "\xCC\x81";
  const auto start = std::chrono::steady_clock::now();
  const std::string got = normalized(text, Normalization::Nfc);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(got, want);
  // Linear time is milliseconds; the bound leaves room for a loaded machine.
  EXPECT_LT(seconds, 5.0);
}

}  // namespace
}  // namespace fluxrt::tokenizers
