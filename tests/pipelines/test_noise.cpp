// torch-identical initial noise: the generator, torch.randn per dtype and size, consecutive draws
// and diffusers' batch handling, against tensors dumped by tools/reference/dump_noise.py.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "pipelines/noise.h"

namespace fluxrt::pipelines {
namespace {

using nlohmann::json;

json load_goldens() {
  const std::string path = std::string(FLUXRT_TEST_DATA_DIR) + "/noise/randn.json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return json::parse(in);
}

DType parse_dtype(const std::string& name) {
  if (name == "f32") return DType::F32;
  if (name == "bf16") return DType::BF16;
  if (name == "f16") return DType::F16;
  if (name == "f64") return DType::F64;
  throw std::runtime_error("unknown dtype " + name);
}

uint64_t fnv1a64(const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t element_bits(const Tensor& t, int64_t i) {
  switch (t.element_size()) {
    case 2: return t.data<uint16_t>()[i];
    case 4: return t.data<uint32_t>()[i];
    default: return t.data<uint64_t>()[i];
  }
}

// Compares one draw with its record; returns a description of the first difference or "".
std::string compare(const Tensor& got, const json& rec) {
  std::vector<int64_t> shape;
  for (const auto& d : rec["shape"]) shape.push_back(d.get<int64_t>());
  if (got.shape() != Shape(shape)) return "shape " + got.shape().str();
  const int64_t n = rec["numel"].get<int64_t>();
  auto check_range = [&](const json& bits, int64_t start) -> std::string {
    for (size_t k = 0; k < bits.size(); ++k) {
      const int64_t i = start + static_cast<int64_t>(k);
      const uint64_t want = bits[k].get<uint64_t>();
      const uint64_t have = element_bits(got, i);
      if (want != have) {
        return "element " + std::to_string(i) + ": bits " + std::to_string(have) + ", torch " + std::to_string(want) +
               " (value " + std::to_string(got.flatten().item({i})) + ")";
      }
    }
    return "";
  };
  if (rec.contains("bits")) {
    if (auto err = check_range(rec["bits"], 0); !err.empty()) return err;
  } else {
    if (auto err = check_range(rec["head"], 0); !err.empty()) return err;
    const int64_t tail_start = n - static_cast<int64_t>(rec["tail"].size());
    if (auto err = check_range(rec["tail"], tail_start); !err.empty()) return err;
  }
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(fnv1a64(got.raw_data(), got.nbytes())));
  if (rec["fnv1a64"].get<std::string>() != hash) return std::string("whole-tensor hash ") + hash;
  return "";
}

Shape shape_of(const json& rec) {
  std::vector<int64_t> shape;
  for (const auto& d : rec["shape"]) shape.push_back(d.get<int64_t>());
  return Shape(shape);
}

TEST(TorchGenerator, MersenneTwisterKnownAnswer) {
  // The 10000th output of the reference MT19937 seeded with 5489 (C++ [rand.predef]).
  TorchGenerator gen(5489);
  uint32_t v = 0;
  for (int i = 0; i < 10000; ++i) v = gen.random();
  EXPECT_EQ(v, 4123659995u);
}

TEST(TorchGenerator, DefaultSeedIsTorchs) {
  EXPECT_EQ(TorchGenerator().initial_seed(), 67280421310721ull);  // torch.Generator().initial_seed()
}

TEST(TorchGenerator, OnlyLow32SeedBitsReachTheEngine) {
  TorchGenerator a(5);
  TorchGenerator b((uint64_t{1} << 32) + 5);
  EXPECT_EQ(b.initial_seed(), (uint64_t{1} << 32) + 5);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(a.random(), b.random());
}

TEST(TorchGenerator, ManualSeedResetsStateAndCache) {
  TorchGenerator gen(3);
  Tensor first = gen.randn({3}, DType::F32);
  EXPECT_TRUE(gen.next_double_normal_sample().has_value());  // 3 scalar draws leave one cached
  gen.manual_seed(3);
  EXPECT_FALSE(gen.next_double_normal_sample().has_value());
  Tensor again = gen.randn({3}, DType::F32);
  EXPECT_EQ(std::memcmp(first.raw_data(), again.raw_data(), first.nbytes()), 0);
}

TEST(TorchRandn, MatchesTorchGoldens) {
  const json doc = load_goldens();
  int checked = 0;
  for (const auto& c : doc["cases"]) {
    const std::string kind = c["kind"];
    if (kind == "single") {
      TorchGenerator gen(std::stoull(c["seed"].get<std::string>()));
      int draw = 0;
      for (const auto& rec : c["draws"]) {
        const Tensor got = gen.randn(shape_of(rec), parse_dtype(rec["dtype"]));
        const std::string err = compare(got, rec);
        EXPECT_EQ(err, "") << "seed " << c["seed"] << " draw " << draw << " " << got.str();
        ++draw;
        ++checked;
      }
    } else {
      std::vector<TorchGenerator> gens;
      for (const auto& s : c["seeds"]) gens.emplace_back(std::stoull(s.get<std::string>()));
      const json& rec = c["draws"][0];
      const Tensor got = randn_tensor(shape_of(rec), parse_dtype(rec["dtype"]), std::span<TorchGenerator>(gens));
      EXPECT_EQ(compare(got, rec), "") << kind << " " << got.str();
      ++checked;
    }
  }
  EXPECT_GT(checked, 150);
}

TEST(TorchRandn, RandnLikeTorchIsAFreshGenerator) {
  TorchGenerator gen(42);
  const Tensor a = gen.randn({1, 128, 4, 4}, DType::BF16);
  const Tensor b = randn_like_torch({1, 128, 4, 4}, DType::BF16, 42);
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0);
}

TEST(TorchRandn, SingleGeneratorListBehavesLikeOneGenerator) {
  std::vector<TorchGenerator> one{TorchGenerator(11)};
  TorchGenerator plain(11);
  const Tensor a = randn_tensor({2, 4, 4, 4}, DType::F32, std::span<TorchGenerator>(one));
  const Tensor b = randn_tensor({2, 4, 4, 4}, DType::F32, plain);
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0);
}

TEST(TorchRandn, RejectsBadArguments) {
  TorchGenerator gen(0);
  try {
    gen.randn({4}, DType::I32);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
  }
  std::vector<TorchGenerator> two(2);
  EXPECT_THROW(randn_tensor({3, 4}, DType::F32, std::span<TorchGenerator>(two)), Error);
  std::vector<TorchGenerator> none;
  EXPECT_THROW(randn_tensor({1, 4}, DType::F32, std::span<TorchGenerator>(none)), Error);
}

TEST(NoiseShapes, AsTheDiffusersPipelinesRequest) {
  EXPECT_EQ(flux1_noise_shape(1, 1024, 1024), (Shape{1, 16, 128, 128}));
  EXPECT_EQ(flux1_noise_shape(2, 768, 1360), (Shape{2, 16, 96, 170}));
  EXPECT_EQ(flux2_noise_shape(1, 1024, 1024), (Shape{1, 128, 64, 64}));
  EXPECT_EQ(flux2_noise_shape(4, 1000, 520), (Shape{4, 128, 62, 32}));
  EXPECT_THROW(flux2_noise_shape(0, 1024, 1024), Error);
}

}  // namespace
}  // namespace fluxrt::pipelines
