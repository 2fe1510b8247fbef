// CPU VAE kernels on channels-last tensors ([N, C, H, W] stored as [N, H, W, C]): GroupNorm (+
// fused SiLU) and nearest 2x upsampling. oneDNN's brgemm convolutions read and write this layout,
// so a VAE kept in it never reorders around a convolution (docs/cpu.md, "VAE").
#include "backend/cpu/hwy_targets.h"
// (hwy_targets.h must precede the Highway headers)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/cpu_vae_channels_last.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace fluxrt::backend::cpu::HWY_NAMESPACE {

// The statistics come from fixed slices of pixels: each slice's per-channel shifted sums in f32
// lanes (kSlicePixels values per lane), added per group in f64, then across slices in f64 in slice
// order. The slices do not depend on the thread count, so neither do the output bits.
constexpr int64_t kSlicePixels = 256;

// Vectors of channels a block keeps in registers while it walks a slice's pixels (the pixels are
// C elements apart): 4 x 3 accumulators or parameters fit AVX2's 16 registers.
constexpr int kBlockVectors = 4;

// One GroupNorm call on x viewed as [N, P, C] (P = H * W pixels). Per-channel arrays (shift, and
// the output's mean, scale and offset) are padded with zeros to whole vectors, so every block
// loads them whole and only the rows of x and y need partial loads at a channel tail.
template <typename T, bool kSilu>
class ChannelsLastGroupNorm {
 public:
  explicit ChannelsLastGroupNorm(const GroupNormArgs& a)
      : x_(a.x.data<T>()),
        y_(a.y.data<T>()),
        n_(a.x.size(0)),
        c_(a.x.size(1)),
        p_(a.x.size(2) * a.x.size(3)),
        groups_(a.groups),
        per_group_(c_ / a.groups),
        slices_((p_ + kSlicePixels - 1) / kSlicePixels),
        c_padded_((c_ + Lanes() - 1) / Lanes() * Lanes()),
        eps_(a.eps),
        w_(f32_copy(a.weight)),
        b_(f32_copy(a.bias)),
        sums_(static_cast<size_t>(n_ * slices_ * groups_)),
        shift_(static_cast<size_t>(n_ * c_padded_), 0.0f) {}

  void run() {
    // The first shift of a group is its first element (x[n, g * C/G, 0, 0], as in the NCHW
    // kernel), which removes the cancellation of sum(x^2) - n mean^2 unless that element sits
    // far from the mean; then the sums are taken again around the estimated mean.
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t g = 0; g < groups_; ++g) set_group_shift(n, g, to_f32(x_[n * p_ * c_ + g * per_group_]));
    sum_slices();
    std::vector<Moments> m(static_cast<size_t>(n_ * groups_));
    bool redo = false;
    for (int64_t u = 0; u < n_ * groups_; ++u) {
      m[u] = moments(u, false);
      if (m[u].redo) {
        set_group_shift(u / groups_, u % groups_, m[u].better_shift);
        redo = true;
      }
    }
    if (redo) {
      sum_slices();
      for (int64_t u = 0; u < n_ * groups_; ++u)
        if (m[u].redo) m[u] = moments(u, true);
    }
    apply_all(m);
  }

 private:
  struct Sums {
    double s1, s2;
  };
  struct Moments {
    float mean = 0, inv_std = 0;
    bool redo = false;       // the shift sat far from the mean: redo the sums around better_shift
    float better_shift = 0;  // the estimated mean
  };

  static int64_t Lanes() { return static_cast<int64_t>(hn::Lanes(DF())); }

  void set_group_shift(int64_t n, int64_t g, float shift) {
    std::fill_n(shift_.begin() + n * c_padded_ + g * per_group_, per_group_, shift);
  }

  // Channels [c0, c0 + kVecs * Lanes) of pixels [p0, p1) of image n: per-channel sums of (x - shift)
  // and its square into s1 / s2 (indexed by channel). `valid` is how many of the block's channels
  // exist (the rest read as zero and sum to zero).
  template <int kVecs>
  void sum_block(int64_t n, int64_t p0, int64_t p1, int64_t c0, int64_t valid, float* s1, float* s2) const {
    const DF df;
    const int64_t L = Lanes();
    VF sh[kVecs], a1[kVecs], a2[kVecs];
    for (int v = 0; v < kVecs; ++v) {
      sh[v] = hn::LoadU(df, shift_.data() + n * c_padded_ + c0 + v * L);
      a1[v] = a2[v] = hn::Zero(df);
    }
    const T* row = x_ + (n * p_ + p0) * c_ + c0;
    for (int64_t p = p0; p < p1; ++p, row += c_) {
      for (int v = 0; v < kVecs; ++v) {
        const int64_t left = valid - v * L;
        const VF x = left >= L ? LoadF(df, row + v * L) : LoadFN(df, row + v * L, static_cast<size_t>(left));
        const VF d = hn::Sub(x, sh[v]);
        a1[v] = hn::Add(a1[v], d);
        a2[v] = hn::MulAdd(d, d, a2[v]);
      }
    }
    for (int v = 0; v < kVecs; ++v) {
      hn::StoreU(a1[v], df, s1 + c0 + v * L);
      hn::StoreU(a2[v], df, s2 + c0 + v * L);
    }
  }

  // Runs block(c0, kVecs, valid) over the channels: whole blocks of kBlockVectors vectors, then
  // single vectors, the last one partial.
  template <typename Block>
  void for_channel_blocks(Block block) const {
    const int64_t L = Lanes();
    int64_t c0 = 0;
    for (; c0 + kBlockVectors * L <= c_; c0 += kBlockVectors * L)
      block.template operator()<kBlockVectors>(c0, kBlockVectors * L);
    for (; c0 < c_; c0 += L) block.template operator()<1>(c0, std::min(L, c_ - c0));
  }

  void sum_slices() {
    parallel_for(n_ * slices_, n_ * p_ * c_, [&](int64_t u) {
      const int64_t n = u / slices_, s = u % slices_;
      const int64_t p0 = s * kSlicePixels, p1 = std::min(p_, p0 + kSlicePixels);
      std::vector<float> s1(static_cast<size_t>(c_padded_)), s2(static_cast<size_t>(c_padded_));
      for_channel_blocks([&]<int kVecs>(int64_t c0, int64_t valid) {
        sum_block<kVecs>(n, p0, p1, c0, valid, s1.data(), s2.data());
      });
      for (int64_t g = 0; g < groups_; ++g) {
        double g1 = 0, g2 = 0;
        for (int64_t c = g * per_group_; c < (g + 1) * per_group_; ++c) {
          g1 += s1[c];
          g2 += s2[c];
        }
        sums_[(n * slices_ + s) * groups_ + g] = {g1, g2};
      }
    });
  }

  // Group u = n * G + g's moments from every slice's sums around its current shift; `last` forbids
  // asking for a redo.
  Moments moments(int64_t u, bool last) const {
    const int64_t n = u / groups_, g = u % groups_;
    double s1 = 0, s2 = 0;
    for (int64_t s = 0; s < slices_; ++s) {
      s1 += sums_[(n * slices_ + s) * groups_ + g].s1;
      s2 += sums_[(n * slices_ + s) * groups_ + g].s2;
    }
    const float shift = shift_[n * c_padded_ + g * per_group_];
    const double count = static_cast<double>(per_group_ * p_), dm = s1 / count;
    const double var = s2 / count - dm * dm;
    Moments m;
    if (!last && dm * dm > 16.0 * var) {
      m.redo = true;
      m.better_shift = static_cast<float>(shift + dm);
      return m;
    }
    m.mean = static_cast<float>(shift + dm);
    m.inv_std = static_cast<float>(1.0 / std::sqrt(std::max(0.0, var) + static_cast<double>(eps_)));
    return m;
  }

  // y = (x - mean) * (w * inv_std) + b per channel, then SiLU (the NCHW kernel's arithmetic).
  template <int kVecs>
  void apply_block(const float* mean, const float* scale, const float* offset, int64_t n, int64_t p0,
                   int64_t p1, int64_t c0, int64_t valid) const {
    const DF df;
    const int64_t L = Lanes();
    VF vm[kVecs], va[kVecs], vb[kVecs];
    for (int v = 0; v < kVecs; ++v) {
      vm[v] = hn::LoadU(df, mean + c0 + v * L);
      va[v] = hn::LoadU(df, scale + c0 + v * L);
      vb[v] = hn::LoadU(df, offset + c0 + v * L);
    }
    const int64_t at = (n * p_ + p0) * c_ + c0;
    const T* in = x_ + at;
    T* out = y_ + at;
    for (int64_t p = p0; p < p1; ++p, in += c_, out += c_) {
      for (int v = 0; v < kVecs; ++v) {
        const int64_t left = valid - v * L;
        const VF x = left >= L ? LoadF(df, in + v * L) : LoadFN(df, in + v * L, static_cast<size_t>(left));
        VF t = hn::MulAdd(hn::Sub(x, vm[v]), va[v], vb[v]);
        if constexpr (kSilu) t = Silu<kAccuracyFor<T>>(df, t);
        if (left >= L)
          StoreF(df, t, out + v * L);
        else
          StoreFN(df, t, out + v * L, static_cast<size_t>(left));
      }
    }
  }

  void apply_all(const std::vector<Moments>& m) {
    // Per image, the per-channel mean, scale and offset the blocks load (padded with zeros).
    std::vector<float> mean(static_cast<size_t>(n_ * c_padded_), 0.0f), scale(mean.size(), 0.0f),
        offset(mean.size(), 0.0f);
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t c = 0; c < c_; ++c) {
        const Moments& g = m[n * groups_ + c / per_group_];
        mean[n * c_padded_ + c] = g.mean;
        scale[n * c_padded_ + c] = (w_.empty() ? 1.0f : w_[c]) * g.inv_std;
        offset[n * c_padded_ + c] = b_.empty() ? 0.0f : b_[c];
      }
    parallel_for(n_ * slices_, n_ * p_ * c_, [&](int64_t u) {
      const int64_t n = u / slices_, s = u % slices_;
      const int64_t p0 = s * kSlicePixels, p1 = std::min(p_, p0 + kSlicePixels);
      const size_t at = static_cast<size_t>(n * c_padded_);
      for_channel_blocks([&]<int kVecs>(int64_t c0, int64_t valid) {
        apply_block<kVecs>(mean.data() + at, scale.data() + at, offset.data() + at, n, p0, p1, c0, valid);
      });
    });
  }

  const T* x_;
  T* y_;
  int64_t n_, c_, p_, groups_, per_group_, slices_, c_padded_;
  float eps_;
  std::vector<float> w_, b_;
  std::vector<Sums> sums_;
  std::vector<float> shift_;  // [N, c_padded_]: each channel's group shift
};

void GroupNormChannelsLastImpl(const GroupNormArgs& args) {
  dispatch_float(args.x.dtype(), "group_norm (channels-last)", [&]<typename T>() {
    if (args.silu)
      ChannelsLastGroupNorm<T, true>(args).run();
    else
      ChannelsLastGroupNorm<T, false>(args).run();
  });
}

}  // namespace fluxrt::backend::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fluxrt::backend::cpu {

HWY_EXPORT(GroupNormChannelsLastImpl);

void group_norm_channels_last(const GroupNormArgs& a) { HWY_DYNAMIC_DISPATCH(GroupNormChannelsLastImpl)(a); }

// Each input pixel's C elements are copied to two adjacent output pixels, and each output row to
// the row below it: whole runs of C elements, so plain copies move them (the dtype is kept).
void upsample_nearest_2x_channels_last(const Upsample2xArgs& a) {
  const int64_t N = a.x.size(0), C = a.x.size(1), H = a.x.size(2), W = a.x.size(3);
  const size_t pixel = static_cast<size_t>(C) * a.x.element_size();
  const char* x = static_cast<const char*>(a.x.raw_data());
  char* y = static_cast<char*>(a.y.raw_data());
  parallel_for(N * H, N * H * W * C * 4, [&](int64_t r) {
    const char* in = x + r * W * pixel;
    char* out0 = y + r * 4 * W * pixel;  // output rows 2i and 2i+1 of an image are adjacent
    for (int64_t j = 0; j < W; ++j) {
      std::memcpy(out0 + 2 * j * pixel, in + j * pixel, pixel);
      std::memcpy(out0 + (2 * j + 1) * pixel, in + j * pixel, pixel);
    }
    std::memcpy(out0 + 2 * W * pixel, out0, 2 * W * pixel);
  });
}

}  // namespace fluxrt::backend::cpu
#endif  // HWY_ONCE
