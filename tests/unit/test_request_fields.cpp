// The request field table (fluxrt/request_fields.h): every surface's names, one syntax and one set
// of bounds, and docs/requests.md's table kept equal to it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

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
      {"padding_mask_crop", {std::string("32"), int64_t{32}}},
      {"batch", {std::string("3"), int64_t{3}}},
      {"max_sequence_length", {std::string("64"), 64.0}},  // a whole JSON float is an integer
      {"seed", {std::string("18446744073709551615"), std::string("18446744073709551615")}},
      {"size", {std::string("96x64"), std::string("96x64")}},
      {"negative_prompt", {std::string("blurry"), std::string("blurry")}},
      {"cache", {std::string("first-block:threshold=0.2"), std::string("first-block:threshold=0.2")}},
      {"max_area", {std::string("4096"), int64_t{4096}}},
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
    EXPECT_EQ(r->padding_mask_crop, 32);
    EXPECT_EQ(r->images_per_prompt, 3);
    EXPECT_EQ(r->max_sequence_length, 64);
    EXPECT_EQ(r->seed, std::numeric_limits<uint64_t>::max());
    EXPECT_EQ(r->width, 96);
    EXPECT_EQ(r->height, 64);
    EXPECT_EQ(r->negative_prompt, std::optional<std::string>("blurry"));
    EXPECT_EQ(r->max_area, 4096);
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
TEST(RequestFields, CacheTextNamesAMethodAndDiffusersKeys) {
  const CacheConfig fbc = parse_cache_config("first-block:threshold=0.2");
  ASSERT_TRUE(std::holds_alternative<FirstBlockCacheConfig>(fbc));
  EXPECT_FLOAT_EQ(std::get<FirstBlockCacheConfig>(fbc).threshold, 0.2f);
  EXPECT_FLOAT_EQ(std::get<FirstBlockCacheConfig>(parse_cache_config("first-block")).threshold, 0.05f);

  const auto ts = std::get<TaylorSeerCacheConfig>(parse_cache_config(
      "taylorseer:cache_interval=4,disable_cache_before_step=2,disable_cache_after_step=40,max_order=2,"
      "taylor_factors_dtype=float32,use_lite_mode=true"));
  EXPECT_EQ(ts.cache_interval, 4);
  EXPECT_EQ(ts.disable_cache_before_step, 2);
  EXPECT_EQ(ts.disable_cache_after_step, std::optional<int>(40));
  EXPECT_EQ(ts.max_order, 2);
  EXPECT_EQ(ts.taylor_factors_dtype, "float32");
  EXPECT_TRUE(ts.use_lite_mode);

  const auto mag = std::get<MagCacheConfig>(
      parse_cache_config("mag:threshold=0.1,max_skip_steps=2,retention_ratio=0.3,mag_ratios=1;1.1;0.9"));
  EXPECT_FLOAT_EQ(mag.threshold, 0.1f);
  EXPECT_EQ(mag.max_skip_steps, 2);
  EXPECT_FLOAT_EQ(mag.retention_ratio, 0.3f);
  EXPECT_EQ(mag.mag_ratios, (std::vector<float>{1.0f, 1.1f, 0.9f}));

  // A file of ratios: a list, or an object as `fluxrt calibrate-cache` writes it.
  const auto file = std::filesystem::temp_directory_path() / "fluxrt_test_ratios.json";
  std::ofstream(file) << R"({"model": "m", "mag_ratios": [1.0, 1.25]})";
  EXPECT_EQ(std::get<MagCacheConfig>(parse_cache_config("mag:mag_ratios=" + file.string())).mag_ratios,
            (std::vector<float>{1.0f, 1.25f}));
  std::filesystem::remove(file);

  // The text round-trips, and the field sets the request (none clears it).
  for (const char* text :
       {"first-block:threshold=0.2", "mag:threshold=0.1,max_skip_steps=2,retention_ratio=0.3",
        "taylorseer:cache_interval=4,disable_cache_before_step=2,max_order=1,"
        "taylor_factors_dtype=bfloat16"})
    EXPECT_EQ(cache_config_text(parse_cache_config(text)), text);
  GenerateRequest r;
  set_request_field(r, field("cache"), std::string("mag"), {}, "--cache");
  EXPECT_TRUE(r.cache && std::holds_alternative<MagCacheConfig>(*r.cache));
  EXPECT_EQ(request_field_text(r, field("cache")), "mag:threshold=0.06,max_skip_steps=3,retention_ratio=0.2");
  set_request_field(r, field("cache"), std::string("none"), {}, "--cache");
  EXPECT_FALSE(r.cache);
}

TEST(RequestFields, BadCacheTextIsAOneLineErrorNamingTheField) {
  const std::pair<const char*, const char*> bad[] = {
      {"teacache:threshold=0.1", "method must be first-block, taylorseer or mag"},
      {"first-block:thresh=0.1", "'thresh' is no first-block setting (it takes threshold)"},
      {"first-block:threshold=abc", "threshold='abc' must be a number"},
      {"first-block:threshold=1e39", "threshold='1e39' must be a number"},  // inf as a float
      {"first-block:threshold", "'threshold' must be key=value"},
      {"taylorseer:cache_interval=2.5", "cache_interval='2.5' must be an integer"},
      {"taylorseer:use_lite_mode=yes", "use_lite_mode='yes' must be true or false"},
      {"mag:threshold=1,threshold=2", "threshold is given twice"},
      {"mag:mag_ratios=/no/such/ratios.json", "mag_ratios:"},
  };
  for (const auto& [text, message] : bad) {
    std::string error_field;
    const std::string error = error_of("cache", std::string(text), {}, &error_field);
    EXPECT_NE(error.find(message), std::string::npos) << text << ": " << error;
    EXPECT_EQ(error.rfind("--x ", 0), 0u) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
    EXPECT_EQ(error_field, "cache") << text;
  }
  EXPECT_NE(error_of("cache", int64_t{3}).find("must be a string"), std::string::npos);
}

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
