// The request field table (fluxrt/request_fields.h): every surface's names, one syntax and one set
// of bounds, and docs/requests.md's table kept equal to it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>

#include "fluxrt/error.h"
#include "fluxrt/request_fields.h"

namespace fluxrt {
namespace {

const RequestField& field(const char* key) {
  const RequestField* f = find_request_field(key);
  EXPECT_NE(f, nullptr) << key;
  return *f;
}

// The error of setting `value`, with its field and message; "" when it was accepted.
std::string error_of(const char* key, const FieldValue& value, const RequestLimits& limits = {},
                     std::string* error_field = nullptr) {
  GenerateRequest r;
  try {
    set_request_field(r, field(key), value, limits, "--x");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    if (error_field) *error_field = e.field();
    return e.what();
  }
  return "";
}

TEST(RequestFields, NamesAreUniqueOnEverySurface) {
  std::set<std::string> keys, flags, apis;
  for (const RequestField& f : request_fields()) {
    EXPECT_TRUE(keys.insert(f.key).second) << f.key;
    EXPECT_TRUE(flags.insert(f.flag).second) << f.flag;
    EXPECT_TRUE(apis.insert(f.api).second) << f.api;
    EXPECT_EQ(std::string(f.flag).rfind("--", 0), 0u) << f.flag;
    EXPECT_EQ(find_request_field_by_api(f.api), &f);
    EXPECT_FALSE(std::string(f.help).empty()) << f.key;
  }
  EXPECT_EQ(find_request_field("no_such_field"), nullptr);
  EXPECT_EQ(find_request_field_by_api("steps"), nullptr);  // the API says num_inference_steps
}

TEST(RequestFields, TextAndJsonValuesSetTheSameRequest) {
  GenerateRequest from_text, from_json;
  const RequestLimits limits;
  const std::pair<const char*, std::pair<FieldValue, FieldValue>> cases[] = {
      {"steps", {std::string("7"), int64_t{7}}},
      {"guidance", {std::string("3.5"), 3.5}},
      {"true_cfg", {std::string("4"), int64_t{4}}},
      {"strength", {std::string("0.25"), 0.25}},
      {"batch", {std::string("3"), int64_t{3}}},
      {"max_sequence_length", {std::string("64"), 64.0}},  // a whole JSON float is an integer
      {"seed", {std::string("18446744073709551615"), std::string("18446744073709551615")}},
      {"size", {std::string("96x64"), std::string("96x64")}},
      {"negative_prompt", {std::string("blurry"), std::string("blurry")}},
  };
  for (const auto& [key, values] : cases) {
    EXPECT_FALSE(set_request_field(from_text, field(key), values.first, limits, key));
    EXPECT_FALSE(set_request_field(from_json, field(key), values.second, limits, key));
  }
  for (const GenerateRequest* r : {&from_text, &from_json}) {
    EXPECT_EQ(r->steps, 7);
    EXPECT_EQ(r->guidance, 3.5f);
    EXPECT_EQ(r->true_cfg, 4.0f);
    EXPECT_EQ(r->strength, 0.25f);
    EXPECT_EQ(r->images_per_prompt, 3);
    EXPECT_EQ(r->max_sequence_length, 64);
    EXPECT_EQ(r->seed, std::numeric_limits<uint64_t>::max());
    EXPECT_EQ(r->width, 96);
    EXPECT_EQ(r->height, 64);
    EXPECT_EQ(r->negative_prompt, std::optional<std::string>("blurry"));
  }
  for (const RequestField& f : request_fields())
    EXPECT_FALSE(request_field_text(from_text, f).empty()) << f.key;
  EXPECT_EQ(request_field_text(from_text, field("size")), "96x64");
  EXPECT_EQ(request_field_text(GenerateRequest{}, field("steps")), "");
}

TEST(RequestFields, BoundsComeFromTheLimits) {
  RequestLimits narrow;
  narrow.max_steps = 50;
  narrow.max_sequence_length = 512;
  narrow.size_multiple = 16;
  narrow.max_side = 2048;
  EXPECT_EQ(error_of("steps", int64_t{1000}), "");
  EXPECT_NE(error_of("steps", int64_t{51}, narrow), "");
  EXPECT_EQ(error_of("steps", int64_t{50}, narrow), "");
  EXPECT_NE(error_of("steps", int64_t{0}), "");
  EXPECT_NE(error_of("max_sequence_length", int64_t{513}, narrow), "");
  EXPECT_EQ(error_of("size", std::string("72x72")), "");  // every model: no multiple known yet
  EXPECT_NE(error_of("size", std::string("72x72"), narrow), "");
  EXPECT_NE(error_of("size", std::string("4096x64"), narrow), "");
  EXPECT_NE(error_of("strength", 0.0), "");  // (0, 1]
  EXPECT_EQ(error_of("strength", 1.0), "");
  EXPECT_NE(error_of("guidance", -0.5), "");
  EXPECT_NE(error_of("guidance", 100.5), "");
  EXPECT_EQ(request_field_bounds(field("steps"), narrow), "1 to 50");
  EXPECT_EQ(request_field_bounds(field("strength"), narrow), "(0, 1]");
  EXPECT_EQ(request_field_bounds(field("size"), narrow), "multiples of 16 up to 2048");
  EXPECT_EQ(request_field_bounds(field("negative_prompt"), narrow), "");
}

TEST(RequestFields, BadValuesAreOneLineErrorsNamingTheField) {
  const std::pair<const char*, FieldValue> bad[] = {
      {"steps", std::string("4.5")},
      {"steps", std::string("four")},
      {"steps", 4.5},
      {"guidance", std::string("nan")},
      {"guidance", std::string("")},
      {"true_cfg", std::string("inf")},
      {"size", std::string("64")},
      {"size", std::string("64x-64")},
      {"size", std::string("+64x64")},
      {"size", int64_t{64}},
      {"seed", int64_t{-2}},
      {"seed", std::string("-1")},
      {"seed", 1.5},
      {"negative_prompt", int64_t{1}},
      {"negative_prompt", std::string("a\xff")},
      {"negative_prompt", std::string("a\0b", 3)},
      {"batch", int64_t{257}},
  };
  for (const auto& [key, value] : bad) {
    std::string error_field;
    const std::string message = error_of(key, value, {}, &error_field);
    EXPECT_NE(message, "") << key;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.rfind("--x ", 0), 0u) << message;  // named as the surface spells it
    EXPECT_EQ(error_field, key) << message;
  }
  RequestLimits short_text;
  short_text.max_prompt_chars = 3;
  EXPECT_EQ(error_of("negative_prompt", std::string("\xc3\xa9\xc3\xa9\xc3\xa9"), short_text),
            "");  // 3 code points
  EXPECT_NE(error_of("negative_prompt", std::string("abcd"), short_text), "");
}

// Found by fuzz_request_fields: a value quoted in a message is escaped (line breaks, bytes that
// are no UTF-8, a character cut at the 40-byte limit), and a strength that is 0 as a float is
// refused rather than stored as 0, outside (0, 1].
TEST(RequestFields, MessagesEscapeTheValueAndStrengthsStayPositiveAsFloats) {
  const std::string multi_line = error_of("steps", std::string(" 4\n"));
  EXPECT_NE(multi_line.find("' 4\\n' must be an integer"), std::string::npos) << multi_line;
  const std::string bad_bytes = error_of("size", std::string("64\xff\r64"));
  EXPECT_NE(bad_bytes.find("'64\\xff\\r64' must be WIDTHxHEIGHT"), std::string::npos) << bad_bytes;
  // 39 ASCII bytes then "é": the cut at 40 bytes falls inside it.
  const std::string cut = error_of("guidance", std::string(39, '1') + "\xc3\xa9");
  EXPECT_EQ(cut.find('\xc3'), std::string::npos) << cut;
  EXPECT_EQ(error_of("strength", 1e-50), "--x 1e-50 must be a number in (0, 1] (it is 0 as a float)");
  EXPECT_NE(error_of("strength", std::string("1e-46")), "");
  EXPECT_EQ(error_of("strength", 1e-45), "");  // the smallest float above 0
}

TEST(RequestFields, RandomSeedsAndAutoSize) {
  GenerateRequest r;
  const RequestLimits limits;
  EXPECT_TRUE(set_request_field(r, field("seed"), std::string("random"), limits, "seed"));
  EXPECT_LT(r.seed, uint64_t{1} << 53);  // survives JSON and JavaScript
  const uint64_t first = r.seed;
  EXPECT_TRUE(set_request_field(r, field("seed"), int64_t{-1}, limits, "seed"));
  EXPECT_TRUE(set_request_field(r, field("seed"), std::string("random"), limits, "seed"));
  EXPECT_NE(r.seed, first);  // 2^-53 to fail by chance
  EXPECT_FALSE(set_request_field(r, field("seed"), int64_t{0}, limits, "seed"));
  EXPECT_EQ(r.seed, 0u);
  set_request_field(r, field("size"), std::string("64x32"), limits, "size");
  set_request_field(r, field("size"), std::string("auto"), limits, "size");
  EXPECT_FALSE(r.width.has_value());
  EXPECT_FALSE(r.height.has_value());
}

// docs/requests.md's table: one row per field with its key, flag and API name, in table order.
TEST(RequestFields, DocsListEveryFieldAsTheTableHasIt) {
  std::ifstream in(std::filesystem::path(FLUXRT_TEST_DATA_DIR) / ".." / ".." / "docs" / "requests.md");
  ASSERT_TRUE(in.good());
  std::vector<std::string> rows;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("| `", 0) == 0) rows.push_back(line);
  ASSERT_EQ(rows.size(), request_fields().size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const RequestField& f = request_fields()[i];
    EXPECT_EQ(rows[i].rfind(std::string("| `") + f.key + "` | `" + f.flag + "`", 0), 0u) << rows[i];
    EXPECT_NE(rows[i].find(std::string("| `") + f.api + "`"), std::string::npos) << rows[i];
  }
}

}  // namespace
}  // namespace fluxrt
