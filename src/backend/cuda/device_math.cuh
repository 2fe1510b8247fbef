#pragma once
// Device-side helpers shared by the .cu files: dtype loads/stores that round exactly like the CPU
// conversions (core/dtype.h, i.e. PyTorch), vector loads, warp reductions. Kernels take the
// storage dtype at run time (a uniform branch per element costs nothing next to the memory
// traffic), so each op compiles once, not once per dtype combination: that keeps the CUDA library
// quick to build on CI's two cores.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/launch.h"

namespace fluxrt::cuda::kern {

using DT = DType;

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }

// Round to nearest even; NaN -> 0xFFFF as torch's contiguous f32 -> bf16 kernels write.
__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0xFFFFu;
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// Exact (the hardware conversion) for numbers; a NaN keeps its sign and payload and is made quiet, as
// core/dtype.h f16_to_f32 does (the hardware may return its canonical NaN instead).
__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) {
  if ((h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0)
    return __uint_as_float(static_cast<uint32_t>(h & 0x8000u) << 16 | 0x7FC00000u | static_cast<uint32_t>(h & 0x3FFu) << 13);
  return __half2float(__ushort_as_half(h));
}

// Round to nearest even (the hardware conversion); NaN keeps sign and top payload bits and is made
// quiet, as core/dtype.h f32_to_f16 does.
__device__ __forceinline__ uint16_t f32_to_f16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u)
    return static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7E00u | ((u >> 13) & 0x3FFu));
  return __half_as_ushort(__float2half_rn(f));
}

// float8_e4m3fn / e5m2 widened exactly, bit for bit as core/dtype.h does (an fp8 checkpoint's
// embedding table is read as stored).
__device__ __forceinline__ float f8e4m3_bits_to_f32(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24, a = v & 0x7Fu;
  if (a == 0x7Fu) return __uint_as_float(sign | 0x7FF00000u);
  const uint32_t exp = a >> 3, mant = a & 0x7u;
  if (exp == 0) return __uint_as_float(sign | __float_as_uint(static_cast<float>(mant) * 0x1p-9f));
  return __uint_as_float(sign | (exp + 127 - 7) << 23 | mant << 20);
}
__device__ __forceinline__ float f8e5m2_bits_to_f32(uint8_t v) {
  return f16_bits_to_f32(static_cast<uint16_t>(static_cast<uint16_t>(v) << 8));  // e5m2 is f16's top byte
}

__device__ __forceinline__ float load_f(const void* base, DT dt, int64_t i) {
  switch (dt) {
    case DT::F32: return static_cast<const float*>(base)[i];
    case DT::BF16: return bf16_bits_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DT::F16: return f16_bits_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DT::F8E4M3: return f8e4m3_bits_to_f32(static_cast<const uint8_t*>(base)[i]);
    case DT::F8E5M2: return f8e5m2_bits_to_f32(static_cast<const uint8_t*>(base)[i]);
    case DT::F64: return static_cast<float>(static_cast<const double*>(base)[i]);
    case DT::I64: return static_cast<float>(static_cast<const int64_t*>(base)[i]);
    case DT::I32: return static_cast<float>(static_cast<const int32_t*>(base)[i]);
    case DT::I16: return static_cast<float>(static_cast<const int16_t*>(base)[i]);
    case DT::I8: return static_cast<float>(static_cast<const int8_t*>(base)[i]);
    case DT::U8:
    case DT::Bool: return static_cast<float>(static_cast<const uint8_t*>(base)[i]);
    default: return 0.0f;
  }
}

__device__ __forceinline__ void store_f(void* base, DT dt, int64_t i, float v) {
  switch (dt) {
    case DT::F32: static_cast<float*>(base)[i] = v; return;
    case DT::BF16: static_cast<uint16_t*>(base)[i] = f32_to_bf16_bits(v); return;
    case DT::F16: static_cast<uint16_t*>(base)[i] = f32_to_f16_bits(v); return;
    default: return;
  }
}

// Value of f32/bf16/f16 element i rounded to dt and widened back (the "round to the output dtype"
// step of RMSNorm's round_before_weight).
__device__ __forceinline__ float round_to(float v, DT dt) {
  if (dt == DT::BF16) return bf16_bits_to_f32(f32_to_bf16_bits(v));
  if (dt == DT::F16) return f16_bits_to_f32(f32_to_f16_bits(v));
  return v;
}

// 8 consecutive elements from element i, widened to f32 (16-byte loads; the host checked alignment).
__device__ __forceinline__ void load8(const void* base, DT dt, int64_t i, float (&v)[8]) {
  if (dt == DT::F32) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(base) + i);
    const float4 a = p[0], b = p[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    return;
  }
  const uint4 raw = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(base) + i);
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint16_t lo = static_cast<uint16_t>(w[k] & 0xFFFFu), hi = static_cast<uint16_t>(w[k] >> 16);
    v[2 * k] = dt == DT::BF16 ? bf16_bits_to_f32(lo) : f16_bits_to_f32(lo);
    v[2 * k + 1] = dt == DT::BF16 ? bf16_bits_to_f32(hi) : f16_bits_to_f32(hi);
  }
}

__device__ __forceinline__ void store8(void* base, DT dt, int64_t i, const float (&v)[8]) {
  if (dt == DT::F32) {
    float4* p = reinterpret_cast<float4*>(static_cast<float*>(base) + i);
    p[0] = make_float4(v[0], v[1], v[2], v[3]);
    p[1] = make_float4(v[4], v[5], v[6], v[7]);
    return;
  }
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t lo = dt == DT::BF16 ? f32_to_bf16_bits(v[2 * k]) : f32_to_f16_bits(v[2 * k]);
    const uint32_t hi = dt == DT::BF16 ? f32_to_bf16_bits(v[2 * k + 1]) : f32_to_f16_bits(v[2 * k + 1]);
    w[k] = lo | (hi << 16);
  }
  *reinterpret_cast<uint4*>(static_cast<uint16_t*>(base) + i) = make_uint4(w[0], w[1], w[2], w[3]);
}

// Element (r, c) of an operand (row r of the kernel, already divided by row_div where needed).
__device__ __forceinline__ float op_load(const Operand& o, int64_t r, int64_t c) {
  return load_f(o.data, o.dtype, o.rows.offset(r / o.row_div) + c * o.rows.col_stride);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float gelu_tanh_f(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

inline int grid_for(int64_t work, int threads, int sm_count) {
  const int64_t blocks = (work + threads - 1) / threads;
  const int64_t cap = int64_t{sm_count > 0 ? sm_count : 80} * 32;
  return static_cast<int>(blocks < 1 ? 1 : (blocks < cap ? blocks : cap));
}

}  // namespace fluxrt::cuda::kern
