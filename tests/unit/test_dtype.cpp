// Dtype conversions against PyTorch, bit for bit. The goldens in tests/data/dtype/ come from
// tools/reference/dump_dtype_goldens.py (torch's contiguous tensor .to() on CPU); see the README
// there for the format and for the few places where torch itself is not self-consistent.
#include <gtest/gtest.h>
#include <hwy/targets.h>
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace fluxrt {
namespace {

// ---- golden file reader (gzip of: u16 name_len, name, u32 elem_size, u64 count, data)

struct Record {
  uint32_t elem_size = 0;
  uint64_t count = 0;
  std::vector<uint8_t> data;
};
using Records = std::map<std::string, Record>;

std::vector<uint8_t> read_gzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return {};
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.insert(out.end(), buf, buf + n);
  gzclose(f);
  return out;
}

Records load_golden(const std::string& file) {
  const std::string path = std::string(FLUXRT_TEST_DATA_DIR) + "/dtype/" + file;
  std::vector<uint8_t> bytes = read_gzip(path);
  Records records;
  size_t pos = 0;
  auto take = [&](void* dst, size_t n) {
    if (pos + n > bytes.size()) throw std::runtime_error("truncated golden " + path);
    std::memcpy(dst, bytes.data() + pos, n);
    pos += n;
  };
  while (pos < bytes.size()) {
    uint16_t name_len;
    take(&name_len, 2);
    std::string name(name_len, '\0');
    take(name.data(), name_len);
    Record r;
    take(&r.elem_size, 4);
    take(&r.count, 8);
    r.data.resize(r.elem_size * r.count);
    take(r.data.data(), r.data.size());
    records.emplace(name, std::move(r));
  }
  if (records.empty()) ADD_FAILURE() << "no records in " << path;
  return records;
}

const Record& get(const Records& records, const std::string& name) {
  auto it = records.find(name);
  if (it == records.end()) throw std::runtime_error("golden record missing: " + name);
  return it->second;
}

DType dtype_named(const std::string& s) {
  static const std::map<std::string, DType> kNames = {
      {"f64", DType::F64}, {"f32", DType::F32},       {"f16", DType::F16},
      {"bf16", DType::BF16}, {"f8e4m3", DType::F8E4M3}, {"f8e5m2", DType::F8E5M2},
      {"i64", DType::I64}, {"i32", DType::I32},       {"i16", DType::I16},
      {"i8", DType::I8},   {"u8", DType::U8},         {"bool", DType::Bool}};
  auto it = kNames.find(s);
  if (it == kNames.end()) throw std::runtime_error("unknown dtype in golden: " + s);
  return it->second;
}

uint64_t element_bits(const uint8_t* p, size_t size) {
  uint64_t v = 0;
  std::memcpy(&v, p, size);  // little endian host
  return v;
}

// Compares two arrays of `size`-byte elements; reports the count and the first few mismatches as
// hex bit patterns (input -> expected, got).
::testing::AssertionResult same_bits(const std::string& label, const uint8_t* inputs,
                                     size_t in_size, const uint8_t* expected, const uint8_t* got,
                                     size_t size, size_t n) {
  size_t bad = 0;
  std::string shown;
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(expected + i * size, got + i * size, size) == 0) continue;
    if (++bad <= 8) {
      char line[160];
      std::snprintf(line, sizeof(line), "\n  [%zu] in %#llx: expected %#llx, got %#llx", i,
                    static_cast<unsigned long long>(element_bits(inputs + i * in_size, in_size)),
                    static_cast<unsigned long long>(element_bits(expected + i * size, size)),
                    static_cast<unsigned long long>(element_bits(got + i * size, size)));
      shown += line;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << label << ": " << bad << " of " << n << " elements differ" << shown;
}

// Converts `inputs` with fluxrt::convert and compares with the golden output record.
void check_convert(const std::string& label, const std::vector<uint8_t>& inputs, DType src,
                   DType dst, const Record& expected) {
  const size_t n = inputs.size() / dtype_size(src);
  ASSERT_EQ(expected.count, n) << label;
  ASSERT_EQ(expected.elem_size, dtype_size(dst)) << label;
  std::vector<uint8_t> got(n * dtype_size(dst), 0xA5);
  convert(inputs.data(), src, got.data(), dst, n);
  EXPECT_TRUE(same_bits(label, inputs.data(), dtype_size(src), expected.data.data(), got.data(),
                        dtype_size(dst), n));
}

template <typename T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// ---- the regenerated f32 input sets (same recipe as dump_dtype_goldens.py)

struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

uint64_t hash_u32(const std::vector<uint32_t>& words) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (uint32_t w : words) h = (h ^ w) * 0x100000001B3ull;
  return h;
}

constexpr uint32_t kSpecialF32[] = {
    0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
    0xFF800001, 0x7FA00000, 0xFFA00000, 0x7FBFFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00001,
    0x7FE00000, 0x7FD55555, 0xFF955555, 0x7F802000, 0x7F801FFF, 0x7FC02000, 0x7F80E000,
    0x7F8FFFFF, 0x7FF00000, 0xFFC12345, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF,
    0x00400000, 0x00000002, 0x00800000, 0x80800000, 0x00800001, 0x7F7FFFFF, 0xFF7FFFFF,
    0x7F7FFFFE, 0x3F800000, 0xBF800000, 0x3F800001, 0x3F7FFFFF, 0x40000000, 0x3F000000,
    0x477FE000, 0x477FF000, 0x477FEFFF, 0x477FF001, 0x47800000, 0xC77FF000, 0x7F7F0000,
    0x7F7F8000, 0x7F7F7FFF, 0xFF7F8000, 0x43E00000, 0x43E80000, 0x43F00000, 0x43EFFFFF,
    0x43E7FFFF, 0x43E80001, 0x44000000, 0xC3E80000, 0xC3F00000, 0x47600000, 0x47700000,
    0x476FFFFF, 0x47700001, 0x47800000, 0xC7700000, 0x33800000, 0x33000000, 0x33000001,
    0x32FFFFFF, 0x387FC000, 0x38800000, 0x387FE000, 0x387FDFFF, 0x3B000000, 0x3A800000,
    0x3A800001, 0x3C000000, 0x37800000, 0x37000000, 0x37000001, 0x38000000, 0x36FFFFFF,
};

struct MiniFloat {
  const char* name;
  DType dtype;
  uint32_t max_finite;  // largest positive finite bit pattern
  int exp_bits, mant_bits, bias;
};
constexpr MiniFloat kFormats[] = {
    {"f16", DType::F16, 0x7BFF, 5, 10, 15},
    {"bf16", DType::BF16, 0x7F7F, 8, 7, 127},
    {"f8e4m3", DType::F8E4M3, 0x7E, 4, 3, 7},
    {"f8e5m2", DType::F8E5M2, 0x7B, 5, 2, 15},
};

// Decodes a finite positive pattern of the format from first principles (independent of
// dtype.cpp, so a wrong decoder there cannot hide in the input set).
double decode(const MiniFloat& f, uint32_t p) {
  const uint32_t e = p >> f.mant_bits;
  const uint32_t m = p & ((1u << f.mant_bits) - 1);
  if (e == 0) return std::ldexp(static_cast<double>(m), 1 - f.bias - f.mant_bits);
  return std::ldexp(static_cast<double>((1u << f.mant_bits) + m),
                    static_cast<int>(e) - f.bias - f.mant_bits);
}

uint32_t f32_bits_exact(double v) {
  const float f = static_cast<float>(v);
  EXPECT_EQ(static_cast<double>(f), v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<uint32_t> f32_input_set(const MiniFloat& f) {
  std::vector<uint32_t> out(std::begin(kSpecialF32), std::end(kSpecialF32));
  std::vector<uint32_t> grid;
  for (uint32_t p = 0; p <= f.max_finite; ++p) {
    const double v = decode(f, p);
    const double hi = p < f.max_finite ? decode(f, p + 1) : v + (v - decode(f, p - 1));
    const uint32_t mb = f32_bits_exact((v + hi) / 2);
    grid.insert(grid.end(), {f32_bits_exact(v), mb, mb - 1, mb + 1});
  }
  const size_t positive = grid.size();
  for (size_t i = 0; i < positive; ++i) grid.push_back(grid[i] | 0x80000000u);
  out.insert(out.end(), grid.begin(), grid.end());
  SplitMix64 rng{0xF1F1F32};
  for (int i = 0; i < 100000; ++i) out.push_back(static_cast<uint32_t>(rng.next() >> 32));
  return out;
}

std::pair<std::string, std::string> split_pair(const std::string& name) {
  const size_t at = name.find("_to_");
  return {name.substr(0, at), name.substr(at + 4)};
}

// ---- tests

TEST(DType, NamesAndSizes) {
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::F8E5M2), 1u);
  EXPECT_EQ(dtype_name(DType::F8E4M3), "f8e4m3");
  DType t;
  ASSERT_TRUE(dtype_from_safetensors("F8_E5M2", &t));
  EXPECT_EQ(t, DType::F8E5M2);
  EXPECT_FALSE(dtype_from_safetensors("F4", &t));
  EXPECT_TRUE(dtype_is_float(DType::BF16));
  EXPECT_FALSE(dtype_is_float(DType::U8));
}

// Every f16/bf16 pattern and every fp8 pattern to every other float type.
TEST(DType, AllNarrowPatternsMatchTorch) {
  const Records records = load_golden("narrow_to_wide.bin.gz");
  for (const auto& [name, expected] : records) {
    const auto [src_name, dst_name] = split_pair(name);
    const DType src = dtype_named(src_name), dst = dtype_named(dst_name);
    const size_t n = dtype_size(src) == 2 ? 65536 : 256;
    std::vector<uint8_t> inputs(n * dtype_size(src));
    for (size_t i = 0; i < n; ++i) std::memcpy(&inputs[i * dtype_size(src)], &i, dtype_size(src));
    check_convert(name, inputs, src, dst, expected);
  }
}

TEST(DType, ScalarNarrowToF32MatchesTorch) {
  const Records records = load_golden("narrow_to_wide.bin.gz");
  struct Case {
    const char* name;
    float (*fn)(uint32_t);
    uint32_t n;
  };
  const Case cases[] = {
      {"f16_to_f32", [](uint32_t p) { return f16_to_f32(static_cast<uint16_t>(p)); }, 65536},
      {"bf16_to_f32", [](uint32_t p) { return bf16_to_f32(static_cast<uint16_t>(p)); }, 65536},
      {"f8e4m3_to_f32", [](uint32_t p) { return f8e4m3_to_f32(static_cast<uint8_t>(p)); }, 256},
      {"f8e5m2_to_f32", [](uint32_t p) { return f8e5m2_to_f32(static_cast<uint8_t>(p)); }, 256},
  };
  for (const auto& c : cases) {
    const Record& expected = get(records, c.name);
    ASSERT_EQ(expected.count, c.n);
    std::vector<uint32_t> inputs(c.n), got(c.n);
    for (uint32_t i = 0; i < c.n; ++i) {
      inputs[i] = i;
      const float f = c.fn(i);
      std::memcpy(&got[i], &f, 4);
    }
    EXPECT_TRUE(same_bits(std::string("scalar ") + c.name,
                          reinterpret_cast<const uint8_t*>(inputs.data()), 4,
                          expected.data.data(), reinterpret_cast<const uint8_t*>(got.data()), 4,
                          c.n));
  }
}

// The golden f32 -> format outputs for the regenerated input set `in`.
std::vector<uint8_t> expected_from_f32(const Records& records, const MiniFloat& f,
                                       const std::vector<uint32_t>& in) {
  const std::string name = std::string("f32_to_") + f.name;
  const Record& hash = get(records, name + ".input_hash");
  EXPECT_EQ(element_bits(hash.data.data(), 8), hash_u32(in))
      << name << ": regenerated input set differs from dump_dtype_goldens.py";
  if (f.dtype != DType::BF16) return get(records, name).data;
  const Record& r = get(records, "f32_to_bf16.minus_trunc");
  std::vector<uint8_t> expected(r.count * 2);
  for (size_t i = 0; i < r.count && i < in.size(); ++i) {
    uint16_t d;
    std::memcpy(&d, &r.data[i * 2], 2);
    const uint16_t v = static_cast<uint16_t>(d + (in[i] >> 16));
    std::memcpy(&expected[i * 2], &v, 2);
  }
  return expected;
}

// Every value, midpoint and midpoint neighbour of each narrow format, edge cases and 100k random
// f32 patterns: bulk conversion, the same split into odd-sized pieces (SIMD tails), and the
// scalar functions.
TEST(DType, F32ToNarrowMatchesTorch) {
  const Records records = load_golden("f32_to_narrow.bin.gz");
  for (const auto& f : kFormats) {
    const std::string name = std::string("f32_to_") + f.name;
    SCOPED_TRACE(name);
    const std::vector<uint32_t> in = f32_input_set(f);
    const size_t n = in.size(), size = dtype_size(f.dtype);
    const std::vector<uint8_t> expected = expected_from_f32(records, f, in);
    ASSERT_EQ(expected.size(), n * size);
    const auto* in_bytes = reinterpret_cast<const uint8_t*>(in.data());

    std::vector<uint8_t> got(n * size);
    convert(in.data(), DType::F32, got.data(), f.dtype, n);
    EXPECT_TRUE(same_bits(name, in_bytes, 4, expected.data(), got.data(), size, n));

    std::fill(got.begin(), got.end(), 0xA5);
    for (size_t i = 0, piece = 1; i < n; i += piece, piece = piece % 37 + 1)
      convert(&in[i], DType::F32, &got[i * size], f.dtype, std::min(piece, n - i));
    EXPECT_TRUE(same_bits(name + " in pieces", in_bytes, 4, expected.data(), got.data(), size, n));

    for (size_t i = 0; i < n; ++i) {
      float x;
      std::memcpy(&x, &in[i], 4);
      uint16_t v = 0;
      switch (f.dtype) {
        case DType::F16: v = f32_to_f16(x); break;
        case DType::BF16: v = f32_to_bf16(x); break;
        case DType::F8E4M3: v = f32_to_f8e4m3(x); break;
        default: v = f32_to_f8e5m2(x); break;
      }
      std::memcpy(&got[i * size], &v, size);
    }
    EXPECT_TRUE(same_bits("scalar " + name, in_bytes, 4, expected.data(), got.data(), size, n));
  }
  std::vector<uint32_t> special(std::begin(kSpecialF32), std::end(kSpecialF32));
  check_convert("special_f32_to_f64", as_bytes(special), DType::F32, DType::F64,
                get(records, "special_f32_to_f64"));
}

// The SIMD bulk paths are compiled for several instruction sets and the best one is picked at
// run time; run the f16/bf16 <-> f32 goldens on each one this CPU supports.
TEST(DType, HotPairsMatchTorchOnEverySimdTarget) {
  const Records narrow = load_golden("narrow_to_wide.bin.gz");
  const Records wide = load_golden("f32_to_narrow.bin.gz");
  std::vector<uint8_t> patterns(65536 * 2);
  for (size_t i = 0; i < 65536; ++i) std::memcpy(&patterns[i * 2], &i, 2);
  const auto targets = hwy::SupportedAndGeneratedTargets();
  EXPECT_FALSE(targets.empty());
  for (int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string tname = hwy::TargetName(target);
    check_convert(tname + " f16_to_f32", patterns, DType::F16, DType::F32,
                  get(narrow, "f16_to_f32"));
    check_convert(tname + " bf16_to_f32", patterns, DType::BF16, DType::F32,
                  get(narrow, "bf16_to_f32"));
    for (const auto& f : {kFormats[0], kFormats[1]}) {
      const std::vector<uint32_t> in = f32_input_set(f);
      Record expected;
      expected.elem_size = 2;
      expected.count = in.size();
      expected.data = expected_from_f32(wide, f, in);
      check_convert(tname + " f32_to_" + f.name, as_bytes(in), DType::F32, f.dtype, expected);
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(DType, F64ToNarrowMatchesTorch) {
  const Records records = load_golden("f64_to_narrow.bin.gz");
  const std::vector<uint8_t>& inputs = get(records, "inputs").data;
  for (const auto& [name, expected] : records) {
    if (name == "inputs") continue;
    const auto [src_name, dst_name] = split_pair(name);
    check_convert(name, inputs, DType::F64, dtype_named(dst_name), expected);
  }
}

// Float -> integer truncates toward zero. Out-of-range values and NaN are undefined behaviour in
// C++; torch on x86 then yields what cvttss2si/cvttsd2si give (INT_MIN of the 32- or 64-bit
// conversion, then wrapped to the narrower type), and fluxrt reproduces that on every CPU.
TEST(DType, IntegerConversionsMatchTorch) {
  const Records records = load_golden("int_conversions.bin.gz");
  size_t checked = 0;
  for (const auto& [name, expected] : records) {
    if (name.ends_with("_inputs")) continue;
    const auto [src_name, dst_name] = split_pair(name);
    check_convert(name, get(records, src_name + "_inputs").data, dtype_named(src_name),
                  dtype_named(dst_name), expected);
    ++checked;
  }
  EXPECT_EQ(checked, 34u);  // 12 float -> int/bool, 22 from i64/i32
}

TEST(DType, SmallIntegersToFloatAreExact) {
  std::vector<int8_t> i8(256);
  std::vector<uint8_t> u8(256);
  for (int i = 0; i < 256; ++i) {
    i8[i] = static_cast<int8_t>(i);
    u8[i] = static_cast<uint8_t>(i);
  }
  std::vector<float> f(256);
  std::vector<uint16_t> h(256);
  convert(i8.data(), DType::I8, f.data(), DType::F32, 256);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(f[i], static_cast<float>(i8[i]));
  convert(u8.data(), DType::U8, h.data(), DType::BF16, 256);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(bf16_to_f32(h[i]), static_cast<float>(i));
}

// Big buffers are converted in parallel chunks; the result must not depend on the split.
TEST(DType, LargeBuffersMatchTheScalarFunctions) {
  const size_t n = (size_t(1) << 20) + 12345;
  std::vector<uint32_t> bits(n);
  SplitMix64 rng{77};
  for (auto& b : bits) b = static_cast<uint32_t>(rng.next());
  std::vector<uint16_t> h(n);
  std::vector<float> f(n);
  std::vector<uint8_t> q(n);
  const auto* x = reinterpret_cast<const float*>(bits.data());
  size_t bad = 0;

  convert(x, DType::F32, h.data(), DType::BF16, n);
  for (size_t i = 0; i < n; ++i) bad += h[i] != f32_to_bf16(x[i]);
  convert(h.data(), DType::BF16, f.data(), DType::F32, n);
  for (size_t i = 0; i < n; ++i) {
    const float g = bf16_to_f32(h[i]);
    bad += std::memcmp(&f[i], &g, 4) != 0;
  }
  convert(x, DType::F32, h.data(), DType::F16, n);
  for (size_t i = 0; i < n; ++i) bad += h[i] != f32_to_f16(x[i]);
  convert(h.data(), DType::F16, f.data(), DType::F32, n);
  for (size_t i = 0; i < n; ++i) {
    const float g = f16_to_f32(h[i]);
    bad += std::memcmp(&f[i], &g, 4) != 0;
  }
  convert(x, DType::F32, q.data(), DType::F8E4M3, n);
  for (size_t i = 0; i < n; ++i) bad += q[i] != f32_to_f8e4m3(x[i]);
  EXPECT_EQ(bad, 0u);
}

TEST(DType, SameDTypeIsACopy) {
  std::vector<uint16_t> a = {1, 2, 0x7FFF, 0xFFFF}, b(4);
  convert(a.data(), DType::BF16, b.data(), DType::BF16, 4);
  EXPECT_EQ(a, b);
  convert(a.data(), DType::BF16, b.data(), DType::BF16, 0);  // n = 0 is fine
}

}  // namespace
}  // namespace fluxrt
