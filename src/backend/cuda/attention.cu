// Attention on [B, L, H, D] (see launch.h for the design and backend/args/attention.h for the
// contract). q is rotated and pre-scaled by c = scale * log2(e) once per row; scores are then in
// log2 units and p = exp2(s - m).
#include "backend/cuda/device_math.cuh"

namespace fluxrt::cuda::kern {
namespace {

constexpr int kRows = 8;    // query rows (= warps) per block
constexpr int kTile = 32;   // keys per shared-memory tile (= lanes: lane j scores key j)
// Head-dim values each lane accumulates: 8 (D <= 256, every text encoder) or 16 (D <= 512: the VAE
// mid block's single 512-wide head); a template so the common case keeps its register count.
constexpr int kSmallDPerLane = 8, kLargeDPerLane = 16;
constexpr float kLog2e = 1.4426950408889634f;
// Fixed-maximum acceptance window, as on the CPU (attention_cpu.h): l_i >= 2^-60 proves the bound
// is within ~60 + log2(Lk) binades of the true maximum, so nothing that matters underflowed; the
// upper limit catches f32 rounding that pushed scores far above a huge bound.
constexpr float kMinRowSum = 0x1p-60f;
constexpr float kMaxRowSum = 0x1p60f;

__device__ __forceinline__ float rope_pair_a(float xa, float xb, float c, float s) { return xa * c - xb * s; }
__device__ __forceinline__ float rope_pair_b(float xa, float xb, float c, float s) { return xb * c + xa * s; }

// Loads row `pos` of a [.., D] tensor (unit stride over d) into dst[0, D) as f32, rotated.
__device__ void load_rotated(const void* base, DT dt, int64_t off, int D, Rope rope, const float* cos, const float* sin,
                             float* dst, int lane, int nthreads) {
  const int half = D / 2;
  if (rope == Rope::None) {
    for (int d = lane; d < D; d += nthreads) dst[d] = load_f(base, dt, off + d);
    return;
  }
  for (int j = lane; j < half; j += nthreads) {
    const int ia = rope == Rope::AdjacentPairs ? 2 * j : j;
    const int ib = rope == Rope::AdjacentPairs ? 2 * j + 1 : j + half;
    const float xa = load_f(base, dt, off + ia), xb = load_f(base, dt, off + ib);
    const float c = cos[j], s = sin[j];
    dst[ia] = rope_pair_a(xa, xb, c, s);
    dst[ib] = rope_pair_b(xa, xb, c, s);
  }
}

// max_j |k_j| per (batch, kv head): one warp per key. The rotation is orthogonal, so the norm of
// the stored key is the norm of the rotated one (to f32 rounding, covered by a 2^-20 margin).
__global__ void key_norm_max_kernel(AttentionParams p, float* kmax) {
  const int64_t warp = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t total = p.B * p.Lk * p.Hkv;
  if (warp >= total) return;
  const int64_t h = warp % p.Hkv, j = (warp / p.Hkv) % p.Lk, b = warp / (p.Hkv * p.Lk);
  // Masked keys never reach a score, so they do not widen the bound (as on the CPU).
  if (p.mask && static_cast<const uint8_t*>(p.mask)[b * p.mask_stride[0] + j * p.mask_stride[1]] == 0) return;
  const int64_t off = b * p.k_stride[0] + j * p.k_stride[1] + h * p.k_stride[2];
  float ss = 0;
  for (int d = lane; d < p.D; d += 32) {
    const float v = load_f(p.k, p.dtype, off + d);
    ss = fmaf(v, v, ss);
  }
  ss = warp_sum(ss);
  if (lane == 0) {
    const float n = sqrtf(ss) * (1.0f + 0x1p-20f);
    atomicMax(reinterpret_cast<int*>(kmax + b * p.Hkv + h), __float_as_int(n));  // n >= 0: int order = float order
  }
}

template <int kDPerLane>
__global__ void attention_kernel(AttentionParams p, bool fixed_max, const float* kmax, int* fallback_rows) {
  extern __shared__ float smem[];
  const int D = static_cast<int>(p.D), ld = D + 1;  // +1: lane j reads row j without bank conflicts
  float* ks = smem;                  // [kTile][ld] rotated keys
  float* vs = ks + kTile * ld;       // [kTile][ld] values
  float* qs = vs + kTile * ld;       // [kRows][D] rotated, pre-scaled queries

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int64_t group = p.H / p.Hkv, kvh = h / group;
  const int64_t i = int64_t{blockIdx.x} * kRows + warp;
  const bool live = i < p.Lq;
  const float c = p.scale * kLog2e;
  const int64_t causal_offset = p.Lk - p.Lq;

  float* q = qs + warp * D;
  float qnorm = 0;
  if (live) {
    const int64_t pos = i + p.q_pos_offset;
    const float* qc = p.q_cos ? p.q_cos + b * p.q_rope_stride[0] + pos * p.q_rope_stride[1] : nullptr;
    const float* qsn = p.q_sin ? p.q_sin + b * p.q_rope_stride[0] + pos * p.q_rope_stride[1] : nullptr;
    load_rotated(p.q, p.dtype, b * p.q_stride[0] + i * p.q_stride[1] + h * p.q_stride[2], D, p.rope, qc, qsn, q, lane,
                 32);
    __syncwarp();
    float ss = 0;
    for (int d = lane; d < D; d += 32) {
      q[d] *= c;
      ss = fmaf(q[d], q[d], ss);
    }
    qnorm = sqrtf(warp_sum(ss));
    __syncwarp();
  }
  const bool use_fixed = fixed_max && p.bias == nullptr;
  const float m_fixed = use_fixed ? qnorm * kmax[b * p.Hkv + kvh] : 0.0f;

  float o[kDPerLane];
  float m = 0, l = 0;
  bool done = false;  // this row's result is final
  // Last key any row of the block can see (causal), to skip fully hidden tiles.
  int64_t key_end = p.Lk;
  if (p.causal) {
    const int64_t last_row = min(int64_t{blockIdx.x} * kRows + kRows - 1, p.Lq - 1);
    key_end = max(int64_t{0}, min(p.Lk, last_row + causal_offset + 1));
  }

  for (int pass = use_fixed ? 0 : 1; pass < 2; ++pass) {
    const bool online = pass == 1;
    if (online && !__syncthreads_or(live && !done)) break;  // every row was accepted
    const bool active = live && !done;
#pragma unroll
    for (int t = 0; t < kDPerLane; ++t) o[t] = 0.0f;
    m = online ? -INFINITY : m_fixed;
    l = 0;
    bool any_key = false;

    for (int64_t j0 = 0; j0 < key_end; j0 += kTile) {
      __syncthreads();  // the previous tile's readers are done
      // Cooperative load: 256 threads, 32 keys; each warp takes 4 keys.
      for (int kk = warp; kk < kTile; kk += kRows) {
        const int64_t j = j0 + kk;
        float* kd = ks + kk * ld;
        float* vd = vs + kk * ld;
        if (j < p.Lk) {
          const float* kc = p.k_cos ? p.k_cos + b * p.k_rope_stride[0] + j * p.k_rope_stride[1] : nullptr;
          const float* ksn = p.k_sin ? p.k_sin + b * p.k_rope_stride[0] + j * p.k_rope_stride[1] : nullptr;
          load_rotated(p.k, p.dtype, b * p.k_stride[0] + j * p.k_stride[1] + kvh * p.k_stride[2], D, p.rope, kc, ksn, kd,
                       lane, 32);
          const int64_t voff = b * p.v_stride[0] + j * p.v_stride[1] + kvh * p.v_stride[2];
          for (int d = lane; d < D; d += 32) vd[d] = load_f(p.v, p.dtype, voff + d);
        } else {
          for (int d = lane; d < D; d += 32) kd[d] = vd[d] = 0.0f;
        }
      }
      __syncthreads();
      if (!active) continue;

      // Lane `lane` scores key j0 + lane.
      const int64_t j = j0 + lane;
      bool valid = j < p.Lk;
      if (valid && p.causal && j > i + causal_offset) valid = false;
      if (valid && p.mask && static_cast<const uint8_t*>(p.mask)[b * p.mask_stride[0] + j * p.mask_stride[1]] == 0)
        valid = false;
      float s = -INFINITY;
      if (valid) {
        const float* kr = ks + lane * ld;
        float acc = 0;
        for (int d = 0; d < D; ++d) acc = fmaf(q[d], kr[d], acc);
        s = acc;
        if (p.bias)
          s += p.bias[b * p.bias_stride[0] + h * p.bias_stride[1] + i * p.bias_stride[2] + j * p.bias_stride[3]] * kLog2e;
      }
      any_key = any_key || __any_sync(0xFFFFFFFFu, valid);
      float pj;
      if (!online) {
        pj = valid ? exp2f(s - m) : 0.0f;
      } else {
        const float tile_max = warp_max(s);
        const float m_new = fmaxf(m, tile_max);
        if (m_new == -INFINITY) continue;  // nothing visible yet
        const float alpha = m == -INFINITY ? 0.0f : exp2f(m - m_new);
        l *= alpha;
#pragma unroll
        for (int t = 0; t < kDPerLane; ++t) o[t] *= alpha;
        m = m_new;
        pj = valid ? exp2f(s - m) : 0.0f;
      }
      l += warp_sum(pj);
      for (int kk = 0; kk < kTile; ++kk) {
        const float pk = __shfl_sync(0xFFFFFFFFu, pj, kk);
        if (pk == 0.0f) continue;  // warp-uniform: every lane got the same pk
        const float* vr = vs + kk * ld;
#pragma unroll
        for (int t = 0; t < kDPerLane; ++t) {
          const int d = lane + 32 * t;
          if (d < D) o[t] = fmaf(pk, vr[d], o[t]);
        }
      }
    }
    if (!active) continue;
    if (!online) {
      const bool ok = isfinite(m) && ((l >= kMinRowSum && l <= kMaxRowSum) || (!any_key && l == 0.0f));
      if (ok) {
        done = true;
      } else if (lane == 0 && fallback_rows) {
        atomicAdd(fallback_rows, 1);
      }
    } else {
      done = true;
    }
    if (done) {
      const float inv = l > 0 ? 1.0f / l : 0.0f;
      const int64_t ooff = b * p.o_stride[0] + i * p.o_stride[1] + h * p.o_stride[2];
#pragma unroll
      for (int t = 0; t < kDPerLane; ++t) {
        const int d = lane + 32 * t;
        if (d < D) store_f(p.out, p.dtype, ooff + d, o[t] * inv);
      }
    }
  }
}

constexpr int dynamic_smem_bytes(int D) { return static_cast<int>(sizeof(float) * (2 * kTile * (D + 1) + kRows * D)); }

template <int kDPerLane>
cudaError_t launch_main(const AttentionParams& p, bool fixed, const float* kmax, int* fallback_rows,
                        cudaStream_t stream) {
  // The opt-in above 48 KiB is per device, hence on every launch (see attention_tc.cu's
  // launch_main): the instantiation's largest size, or the device's limit when that is lower (a
  // constant per device, so concurrent launches agree on it); a launch needing more than the
  // device has fails.
  int device = 0, limit = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (e != cudaSuccess) return e;
  const int needed = dynamic_smem_bytes(static_cast<int>(p.D));
  if (needed > limit) return cudaErrorInvalidValue;
  e = cudaFuncSetAttribute(attention_kernel<kDPerLane>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           min(dynamic_smem_bytes(32 * kDPerLane), limit));
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((p.Lq + kRows - 1) / kRows), static_cast<unsigned>(p.H),
                  static_cast<unsigned>(p.B));
  attention_kernel<kDPerLane>
      <<<grid, kRows * 32, needed, stream>>>(p, fixed, kmax, fallback_rows);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_attention(const AttentionParams& p, bool fixed_max, float* kmax, int* fallback_rows,
                             cudaStream_t stream) {
  if (p.B == 0 || p.Lq == 0 || p.H == 0) return cudaSuccess;
  if (p.D > 32 * kLargeDPerLane || p.D % 2 != 0 || p.H > 65535 || p.B > 65535) return cudaErrorInvalidValue;
  const bool fixed = fixed_max && p.bias == nullptr;
  if (fixed) {
    const cudaError_t e = cudaMemsetAsync(kmax, 0, sizeof(float) * p.B * p.Hkv, stream);
    if (e != cudaSuccess) return e;
    const int64_t warps = p.B * p.Lk * p.Hkv;
    if (warps > 0) key_norm_max_kernel<<<static_cast<unsigned>((warps * 32 + 255) / 256), 256, 0, stream>>>(p, kmax);
  }
  if (p.D <= 32 * kSmallDPerLane) return launch_main<kSmallDPerLane>(p, fixed, kmax, fallback_rows, stream);
  return launch_main<kLargeDPerLane>(p, fixed, kmax, fallback_rows, stream);
}

}  // namespace fluxrt::cuda::kern
