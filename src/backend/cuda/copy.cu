// Device-to-device copies between any two same-shape views on one device, with dtype conversion:
// what Tensor::contiguous(), clone() and to() run for CUDA tensors (host side: memory.cpp).
#include "backend/cuda/device_math.cuh"

namespace fluxrt::cuda::kern {
namespace {

__device__ __forceinline__ void offsets(const CopyLayout& l, int64_t i, int64_t* d, int64_t* s) {
  int64_t od = 0, os = 0;
  for (int k = l.rank - 1; k >= 0; --k) {
    const int64_t idx = i % l.extent[k];
    i /= l.extent[k];
    od += idx * l.dst_stride[k];
    os += idx * l.src_stride[k];
  }
  *d = od;
  *s = os;
}

// Same dtype: move the bits (exact for every dtype, f8 included).
template <typename Word>
__global__ void copy_bits_kernel(Word* dst, const Word* src, CopyLayout l, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t d, s;
    offsets(l, i, &d, &s);
    dst[d] = src[s];
  }
}

template <typename Word>
__global__ void fill_bits_kernel(Word* dst, Word pattern, CopyLayout l, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t d, s;
    offsets(l, i, &d, &s);
    dst[d] = pattern;
  }
}

__device__ __forceinline__ int32_t truncate_i32(double v) {
  return v > -2147483649.0 && v < 2147483648.0 ? static_cast<int32_t>(v) : INT32_MIN;
}
__device__ __forceinline__ int64_t truncate_i64(double v) {
  return v >= -0x1p63 && v < 0x1p63 ? static_cast<int64_t>(v) : INT64_MIN;
}

__device__ __forceinline__ void store_d(void* p, DT dt, int64_t i, double v) {
  switch (dt) {
    case DT::F64: static_cast<double*>(p)[i] = v; return;
    case DT::F32: static_cast<float*>(p)[i] = static_cast<float>(v); return;
    case DT::BF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16_bits(static_cast<float>(v)); return;
    case DT::F16: static_cast<uint16_t*>(p)[i] = f32_to_f16_bits(static_cast<float>(v)); return;
    // Integer targets truncate toward zero, with x86's "integer indefinite" (INT_MIN of the 32- or
    // 64-bit conversion) for NaN and out-of-range values, narrowed by wrapping: the host's rule
    // (core/dtype.h), where the GPU's own conversion would saturate.
    case DT::I64: static_cast<int64_t*>(p)[i] = truncate_i64(v); return;
    case DT::I32: static_cast<int32_t*>(p)[i] = truncate_i32(v); return;
    case DT::I16: static_cast<int16_t*>(p)[i] = static_cast<int16_t>(truncate_i32(v)); return;
    case DT::I8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(truncate_i32(v)); return;
    case DT::U8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(truncate_i64(v)); return;
    case DT::Bool: static_cast<uint8_t*>(p)[i] = v != 0.0; return;
    default: return;
  }
}

// A float value from a 32-bit-or-narrower float source, stored without a detour through double
// (whose conversions may make every NaN the canonical one; the host keeps sign and payload).
__device__ __forceinline__ void store_from_float(void* p, DT dt, int64_t i, float v) {
  switch (dt) {
    case DT::F32: static_cast<float*>(p)[i] = v; return;
    case DT::BF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16_bits(v); return;
    case DT::F16: static_cast<uint16_t*>(p)[i] = f32_to_f16_bits(v); return;
    default: store_d(p, dt, i, static_cast<double>(v)); return;  // f64, and integers (NaN: INT_MIN either way)
  }
}

__device__ __forceinline__ bool is_integer(DT dt) {
  return dt == DT::I64 || dt == DT::I32 || dt == DT::I16 || dt == DT::I8 || dt == DT::U8 || dt == DT::Bool;
}

__device__ __forceinline__ int64_t load_i(const void* p, DT dt, int64_t i) {
  switch (dt) {
    case DT::I64: return static_cast<const int64_t*>(p)[i];
    case DT::I32: return static_cast<const int32_t*>(p)[i];
    case DT::I16: return static_cast<const int16_t*>(p)[i];
    case DT::I8: return static_cast<const int8_t*>(p)[i];
    case DT::Bool: return static_cast<const uint8_t*>(p)[i] != 0;  // any nonzero byte is true, as on the host
    default: return static_cast<const uint8_t*>(p)[i];  // U8
  }
}

// An integer source, exactly: integer targets wrap (as c10's casts), float targets round once from
// the integer (f32 directly; bf16/f16 through f32, as c10 does). Through double, int64 -> int32
// lost everything above 2^53 and int32 -> f32 was rounded twice.
__device__ __forceinline__ void store_from_integer(void* p, DT dt, int64_t i, int64_t v) {
  switch (dt) {
    case DT::F64: static_cast<double*>(p)[i] = static_cast<double>(v); return;
    case DT::F32:
    case DT::BF16:
    case DT::F16: store_from_float(p, dt, i, static_cast<float>(v)); return;
    case DT::I64: static_cast<int64_t*>(p)[i] = v; return;
    case DT::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); return;
    case DT::I16: static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v); return;
    case DT::I8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); return;
    case DT::U8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); return;
    case DT::Bool: static_cast<uint8_t*>(p)[i] = v != 0; return;
    default: return;
  }
}

__global__ void convert_kernel(void* dst, DT dst_dt, const void* src, DT src_dt, CopyLayout l, int64_t n) {
  const bool integer_source = is_integer(src_dt);
  // torch narrows f16 / fp8 to bf16 through c10's scalar constructor, whose NaN is 0x7FC0 (the
  // f32 path writes 0xFFFF): core/dtype.h does the same.
  const bool narrow_to_bf16 =
      dst_dt == DT::BF16 && (src_dt == DT::F16 || src_dt == DT::F8E4M3 || src_dt == DT::F8E5M2);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t d, s;
    offsets(l, i, &d, &s);
    if (integer_source) {
      store_from_integer(dst, dst_dt, d, load_i(src, src_dt, s));
    } else if (src_dt == DT::F64) {
      store_d(dst, dst_dt, d, static_cast<const double*>(src)[s]);
    } else {
      const float v = load_f(src, src_dt, s);
      if (narrow_to_bf16 && v != v) static_cast<uint16_t*>(dst)[d] = 0x7FC0u;
      else store_from_float(dst, dst_dt, d, v);
    }
  }
}

}  // namespace

cudaError_t copy_strided(void* dst, DType dst_dtype, const void* src, DType src_dtype, const CopyLayout& l, int64_t n,
                         cudaStream_t stream, int sm_count) {
  const int threads = 256;
  const int blocks = grid_for(n, threads, sm_count);
  if (dst_dtype == src_dtype) {
    switch (dtype_size(dst_dtype)) {
      case 1:
        copy_bits_kernel<<<blocks, threads, 0, stream>>>(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), l, n);
        break;
      case 2:
        copy_bits_kernel<<<blocks, threads, 0, stream>>>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), l, n);
        break;
      case 4:
        copy_bits_kernel<<<blocks, threads, 0, stream>>>(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src), l, n);
        break;
      default:
        copy_bits_kernel<<<blocks, threads, 0, stream>>>(static_cast<uint64_t*>(dst), static_cast<const uint64_t*>(src), l, n);
        break;
    }
  } else {
    convert_kernel<<<blocks, threads, 0, stream>>>(dst, dst_dtype, src, src_dtype, l, n);
  }
  return cudaGetLastError();
}

cudaError_t fill_strided(void* dst, size_t word_bytes, uint64_t pattern, const CopyLayout& l, int64_t n,
                         cudaStream_t stream, int sm_count) {
  const int threads = 256;
  const int blocks = grid_for(n, threads, sm_count);
  switch (word_bytes) {
    case 1:
      fill_bits_kernel<<<blocks, threads, 0, stream>>>(static_cast<uint8_t*>(dst), static_cast<uint8_t>(pattern), l, n);
      break;
    case 2:
      fill_bits_kernel<<<blocks, threads, 0, stream>>>(static_cast<uint16_t*>(dst), static_cast<uint16_t>(pattern), l, n);
      break;
    case 4:
      fill_bits_kernel<<<blocks, threads, 0, stream>>>(static_cast<uint32_t*>(dst), static_cast<uint32_t>(pattern), l, n);
      break;
    default:
      fill_bits_kernel<<<blocks, threads, 0, stream>>>(static_cast<uint64_t*>(dst), pattern, l, n);
      break;
  }
  return cudaGetLastError();
}

}  // namespace fluxrt::cuda::kern
