// The scalar reference dequantization. Each formula is the `gguf` package's numpy one, evaluated
// in f32 in the same order: this file is compiled with -ffp-contract=off (CMakeLists.txt) so
// `d * q - m` stays two roundings, as in numpy. Block layouts (bytes, in order):
//   Q8_0 d:f16 qs:i8[32]                      Q4_0 d qs:u8[16] (low nibbles first, then high)
//   Q4_1 d m:f16 qs[16]                       Q5_0 d qh:u32 qs[16]      Q5_1 d m qh qs[16]
//   Q2_K scales:u8[16] qs[64] d dmin          Q3_K hmask[32] qs[64] scales[12] d
//   Q4_K d dmin scales[12] qs[128]            Q5_K d dmin scales[12] qh[32] qs[128]
//   Q6_K ql[128] qh[64] scales:i8[16] d
#include "core/quant.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace fluxrt {
namespace {

constexpr QuantTraits kTraits[] = {
    {"F32", 1, 4, 0},       {"F16", 1, 2, 1},       {"BF16", 1, 2, 30},     {"Q8_0", 32, 34, 8},
    {"Q4_0", 32, 18, 2},    {"Q4_1", 32, 20, 3},    {"Q5_0", 32, 22, 6},    {"Q5_1", 32, 24, 7},
    {"Q2_K", 256, 84, 10},  {"Q3_K", 256, 110, 11}, {"Q4_K", 256, 144, 12}, {"Q5_K", 256, 176, 13},
    {"Q6_K", 256, 210, 14}, {"F8_E4M3", 1, 1, -1},  {"F8_E5M2", 1, 1, -1},
};
constexpr int kNumTypes = static_cast<int>(sizeof(kTraits) / sizeof(kTraits[0]));

// Every type id GGML has defined, so that a file with one we do not run is refused by its name.
struct GgmlName {
  uint32_t id;
  std::string_view name;
};
constexpr GgmlName kGgmlNames[] = {
    {0, "F32"},         {1, "F16"},         {2, "Q4_0"},   {3, "Q4_1"},    {6, "Q5_0"},
    {7, "Q5_1"},        {8, "Q8_0"},        {9, "Q8_1"},   {10, "Q2_K"},   {11, "Q3_K"},
    {12, "Q4_K"},       {13, "Q5_K"},       {14, "Q6_K"},  {15, "Q8_K"},   {16, "IQ2_XXS"},
    {17, "IQ2_XS"},     {18, "IQ3_XXS"},    {19, "IQ1_S"}, {20, "IQ4_NL"}, {21, "IQ3_S"},
    {22, "IQ2_S"},      {23, "IQ4_XS"},     {24, "I8"},    {25, "I16"},    {26, "I32"},
    {27, "I64"},        {28, "F64"},        {29, "IQ1_M"}, {30, "BF16"},   {31, "Q4_0_4_4"},
    {32, "Q4_0_4_8"},   {33, "Q4_0_8_8"},   {34, "TQ1_0"}, {35, "TQ2_0"},  {36, "IQ4_NL_4_4"},
    {37, "IQ4_NL_4_8"}, {38, "IQ4_NL_8_8"}, {39, "MXFP4"}, {40, "NVFP4"},  {41, "Q1_0"},
};

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

inline uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void q8_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(static_cast<int8_t>(b[2 + i])) * d;
}

void q4_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const uint8_t* qs = b + 2;
  for (int i = 0; i < 16; ++i) {
    y[i] = d * static_cast<float>((qs[i] & 0x0F) - 8);
    y[i + 16] = d * static_cast<float>((qs[i] >> 4) - 8);
  }
}

void q4_1(const uint8_t* b, float* y) {
  const float d = f16_at(b), m = f16_at(b + 2);
  const uint8_t* qs = b + 4;
  for (int i = 0; i < 16; ++i) {
    y[i] = d * static_cast<float>(qs[i] & 0x0F) + m;
    y[i + 16] = d * static_cast<float>(qs[i] >> 4) + m;
  }
}

// Q5_0 / Q5_1: value i's fifth bit is bit i of qh.
void q5_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const uint32_t qh = u32_at(b + 2);
  const uint8_t* qs = b + 6;
  for (int i = 0; i < 16; ++i) {
    const int lo = (qs[i] & 0x0F) | static_cast<int>(((qh >> i) & 1u) << 4);
    const int hi = (qs[i] >> 4) | static_cast<int>(((qh >> (i + 16)) & 1u) << 4);
    y[i] = d * static_cast<float>(lo - 16);
    y[i + 16] = d * static_cast<float>(hi - 16);
  }
}

void q5_1(const uint8_t* b, float* y) {
  const float d = f16_at(b), m = f16_at(b + 2);
  const uint32_t qh = u32_at(b + 4);
  const uint8_t* qs = b + 8;
  for (int i = 0; i < 16; ++i) {
    const int lo = (qs[i] & 0x0F) | static_cast<int>(((qh >> i) & 1u) << 4);
    const int hi = (qs[i] >> 4) | static_cast<int>(((qh >> (i + 16)) & 1u) << 4);
    y[i] = d * static_cast<float>(lo) + m;
    y[i + 16] = d * static_cast<float>(hi) + m;
  }
}

// Q2_K: 16 groups of 16 values, each with a 4-bit scale and a 4-bit min; value c*128 + s*32 + l
// is bits 2s..2s+1 of qs[c*32 + l].
void q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = f16_at(b + 80), dmin = f16_at(b + 82);
  for (int i = 0; i < 256; ++i) {
    const int c = i / 128, s = (i / 32) % 4, l = i % 32, g = i / 16;
    const float dl = d * static_cast<float>(scales[g] & 0x0F);
    const float ml = dmin * static_cast<float>(scales[g] >> 4);
    const int q = (qs[c * 32 + l] >> (2 * s)) & 3;
    y[i] = dl * static_cast<float>(q) - ml;
  }
}

// Q3_K: 16 groups of 16 with 6-bit signed scales (low 4 bits in bytes 0..7, nibble by nibble;
// high 2 bits in bytes 8..11); value i's third bit is bit i/32 of hmask[i%32], and a clear bit
// subtracts 4.
void q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  const float d = f16_at(b + 108);
  float dl[16];
  for (int g = 0; g < 16; ++g) {
    const int low = (g < 8 ? sc[g] : sc[g - 8] >> 4) & 0x0F;
    const int high = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
    dl[g] = d * static_cast<float>((low | (high << 4)) - 32);
  }
  for (int i = 0; i < 256; ++i) {
    const int c = i / 128, s = (i / 32) % 4, l = i % 32;
    const int ql = (qs[c * 32 + l] >> (2 * s)) & 3;
    const int h = (hmask[l] >> (i / 32)) & 1;
    y[i] = dl[i / 16] * static_cast<float>(ql - ((h ^ 1) << 2));
  }
}

// The 8 six-bit scales and mins of Q4_K / Q5_K, packed in 12 bytes.
void k_scale_min(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 0x3F;
    *mn = s[j + 4] & 0x3F;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 2) & 0x30);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 2) & 0x30);
  }
}

// Q4_K / Q5_K: 8 groups of 32; value c*64 + s*32 + l is nibble s of qs[c*32 + l] (Q5_K adds bit
// i/32 of qh[i%32] as the fifth bit).
void q4_k(const uint8_t* b, float* y) {
  const float d = f16_at(b), dmin = f16_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int g = 0; g < 8; ++g) {
    int sc, mn;
    k_scale_min(scales, g, &sc, &mn);
    const float dd = d * static_cast<float>(sc), dm = dmin * static_cast<float>(mn);
    const int c = g / 2, s = g % 2;
    for (int l = 0; l < 32; ++l) {
      const int q = (qs[c * 32 + l] >> (4 * s)) & 0x0F;
      y[g * 32 + l] = dd * static_cast<float>(q) - dm;
    }
  }
}

void q5_k(const uint8_t* b, float* y) {
  const float d = f16_at(b), dmin = f16_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int g = 0; g < 8; ++g) {
    int sc, mn;
    k_scale_min(scales, g, &sc, &mn);
    const float dd = d * static_cast<float>(sc), dm = dmin * static_cast<float>(mn);
    const int c = g / 2, s = g % 2;
    for (int l = 0; l < 32; ++l) {
      const int q = ((qs[c * 32 + l] >> (4 * s)) & 0x0F) | (((qh[l] >> g) & 1) << 4);
      y[g * 32 + l] = dd * static_cast<float>(q) - dm;
    }
  }
}

// Q6_K: 16 groups of 16 with signed 8-bit scales; value c*128 + s*64 + l (l < 64) takes nibble s
// of ql[c*64 + l], and value c*128 + t*32 + l (l < 32) bits 2t..2t+1 of qh[c*32 + l] as its top.
void q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = f16_at(b + 208);
  for (int i = 0; i < 256; ++i) {
    const int c = i / 128, r = i % 128;
    const int low = (ql[c * 64 + r % 64] >> (4 * (r / 64))) & 0x0F;
    const int high = (qh[c * 32 + r % 32] >> (2 * (r / 32))) & 3;
    const float dg = d * static_cast<float>(scales[i / 16]);
    y[i] = dg * static_cast<float>((low | (high << 4)) - 32);
  }
}

// ---- quantization (gguf's numpy quantize_blocks, value for value; the K types: quant_kquants.cpp) ----

inline void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// 1 / d, or 0 when d is 0 (np.where(d == 0, 0, 1 / d)).
inline float inverse_or_zero(float d) { return d == 0.0f ? 0.0f : 1.0f / d; }

// The value of largest magnitude, the first one on ties (np.argmax of abs), with its sign.
float signed_absmax(const float* x, int n) {
  float best = x[0];
  for (int i = 1; i < n; ++i)
    if (std::fabs(x[i]) > std::fabs(best)) best = x[i];
  return best;
}

// trunc(v) as uint8 clipped to [0, hi]: numpy's astype(uint8) of a value in [0, 256) then clip.
inline uint8_t trunc_clip(float v, int hi) {
  const int q = static_cast<int>(std::trunc(v));
  return static_cast<uint8_t>(std::clamp(q, 0, hi));
}

void quant_q8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = inverse_or_zero(d);
  put_f16(b, d);
  // np_roundf: round half away from zero, which is what roundf does.
  for (int i = 0; i < 32; ++i) b[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[i] * id)));
}

void quant_q4_0(const float* x, uint8_t* b) {
  const float d = signed_absmax(x, 32) / -8.0f;
  const float id = inverse_or_zero(d);
  put_f16(b, d);
  for (int i = 0; i < 16; ++i)
    b[2 + i] =
        static_cast<uint8_t>(trunc_clip(x[i] * id + 8.5f, 15) | (trunc_clip(x[i + 16] * id + 8.5f, 15) << 4));
}

void quant_q4_1(const float* x, uint8_t* b) {
  const float mx = *std::max_element(x, x + 32), mn = *std::min_element(x, x + 32);
  const float d = (mx - mn) / 15.0f;
  const float id = inverse_or_zero(d);
  put_f16(b, d);
  put_f16(b + 2, mn);
  for (int i = 0; i < 16; ++i)
    b[4 + i] = static_cast<uint8_t>(trunc_clip((x[i] - mn) * id + 0.5f, 15) |
                                    (trunc_clip((x[i + 16] - mn) * id + 0.5f, 15) << 4));
}

// Q5_0 / Q5_1 share the packing: low nibbles as Q4, the fifth bits in a u32.
void pack_q5(const uint8_t* q, uint8_t* qh_out, uint8_t* qs) {
  uint32_t qh = 0;
  for (int i = 0; i < 32; ++i) qh |= static_cast<uint32_t>(q[i] >> 4) << i;
  std::memcpy(qh_out, &qh, 4);
  for (int i = 0; i < 16; ++i) qs[i] = static_cast<uint8_t>((q[i] & 0x0F) | ((q[i + 16] & 0x0F) << 4));
}

void quant_q5_0(const float* x, uint8_t* b) {
  const float d = signed_absmax(x, 32) / -16.0f;
  const float id = inverse_or_zero(d);
  put_f16(b, d);
  uint8_t q[32];
  for (int i = 0; i < 32; ++i) q[i] = trunc_clip(x[i] * id + 16.5f, 31);
  pack_q5(q, b + 2, b + 6);
}

void quant_q5_1(const float* x, uint8_t* b) {
  const float mx = *std::max_element(x, x + 32), mn = *std::min_element(x, x + 32);
  const float d = (mx - mn) / 31.0f;
  const float id = inverse_or_zero(d);
  put_f16(b, d);
  put_f16(b + 2, mn);
  uint8_t q[32];
  for (int i = 0; i < 32; ++i) q[i] = trunc_clip((x[i] - mn) * id + 0.5f, 31);
  pack_q5(q, b + 4, b + 8);
}

// gguf's BF16 quantize: round to nearest even; NaN keeps sign and top bits, made quiet.
uint16_t gguf_bf16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(((u & 0xffff0000u) | (64u << 16)) >> 16);
  return static_cast<uint16_t>((static_cast<uint64_t>(u) + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

}  // namespace

bool quant_can_quantize(QuantType type) {
  switch (type) {
    case QuantType::F32:
    case QuantType::F16:
    case QuantType::BF16:
    case QuantType::Q8_0:
    case QuantType::Q4_0:
    case QuantType::Q4_1:
    case QuantType::Q5_0:
    case QuantType::Q5_1:
    case QuantType::Q2_K:
    case QuantType::Q3_K:
    case QuantType::Q4_K:
    case QuantType::Q5_K:
    case QuantType::Q6_K:
      return true;
    default:
      return false;
  }
}

void quantize_row_ref(QuantType type, const float* src, uint8_t* dst, int64_t n) {
  const QuantTraits& t = quant_traits(type);
  FLUXRT_CHECK(n >= 0 && n % t.block == 0, ErrorCode::InvalidArgument,
               "quantize: a row of {} values is not whole {} blocks of {}", n, t.name, t.block);
  void (*block_fn)(const float*, uint8_t*) = nullptr;
  switch (type) {
    case QuantType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case QuantType::F16:
      for (int64_t i = 0; i < n; ++i) put_f16(dst + 2 * i, src[i]);
      return;
    case QuantType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = gguf_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case QuantType::Q8_0:
      block_fn = quant_q8_0;
      break;
    case QuantType::Q4_0:
      block_fn = quant_q4_0;
      break;
    case QuantType::Q4_1:
      block_fn = quant_q4_1;
      break;
    case QuantType::Q5_0:
      block_fn = quant_q5_0;
      break;
    case QuantType::Q5_1:
      block_fn = quant_q5_1;
      break;
    case QuantType::Q2_K:
      block_fn = quant_detail::quantize_block_q2_k;
      break;
    case QuantType::Q3_K:
      block_fn = quant_detail::quantize_block_q3_k;
      break;
    case QuantType::Q4_K:
      block_fn = quant_detail::quantize_block_q4_k;
      break;
    case QuantType::Q5_K:
      block_fn = quant_detail::quantize_block_q5_k;
      break;
    case QuantType::Q6_K:
      block_fn = quant_detail::quantize_block_q6_k;
      break;
    default:
      fail(ErrorCode::Unsupported,
           "quantize: writing {} is not supported (q8_0, q6_K, q5_K, q5_1, q5_0, q4_K, q4_1, "
           "q4_0, q3_K, q2_K, f16, bf16 and f32 are)",
           t.name);
  }
  for (int64_t b = 0; b < n / t.block; ++b) block_fn(src + b * t.block, dst + b * t.block_bytes);
}

const QuantTraits& quant_traits(QuantType type) {
  const int i = static_cast<int>(type);
  FLUXRT_CHECK(i >= 0 && i < kNumTypes, ErrorCode::Internal, "quant_traits: bad type {}", i);
  return kTraits[i];
}

bool quant_type_from_ggml(uint32_t ggml_id, QuantType* out) {
  for (int i = 0; i < kNumTypes; ++i) {
    if (kTraits[i].ggml_id >= 0 && static_cast<uint32_t>(kTraits[i].ggml_id) == ggml_id) {
      *out = static_cast<QuantType>(i);
      return true;
    }
  }
  return false;
}

std::string_view ggml_type_name(uint32_t ggml_id) {
  for (const GgmlName& n : kGgmlNames)
    if (n.id == ggml_id) return n.name;
  return {};
}

bool quant_type_from_name(std::string_view name, QuantType* out) {
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (int i = 0; i < kNumTypes; ++i) {
    if (kTraits[i].ggml_id >= 0 && kTraits[i].name == upper) {
      *out = static_cast<QuantType>(i);
      return true;
    }
  }
  return false;
}

void dequantize_row_ref(QuantType type, const uint8_t* src, float* dst, int64_t n) {
  const QuantTraits& t = quant_traits(type);
  const int64_t blocks = n / t.block;
  switch (type) {
    case QuantType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case QuantType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_at(src + 2 * i);
      return;
    case QuantType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
    case QuantType::F8E4M3:
      for (int64_t i = 0; i < n; ++i) dst[i] = f8e4m3_to_f32(src[i]);
      return;
    case QuantType::F8E5M2:
      for (int64_t i = 0; i < n; ++i) dst[i] = f8e5m2_to_f32(src[i]);
      return;
    default:
      break;
  }
  void (*block_fn)(const uint8_t*, float*) = nullptr;
  switch (type) {
    case QuantType::Q8_0:
      block_fn = q8_0;
      break;
    case QuantType::Q4_0:
      block_fn = q4_0;
      break;
    case QuantType::Q4_1:
      block_fn = q4_1;
      break;
    case QuantType::Q5_0:
      block_fn = q5_0;
      break;
    case QuantType::Q5_1:
      block_fn = q5_1;
      break;
    case QuantType::Q2_K:
      block_fn = q2_k;
      break;
    case QuantType::Q3_K:
      block_fn = q3_k;
      break;
    case QuantType::Q4_K:
      block_fn = q4_k;
      break;
    case QuantType::Q5_K:
      block_fn = q5_k;
      break;
    case QuantType::Q6_K:
      block_fn = q6_k;
      break;
    default:
      fail(ErrorCode::Internal, "dequantize_row_ref: unhandled type {}", t.name);
  }
  for (int64_t b = 0; b < blocks; ++b) block_fn(src + b * t.block_bytes, dst + b * t.block);
}

float QuantizedMatrix::row_scale(int64_t r) const {
  if (!scale.defined()) return 1.0f;
  const float* s = static_cast<const float*>(scale.raw_data());
  return scale.numel() == 1 ? s[0] : s[r];
}

void validate_quantized(const QuantizedMatrix& q, std::string_view what) {
  const QuantTraits& t = quant_traits(q.type);
  FLUXRT_CHECK(q.rows > 0 && q.cols > 0, ErrorCode::InvalidArgument, "{}: {} weight has shape [{}, {}]", what,
               t.name, q.rows, q.cols);
  FLUXRT_CHECK(q.cols % t.block == 0, ErrorCode::InvalidArgument,
               "{}: {} weight rows of {} values are not whole blocks of {}", what, t.name, q.cols, t.block);
  FLUXRT_CHECK(q.bytes.defined() && q.bytes.is_contiguous() && q.bytes.nbytes() == q.nbytes(),
               ErrorCode::InvalidArgument, "{}: {} weight [{}, {}] needs {} contiguous bytes, got {}", what,
               t.name, q.rows, q.cols, q.nbytes(), q.bytes.defined() ? q.bytes.nbytes() : 0);
  if (q.scale.defined())
    FLUXRT_CHECK(q.scale.dtype() == DType::F32 && q.scale.is_contiguous() &&
                     (q.scale.numel() == 1 || q.scale.numel() == q.rows),
                 ErrorCode::InvalidArgument, "{}: weight scale {} must be f32 with 1 or {} values", what,
                 q.scale.shape().str(), q.rows);
}

void dequantize_rows_ref(const QuantizedMatrix& q, int64_t r0, int64_t count, float* dst, int64_t ld) {
  for (int64_t r = 0; r < count; ++r) {
    float* out = dst + r * ld;
    dequantize_row_ref(q.type, q.row(r0 + r), out, q.cols);
    if (q.scale.defined()) {
      const float s = q.row_scale(r0 + r);
      for (int64_t j = 0; j < q.cols; ++j) out[j] = scaled_weight(out[j], s);
    }
  }
}

Tensor dequantize_ref(const QuantizedMatrix& q) {
  Tensor out = Tensor::empty({q.rows, q.cols}, DType::F32);
  float* dst = out.data<float>();
#pragma omp parallel for schedule(static) if (q.rows * q.cols >= (int64_t{1} << 18))
  for (int64_t r = 0; r < q.rows; ++r) dequantize_rows_ref(q, r, 1, dst + r * q.cols, q.cols);
  return out;
}

}  // namespace fluxrt
