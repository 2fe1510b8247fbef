// CPU VAE kernels: GroupNorm (+ fused SiLU), nearest 2x upsampling, latent channel normalisation.
#include "backend/cpu/hwy_targets.h"
// (hwy_targets.h must precede the Highway headers)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/cpu_vae.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace fluxrt::backend::cpu::HWY_NAMESPACE {

// y = (x - mean) a + b over a plane, then SiLU (the cheaper Accuracy::Bf16 math for bf16 output).
template <typename T, bool kSilu, bool kStream>
void PlaneAffine(const T* x, T* y, int64_t n, float mean, float a, float b) {
  const DF df;
  const VF vm = hn::Set(df, mean), va = hn::Set(df, a), vb = hn::Set(df, b);
  auto f = [&](VF v) {
    const VF t = hn::MulAdd(hn::Sub(v, vm), va, vb);
    if constexpr (kSilu)
      return Silu<kAccuracyFor<T>>(df, t);
    else
      return t;
  };
  MapRow1<kStream>(x, y, n, f);
}

// GroupNorm's statistics come from fixed slices of each group: each slice's shifted sums in f32
// lanes (a few hundred values per lane), the slices' sums added in f64 in slice order. The slices
// do not depend on the thread count, so neither do the output bits, whichever way GroupNormImpl
// shares the groups out.
constexpr int64_t kGroupSlice = 8192;

// With fewer groups per thread than this, the threads share each group instead of taking whole
// groups (see GroupNormImpl): below two, whole groups would leave up to half the threads idle in
// the last round. Not more, because sharing costs a barrier per group, cheap on dedicated cores
// but a scheduler slice each when the machine is oversubscribed: on the shared 2-core box (load
// average 5) forcing it made [1,128,512,512] take 200 ms instead of 36 ms.
constexpr int64_t kMinGroupsPerThread = 2;

// One GroupNorm call's groups (u = n * G + g, each a contiguous block of C/G planes) and the
// per-slice sums its threads fill in.
template <typename T, bool kSilu, bool kStream>
class GroupNormGroups {
 public:
  GroupNormGroups(const GroupNormArgs& args, int64_t N, int64_t C, int64_t hw)
      : x_(args.x.data<T>()),
        y_(args.y.data<T>()),
        hw_(hw),
        channels_per_group_(C / args.groups),
        groups_(args.groups),
        n_per_(channels_per_group_ * hw),
        slices_((n_per_ + kGroupSlice - 1) / kGroupSlice),
        eps_(args.eps),
        w_(f32_copy(args.weight)),
        b_(f32_copy(args.bias)),
        sums_(static_cast<size_t>(N * groups_ * slices_)) {}

  // Group u on one thread: sums (twice if the first shift was poor), then the output while the
  // group is still in this core's caches.
  void whole_group(int64_t u) { group_part(u, 0, slices_, [] {}); }

  // Group u shared by `threads` threads (all of them call this, in the same order of groups):
  // each sums its run of slices, they meet, and each writes its own slices, which are still in its
  // caches. Every thread derives the moments from the same sums, so they agree.
  void shared_group(int64_t u, int thread, int threads) {
    group_part(u, slices_ * thread / threads, slices_ * (thread + 1) / threads, [] { team_barrier(); });
  }

 private:
  // The first shift of group u's sums: its first element, which removes the cancellation of
  // sum(x^2) - n mean^2 unless that element sits far from the mean (see moments()).
  float first_shift(int64_t u) const { return to_f32(x_[u * n_per_]); }

  // Sums of slices [k0, k1) of group u around `shift`.
  void slice_sums(int64_t u, int64_t k0, int64_t k1, float shift) {
    const T* x = x_ + u * n_per_;
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t i0 = k * kGroupSlice, i1 = std::min(n_per_, i0 + kGroupSlice);
      float s1, s2;
      RowShiftedSums(x + i0, i1 - i0, shift, &s1, &s2);
      sums_[u * slices_ + k] = {s1, s2};
    }
  }

  struct Moments {
    float mean, inv_std;
    bool redo;         // the shift sat far from the mean: redo the sums around better_shift
    float better_shift;  // the estimated mean
  };
  // Group u's moments from all its slices' sums around `shift`; `last` forbids asking for a redo.
  Moments moments(int64_t u, float shift, bool last) const {
    double s1 = 0, s2 = 0;
    for (int64_t k = 0; k < slices_; ++k) {
      s1 += sums_[u * slices_ + k].s1;
      s2 += sums_[u * slices_ + k].s2;
    }
    const double n = static_cast<double>(n_per_), dm = s1 / n;
    const double var = s2 / n - dm * dm;
    if (!last && dm * dm > 16.0 * var) return {0.0f, 0.0f, true, static_cast<float>(shift + dm)};
    return {static_cast<float>(shift + dm),
            static_cast<float>(1.0 / std::sqrt(std::max(0.0, var) + static_cast<double>(eps_))), false, 0.0f};
  }

  // Writes slices [k0, k1) of group u: (x - mean) * (w * inv_std) + b, then SiLU.
  void apply(int64_t u, int64_t k0, int64_t k1, const Moments& m) const {
    const int64_t g = u % groups_;
    const int64_t i1 = std::min(n_per_, k1 * kGroupSlice);
    for (int64_t i = k0 * kGroupSlice; i < i1;) {  // the slices' part of each channel plane
      const int64_t plane = i / hw_, end = std::min(i1, (plane + 1) * hw_);
      const int64_t ch = g * channels_per_group_ + plane;
      const float a = (w_.empty() ? 1.0f : w_[ch]) * m.inv_std, b = b_.empty() ? 0.0f : b_[ch];
      const int64_t off = u * n_per_ + i;
      PlaneAffine<T, kSilu, kStream>(x_ + off, y_ + off, end - i, m.mean, a, b);
      i = end;
    }
  }

  // Slices [k0, k1) of group u: their sums around the first shift (again around the estimated mean
  // when that shift was poor), the moments from every slice's sums, the output. `meet` waits for
  // the other threads working on the group wherever one reads what another wrote.
  template <typename Meet>
  void group_part(int64_t u, int64_t k0, int64_t k1, Meet meet) {
    float shift = first_shift(u);
    slice_sums(u, k0, k1, shift);
    meet();
    Moments m = moments(u, shift, false);
    if (m.redo) {
      meet();  // everyone has read the first sums before they are overwritten
      shift = m.better_shift;
      slice_sums(u, k0, k1, shift);
      meet();
      m = moments(u, shift, true);
    }
    apply(u, k0, k1, m);
  }

  struct Sums {
    double s1, s2;
  };
  const T* x_;
  T* y_;
  int64_t hw_, channels_per_group_, groups_, n_per_, slices_;
  float eps_;
  std::vector<float> w_, b_;
  std::vector<Sums> sums_;
};

// Each group is read twice, for its statistics and for the output; the second read must find it in
// cache. With enough groups, each thread takes whole groups (a group of the 1024 px decoder is
// 0.5-2 MB in bf16: L2 or L3); with few groups per thread, all threads share each group, one run
// of slices each, so every core still streams and re-reads only its own part.
void GroupNormImpl(const GroupNormArgs& args) {
  dispatch_float(args.x.dtype(), "group_norm", [&]<typename T>() {
    const int64_t N = args.x.size(0), C = args.x.size(1);
    const int64_t hw = N * C == 0 ? 0 : args.x.numel() / (N * C);
    if (hw == 0) return;
    const int64_t units = N * args.groups;
    const bool share_groups = units < kMinGroupsPerThread * omp_get_max_threads();
    with_stream(stream_output(args.y, {&args.x}), [&]<bool kS>() {
      auto run = [&]<bool kSilu>() {
        GroupNormGroups<T, kSilu, kS> groups(args, N, C, hw);
        if (share_groups) {
          parallel_team(args.x.numel(), [&](int thread, int threads) {
            for (int64_t u = 0; u < units; ++u) groups.shared_group(u, thread, threads);
          });
        } else {
          parallel_for(units, args.x.numel(), [&](int64_t u) { groups.whole_group(u); });
        }
      };
      if (args.silu)
        run.template operator()<true>();
      else
        run.template operator()<false>();
    });
  });
}

void ChannelNormImpl(const ChannelNormArgs& args) {
  dispatch_float(args.x.dtype(), "channel_norm", [&]<typename T>() {
    const int64_t N = args.x.size(0), C = args.x.size(1);
    const int64_t hw = N * C == 0 ? 0 : args.x.numel() / (N * C);
    const std::vector<float> mean = f32_copy(args.mean), var = f32_copy(args.var);
    const T* xp = args.x.data<T>();
    T* yp = args.y.data<T>();
    with_stream(stream_output(args.y, {&args.x}), [&]<bool kS>() {
      parallel_for(N * C, N * C * hw, [&](int64_t u) {
        const int64_t c = u % C;
        const double sd = std::sqrt(static_cast<double>(var[c]) + static_cast<double>(args.eps));
        const int64_t off = u * hw;
        // forward: (x - mean) * (1/sd); inverse: (x - 0) * sd + mean.
        if (args.inverse)
          PlaneAffine<T, false, kS>(xp + off, yp + off, hw, 0.0f, static_cast<float>(sd), mean[c]);
        else
          PlaneAffine<T, false, kS>(xp + off, yp + off, hw, mean[c], static_cast<float>(1.0 / sd), 0.0f);
      });
    });
  });
}

// Nearest 2x upsampling of planes of 2- or 4-byte elements U (the dtype does not change, so
// this moves bits): each input row becomes two identical output rows with every element doubled.
// The pair (v, v) is built in a lane of twice U's width as v | v << bits (a zero-extending load,
// the same on every target), and each vector is stored to both output rows; the output is 4x the
// input, so when streamed (kStream, rows vector-aligned) the op moves 5 units instead of 9.
template <bool kStream, typename U>
void UpsampleRows(const U* x, U* y, int64_t planes, int64_t H, int64_t W) {
  parallel_for(planes * H, planes * H * W * 4, [&](int64_t r) {
    const U* in = x + r * W;
    U* out0 = y + r * 4 * W;  // rows 2i and 2i+1 of the plane are adjacent
    U* out1 = out0 + 2 * W;
    int64_t j = 0;
#if HWY_TARGET != HWY_SCALAR
    using Wide = std::conditional_t<sizeof(U) == 2, uint32_t, uint64_t>;
    const hn::Repartition<Wide, DF> dw;
    const hn::Rebind<U, decltype(dw)> dn;       // half-width loads of input elements
    const hn::Repartition<U, decltype(dw)> du;  // stores through U lanes (rows are U-aligned)
    const int64_t N = static_cast<int64_t>(hn::Lanes(dw));
    auto doubled = [&](int64_t at) {
      const auto v = hn::PromoteTo(dw, hn::LoadU(dn, in + at));
      return hn::BitCast(du, hn::Or(v, hn::ShiftLeft<8 * sizeof(U)>(v)));
    };
    if (kStream && ElementsBeforeAlignment(out0, 2 * W) == 0 && ElementsBeforeAlignment(out1, 2 * W) == 0) {
      for (; j + N <= W; j += N) {
        const auto d = doubled(j);
        hn::Stream(d, du, out0 + 2 * j);
        hn::Stream(d, du, out1 + 2 * j);
      }
    }
    for (; j + N <= W; j += N) {
      const auto d = doubled(j);
      hn::StoreU(d, du, out0 + 2 * j);
      hn::StoreU(d, du, out1 + 2 * j);
    }
#endif
    for (; j < W; ++j) out0[2 * j] = out0[2 * j + 1] = out1[2 * j] = out1[2 * j + 1] = in[j];
  });
}

void Upsample2xImpl(const Upsample2xArgs& a) {
  const int64_t H = a.x.size(-2), W = a.x.size(-1);
  const int64_t planes = H * W == 0 ? 0 : a.x.numel() / (H * W);
  with_stream(stream_output(a.y, {&a.x}), [&]<bool kS>() {
    if (a.x.element_size() == 2)
      UpsampleRows<kS>(a.x.data<uint16_t>(), a.y.data<uint16_t>(), planes, H, W);
    else
      UpsampleRows<kS>(a.x.data<uint32_t>(), a.y.data<uint32_t>(), planes, H, W);
  });
}

}  // namespace fluxrt::backend::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fluxrt::backend::cpu {

HWY_EXPORT(GroupNormImpl);
HWY_EXPORT(ChannelNormImpl);
HWY_EXPORT(Upsample2xImpl);

void group_norm(const GroupNormArgs& a) { HWY_DYNAMIC_DISPATCH(GroupNormImpl)(a); }
void channel_norm(const ChannelNormArgs& a) { HWY_DYNAMIC_DISPATCH(ChannelNormImpl)(a); }

namespace {
// 1- and 8-byte elements (no FLUX dtype; kept for completeness): each input row becomes two
// identical output rows with every element doubled.
template <typename U>
void upsample_rows(const U* x, U* y, int64_t planes, int64_t H, int64_t W) {
  parallel_for(planes * H, planes * H * W * 4, [&](int64_t r) {
    const U* in = x + r * W;
    U* out = y + r * 4 * W;  // rows 2i and 2i+1 of the plane are adjacent
    for (int64_t j = 0; j < W; ++j) out[2 * j] = out[2 * j + 1] = in[j];
    std::memcpy(out + 2 * W, out, static_cast<size_t>(2 * W) * sizeof(U));
  });
}
}  // namespace

void upsample_nearest_2x(const Upsample2xArgs& a) {
  const int64_t H = a.x.size(-2), W = a.x.size(-1);
  const int64_t planes = H * W == 0 ? 0 : a.x.numel() / (H * W);
  switch (a.x.element_size()) {
    case 2:
    case 4:
      HWY_DYNAMIC_DISPATCH(Upsample2xImpl)(a);
      return;
    case 8:
      upsample_rows(a.x.data<uint64_t>(), a.y.data<uint64_t>(), planes, H, W);
      return;
    case 1:
      upsample_rows(a.x.data<uint8_t>(), a.y.data<uint8_t>(), planes, H, W);
      return;
    default:
      fail(ErrorCode::Unsupported, "[upsample_nearest_2x] element size {}", a.x.element_size());
  }
}

}  // namespace fluxrt::backend::cpu
#endif  // HWY_ONCE
