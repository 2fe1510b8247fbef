// The K-quant writers (core/quant_kquants.cpp) against ggml's own reference quantizers: the bytes
// of tests/data/gguf/kquants.bin were written by quantize_row_q*_K_ref compiled from ggml's
// source (tools/reference/dump_kquants.py), with the gguf package's dequantization of them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/quant.h"

namespace fluxrt {
namespace {

constexpr QuantType kKTypes[] = {QuantType::Q2_K, QuantType::Q3_K, QuantType::Q4_K, QuantType::Q5_K,
                                 QuantType::Q6_K};

struct Encoded {
  QuantType type;
  std::vector<uint8_t> bytes;      // ggml's quantization of the case's input
  std::vector<float> dequantized;  // gguf.quants.dequantize of those bytes
};

struct Case {
  std::string name;
  std::vector<float> input;
  std::vector<Encoded> encoded;  // one per K type, in kKTypes order
};

// Reads kquants.bin (its layout is in dump_kquants.py's docstring).
class Reader {
 public:
  explicit Reader(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    data_.assign(std::istreambuf_iterator<char>(in), {});
  }
  bool empty() const { return data_.empty(); }
  uint32_t u32() {
    uint32_t v;
    take(&v, 4);
    return v;
  }
  void take(void* dst, size_t n) {
    if (pos_ + n > data_.size()) throw std::runtime_error("kquants.bin: truncated");
    std::memcpy(dst, data_.data() + pos_, n);
    pos_ += n;
  }
  std::vector<float> floats(size_t n) {
    std::vector<float> v(n);
    take(v.data(), n * 4);
    return v;
  }
  bool at_end() const { return pos_ == data_.size(); }

 private:
  std::vector<char> data_;
  size_t pos_ = 0;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = [] {
    Reader r(std::string(FLUXRT_TEST_DATA_DIR) + "/gguf/kquants.bin");
    std::vector<Case> out;
    if (r.empty()) return out;
    char magic[4];
    r.take(magic, 4);
    if (std::memcmp(magic, "FXKQ", 4) != 0 || r.u32() != 1)
      throw std::runtime_error("kquants.bin: bad header");
    const uint32_t count = r.u32();
    for (uint32_t c = 0; c < count; ++c) {
      Case k;
      k.name.resize(r.u32());
      r.take(k.name.data(), k.name.size());
      const uint32_t n = r.u32();
      k.input = r.floats(n);
      for (QuantType type : kKTypes) {
        Encoded e;
        const uint32_t id = r.u32();
        if (!quant_type_from_ggml(id, &e.type) || e.type != type)
          throw std::runtime_error("kquants.bin: unexpected type id " + std::to_string(id));
        e.bytes.resize(r.u32());
        r.take(e.bytes.data(), e.bytes.size());
        e.dequantized = r.floats(n);
        k.encoded.push_back(std::move(e));
      }
      out.push_back(std::move(k));
    }
    if (!r.at_end()) throw std::runtime_error("kquants.bin: trailing bytes");
    return out;
  }();
  return all;
}

std::vector<uint8_t> quantize(QuantType type, const std::vector<float>& x) {
  std::vector<uint8_t> q(quant_row_bytes(type, static_cast<int64_t>(x.size())));
  quantize_row_ref(type, x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

std::vector<float> dequantize(QuantType type, const std::vector<uint8_t>& q, size_t n) {
  std::vector<float> y(n);
  dequantize_row_ref(type, q.data(), y.data(), static_cast<int64_t>(n));
  return y;
}

double rel_l2(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(x[i]) - y[i];
    err += d * d;
    ref += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(err / ref);
}

// The index of the first differing byte, or -1.
long first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<long>(i);
  return -1;
}

const Case& find_case(const std::string& name) {
  for (const Case& c : cases())
    if (c.name == name) return c;
  throw std::runtime_error("kquants.bin: no case " + name);
}

TEST(KQuants, TheKTypesCanBeWritten) {
  for (QuantType type : kKTypes) EXPECT_TRUE(quant_can_quantize(type)) << quant_name(type);
  EXPECT_FALSE(quant_can_quantize(QuantType::F8E4M3));
}

TEST(KQuants, BytesEqualGgmlReferenceQuantizers) {
  ASSERT_GE(cases().size(), 10u) << "tests/data/gguf/kquants.bin missing or short";
  int compared = 0;
  for (const Case& c : cases()) {
    for (const Encoded& e : c.encoded) {
      SCOPED_TRACE(c.name + " " + std::string(quant_name(e.type)));
      const std::vector<uint8_t> got = quantize(e.type, c.input);
      ASSERT_EQ(got.size(), e.bytes.size());
      const long at = first_difference(got, e.bytes);
      EXPECT_EQ(at, -1) << "first difference at byte " << at << " (block "
                        << at / static_cast<long>(quant_traits(e.type).block_bytes) << ")";
      ++compared;
    }
  }
  EXPECT_EQ(compared, static_cast<int>(cases().size()) * 5);
}

TEST(KQuants, DequantizationOfGgmlBytesEqualsGguf) {
  ASSERT_FALSE(cases().empty());
  for (const Case& c : cases()) {
    for (const Encoded& e : c.encoded) {
      SCOPED_TRACE(c.name + " " + std::string(quant_name(e.type)));
      const std::vector<float> got = dequantize(e.type, e.bytes, c.input.size());
      EXPECT_EQ(std::memcmp(got.data(), e.dequantized.data(), got.size() * 4), 0);
    }
  }
}

// Error bounds of a round trip on weight-like and unit normal values, a little above what ggml's
// own bytes give (measured: Q2_K 0.296 / 0.304, Q3_K 0.153 / 0.148, Q4_K 0.071 / 0.070, Q5_K
// 0.037 / 0.036, Q6_K 0.018 / 0.018 for weights_2048 / normal_512).
TEST(KQuants, RoundTripErrorIsBounded) {
  const double bound[] = {0.32, 0.165, 0.078, 0.040, 0.020};
  for (const char* name : {"weights_2048", "normal_512"}) {
    const Case& c = find_case(name);
    for (int t = 0; t < 5; ++t) {
      const QuantType type = kKTypes[t];
      const double err = rel_l2(c.input, dequantize(type, quantize(type, c.input), c.input.size()));
      EXPECT_LT(err, bound[t]) << name << " " << quant_name(type);
      EXPECT_GT(err, 0.0) << name << " " << quant_name(type);
    }
  }
  // Each type is more accurate than the one with a bit less.
  const Case& c = find_case("weights_2048");
  double prev = 1.0;
  for (QuantType type : kKTypes) {
    const double err = rel_l2(c.input, dequantize(type, quantize(type, c.input), c.input.size()));
    EXPECT_LT(err, prev) << quant_name(type);
    prev = err;
  }
}

TEST(KQuants, ZeroInputGivesZeroBlocksAndZeros) {
  const std::vector<float> zeros(512, 0.0f);
  for (QuantType type : kKTypes) {
    SCOPED_TRACE(std::string(quant_name(type)));
    const std::vector<float> back = dequantize(type, quantize(type, zeros), zeros.size());
    for (float v : back) ASSERT_EQ(v, 0.0f);
  }
}

TEST(KQuants, RowsThatAreNotWholeBlocksAreRefused) {
  std::vector<float> x(512, 1.0f);
  std::vector<uint8_t> out(2 * 210);
  for (QuantType type : kKTypes) {
    SCOPED_TRACE(std::string(quant_name(type)));
    for (int64_t n : {int64_t{32}, int64_t{255}, int64_t{300}}) {
      try {
        quantize_row_ref(type, x.data(), out.data(), n);
        ADD_FAILURE() << "no error for n = " << n;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      }
    }
  }
  // The other block types are held to the same rule.
  EXPECT_THROW(quantize_row_ref(QuantType::Q8_0, x.data(), out.data(), 48), Error);
}

}  // namespace
}  // namespace fluxrt
