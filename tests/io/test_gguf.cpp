// GGUF reader and the reference dequantization. tests/data/gguf/quants.gguf is written by the
// `gguf` package (tools/reference/dump_gguf_quants.py): every supported type next to gguf's own
// numpy dequantization of it, compared here bit for bit. The bad-file corpus is built below, one
// header field broken at a time, each with the error it must give.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "core/quant.h"
#include "io/gguf.h"

namespace fluxrt::io {
namespace {

namespace fs = std::filesystem;

const fs::path kQuants = fs::path(FLUXRT_TEST_DATA_DIR) / "gguf" / "quants.gguf";

constexpr QuantType kAllTypes[] = {QuantType::F32,  QuantType::F16,  QuantType::BF16, QuantType::Q8_0,
                                   QuantType::Q4_0, QuantType::Q4_1, QuantType::Q5_0, QuantType::Q5_1,
                                   QuantType::Q2_K, QuantType::Q3_K, QuantType::Q4_K, QuantType::Q5_K,
                                   QuantType::Q6_K};

TEST(GgufQuants, ReferenceDequantizationIsBitExactAgainstGguf) {
  auto file = GgufFile::open(kQuants.string());
  EXPECT_EQ(file->version(), 3u);
  for (QuantType type : kAllTypes) {
    const std::string name(quant_name(type));
    SCOPED_TRACE(name);
    const GgufTensorInfo& info = file->info(name);
    EXPECT_EQ(info.type, type);
    EXPECT_EQ(info.shape, Shape({3, 512}));
    const QuantizedMatrix q = file->matrix(name);
    EXPECT_EQ(q.rows, 3);
    EXPECT_EQ(q.cols, 512);
    const Tensor expected = file->tensor(name + ".expected");
    ASSERT_EQ(expected.dtype(), DType::F32);
    const Tensor got = dequantize_ref(q);
    ASSERT_EQ(got.numel(), expected.numel());
    const auto* e = expected.data<float>();
    const auto* g = got.data<float>();
    int64_t mismatches = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      uint32_t eb, gb;
      std::memcpy(&eb, &e[i], 4);
      std::memcpy(&gb, &g[i], 4);
      if (eb != gb && mismatches++ < 5)
        ADD_FAILURE() << "element " << i << ": " << g[i] << " vs gguf " << e[i];
    }
    EXPECT_EQ(mismatches, 0);
  }
}

TEST(GgufQuants, QuantizationIsBitExactAgainstGguf) {
  auto file = GgufFile::open(kQuants.string());
  int checked = 0;
  for (QuantType type : kAllTypes) {
    // The K types have no gguf quantizer: tests/unit/test_quant_kquants.cpp checks them against ggml's.
    if (!quant_can_quantize(type) || quant_traits(type).block == 256) continue;
    const std::string name(quant_name(type));
    SCOPED_TRACE(name);
    const Tensor source = file->tensor(name + ".source");
    const QuantizedMatrix expected = file->matrix(name);
    std::vector<uint8_t> got(expected.nbytes());
    for (int64_t r = 0; r < expected.rows; ++r)
      quantize_row_ref(type, source.data<float>() + r * expected.cols, got.data() + r * expected.row_bytes(),
                       expected.cols);
    EXPECT_EQ(std::memcmp(got.data(), expected.row(0), got.size()), 0);
    ++checked;
  }
  EXPECT_EQ(checked, 8);
  std::vector<uint8_t> out(144);
  std::vector<float> in(256, 1.0f);
  EXPECT_THROW(quantize_row_ref(QuantType::F8E4M3, in.data(), out.data(), 256), Error);
}

TEST(GgufQuants, DenseTensorsAreViewsAndBlockTypesDequantize) {
  auto file = GgufFile::open(kQuants.string());
  const Tensor f16 = file->tensor("F16");
  EXPECT_EQ(f16.dtype(), DType::F16);
  EXPECT_EQ(f16.shape(), Shape({3, 512}));
  const uint8_t* map_begin = file->mapping().data();
  const auto* p = static_cast<const uint8_t*>(f16.raw_data());
  EXPECT_TRUE(p >= map_begin && p < map_begin + file->mapping().size()) << "F16 should be a zero-copy view";
  const Tensor q4 = file->tensor("Q4_K");
  EXPECT_EQ(q4.dtype(), DType::F32);
  EXPECT_EQ(q4.shape(), Shape({3, 512}));
}

TEST(GgufQuants, EveryMetadataKindOfTheSeedFile) {
  auto file = GgufFile::open((kQuants.parent_path() / "seeds" / "small.gguf").string());
  const auto& md = file->metadata();
  EXPECT_EQ(md.at("general.architecture").s, "flux");
  EXPECT_EQ(md.at("general.alignment").u, 32u);
  EXPECT_EQ(md.at("seed.flag").type, GgufValueType::Bool);
  EXPECT_EQ(md.at("seed.flag").u, 1u);
  EXPECT_EQ(md.at("seed.f32").f, 0.5);
  EXPECT_EQ(md.at("seed.i64").i, -3);
  EXPECT_EQ(md.at("seed.tokens").strings, (std::vector<std::string>{"a", "bc", "d"}));
  EXPECT_EQ(md.at("seed.ids").array_count, 3u);
  EXPECT_EQ(md.at("seed.ids").str(), "[i32 x 3]");
  ASSERT_EQ(file->tensors().size(), 3u);
  EXPECT_EQ(file->info("c").type, QuantType::Q4_K);
  EXPECT_EQ(file->info("c").shape, Shape({1, 256}));
  const Tensor a = file->tensor("a");
  EXPECT_EQ(a.data<float>()[3], 3.0f);
}

TEST(GgufQuants, TypeNames) {
  QuantType t;
  EXPECT_TRUE(quant_type_from_name("q4_k", &t));
  EXPECT_EQ(t, QuantType::Q4_K);
  EXPECT_TRUE(quant_type_from_name("Q8_0", &t));
  EXPECT_EQ(t, QuantType::Q8_0);
  EXPECT_FALSE(quant_type_from_name("iq2_xxs", &t));
  EXPECT_FALSE(quant_type_from_name("f8_e4m3", &t));  // not a GGUF type
  EXPECT_EQ(ggml_type_name(16), "IQ2_XXS");
  EXPECT_EQ(ggml_type_name(999), "");
}

// ---------------------------------------------------------------- the bad-file corpus

// Builds GGUF bytes field by field, so each test can break one field.
class Builder {
 public:
  Builder& u32(uint32_t v) { return raw(&v, 4); }
  Builder& u64(uint64_t v) { return raw(&v, 8); }
  Builder& u8(uint8_t v) { return raw(&v, 1); }
  Builder& str(const std::string& s) {
    u64(s.size());
    return raw(s.data(), s.size());
  }
  Builder& raw(const void* p, size_t n) {
    bytes_.append(static_cast<const char*>(p), n);
    return *this;
  }
  Builder& pad_to(size_t alignment) {
    bytes_.append((alignment - bytes_.size() % alignment) % alignment, '\0');
    return *this;
  }
  Builder& zeros(size_t n) {
    bytes_.append(n, '\0');
    return *this;
  }
  std::string bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// A tensor info: name, extents (GGUF order, innermost first), type id, offset.
void tensor_info(Builder& b, const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                 uint64_t offset) {
  b.str(name).u32(static_cast<uint32_t>(dims.size()));
  for (uint64_t d : dims) b.u64(d);
  b.u32(type).u64(offset);
}

// A valid file: one key (general.architecture), two tensors: "a" F32 [4] and "b" Q8_0 [2, 32].
Builder valid_prefix(uint64_t tensors = 2, uint64_t kvs = 1) {
  Builder b;
  b.raw("GGUF", 4).u32(3).u64(tensors).u64(kvs);
  b.str("general.architecture").u32(8).str("flux");
  return b;
}

std::string valid_file() {
  Builder b = valid_prefix();
  tensor_info(b, "a", {4}, 0, 0);
  tensor_info(b, "b", {32, 2}, 8, 32);
  b.pad_to(32).zeros(32 + 2 * 34);
  return b.bytes();
}

std::string parse_error(const std::string& bytes) {
  try {
    parse_gguf_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "bad.gguf");
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("bad.gguf: ", 0), 0u) << e.what();
    return e.what();
  }
  return "(parsed)";
}

TEST(GgufHeader, ValidFileParses) {
  const std::string bytes = valid_file();
  ParsedGguf p = parse_gguf_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "ok.gguf");
  ASSERT_EQ(p.tensors.size(), 2u);
  EXPECT_EQ(p.tensors[1].name, "b");
  EXPECT_EQ(p.tensors[1].shape, Shape({2, 32}));
  EXPECT_EQ(p.tensors[1].nbytes, 68u);
  EXPECT_EQ(p.metadata.at("general.architecture").s, "flux");
  EXPECT_EQ(p.data_offset % 32, 0u);
}

struct BadCase {
  const char* what;
  std::string bytes;
  const char* expect;  // a substring of the message
};

std::vector<BadCase> bad_cases() {
  std::vector<BadCase> cases;
  cases.push_back({"empty", "", "empty file"});
  cases.push_back({"magic", "GGML" + valid_file().substr(4), "no GGUF magic"});
  {
    std::string v = valid_file();
    v[4] = 1;
    cases.push_back({"version 1", v, "version 1"});
    v[4] = 7;
    cases.push_back({"version 7", v, "version 7 is not supported"});
  }
  cases.push_back({"truncated counts", valid_file().substr(0, 14), "truncated"});
  {
    Builder b;
    b.raw("GGUF", 4).u32(3).u64(0).u64(uint64_t{1} << 60);
    cases.push_back({"kv count", b.bytes(), "key-value count"});
  }
  {
    Builder b;
    b.raw("GGUF", 4).u32(3).u64(uint64_t{1} << 60).u64(0);
    cases.push_back({"tensor count", b.bytes(), "tensor count"});
  }
  {
    Builder b;
    b.raw("GGUF", 4).u32(3).u64(0).u64(1).u64(uint64_t{1} << 40).zeros(16);
    cases.push_back({"key length", b.bytes(), "over the"});
  }
  {
    Builder b;
    b.raw("GGUF", 4).u32(3).u64(0).u64(1).u64(100).raw("abc", 3).zeros(12);
    cases.push_back({"key past end", b.bytes(), "truncated"});
  }
  {
    Builder b;
    b.raw("GGUF", 4).u32(3).u64(0).u64(1).str("k").u32(13).zeros(16);
    cases.push_back({"value type", b.bytes(), "unknown value type 13"});
  }
  {
    Builder b;
    b.raw("GGUF", 4).u32(3).u64(0).u64(1).str("k").u32(9).u32(4).u64(uint64_t{1} << 61).zeros(16);
    cases.push_back({"array length", b.bytes(), "claims"});
  }
  {
    Builder b;
    b.raw("GGUF", 4).u32(3).u64(0).u64(1).str("k").u32(9).u32(8).u64(uint64_t{1} << 40).zeros(16);
    cases.push_back({"string array length", b.bytes(), "claims"});
  }
  {
    Builder b;
    b.raw("GGUF", 4).u32(3).u64(0).u64(1).str("k").u32(7).u8(2).zeros(16);
    cases.push_back({"bool", b.bytes(), "not 0 or 1"});
  }
  {
    Builder b;
    b.raw("GGUF", 4).u32(3).u64(0).u64(2).str("k").u32(4).u32(1).str("k").u32(4).u32(2).zeros(16);
    cases.push_back({"duplicate key", b.bytes(), "appears twice"});
  }
  {
    Builder b;
    b.raw("GGUF", 4).u32(3).u64(0).u64(1).str("general.alignment").u32(4).u32(48).zeros(16);
    cases.push_back({"alignment", b.bytes(), "power of two"});
  }
  {
    Builder b;
    b.raw("GGUF", 4).u32(3).u64(0).u64(1).str("general.alignment").u32(5).u32(32).zeros(16);
    cases.push_back({"alignment type", b.bytes(), "not a u32"});
  }
  auto one_tensor = [](const std::string& name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset,
                       size_t data) {
    Builder b = valid_prefix(1);
    tensor_info(b, name, std::move(dims), type, offset);
    b.pad_to(32).zeros(data);
    return b.bytes();
  };
  cases.push_back({"rank 0", one_tensor("t", {}, 0, 0, 64), "rank 0"});
  cases.push_back({"rank 5", one_tensor("t", {1, 1, 1, 1, 1}, 0, 0, 64), "rank 5"});
  cases.push_back({"zero extent", one_tensor("t", {4, 0}, 0, 0, 64), "is zero"});
  cases.push_back({"overflowing extents", one_tensor("t", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0, 64),
                   "too many elements"});
  cases.push_back(
      {"byte size overflow", one_tensor("t", {uint64_t{1} << 62}, 0, 0, 64), "byte size overflows"});
  cases.push_back({"unsupported type", one_tensor("w", {256}, 16, 0, 64), "type IQ2_XXS is not supported"});
  cases.push_back({"unknown type", one_tensor("w", {256}, 200, 0, 64), "unknown type id 200"});
  cases.push_back({"partial block", one_tensor("w", {48}, 8, 0, 64), "not whole Q8_0 blocks of 32"});
  cases.push_back({"misaligned offset", one_tensor("t", {4}, 0, 4, 64), "not a multiple of the alignment"});
  cases.push_back({"past the end", one_tensor("t", {32}, 0, 0, 64), "run past the data section"});
  cases.push_back(
      {"huge offset", one_tensor("t", {4}, 0, uint64_t{1} << 63, 64), "run past the data section"});
  {
    Builder b = valid_prefix(2);
    tensor_info(b, "a", {16}, 0, 0);
    tensor_info(b, "b", {16}, 0, 32);
    b.pad_to(32).zeros(128);
    cases.push_back({"overlap", b.bytes(), "overlap"});
  }
  {
    Builder b = valid_prefix(2);
    tensor_info(b, "a", {4}, 0, 0);
    tensor_info(b, "a", {4}, 0, 32);
    b.pad_to(32).zeros(64);
    cases.push_back({"duplicate tensor", b.bytes(), "tensor \"a\" appears twice"});
  }
  {
    Builder b = valid_prefix(1);
    tensor_info(b, std::string("bad\xff\nname"), {4}, 0, 0);
    b.pad_to(32).zeros(64);
    cases.push_back({"name utf-8", b.bytes(), "not valid UTF-8"});
  }
  {
    Builder b = valid_prefix(1);
    tensor_info(b, "t", {4}, 0, 0);
    cases.push_back({"no data section", b.bytes(), "past the end of the file"});
  }
  return cases;
}

// A metadata-only file (a vocabulary, say) may end right after its last key, without the padding
// a data section would need: it parses, with the data section empty at the end of the file.
TEST(GgufHeader, MetadataOnlyFileWithoutPaddingParses) {
  const std::string bytes = valid_prefix(/*tensors=*/0).bytes();
  ASSERT_NE(bytes.size() % 32, 0u);
  ParsedGguf p = parse_gguf_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "v.gguf");
  EXPECT_TRUE(p.tensors.empty());
  EXPECT_EQ(p.metadata.at("general.architecture").s, "flux");
  EXPECT_EQ(p.data_offset, bytes.size());
  const std::string padded = valid_prefix(0).pad_to(32).bytes();
  p = parse_gguf_header(reinterpret_cast<const uint8_t*>(padded.data()), padded.size(), "v.gguf");
  EXPECT_EQ(p.data_offset, padded.size());
}

TEST(GgufHeader, BadFilesGiveOneLineErrors) {
  for (const BadCase& c : bad_cases()) {
    SCOPED_TRACE(c.what);
    const std::string message = parse_error(c.bytes);
    EXPECT_NE(message.find(c.expect), std::string::npos) << message;
  }
}

TEST(GgufHeader, EveryTruncationOfAValidFileIsAnError) {
  const std::string bytes = valid_file();
  for (size_t n = 0; n < bytes.size(); ++n) {
    SCOPED_TRACE(n);
    EXPECT_NE(parse_error(bytes.substr(0, n)), "(parsed)");
  }
}

TEST(GgufHeader, RandomByteFlipsNeverCrash) {
  const std::string good = valid_file();
  std::mt19937 rng(26);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    try {
      ParsedGguf p =
          parse_gguf_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "flip.gguf");
      for (const GgufTensorInfo& t : p.tensors) ASSERT_LE(p.data_offset + t.offset + t.nbytes, bytes.size());
    } catch (const Error& e) {
      ASSERT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

TEST(GgufWriter, RoundTripsTensorsAndMetadata) {
  const fs::path path =
      fs::temp_directory_path() / fmt::format("fluxrt_gguf_w_{}.gguf", std::random_device{}());
  std::vector<float> values(4 * 64);
  for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(0.37f * static_cast<float>(i));
  std::vector<GgufTensorToWrite> tensors(3);
  tensors[0] = {"blk.0.w", QuantType::Q8_0, Shape({4, 64}),
                std::vector<uint8_t>(4 * quant_row_bytes(QuantType::Q8_0, 64))};
  for (int r = 0; r < 4; ++r)
    quantize_row_ref(QuantType::Q8_0, values.data() + r * 64, tensors[0].bytes.data() + r * 68, 64);
  tensors[1] = {"norm", QuantType::F32, Shape({5}), std::vector<uint8_t>(20, 0x3f)};
  tensors[2] = {"odd", QuantType::F16, Shape({3, 7}), std::vector<uint8_t>(42, 0x11)};
  GgufValue arch;
  arch.type = GgufValueType::String;
  arch.s = "flux";
  GgufValue vocab;
  vocab.type = GgufValueType::Array;
  vocab.array_type = GgufValueType::String;
  vocab.strings = {"x", "yz"};
  vocab.array_count = 2;
  write_gguf(path.string(), tensors, {{"general.architecture", arch}, {"tokens", vocab}});
  auto file = GgufFile::open(path.string());
  ASSERT_EQ(file->tensors().size(), 3u);
  for (const GgufTensorToWrite& t : tensors) {
    SCOPED_TRACE(t.name);
    const GgufTensorInfo& info = file->info(t.name);
    EXPECT_EQ(info.type, t.type);
    EXPECT_EQ(info.shape, t.shape);
    ASSERT_EQ(info.nbytes, t.bytes.size());
    EXPECT_EQ(std::memcmp(file->matrix(t.name).row(0), t.bytes.data(), t.bytes.size()), 0);
  }
  EXPECT_EQ(file->metadata().at("general.architecture").s, "flux");
  EXPECT_EQ(file->metadata().at("tokens").strings, vocab.strings);
  EXPECT_EQ(file->metadata().at("general.alignment").u, 32u);
  // A size that does not match is refused before anything is written.
  tensors[1].bytes.resize(19);
  EXPECT_THROW(write_gguf(path.string() + ".bad", tensors, {}), Error);
  EXPECT_FALSE(fs::exists(path.string() + ".bad"));
  fs::remove(path);
}

TEST(GgufFile, OpenNamesTheFileAndMissingTensors) {
  const fs::path path =
      fs::temp_directory_path() / fmt::format("fluxrt_gguf_{}.gguf", std::random_device{}());
  {
    std::ofstream out(path, std::ios::binary);
    const std::string bytes = valid_file();
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  EXPECT_TRUE(is_gguf_file(path.string()));
  auto file = GgufFile::open(path.string());
  EXPECT_EQ(file->tensor("a").shape(), Shape({4}));
  const QuantizedMatrix q = file->matrix("b");
  EXPECT_EQ(q.type, QuantType::Q8_0);
  EXPECT_EQ(q.rows, 2);
  try {
    file->info("nope");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotFound);
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("\"nope\""), std::string::npos);
  }
  fs::remove(path);
  EXPECT_FALSE(is_gguf_file(kQuants.parent_path().string()));
}

}  // namespace
}  // namespace fluxrt::io
