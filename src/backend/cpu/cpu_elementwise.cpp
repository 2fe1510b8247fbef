// CPU element-wise kernels: activations, binary ops, GLUs, gated residual, softmax, embedding.
#include "backend/cpu/hwy_targets.h"
// (hwy_targets.h must precede the Highway headers)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/cpu_elementwise.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/simd-inl.h"
#include "backend/row_index.h"

HWY_BEFORE_NAMESPACE();
namespace fluxrt::backend::cpu::HWY_NAMESPACE {

// Runs body(row, c0, c1) over [rows, cols] split into column blocks.
template <typename Body>
void ForBlocks(int64_t rows, int64_t cols, Body body) {
  const int64_t blocks = std::max<int64_t>(1, (cols + kColumnBlock - 1) / kColumnBlock);
  parallel_for(rows * blocks, rows * cols, [&](int64_t u) {
    const int64_t r = u / blocks, c0 = (u % blocks) * kColumnBlock;
    body(r, c0, std::min(cols, c0 + kColumnBlock));
  });
}

// The activations of a bf16 output use the cheaper Accuracy::Bf16 math (simd-inl.h).
void UnaryImpl(const UnaryArgs& a) {
  dispatch_float(a.x.dtype(), "unary", [&]<typename T>() {
    const RowIndex xi(a.x), yi(a.y);
    const T* xp = a.x.data<T>();
    T* yp = a.y.data<T>();
    const DF df;
    const float alpha = a.alpha;
    constexpr Accuracy kAcc = kAccuracyFor<T>;
    with_stream(stream_output(a.y, {&a.x}), [&]<bool kS>() {
      ForBlocks(xi.rows(), xi.cols(), [&](int64_t r, int64_t c0, int64_t c1) {
        const T* x = xp + xi.offset(r) + c0;
        T* y = yp + yi.offset(r) + c0;
        const int64_t n = c1 - c0;
        switch (a.op) {
          case UnaryOp::Silu:
            MapRow1<kS>(x, y, n, [&](VF v) { return Silu<kAcc>(df, v); });
            break;
          case UnaryOp::GeluTanh:
            MapRow1<kS>(x, y, n, [&](VF v) { return GeluTanh<kAcc>(df, v); });
            break;
          case UnaryOp::QuickGelu:
            MapRow1<kS>(x, y, n, [&](VF v) { return SiluK<kAcc>(df, v, 1.702f); });
            break;
          case UnaryOp::Scale:
            MapRow1<kS>(x, y, n, [&](VF v) { return hn::Mul(v, hn::Set(df, alpha)); });
            break;
        }
      });
    });
  });
}

void BinaryImpl(const BinaryArgs& a) {
  dispatch_float(a.a.dtype(), "binary", [&]<typename T>() {
    const RowIndex ai(a.a), bi(a.b), yi(a.y);
    const T* ap = a.a.data<T>();
    const T* bp = a.b.data<T>();
    T* yp = a.y.data<T>();
    const DF df;
    const bool add = a.op == BinaryOp::Add;
    const bool b_scalar_per_row = bi.col_stride() == 0;
    with_stream(stream_output(a.y, {&a.a, &a.b}), [&]<bool kS>() {
      ForBlocks(ai.rows(), ai.cols(), [&](int64_t r, int64_t c0, int64_t c1) {
        const T* x = ap + ai.offset(r) + c0;
        T* y = yp + yi.offset(r) + c0;
        if (b_scalar_per_row) {
          const VF s = hn::Set(df, to_f32(bp[bi.offset(r)]));
          if (add)
            MapRow1<kS>(x, y, c1 - c0, [&](VF v) { return hn::Add(v, s); });
          else
            MapRow1<kS>(x, y, c1 - c0, [&](VF v) { return hn::Mul(v, s); });
          return;
        }
        const T* w = bp + bi.offset(r) + c0;
        if (add)
          MapRow<kS>(y, c1 - c0, [](VF p, VF q) { return hn::Add(p, q); }, RowOf<T>{x}, RowOf<T>{w});
        else
          MapRow<kS>(y, c1 - c0, [](VF p, VF q) { return hn::Mul(p, q); }, RowOf<T>{x}, RowOf<T>{w});
      });
    });
  });
}

void GluImpl(const GluArgs& a) {
  dispatch_float(a.gate.dtype(), "glu", [&]<typename T>() {
    const RowIndex gi(a.gate), ui(a.up), yi(a.y);
    const T* gp = a.gate.data<T>();
    const T* up = a.up.data<T>();
    T* yp = a.y.data<T>();
    const DF df;
    constexpr Accuracy kAcc = kAccuracyFor<T>;
    with_stream(stream_output(a.y, {&a.gate, &a.up}), [&]<bool kS>() {
      ForBlocks(gi.rows(), gi.cols(), [&](int64_t r, int64_t c0, int64_t c1) {
        const T* g = gp + gi.offset(r) + c0;
        const T* u = up + ui.offset(r) + c0;
        T* y = yp + yi.offset(r) + c0;
        if (a.act == GluActivation::Silu)
          MapRow<kS>(y, c1 - c0, [&](VF p, VF q) { return hn::Mul(Silu<kAcc>(df, p), q); }, RowOf<T>{g}, RowOf<T>{u});
        else
          MapRow<kS>(y, c1 - c0, [&](VF p, VF q) { return hn::Mul(GeluTanh<kAcc>(df, p), q); }, RowOf<T>{g}, RowOf<T>{u});
      });
    });
  });
}

void GatedResidualImpl(const GatedResidualArgs& a) {
  dispatch_float(a.x.dtype(), "gated_residual", [&]<typename T>() {
    const int64_t B = a.x.size(0), L = a.x.size(1), D = a.x.size(2);
    const std::vector<float> gate = f32_copy(a.gate);  // [B, D]
    const RowIndex xi(a.x), yi(a.y), oi(a.out);
    const T* xp = a.x.data<T>();
    const T* yp = a.y.data<T>();
    T* op = a.out.data<T>();
    const DF df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    ForBlocks(B * L, D, [&](int64_t r, int64_t c0, int64_t c1) {
      const float* g = gate.data() + (r / L) * D;
      const T* x = xp + xi.offset(r);
      const T* y = yp + yi.offset(r);
      T* o = op + oi.offset(r);
      int64_t i = c0;
      for (; i + N <= c1; i += N)
        StoreF(df, hn::MulAdd(hn::LoadU(df, g + i), LoadF(df, y + i), LoadF(df, x + i)), o + i);
      if (i < c1) {
        const size_t n = static_cast<size_t>(c1 - i);
        StoreFN(df, hn::MulAdd(LoadFN(df, g + i, n), LoadFN(df, y + i, n), LoadFN(df, x + i, n)), o + i, n);
      }
    });
  });
}

// exp(x) for x <= 0 (softmax's x - max): the polynomial of ExpClamped (~3x cheaper than hn::Exp),
// with exact zeros below -87 where exp underflows to subnormals (masked -inf scores give 0) and
// NaN kept (a row of -inf has NaN differences, as in torch).
HWY_INLINE VF ExpNonPositive(DF df, VF x) {
  const VF e = hn::IfThenZeroElse(hn::Lt(x, hn::Set(df, -87.0f)), ExpClamped(df, x));
  return hn::IfThenElse(hn::IsNaN(x), x, e);
}

void SoftmaxImpl(const SoftmaxArgs& a) {
  dispatch_float(a.x.dtype(), "softmax", [&]<typename T>() {
    constexpr bool kF32 = std::is_same_v<T, float>;
    const RowIndex xi(a.x), yi(a.y);
    const int64_t D = xi.cols();
    const T* xp = a.x.data<T>();
    T* yp = a.y.data<T>();
    // Large f32 outputs (not in place) are streamed by the last pass (cpu_common.h).
    with_stream(kF32 && stream_output(a.y, {&a.x}), [&]<bool kS>() {
      parallel_for(xi.rows(), xi.rows() * D, [&](int64_t r) {
        const DF df;
        const int64_t N = static_cast<int64_t>(hn::Lanes(df));
        const T* x = xp + xi.offset(r);
        T* y = yp + yi.offset(r);
        // f32 rows: max over x, exps written straight into y and scaled there (y may alias x:
        // each pass reads an element before writing it); a streamed y is written once, by the
        // last pass, so its exps go to scratch. Other dtypes: widened once into f32 scratch.
        // Either way the row stays in L1 between the passes.
        constexpr bool kExpsInY = kF32 && !kS;
        thread_local std::vector<float> buf;
        float* e;
        const float* src;
        if constexpr (kExpsInY) {
          e = y;
          src = x;
        } else {
          buf.resize(static_cast<size_t>(D) + hn::MaxLanes(DF()));
          e = buf.data();
          if constexpr (kF32)
            src = x;
          else
            src = e;
        }
        VF vmax = hn::Set(df, -HUGE_VALF);
        int64_t i = 0;
        for (; i + N <= D; i += N) {
          const VF v = LoadF(df, x + i);
          if constexpr (!kF32) hn::StoreU(v, df, e + i);
          vmax = hn::Max(vmax, v);
        }
        float m = hn::GetLane(hn::MaxOfLanes(df, vmax));
        for (; i < D; ++i) {
          const float v = to_f32(x[i]);
          if constexpr (!kF32) e[i] = v;
          m = std::max(m, v);
        }
        const VF vm = hn::Set(df, m);
        VF vsum = hn::Zero(df);
        for (i = 0; i + N <= D; i += N) {
          const VF v = ExpNonPositive(df, hn::Sub(hn::LoadU(df, src + i), vm));
          hn::StoreU(v, df, e + i);
          vsum = hn::Add(vsum, v);
        }
        float s = hn::GetLane(hn::SumOfLanes(df, vsum));
        if (i < D) {
          const size_t n = static_cast<size_t>(D - i);
          HWY_ALIGN float tail[hn::MaxLanes(df)];
          for (size_t k = 0; k < hn::Lanes(df); ++k) tail[k] = k < n ? src[i + k] - m : -HUGE_VALF;
          const VF v = ExpNonPositive(df, hn::Load(df, tail));
          hn::Store(v, df, tail);
          for (size_t k = 0; k < n; ++k) {
            e[i + k] = tail[k];
            s += tail[k];
          }
        }
        const VF inv = hn::Set(df, 1.0f / s);
        if constexpr (kF32 && kS) {
          MapRow1<true>(static_cast<const float*>(e), y, D, [&](VF v) { return hn::Mul(v, inv); });
        } else {
          for (i = 0; i + N <= D; i += N) StoreF(df, hn::Mul(hn::LoadU(df, e + i), inv), y + i);
          if (i < D)
            StoreFN(df, hn::Mul(LoadFN(df, e + i, static_cast<size_t>(D - i)), inv), y + i,
                    static_cast<size_t>(D - i));
        }
      });
    });
  });
}

}  // namespace fluxrt::backend::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fluxrt::backend::cpu {

HWY_EXPORT(UnaryImpl);
HWY_EXPORT(BinaryImpl);
HWY_EXPORT(GluImpl);
HWY_EXPORT(GatedResidualImpl);
HWY_EXPORT(SoftmaxImpl);

void unary(const UnaryArgs& a) { HWY_DYNAMIC_DISPATCH(UnaryImpl)(a); }
void binary(const BinaryArgs& a) { HWY_DYNAMIC_DISPATCH(BinaryImpl)(a); }
void glu(const GluArgs& a) { HWY_DYNAMIC_DISPATCH(GluImpl)(a); }
void gated_residual(const GatedResidualArgs& a) { HWY_DYNAMIC_DISPATCH(GatedResidualImpl)(a); }
void softmax(const SoftmaxArgs& a) { HWY_DYNAMIC_DISPATCH(SoftmaxImpl)(a); }

// Embedding is a gather of whole rows: memcpy when the dtypes match, else a converting copy.
void embedding(const EmbeddingArgs& a) {
  const int64_t n = a.ids.numel(), D = a.table.size(1);
  const size_t te = a.table.element_size(), oe = a.out.element_size();
  const char* tp = static_cast<const char*>(a.table.raw_data());
  char* op = static_cast<char*>(a.out.raw_data());
  const bool i64 = a.ids.dtype() == DType::I64;
  const void* ids = a.ids.raw_data();
  parallel_for(n, n * D, [&](int64_t i) {
    const int64_t id = i64 ? static_cast<const int64_t*>(ids)[i] : static_cast<const int32_t*>(ids)[i];
    const char* src = tp + static_cast<size_t>(id * a.table.stride(0)) * te;
    char* dst = op + static_cast<size_t>(i * a.out.stride(0)) * oe;
    if (a.table.dtype() == a.out.dtype())
      std::memcpy(dst, src, static_cast<size_t>(D) * te);
    else
      convert(src, a.table.dtype(), dst, a.out.dtype(), static_cast<size_t>(D));
  });
}

}  // namespace fluxrt::backend::cpu
#endif  // HWY_ONCE
