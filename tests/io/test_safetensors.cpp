// safetensors reader, checkpoint resolution and writer. The good fixtures come from the
// `safetensors` package (tools/reference/make_safetensors_fixtures.py); the bad corpus from
// tools/reference/make_bad_safetensors.py, with the expected error of each file in expected.json.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "io/safetensors.h"
#include "io/utf8.h"

namespace fluxrt::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kData = fs::path(FLUXRT_TEST_DATA_DIR) / "safetensors";

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

json read_json(const fs::path& path) { return json::parse(read_bytes(path)); }

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A fresh folder per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            fmt::format("fluxrt_st_{}_{}_{}", info->test_suite_name(), info->name(), std::random_device{}());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path operator/(const std::string& name) const { return path_ / name; }
  const fs::path& path() const { return path_; }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  fs::path path_;
};

ErrorCode code_from_name(const std::string& name) {
  static const std::map<std::string, ErrorCode> kCodes = {
      {"InvalidArgument", ErrorCode::InvalidArgument}, {"NotFound", ErrorCode::NotFound},
      {"Format", ErrorCode::Format},                   {"Unsupported", ErrorCode::Unsupported},
      {"Io", ErrorCode::Io}};
  return kCodes.at(name);
}

// Runs `fn`, which must throw fluxrt::Error with `code` and a one-line message holding `needles`.
template <typename Fn>
void expect_error(Fn&& fn, ErrorCode code, const std::vector<std::string>& needles, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << what << ": no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(error_code_name(e.code()), std::string(error_code_name(code))) << what << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << what << ": message spans lines: " << msg;
    EXPECT_EQ(msg.find('\r'), std::string::npos) << what << ": " << msg;
    for (const auto& needle : needles) EXPECT_NE(msg.find(needle), std::string::npos) << what << ": no '" << needle << "' in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": threw a non-fluxrt exception: " << e.what();
  }
}

std::vector<double> as_f64(const Tensor& t) {
  Tensor d = ensure_aligned(t).to(DType::F64).contiguous();
  const double* p = d.data<double>();
  return std::vector<double>(p, p + d.numel());
}

DType dtype_from_torch(const std::string& name) {
  static const std::map<std::string, DType> kTorch = {
      {"float64", DType::F64}, {"float32", DType::F32},          {"float16", DType::F16},
      {"bfloat16", DType::BF16}, {"float8_e4m3fn", DType::F8E4M3}, {"float8_e5m2", DType::F8E5M2},
      {"int64", DType::I64},   {"int32", DType::I32},            {"int16", DType::I16},
      {"int8", DType::I8},     {"uint8", DType::U8},             {"bool", DType::Bool}};
  return kTorch.at(name);
}

// Checks every tensor listed in an *.expected.json written by the fixture script.
template <typename Source>
void check_expected(const Source& source, const json& expected) {
  for (const auto& [name, want] : expected.items()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(source.contains(name));
    const TensorInfo& info = source.info(name);
    EXPECT_EQ(info.dtype, dtype_from_torch(want["dtype"].template get<std::string>()));
    EXPECT_EQ(info.shape.vec(), want["shape"].template get<std::vector<int64_t>>());
    Tensor t = source.tensor(name);
    EXPECT_EQ(t.shape(), info.shape);
    EXPECT_EQ(t.dtype(), info.dtype);
    std::vector<double> got = as_f64(t);
    ASSERT_EQ(got.size(), want["values"].size());
    for (size_t i = 0; i < got.size(); ++i) {
      const json& w = want["values"][i];
      if (w.is_string()) {
        const std::string s = w.template get<std::string>();
        if (s == "nan")
          EXPECT_TRUE(std::isnan(got[i])) << i;
        else
          EXPECT_EQ(got[i], s == "inf" ? INFINITY : -INFINITY) << i;
      } else {
        EXPECT_EQ(got[i], w.template get<double>()) << "element " << i;  // exact: every dtype fits in f64
      }
    }
  }
}

// ---------------------------------------------------------------- the bad corpus

TEST(SafetensorsBad, EveryFileIsListed) {
  json expected = read_json(kData / "bad" / "expected.json");
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(kData / "bad")) {
    if (e.path().extension() != ".safetensors") continue;
    ++files;
    EXPECT_TRUE(expected.contains(e.path().filename().string())) << e.path();
  }
  EXPECT_EQ(files, expected.size());
  EXPECT_GE(files, 16u);
}

TEST(SafetensorsBad, EachFileGivesItsOneLineError) {
  json expected = read_json(kData / "bad" / "expected.json");
  for (const auto& [file, want] : expected.items()) {
    const std::string path = (kData / "bad" / file).string();
    std::vector<std::string> needles = want["contains"].get<std::vector<std::string>>();
    needles.push_back(file);
    const ErrorCode code = code_from_name(want["code"].get<std::string>());
    expect_error([&] { SafetensorsFile::open(path); }, code, needles, file);
    expect_error([&] { Checkpoint::open(path); }, code, needles, file + " (Checkpoint)");
    // The in-memory entry point sees the same bytes and must agree.
    const std::string bytes = read_bytes(path);
    expect_error([&] {
      parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
    }, code, needles, file + " (parse_safetensors_header)");
  }
}

// A cheap stand-in for the fuzzer in the g++ build: random byte edits, truncations and
// extensions of valid files either parse (and then satisfy the invariants) or throw Error.
TEST(SafetensorsBad, MutatedFilesNeverEscapeAsOtherErrors) {
  std::vector<std::string> seeds = {read_bytes(kData / "good" / "dtypes.safetensors"),
                                    read_bytes(kData / "good" / "misaligned.safetensors")};
  std::mt19937_64 rng(42);
  int parsed_ok = 0, rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string bytes = seeds[iter % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 4) {
        case 0:  // flip a byte, mostly inside the header where it matters
          bytes[rng() % std::min<size_t>(bytes.size(), 400)] = static_cast<char>(rng());
          break;
        case 1:
          bytes.resize(rng() % (bytes.size() + 1));
          break;
        case 2:
          bytes.append(static_cast<size_t>(rng() % 16), static_cast<char>(rng()));
          break;
        default:  // a digit somewhere in the header becomes another digit
          for (int tries = 0; tries < 50 && bytes.size() > 8; ++tries) {
            size_t i = 8 + rng() % (std::min<size_t>(bytes.size(), 400) - 8);
            if (bytes[i] >= '0' && bytes[i] <= '9') {
              bytes[i] = static_cast<char>('0' + rng() % 10);
              break;
            }
          }
      }
      if (bytes.empty()) break;
    }
    try {
      ParsedHeader h = parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "m");
      ++parsed_ok;
      ASSERT_EQ(h.data_offset + h.data_size, bytes.size());
      uint64_t end = 0;
      for (const TensorInfo& t : h.tensors) {
        ASSERT_LE(t.data_end, h.data_size);
        ASSERT_EQ(t.nbytes(), static_cast<size_t>(t.numel()) * dtype_size(t.dtype));
        if (t.nbytes() > 0) {
          ASSERT_GE(t.data_begin, end);
          end = t.data_end;
        }
      }
    } catch (const Error& e) {
      ++rejected;
      ASSERT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(rejected, 100);
  EXPECT_GT(parsed_ok, 10);
}

// ---------------------------------------------------------------- good files

TEST(SafetensorsGood, ReadsEveryDtypeWrittenByTheReference) {
  auto file = SafetensorsFile::open((kData / "good" / "dtypes.safetensors").string());
  json expected = read_json(kData / "good" / "dtypes.expected.json");
  EXPECT_EQ(file->tensors().size(), expected.size());
  check_expected(*file, expected);
  EXPECT_EQ(file->metadata(), (std::map<std::string, std::string>{
                                  {"format", "pt"}, {"note", "fluxrt fixture"}, {"unicode", "größe ✓"}}));
  EXPECT_EQ(file->data_offset() % 8, 0u);  // the reference pads the header with spaces
}

TEST(SafetensorsGood, ViewsAreZeroCopyAndKeepTheMappingAlive) {
  Tensor t;
  const uint8_t* begin = nullptr;
  {
    auto file = SafetensorsFile::open((kData / "good" / "dtypes.safetensors").string());
    t = file->tensor("f32.matrix");
    begin = file->mapping().data();
    const TensorInfo& info = file->info("f32.matrix");
    EXPECT_EQ(static_cast<const uint8_t*>(t.raw_data()), begin + file->data_offset() + info.data_begin);
    EXPECT_TRUE(t.is_contiguous());
  }
  // The file object is gone; the view still reads the mapped bytes.
  EXPECT_EQ(t.to_vector(), (std::vector<float>{-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f}));
}

TEST(SafetensorsGood, EmptyAndScalarTensors) {
  auto file = SafetensorsFile::open((kData / "good" / "dtypes.safetensors").string());
  Tensor empty = file->tensor("empty.f32");
  EXPECT_EQ(empty.shape(), (Shape{0, 4}));
  EXPECT_EQ(empty.numel(), 0);
  Tensor scalar = file->tensor("scalar.f32");
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(scalar.to_vector(), std::vector<float>{3.5f});
}

TEST(SafetensorsGood, MissingTensorIsNotFoundNamingFileAndTensor) {
  const std::string path = (kData / "good" / "dtypes.safetensors").string();
  auto file = SafetensorsFile::open(path);
  EXPECT_FALSE(file->contains("nope"));
  expect_error([&] { file->info("nope"); }, ErrorCode::NotFound, {path, "\"nope\""}, "info");
  expect_error([&] { file->tensor("nope\n"); }, ErrorCode::NotFound, {path, "\"nope\\n\""}, "tensor");
}

TEST(SafetensorsGood, MisalignedTensorIsReadableAndCopiedWhenAlignmentIsAsked) {
  auto file = SafetensorsFile::open((kData / "good" / "misaligned.safetensors").string());
  Tensor view = file->tensor("weight");
  EXPECT_NE(reinterpret_cast<uintptr_t>(view.raw_data()) % 4, 0u);
  float raw[2];
  std::memcpy(raw, view.raw_data(), sizeof(raw));  // byte access is always fine
  EXPECT_EQ(raw[0], 1.5f);
  EXPECT_EQ(raw[1], -4.0f);
  Tensor aligned = file->tensor_aligned("weight");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(aligned.raw_data()) % 4, 0u);
  EXPECT_NE(aligned.raw_data(), view.raw_data());
  EXPECT_EQ(aligned.to_vector(), (std::vector<float>{1.5f, -4.0f}));
  // An aligned view is returned as is.
  Tensor mask = file->tensor("mask");
  EXPECT_EQ(ensure_aligned(mask).raw_data(), mask.raw_data());
  EXPECT_EQ(mask.to_vector(), (std::vector<float>{1.0f, 0.0f, 1.0f}));
}

TEST(SafetensorsGood, OpenErrorsForPaths) {
  expect_error([&] { SafetensorsFile::open("/nonexistent/x.safetensors"); }, ErrorCode::NotFound,
               {"/nonexistent/x.safetensors"}, "missing");
  expect_error([&] { SafetensorsFile::open((kData / "good").string()); }, ErrorCode::Io, {"directory"}, "dir");
  expect_error([&] { Checkpoint::open("/nonexistent/ckpt"); }, ErrorCode::NotFound, {"/nonexistent/ckpt"},
               "ckpt");
}

TEST(SafetensorsGood, MappedFileCoversEmptyAndWholeFiles) {
  auto empty = MappedFile::open((kData / "bad" / "empty.safetensors").string());
  EXPECT_EQ(empty->size(), 0u);
  EXPECT_EQ(empty->data(), nullptr);
  empty->prefetch(0, 100);  // a hint; harmless on an empty mapping
  const fs::path path = kData / "good" / "dtypes.safetensors";
  auto file = MappedFile::open(path.string());
  const std::string bytes = read_bytes(path);
  ASSERT_EQ(file->size(), bytes.size());
  EXPECT_EQ(std::memcmp(file->data(), bytes.data(), bytes.size()), 0);
  file->prefetch(5, 1 << 30);  // clamped to the file
}

// ---------------------------------------------------------------- checkpoints

TEST(SafetensorsCheckpoint, ShardedThroughIndexFileAndFolder) {
  json expected = read_json(kData / "good" / "sharded.expected.json");
  const fs::path dir = kData / "good" / "sharded";
  for (const std::string& path : {(dir / "model.safetensors.index.json").string(), dir.string()}) {
    SCOPED_TRACE(path);
    Checkpoint ckpt = Checkpoint::open(path);
    EXPECT_EQ(ckpt.size(), expected.size());
    EXPECT_EQ(ckpt.files().size(), 2u);
    check_expected(ckpt, expected);
    std::vector<std::string> names = ckpt.names();
    EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
    EXPECT_NE(ckpt.file_of("layers.3.weight").find("model-00002-of-00002.safetensors"), std::string::npos);
    EXPECT_NE(ckpt.file_of("layers.0.weight").find("model-00001-of-00002.safetensors"), std::string::npos);
    EXPECT_EQ(ckpt.metadata().at("total_size"), "544");
    expect_error([&] { ckpt.tensor("missing"); }, ErrorCode::NotFound, {path, "\"missing\""}, "missing");
  }
}

TEST(SafetensorsCheckpoint, SingleFileAndFolderOfFiles) {
  TempDir dir;
  write_safetensors((dir / "a.safetensors").string(), {{"x", Tensor::full({2}, DType::F32, 1.0)}});
  write_safetensors((dir / "b.safetensors").string(), {{"y", Tensor::full({3}, DType::BF16, 2.0)}},
                    {{"k", "v"}});
  Checkpoint one = Checkpoint::open((dir / "b.safetensors").string());
  EXPECT_EQ(one.names(), std::vector<std::string>{"y"});
  EXPECT_EQ(one.metadata().at("k"), "v");
  Checkpoint both = Checkpoint::open(dir.path().string());
  EXPECT_EQ(both.names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(both.tensor("y").to_vector(), (std::vector<float>{2, 2, 2}));
  EXPECT_EQ(both.file_of("x"), (dir / "a.safetensors").string());
}

TEST(SafetensorsCheckpoint, NameCollisionAcrossFilesNamesBoth) {
  TempDir dir;
  write_safetensors((dir / "a.safetensors").string(), {{"w", Tensor::zeros({1}, DType::F32)}});
  write_safetensors((dir / "b.safetensors").string(), {{"w", Tensor::zeros({1}, DType::F32)}});
  expect_error([&] { Checkpoint::open(dir.path().string()); }, ErrorCode::Format,
               {"\"w\"", "a.safetensors", "b.safetensors"}, "collision");
}

TEST(SafetensorsCheckpoint, IndexErrorsNameIndexShardAndTensor) {
  TempDir dir;
  write_safetensors((dir / "s1.safetensors").string(), {{"a", Tensor::zeros({1}, DType::F32)}});
  const std::string index = (dir / "m.safetensors.index.json").string();

  write_bytes(index, R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})");
  expect_error([&] { Checkpoint::open(index); }, ErrorCode::Format, {index, "\"b\"", "s1.safetensors"}, "absent");

  write_bytes(index, R"({"weight_map": {"a": "s1.safetensors", "c": "s2.safetensors"}})");
  expect_error([&] { Checkpoint::open(index); }, ErrorCode::NotFound, {index, "s2.safetensors", "\"c\""},
               "no shard");

  write_bytes(index, R"({"weight_map": {"a": 3}})");
  expect_error([&] { Checkpoint::open(index); }, ErrorCode::Format, {index, "\"a\""}, "not a name");

  write_bytes(index, R"({"weights": {}})");
  expect_error([&] { Checkpoint::open(index); }, ErrorCode::Format, {index, "weight_map"}, "no map");

  write_bytes(index, "{\"weight_map\": \n");
  expect_error([&] { Checkpoint::open(index); }, ErrorCode::Format, {index, "JSON"}, "bad json");

  // A bad shard reports the shard's own error.
  write_bytes(dir / "s3.safetensors", "1234567");
  write_bytes(index, R"({"weight_map": {"a": "s1.safetensors", "z": "s3.safetensors"}})");
  expect_error([&] { Checkpoint::open(index); }, ErrorCode::Format, {"s3.safetensors", "7 bytes"}, "bad shard");

  // A folder is ambiguous with two indexes.
  write_bytes(dir / "other.safetensors.index.json", R"({"weight_map": {"a": "s1.safetensors"}})");
  expect_error([&] { Checkpoint::open(dir.path().string()); }, ErrorCode::Format, {"2 index files"}, "two");
}

TEST(SafetensorsCheckpoint, EmptyFolderIsNotFound) {
  TempDir dir;
  expect_error([&] { Checkpoint::open(dir.path().string()); }, ErrorCode::NotFound, {dir.path().string()},
               "empty");
}

// ---------------------------------------------------------------- writer

TEST(SafetensorsWriter, RoundTripsEveryDtypeStridesAndMetadata) {
  TempDir dir;
  const std::string path = (dir / "out.safetensors").string();
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::vector<float> values;
  for (int i = 0; i < 24; ++i) values.push_back(static_cast<float>(i % 7) - 3.0f);
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16, DType::F8E4M3, DType::F8E5M2, DType::I64,
                   DType::I32, DType::I16, DType::I8, DType::U8, DType::Bool}) {
    tensors.emplace_back(fmt::format("t.{}", dtype_name(dt)), Tensor::from_vector(values, {2, 3, 4}, dt));
  }
  Tensor base = Tensor::from_vector(values, {4, 6});
  tensors.emplace_back("strided.transposed", base.transpose(0, 1));  // [6, 4], not contiguous
  tensors.emplace_back("strided.slice", base.slice(1, 1, 6, 2));     // [4, 3]
  tensors.emplace_back("empty", Tensor::zeros({3, 0}, DType::BF16));
  tensors.emplace_back("scalar", Tensor::full({}, DType::F32, -7.25));
  tensors.emplace_back("odd.bool", Tensor::full({3}, DType::Bool, 1.0));
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"name", "größe\n\"q\""}};
  write_safetensors(path, tensors, metadata);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.safetensors"});  // no temporary left

  auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file->metadata(), metadata);
  EXPECT_EQ(file->tensors().size(), tensors.size());
  EXPECT_EQ(file->data_offset() % 8, 0u);
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    Tensor back = file->tensor(name);
    EXPECT_EQ(back.dtype(), t.dtype());
    EXPECT_EQ(back.shape(), t.shape());
    // Largest elements first: every tensor the writer lays out is aligned.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(back.raw_data()) % back.element_size(), 0u);
    Tensor c = t.contiguous();
    ASSERT_EQ(back.nbytes(), c.nbytes());
    EXPECT_EQ(std::memcmp(back.raw_data(), c.raw_data(), c.nbytes()), 0);
  }
  EXPECT_EQ(file->tensor("strided.transposed").to_vector(), base.transpose(0, 1).to_vector());
}

TEST(SafetensorsWriter, OverwritesAtomically) {
  TempDir dir;
  const std::string path = (dir / "w.safetensors").string();
  write_safetensors(path, {{"a", Tensor::full({4}, DType::F32, 1.0)}});
  auto old_view = SafetensorsFile::open(path);
  write_safetensors(path, {{"b", Tensor::full({2}, DType::F32, 2.0)}}, {}, WriteOptions{.fsync = true});
  // The old mapping still sees the old file (rename replaced the directory entry, not the bytes).
  EXPECT_EQ(old_view->tensor("a").to_vector(), (std::vector<float>{1, 1, 1, 1}));
  auto fresh = SafetensorsFile::open(path);
  EXPECT_FALSE(fresh->contains("a"));
  EXPECT_EQ(fresh->tensor("b").to_vector(), (std::vector<float>{2, 2}));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"w.safetensors"});
}

TEST(SafetensorsWriter, RejectsBadInputWithoutLeavingFiles) {
  TempDir dir;
  const std::string path = (dir / "bad.safetensors").string();
  Tensor t = Tensor::zeros({1}, DType::F32);
  expect_error([&] { write_safetensors(path, {{"a", t}, {"a", t}}); }, ErrorCode::InvalidArgument,
               {path, "\"a\"", "twice"}, "duplicate");
  expect_error([&] { write_safetensors(path, {{"x\xff", t}}); }, ErrorCode::InvalidArgument,
               {path, "\"x\\xff\"", "UTF-8"}, "utf8");
  expect_error([&] { write_safetensors(path, {{"__metadata__", t}}); }, ErrorCode::InvalidArgument, {path},
               "reserved");
  expect_error([&] { write_safetensors(path, {{"u", Tensor()}}); }, ErrorCode::InvalidArgument,
               {path, "\"u\""}, "undefined");
  expect_error([&] { write_safetensors(path, {{"a", t}}, {{"k", "\xc0"}}); }, ErrorCode::InvalidArgument,
               {path, "\"k\""}, "metadata");
  EXPECT_TRUE(dir.entries().empty());
  const std::string nowhere = (dir / "no" / "such" / "dir.safetensors").string();
  expect_error([&] { write_safetensors(nowhere, {{"a", t}}); }, ErrorCode::Io, {nowhere}, "no dir");
  EXPECT_TRUE(dir.entries().empty());
}

TEST(SafetensorsUtf8, ValidationAndEscaping) {
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("größe ✓ 𝄞"));
  size_t bad = 0;
  EXPECT_FALSE(is_valid_utf8("ab\xff", &bad));
  EXPECT_EQ(bad, 2u);
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));      // surrogate U+D800
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\xe2\x9c"));          // truncated
  EXPECT_EQ(quote_name("a\nb\"c\\\x01\xffé"), "\"a\\nb\\\"c\\\\\\x01\\xffé\"");
  EXPECT_EQ(escape_for_message(std::string(300, 'x'), 10), "xxxxxxxxxx...");
}

}  // namespace
}  // namespace fluxrt::io
