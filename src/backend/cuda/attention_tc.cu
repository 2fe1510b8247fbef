// Tensor-core attention for head dim 128 (attention_tc.h has the contract, docs/cuda.md the design).
//
// A CTA owns 64 query rows of one (batch, head): 4 warps, 16 rows each, so every warp's S = Q K^T
// tile and O accumulator are whole m16n8k16 fragments held in registers (O: 64 f32, S: 32 f32,
// Q: 32 regs of bf16 pairs per thread), which keeps sm_80 and sm_90 under 255 registers without
// spills. Keys/values stream through shared memory in 64-key tiles, double-buffered with cp.async;
// the rows are stored with a 16-byte-chunk XOR swizzle so ldmatrix reads are bank-conflict free.
// q is rotated and rounded once while its tile loads (not pre-scaled: without RoPE the rounding is
// then exact); the scale enters as p = exp2(s * c - m) with c = scale * log2(e), one FMA.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/attention_tc.h"
#include "backend/cuda/device_math.cuh"

namespace fluxrt::cuda::kern {
namespace {

constexpr int kD = kTcHeadDim;
constexpr int kBlockM = 64;                 // query rows per CTA
constexpr int kBlockN = 64;                 // keys per tile
constexpr int kWarps = kBlockM / 16;
constexpr int kThreads = kWarps * 32;
constexpr int kRowBytes = kD * 2;           // one bf16/f16 row: 16 chunks of 16 bytes
constexpr int kTileBytes = kBlockN * kRowBytes;
constexpr int kStageBytes = 2 * kTileBytes;  // K tile then V tile
constexpr int kSmemBytes = 2 * kStageBytes + kBlockM * 4;  // two stages + |q_i| per row
constexpr float kLog2e = 1.4426950408889634f;
// Same acceptance window as attention.cu and the CPU kernel (attention_cpu.cpp explains it).
constexpr float kMinRowSum = 0x1p-60f;
constexpr float kMaxRowSum = 0x1p60f;

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile: the 8 rows an ldmatrix
// phase reads share a logical chunk and land in 8 different bank groups.
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy; src_bytes = 0 writes zeros (tail keys) without reading src.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_one() { asm volatile("cp.async.wait_group 1;\n" ::); }

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a * b on one m16n8k16 tile, f32 accumulators.
template <bool kHalf>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kHalf) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two f32 -> one register of two 16-bit values (lo in the low half), round to nearest even.
template <bool kHalf>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (kHalf) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}
template <bool kHalf>
__device__ __forceinline__ float lo_f(uint32_t w) {
  return kHalf ? f16_bits_to_f32(static_cast<uint16_t>(w & 0xFFFFu)) : __uint_as_float(w << 16);
}
template <bool kHalf>
__device__ __forceinline__ float hi_f(uint32_t w) {
  return kHalf ? f16_bits_to_f32(static_cast<uint16_t>(w >> 16)) : __uint_as_float(w & 0xFFFF0000u);
}

// Rotates one pair in f32 with table entry j (the contract's formula).
__device__ __forceinline__ void rope_pair(float& xa, float& xb, const float* cs, const float* sn, int j) {
  if (cs == nullptr) return;
  const float c = cs[j], s = sn[j];
  const float a = xa * c - xb * s, b = xb * c + xa * s;
  xa = a;
  xb = b;
}

// ---- pre-pass: rotate + round every key once, max |k_j| per (batch, head) ----
// One warp per key row; lane l holds pairs 2l and 2l+1 of the row in either RoPE layout.
template <bool kHalf>
__global__ void __launch_bounds__(256) rotate_keys_kernel(AttentionParams p, uint16_t* kr, float* kmax) {
  const int64_t warp = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= p.B * p.Lk * p.H) return;
  const int64_t h = warp % p.H, j = (warp / p.H) % p.Lk, b = warp / (p.H * p.Lk);
  const int64_t src = b * p.k_stride[0] + j * p.k_stride[1] + h * p.k_stride[2];
  uint16_t* dst = kr + ((b * p.H + h) * p.Lk + j) * kD;
  const float* cs = p.k_cos ? p.k_cos + b * p.k_rope_stride[0] + j * p.k_rope_stride[1] : nullptr;
  const float* sn = p.k_sin ? p.k_sin + b * p.k_rope_stride[0] + j * p.k_rope_stride[1] : nullptr;
  // Element indices of this lane's two pairs (a0, b0), (a1, b1).
  int ia[2], ib[2];
  for (int t = 0; t < 2; ++t) {
    const int pj = 2 * lane + t;
    ia[t] = p.rope == Rope::HalfSplit ? pj : 2 * pj;
    ib[t] = p.rope == Rope::HalfSplit ? pj + kD / 2 : 2 * pj + 1;
  }
  float ss = 0;
  for (int t = 0; t < 2; ++t) {
    float xa = load_f(p.k, p.dtype, src + ia[t]), xb = load_f(p.k, p.dtype, src + ib[t]);
    if (p.rope != Rope::None) rope_pair(xa, xb, cs, sn, 2 * lane + t);
    const uint32_t w = pack2<kHalf>(xa, xb);
    dst[ia[t]] = static_cast<uint16_t>(w & 0xFFFFu);
    dst[ib[t]] = static_cast<uint16_t>(w >> 16);
    const float ra = lo_f<kHalf>(w), rb = hi_f<kHalf>(w);
    ss = fmaf(ra, ra, fmaf(rb, rb, ss));
  }
  ss = warp_sum(ss);
  // The margin covers f32 rounding in this norm and in the tensor cores' dot products (<= 2^-16
  // relative for 128 terms); a score above the bound only makes p slightly above 1.
  if (lane == 0)
    atomicMax(reinterpret_cast<int*>(kmax + b * p.H + h), __float_as_int(sqrtf(ss) * (1.0f + 0x1p-14f)));
}

// ---- main kernel ----
// kOnline: exact running maximum (flash-attention's rescaling) instead of the fixed bound.
// flags: one int per (batch, head, query tile). Fixed pass: written 1 for a tile holding a
// rejected row. Online pass: when not null, only tiles with a flag run.
template <bool kHalf, bool kOnline>
__global__ void __launch_bounds__(kThreads, 2)
    attention_tc_kernel(AttentionParams p, const uint16_t* __restrict__ kr, const float* __restrict__ kmax,
                        int* __restrict__ flags, int* __restrict__ fallback_rows) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int64_t q0 = int64_t{blockIdx.x} * kBlockM;
  const int64_t ntile_q = gridDim.x;
  const float c = p.scale * kLog2e;  // > 0 (host-checked)
  int* flag = flags ? flags + (b * p.H + h) * ntile_q + blockIdx.x : nullptr;
  if (kOnline && flag && *flag == 0) return;  // the fixed pass accepted every row of this tile

  const uint32_t sbase = smem_addr(smem);
  float* qnorm = reinterpret_cast<float*>(smem + 2 * kStageBytes);
  const int64_t Lk = p.Lk;
  const int ntiles = static_cast<int>((Lk + kBlockN - 1) / kBlockN);
  const uint16_t* kbase = kr + (b * p.H + h) * Lk * kD;
  const uint16_t* vbase = static_cast<const uint16_t*>(p.v) + b * p.v_stride[0] + h * p.v_stride[2];

  // Tile t of K (rotated scratch, contiguous rows) and V (strided rows) into stage s.
  auto issue_tile = [&](int t, int s) {
    const uint32_t kdst = sbase + s * kStageBytes, vdst = kdst + kTileBytes;
    const int64_t j0 = int64_t{t} * kBlockN;
#pragma unroll
    for (int i = 0; i < kBlockN * 16 / kThreads; ++i) {
      const int idx = tid + i * kThreads, row = idx / 16, chunk = idx % 16;
      const int64_t j = j0 + row;
      const bool live = j < Lk;
      const int64_t jj = live ? j : 0;
      cp_async16(kdst + swz(row, chunk), kbase + jj * kD + chunk * 8, live ? 16 : 0);
      cp_async16(vdst + swz(row, chunk), vbase + jj * p.v_stride[1] + chunk * 8, live ? 16 : 0);
    }
  };
  issue_tile(0, 0);
  cp_async_commit();

  // Q tile into stage 1's K slot while tile 0 is in flight: two threads per row, each 32 pairs.
  {
    const int row = tid / 2, half = tid % 2;
    const int64_t i = q0 + row;
    const bool live = i < p.Lq;
    const uint16_t* src =
        static_cast<const uint16_t*>(p.q) + b * p.q_stride[0] + (live ? i : 0) * p.q_stride[1] + h * p.q_stride[2];
    const int64_t pos = (live ? i : 0) + p.q_pos_offset;
    const float* cs = p.q_cos ? p.q_cos + b * p.q_rope_stride[0] + pos * p.q_rope_stride[1] : nullptr;
    const float* sn = p.q_sin ? p.q_sin + b * p.q_rope_stride[0] + pos * p.q_rope_stride[1] : nullptr;
    unsigned char* qdst = smem + kStageBytes;
    float ss = 0;
    // Four steps of 8 pairs: the pairs' elements are one 16-byte chunk (adjacent pairs) or two
    // chunks 64 elements apart (rotate_half).
#pragma unroll
    for (int step = 0; step < 4; ++step) {
      const int j0 = 32 * half + 8 * step;  // first pair of the step
      float xa[8], xb[8];
      int ca, cb;  // chunk(s) holding the elements
      if (p.rope == Rope::HalfSplit) {
        ca = j0 / 8;
        cb = ca + 8;
        uint4 ua = make_uint4(0, 0, 0, 0), ub = ua;
        if (live) {
          ua = *reinterpret_cast<const uint4*>(src + ca * 8);
          ub = *reinterpret_cast<const uint4*>(src + cb * 8);
        }
        const uint32_t wa[4] = {ua.x, ua.y, ua.z, ua.w}, wb[4] = {ub.x, ub.y, ub.z, ub.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          xa[2 * e] = lo_f<kHalf>(wa[e]), xa[2 * e + 1] = hi_f<kHalf>(wa[e]);
          xb[2 * e] = lo_f<kHalf>(wb[e]), xb[2 * e + 1] = hi_f<kHalf>(wb[e]);
        }
      } else {
        // Adjacent pairs (or no RoPE): pairs j0..j0+7 are elements 2*j0 .. 2*j0+15, two chunks.
        ca = 2 * j0 / 8;
        cb = ca + 1;
        uint4 ua = make_uint4(0, 0, 0, 0), ub = ua;
        if (live) {
          ua = *reinterpret_cast<const uint4*>(src + ca * 8);
          ub = *reinterpret_cast<const uint4*>(src + cb * 8);
        }
        const uint32_t w[8] = {ua.x, ua.y, ua.z, ua.w, ub.x, ub.y, ub.z, ub.w};
#pragma unroll
        for (int e = 0; e < 8; ++e) xa[e] = lo_f<kHalf>(w[e]), xb[e] = hi_f<kHalf>(w[e]);
      }
      uint32_t oa[4], ob[4];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (p.rope != Rope::None) rope_pair(xa[e], xb[e], cs, sn, j0 + e);
      }
      if (p.rope == Rope::HalfSplit) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          oa[e] = pack2<kHalf>(xa[2 * e], xa[2 * e + 1]);
          ob[e] = pack2<kHalf>(xb[2 * e], xb[2 * e + 1]);
        }
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          oa[e] = pack2<kHalf>(xa[e], xb[e]);
          ob[e] = pack2<kHalf>(xa[4 + e], xb[4 + e]);
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float r0 = lo_f<kHalf>(oa[e]), r1 = hi_f<kHalf>(oa[e]);
        const float r2 = lo_f<kHalf>(ob[e]), r3 = hi_f<kHalf>(ob[e]);
        ss = fmaf(r0, r0, fmaf(r1, r1, fmaf(r2, r2, fmaf(r3, r3, ss))));
      }
      *reinterpret_cast<uint4*>(qdst + swz(row, ca)) = make_uint4(oa[0], oa[1], oa[2], oa[3]);
      *reinterpret_cast<uint4*>(qdst + swz(row, cb)) = make_uint4(ob[0], ob[1], ob[2], ob[3]);
    }
    ss += __shfl_xor_sync(0xFFFFFFFFu, ss, 1);
    if (half == 0) qnorm[row] = sqrtf(ss);
  }
  __syncthreads();

  // Q fragments for this warp's 16 rows, all 8 k-steps of 16 dims.
  uint32_t qf[kD / 16][4];
#pragma unroll
  for (int kc = 0; kc < kD / 16; ++kc)
    ldsm_x4(sbase + kStageBytes + swz(warp * 16 + (lane & 15), 2 * kc + (lane >> 4)), qf[kc]);
  const int g = lane / 4, t4 = lane % 4;
  const int r_lo = warp * 16 + g, r_hi = r_lo + 8;  // this thread's two rows in the tile
  float m[2], l[2] = {0.0f, 0.0f};
  if constexpr (kOnline) {
    m[0] = m[1] = -INFINITY;
  } else {
    const float km = kmax[b * p.H + h] * c;
    m[0] = qnorm[r_lo] * km;
    m[1] = qnorm[r_hi] * km;
  }
  float o[kD / 8][4];
#pragma unroll
  for (int n = 0; n < kD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  __syncthreads();  // stage 1 (the Q staging area) is free for tile 1

  for (int t = 0; t < ntiles; ++t) {
    if (t + 1 < ntiles) issue_tile(t + 1, (t + 1) & 1);
    cp_async_commit();
    cp_async_wait_one();
    __syncthreads();
    const uint32_t ks = sbase + (t & 1) * kStageBytes, vs = ks + kTileBytes;

    float s[kBlockN / 8][4];
#pragma unroll
    for (int n = 0; n < kBlockN / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < kD / 16; ++kc) {
#pragma unroll
      for (int np = 0; np < kBlockN / 16; ++np) {
        uint32_t kb[4];
        ldsm_x4(ks + swz(16 * np + (lane & 7) + ((lane >> 4) << 3), 2 * kc + ((lane >> 3) & 1)), kb);
        mma16816<kHalf>(s[2 * np], qf[kc], kb[0], kb[1]);
        mma16816<kHalf>(s[2 * np + 1], qf[kc], kb[2], kb[3]);
      }
    }
    const int64_t j0 = int64_t{t} * kBlockN;
    if (j0 + kBlockN > Lk) {  // tail tile: keys past Lk do not exist
#pragma unroll
      for (int n = 0; n < kBlockN / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (j0 + 8 * n + 2 * t4 + (e & 1) >= Lk) s[n][e] = -INFINITY;
    }
    if constexpr (kOnline) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < kBlockN / 8; ++n) {
          s[n][2 * r] *= c;  // log2 units here, so the exp2 below uses a unit factor
          s[n][2 * r + 1] *= c;
          mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
        const float m_new = fmaxf(m[r], mx);  // finite: every tile holds at least one real key
        const float alpha = exp2f(m[r] - m_new);
        m[r] = m_new;
        l[r] *= alpha;
#pragma unroll
        for (int n = 0; n < kD / 8; ++n) o[n][2 * r] *= alpha, o[n][2 * r + 1] *= alpha;
      }
    }
    // P = exp2(S c - m), rounded to the storage dtype for the P V product; l sums the rounded
    // values so the output stays a convex combination of the values.
    const float sc = kOnline ? 1.0f : c;
    uint32_t pf[kBlockN / 8][2];
#pragma unroll
    for (int n = 0; n < kBlockN / 8; ++n) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t w =
            pack2<kHalf>(exp2f(fmaf(s[n][2 * r], sc, -m[r])), exp2f(fmaf(s[n][2 * r + 1], sc, -m[r])));
        pf[n][r] = w;
        l[r] += lo_f<kHalf>(w) + hi_f<kHalf>(w);
      }
    }
#pragma unroll
    for (int kc = 0; kc < kBlockN / 16; ++kc) {
      const uint32_t a[4] = {pf[2 * kc][0], pf[2 * kc][1], pf[2 * kc + 1][0], pf[2 * kc + 1][1]};
#pragma unroll
      for (int dp = 0; dp < kD / 16; ++dp) {
        uint32_t vb[4];
        ldsm_x4_trans(vs + swz(16 * kc + (lane & 15), 2 * dp + (lane >> 4)), vb);
        mma16816<kHalf>(o[2 * dp], a, vb[0], vb[1]);
        mma16816<kHalf>(o[2 * dp + 1], a, vb[2], vb[3]);
      }
    }
    __syncthreads();  // the next iteration's copy overwrites this stage
  }

  // Row sums over the quad that shares each row, acceptance test, store.
  bool any_rejected = false;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float lr = l[r];
    lr += __shfl_xor_sync(0xFFFFFFFFu, lr, 1);
    lr += __shfl_xor_sync(0xFFFFFFFFu, lr, 2);
    const int64_t i = q0 + (r == 0 ? r_lo : r_hi);
    if (i >= p.Lq) continue;
    if (!kOnline && !(isfinite(m[r]) && lr >= kMinRowSum && lr <= kMaxRowSum)) {
      any_rejected = true;
      if (t4 == 0 && fallback_rows) atomicAdd(fallback_rows, 1);
      continue;
    }
    const float inv = lr > 0.0f ? 1.0f / lr : 0.0f;
    uint16_t* dst = static_cast<uint16_t*>(p.out) + b * p.o_stride[0] + i * p.o_stride[1] + h * p.o_stride[2];
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) {
      const float v0 = o[n][2 * r] * inv, v1 = o[n][2 * r + 1] * inv;
      const uint32_t lo = kHalf ? f32_to_f16_bits(v0) : f32_to_bf16_bits(v0);
      const uint32_t hi = kHalf ? f32_to_f16_bits(v1) : f32_to_bf16_bits(v1);
      *reinterpret_cast<uint32_t*>(dst + 8 * n + 2 * t4) = lo | (hi << 16);
    }
  }
  if (!kOnline && any_rejected && flag) *flag = 1;  // every writer stores 1: benign race
}

template <bool kHalf, bool kOnline>
cudaError_t launch_main(const AttentionParams& p, const uint16_t* kr, const float* kmax, int* flags,
                        int* fallback_rows, cudaStream_t stream) {
  // The opt-in above 48 KiB is per device, so it is set on every launch (about a microsecond, and
  // legal during stream capture) rather than once per process, which would miss a second GPU.
  const cudaError_t e = cudaFuncSetAttribute(attention_tc_kernel<kHalf, kOnline>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((p.Lq + kBlockM - 1) / kBlockM), static_cast<unsigned>(p.H),
                  static_cast<unsigned>(p.B));
  attention_tc_kernel<kHalf, kOnline><<<grid, kThreads, kSmemBytes, stream>>>(p, kr, kmax, flags, fallback_rows);
  return cudaGetLastError();
}

template <bool kHalf>
cudaError_t launch_all(const AttentionParams& p, bool online_only, void* scratch, int* fallback_rows,
                       cudaStream_t stream) {
  const int64_t bh = p.B * p.H, nq = (p.Lq + kBlockM - 1) / kBlockM;
  float* kmax = static_cast<float*>(scratch);
  int* flags = reinterpret_cast<int*>(kmax + bh);
  uint16_t* kr = reinterpret_cast<uint16_t*>(static_cast<unsigned char*>(scratch) +
                                             ((sizeof(float) * bh + sizeof(int) * bh * nq + 255) / 256) * 256);
  cudaError_t e = cudaMemsetAsync(scratch, 0, sizeof(float) * bh + sizeof(int) * bh * nq, stream);
  if (e != cudaSuccess) return e;
  const int64_t warps = p.B * p.Lk * p.H;
  rotate_keys_kernel<kHalf><<<static_cast<unsigned>((warps * 32 + 255) / 256), 256, 0, stream>>>(p, kr, kmax);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  if constexpr (!kHalf) {
    if (!online_only) {
      if ((e = launch_main<kHalf, false>(p, kr, kmax, flags, fallback_rows, stream)) != cudaSuccess) return e;
      return launch_main<kHalf, true>(p, kr, kmax, flags, nullptr, stream);
    }
  }
  return launch_main<kHalf, true>(p, kr, kmax, nullptr, nullptr, stream);
}

}  // namespace

size_t attention_tc_scratch_bytes(const AttentionParams& p) {
  const int64_t bh = p.B * p.H, nq = (p.Lq + kBlockM - 1) / kBlockM;
  const size_t head = ((sizeof(float) * bh + sizeof(int) * bh * nq + 255) / 256) * 256;
  return head + sizeof(uint16_t) * static_cast<size_t>(bh * p.Lk * kD);
}

cudaError_t launch_attention_tc(const AttentionParams& p, bool online_only, void* scratch, int* fallback_rows,
                                cudaStream_t stream) {
  if (p.B == 0 || p.Lq == 0 || p.H == 0) return cudaSuccess;
  if (p.D != kD || p.Hkv != p.H || p.Lk < 1 || p.mask || p.bias || p.causal || p.H > 65535 || p.B > 65535)
    return cudaErrorInvalidValue;
  if (p.dtype == DType::BF16) return launch_all<false>(p, online_only, scratch, fallback_rows, stream);
  if (p.dtype == DType::F16) return launch_all<true>(p, true, scratch, fallback_rows, stream);
  return cudaErrorInvalidValue;
}

}  // namespace fluxrt::cuda::kern
