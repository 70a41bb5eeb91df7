// Highway implementation of the kernels of kernels.h, compiled once per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "backend/cpu/kernels.h"
#include "quant/quant.h"

#include <cstring>

HWY_BEFORE_NAMESPACE();
namespace eg::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

// Loads N floats of weight type W at w + i, converted to f32.
template <typename W>
HWY_INLINE hn::Vec<DF> LoadW(DF df, const W* w, size_t i) {
  if constexpr (std::is_same_v<W, float>) {
    return hn::LoadU(df, w + i);
  } else {
    const hn::Rebind<W, DF> dw;
    return hn::PromoteTo(df, hn::LoadU(dw, w + i));
  }
}

template <typename W>
HWY_INLINE float ScalarW(const W* w, size_t i) {
  if constexpr (std::is_same_v<W, float>) {
    return w[i];
  } else if constexpr (std::is_same_v<W, hwy::bfloat16_t>) {
    return hwy::F32FromBF16(w[i]);
  } else {
    uint16_t bits;
    std::memcpy(&bits, &w[i], 2);
    return f16_to_f32(bits);
  }
}

// The canonical order: acc0 takes chunks 0,2,4..., acc1 chunks 1,3,5...; then acc0+acc1 reduced,
// then the scalar tail added in index order.
template <typename W>
HWY_INLINE float DotT(const float* HWY_RESTRICT x, const W* HWY_RESTRICT w, size_t n) {
  const DF df;
  const size_t N = hn::Lanes(df);
  auto acc0 = hn::Zero(df), acc1 = hn::Zero(df);
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    acc0 = hn::MulAdd(hn::LoadU(df, x + i), LoadW(df, w, i), acc0);
    acc1 = hn::MulAdd(hn::LoadU(df, x + i + N), LoadW(df, w, i + N), acc1);
  }
  if (i + N <= n) {
    acc0 = hn::MulAdd(hn::LoadU(df, x + i), LoadW(df, w, i), acc0);
    i += N;
  }
  float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1)));
  for (; i < n; ++i) s += x[i] * ScalarW(w, i);
  return s;
}

template <typename W>
HWY_INLINE void Dot4T(const float* const* x, const W* HWY_RESTRICT w, size_t n, float* out) {
  const DF df;
  const size_t N = hn::Lanes(df);
  auto a00 = hn::Zero(df), a01 = hn::Zero(df), a10 = hn::Zero(df), a11 = hn::Zero(df);
  auto a20 = hn::Zero(df), a21 = hn::Zero(df), a30 = hn::Zero(df), a31 = hn::Zero(df);
  const float* HWY_RESTRICT x0 = x[0];
  const float* HWY_RESTRICT x1 = x[1];
  const float* HWY_RESTRICT x2 = x[2];
  const float* HWY_RESTRICT x3 = x[3];
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const auto w0 = LoadW(df, w, i);
    const auto w1 = LoadW(df, w, i + N);
    a00 = hn::MulAdd(hn::LoadU(df, x0 + i), w0, a00);
    a01 = hn::MulAdd(hn::LoadU(df, x0 + i + N), w1, a01);
    a10 = hn::MulAdd(hn::LoadU(df, x1 + i), w0, a10);
    a11 = hn::MulAdd(hn::LoadU(df, x1 + i + N), w1, a11);
    a20 = hn::MulAdd(hn::LoadU(df, x2 + i), w0, a20);
    a21 = hn::MulAdd(hn::LoadU(df, x2 + i + N), w1, a21);
    a30 = hn::MulAdd(hn::LoadU(df, x3 + i), w0, a30);
    a31 = hn::MulAdd(hn::LoadU(df, x3 + i + N), w1, a31);
  }
  if (i + N <= n) {
    const auto w0 = LoadW(df, w, i);
    a00 = hn::MulAdd(hn::LoadU(df, x0 + i), w0, a00);
    a10 = hn::MulAdd(hn::LoadU(df, x1 + i), w0, a10);
    a20 = hn::MulAdd(hn::LoadU(df, x2 + i), w0, a20);
    a30 = hn::MulAdd(hn::LoadU(df, x3 + i), w0, a30);
    i += N;
  }
  float s0 = hn::GetLane(hn::SumOfLanes(df, hn::Add(a00, a01)));
  float s1 = hn::GetLane(hn::SumOfLanes(df, hn::Add(a10, a11)));
  float s2 = hn::GetLane(hn::SumOfLanes(df, hn::Add(a20, a21)));
  float s3 = hn::GetLane(hn::SumOfLanes(df, hn::Add(a30, a31)));
  for (; i < n; ++i) {
    const float wi = ScalarW(w, i);
    s0 += x0[i] * wi;
    s1 += x1[i] * wi;
    s2 += x2[i] * wi;
    s3 += x3[i] * wi;
  }
  out[0] = s0;
  out[1] = s1;
  out[2] = s2;
  out[3] = s3;
}

float Dot(const float* x, const void* w, DType t, size_t n) {
  switch (t) {
    case DType::F32: return DotT(x, static_cast<const float*>(w), n);
    case DType::BF16: return DotT(x, static_cast<const hwy::bfloat16_t*>(w), n);
    case DType::F16: return DotT(x, static_cast<const hwy::float16_t*>(w), n);
    default: break;  // block types: quant_kernels.h
  }
  return 0.0f;
}

void Dot4(const float* const* x, const void* w, DType t, size_t n, float* out) {
  switch (t) {
    case DType::F32: return Dot4T(x, static_cast<const float*>(w), n, out);
    case DType::BF16: return Dot4T(x, static_cast<const hwy::bfloat16_t*>(w), n, out);
    case DType::F16: return Dot4T(x, static_cast<const hwy::float16_t*>(w), n, out);
    default: break;  // block types: quant_kernels.h
  }
}

// Pins a loaded vector in a register: GCC otherwise folds each use of a loaded value into its own
// memory operand (one load per use), and q·K is bound by loads (measured: 20 loads per 16 FMAs).
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#define EG_IN_REG(v) asm("" : "+v"((v).raw))
#else
#define EG_IN_REG(v) (void)0
#endif

// Four queries against nk consecutive f32 rows (row stride D), two rows per pass: 16 accumulators
// (query × row × even/odd chunk), so each loaded chunk of a query feeds two rows and each chunk of
// a row four queries. Every score is Dot4T's (= DotT's) arithmetic for its pair, then × scale.
void Dot4Rows(const float* const* x, const float* HWY_RESTRICT rows, size_t D, int64_t nk, float scale,
              float* const* out) {
  int64_t k = 0;
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3  // 16 vector registers: one row per pass (Dot4T)
  for (; k < nk; ++k) {
    float o[4];
    Dot4T(x, rows + static_cast<size_t>(k) * D, D, o);
    for (int j = 0; j < 4; ++j) out[j][k] = o[j] * scale;
  }
  return;
#endif
  const DF df;
  const size_t N = hn::Lanes(df);
  const float* HWY_RESTRICT x0 = x[0];
  const float* HWY_RESTRICT x1 = x[1];
  const float* HWY_RESTRICT x2 = x[2];
  const float* HWY_RESTRICT x3 = x[3];
  for (; k + 2 <= nk; k += 2) {
    const float* HWY_RESTRICT w0 = rows + static_cast<size_t>(k) * D;
    const float* HWY_RESTRICT w1 = w0 + D;
    auto a00 = hn::Zero(df), a01 = hn::Zero(df), b00 = hn::Zero(df), b01 = hn::Zero(df);
    auto a10 = hn::Zero(df), a11 = hn::Zero(df), b10 = hn::Zero(df), b11 = hn::Zero(df);
    auto a20 = hn::Zero(df), a21 = hn::Zero(df), b20 = hn::Zero(df), b21 = hn::Zero(df);
    auto a30 = hn::Zero(df), a31 = hn::Zero(df), b30 = hn::Zero(df), b31 = hn::Zero(df);
    size_t i = 0;
    for (; i + 2 * N <= D; i += 2 * N) {
      auto u0 = hn::LoadU(df, w0 + i), u1 = hn::LoadU(df, w0 + i + N);
      auto v0 = hn::LoadU(df, w1 + i), v1 = hn::LoadU(df, w1 + i + N);
      EG_IN_REG(u0);
      EG_IN_REG(u1);
      EG_IN_REG(v0);
      EG_IN_REG(v1);
      auto q0 = hn::LoadU(df, x0 + i), q1 = hn::LoadU(df, x0 + i + N);
      EG_IN_REG(q0);
      EG_IN_REG(q1);
      a00 = hn::MulAdd(q0, u0, a00), a01 = hn::MulAdd(q1, u1, a01);
      b00 = hn::MulAdd(q0, v0, b00), b01 = hn::MulAdd(q1, v1, b01);
      q0 = hn::LoadU(df, x1 + i), q1 = hn::LoadU(df, x1 + i + N);
      EG_IN_REG(q0);
      EG_IN_REG(q1);
      a10 = hn::MulAdd(q0, u0, a10), a11 = hn::MulAdd(q1, u1, a11);
      b10 = hn::MulAdd(q0, v0, b10), b11 = hn::MulAdd(q1, v1, b11);
      q0 = hn::LoadU(df, x2 + i), q1 = hn::LoadU(df, x2 + i + N);
      EG_IN_REG(q0);
      EG_IN_REG(q1);
      a20 = hn::MulAdd(q0, u0, a20), a21 = hn::MulAdd(q1, u1, a21);
      b20 = hn::MulAdd(q0, v0, b20), b21 = hn::MulAdd(q1, v1, b21);
      q0 = hn::LoadU(df, x3 + i), q1 = hn::LoadU(df, x3 + i + N);
      EG_IN_REG(q0);
      EG_IN_REG(q1);
      a30 = hn::MulAdd(q0, u0, a30), a31 = hn::MulAdd(q1, u1, a31);
      b30 = hn::MulAdd(q0, v0, b30), b31 = hn::MulAdd(q1, v1, b31);
    }
    if (i + N <= D) {
      const auto u0 = hn::LoadU(df, w0 + i), v0 = hn::LoadU(df, w1 + i);
      auto q0 = hn::LoadU(df, x0 + i);
      a00 = hn::MulAdd(q0, u0, a00), b00 = hn::MulAdd(q0, v0, b00);
      q0 = hn::LoadU(df, x1 + i);
      a10 = hn::MulAdd(q0, u0, a10), b10 = hn::MulAdd(q0, v0, b10);
      q0 = hn::LoadU(df, x2 + i);
      a20 = hn::MulAdd(q0, u0, a20), b20 = hn::MulAdd(q0, v0, b20);
      q0 = hn::LoadU(df, x3 + i);
      a30 = hn::MulAdd(q0, u0, a30), b30 = hn::MulAdd(q0, v0, b30);
      i += N;
    }
    float s[8] = {hn::GetLane(hn::SumOfLanes(df, hn::Add(a00, a01))), hn::GetLane(hn::SumOfLanes(df, hn::Add(a10, a11))),
                  hn::GetLane(hn::SumOfLanes(df, hn::Add(a20, a21))), hn::GetLane(hn::SumOfLanes(df, hn::Add(a30, a31))),
                  hn::GetLane(hn::SumOfLanes(df, hn::Add(b00, b01))), hn::GetLane(hn::SumOfLanes(df, hn::Add(b10, b11))),
                  hn::GetLane(hn::SumOfLanes(df, hn::Add(b20, b21))), hn::GetLane(hn::SumOfLanes(df, hn::Add(b30, b31)))};
    for (; i < D; ++i)
      for (int j = 0; j < 4; ++j) {
        s[j] += x[j][i] * w0[i];
        s[4 + j] += x[j][i] * w1[i];
      }
    for (int j = 0; j < 4; ++j) {
      out[j][k] = s[j] * scale;
      out[j][k + 1] = s[4 + j] * scale;
    }
  }
  if (k < nk) {
    float o[4];
    Dot4T(x, rows + static_cast<size_t>(k) * D, D, o);
    for (int j = 0; j < 4; ++j) out[j][k] = o[j] * scale;
  }
}

// (Named vectors, not arrays, below: SVE vectors cannot be array elements.)
// Four queries, 4 vectors of D each per pass (16 accumulators): each loaded vector of V feeds the
// four queries. Columns [0, return value) are done.
size_t AccumulatePV4(float* const* outs, const float* const* ps, const float* HWY_RESTRICT V, int64_t nk, size_t D) {
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3  // 16 vector registers: the one-query passes below
  return 0;
#endif
  const DF df;
  const size_t N = hn::Lanes(df);
  float* HWY_RESTRICT o0 = outs[0];
  float* HWY_RESTRICT o1 = outs[1];
  float* HWY_RESTRICT o2 = outs[2];
  float* HWY_RESTRICT o3 = outs[3];
  const float* HWY_RESTRICT p0 = ps[0];
  const float* HWY_RESTRICT p1 = ps[1];
  const float* HWY_RESTRICT p2 = ps[2];
  const float* HWY_RESTRICT p3 = ps[3];
  size_t d = 0;
  for (; d + 4 * N <= D; d += 4 * N) {
    auto a00 = hn::LoadU(df, o0 + d), a01 = hn::LoadU(df, o0 + d + N);
    auto a02 = hn::LoadU(df, o0 + d + 2 * N), a03 = hn::LoadU(df, o0 + d + 3 * N);
    auto a10 = hn::LoadU(df, o1 + d), a11 = hn::LoadU(df, o1 + d + N);
    auto a12 = hn::LoadU(df, o1 + d + 2 * N), a13 = hn::LoadU(df, o1 + d + 3 * N);
    auto a20 = hn::LoadU(df, o2 + d), a21 = hn::LoadU(df, o2 + d + N);
    auto a22 = hn::LoadU(df, o2 + d + 2 * N), a23 = hn::LoadU(df, o2 + d + 3 * N);
    auto a30 = hn::LoadU(df, o3 + d), a31 = hn::LoadU(df, o3 + d + N);
    auto a32 = hn::LoadU(df, o3 + d + 2 * N), a33 = hn::LoadU(df, o3 + d + 3 * N);
    for (int64_t k = 0; k < nk; ++k) {
      const float* HWY_RESTRICT row = V + static_cast<size_t>(k) * D + d;
      const auto v0 = hn::LoadU(df, row), v1 = hn::LoadU(df, row + N);
      const auto v2 = hn::LoadU(df, row + 2 * N), v3 = hn::LoadU(df, row + 3 * N);
      auto p = hn::Set(df, p0[k]);
      a00 = hn::Add(a00, hn::Mul(p, v0)), a01 = hn::Add(a01, hn::Mul(p, v1));
      a02 = hn::Add(a02, hn::Mul(p, v2)), a03 = hn::Add(a03, hn::Mul(p, v3));
      p = hn::Set(df, p1[k]);
      a10 = hn::Add(a10, hn::Mul(p, v0)), a11 = hn::Add(a11, hn::Mul(p, v1));
      a12 = hn::Add(a12, hn::Mul(p, v2)), a13 = hn::Add(a13, hn::Mul(p, v3));
      p = hn::Set(df, p2[k]);
      a20 = hn::Add(a20, hn::Mul(p, v0)), a21 = hn::Add(a21, hn::Mul(p, v1));
      a22 = hn::Add(a22, hn::Mul(p, v2)), a23 = hn::Add(a23, hn::Mul(p, v3));
      p = hn::Set(df, p3[k]);
      a30 = hn::Add(a30, hn::Mul(p, v0)), a31 = hn::Add(a31, hn::Mul(p, v1));
      a32 = hn::Add(a32, hn::Mul(p, v2)), a33 = hn::Add(a33, hn::Mul(p, v3));
    }
    hn::StoreU(a00, df, o0 + d), hn::StoreU(a01, df, o0 + d + N);
    hn::StoreU(a02, df, o0 + d + 2 * N), hn::StoreU(a03, df, o0 + d + 3 * N);
    hn::StoreU(a10, df, o1 + d), hn::StoreU(a11, df, o1 + d + N);
    hn::StoreU(a12, df, o1 + d + 2 * N), hn::StoreU(a13, df, o1 + d + 3 * N);
    hn::StoreU(a20, df, o2 + d), hn::StoreU(a21, df, o2 + d + N);
    hn::StoreU(a22, df, o2 + d + 2 * N), hn::StoreU(a23, df, o2 + d + 3 * N);
    hn::StoreU(a30, df, o3 + d), hn::StoreU(a31, df, o3 + d + N);
    hn::StoreU(a32, df, o3 + d + 2 * N), hn::StoreU(a33, df, o3 + d + 3 * N);
  }
  return d;
}

// One query at a time for what the four-query pass left (other m, the columns past its last
// multiple of 4 vectors): 4 vectors of D per pass, then single vectors, then scalars.
void AccumulatePV(float* const* outs, const float* const* ps, int m, const float* HWY_RESTRICT V, int64_t nk,
                  size_t D) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t d0 = m == 4 ? AccumulatePV4(outs, ps, V, nk, D) : 0;
  for (int j = 0; j < m; ++j) {
    float* HWY_RESTRICT o = outs[j];
    const float* HWY_RESTRICT pj = ps[j];
    size_t d = d0;
    for (; d + 4 * N <= D; d += 4 * N) {
      auto a0 = hn::LoadU(df, o + d), a1 = hn::LoadU(df, o + d + N);
      auto a2 = hn::LoadU(df, o + d + 2 * N), a3 = hn::LoadU(df, o + d + 3 * N);
      for (int64_t k = 0; k < nk; ++k) {
        const float* HWY_RESTRICT row = V + static_cast<size_t>(k) * D + d;
        const auto p = hn::Set(df, pj[k]);
        a0 = hn::Add(a0, hn::Mul(p, hn::LoadU(df, row)));
        a1 = hn::Add(a1, hn::Mul(p, hn::LoadU(df, row + N)));
        a2 = hn::Add(a2, hn::Mul(p, hn::LoadU(df, row + 2 * N)));
        a3 = hn::Add(a3, hn::Mul(p, hn::LoadU(df, row + 3 * N)));
      }
      hn::StoreU(a0, df, o + d);
      hn::StoreU(a1, df, o + d + N);
      hn::StoreU(a2, df, o + d + 2 * N);
      hn::StoreU(a3, df, o + d + 3 * N);
    }
    for (; d + N <= D; d += N) {
      auto acc = hn::LoadU(df, o + d);
      for (int64_t k = 0; k < nk; ++k)
        acc = hn::Add(acc, hn::Mul(hn::Set(df, pj[k]), hn::LoadU(df, V + static_cast<size_t>(k) * D + d)));
      hn::StoreU(acc, df, o + d);
    }
    for (; d < D; ++d) {
      float acc = o[d];
      for (int64_t k = 0; k < nk; ++k) {
        const float prod = pj[k] * V[static_cast<size_t>(k) * D + d];
        acc = acc + prod;
      }
      o[d] = acc;
    }
  }
}

template <typename W>
HWY_INLINE void ToF32T(const W* src, size_t n, float* dst) {
  const DF df;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(LoadW(df, src, i), df, dst + i);
  for (; i < n; ++i) dst[i] = ScalarW(src, i);
}

void ToF32(const void* src, DType t, size_t n, float* dst) {
  switch (t) {
    case DType::F32: return ToF32T(static_cast<const float*>(src), n, dst);
    case DType::BF16: return ToF32T(static_cast<const hwy::bfloat16_t*>(src), n, dst);
    case DType::F16: return ToF32T(static_cast<const hwy::float16_t*>(src), n, dst);
    default: break;  // block types: dequantized by to_f32 below
  }
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace eg::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace eg::cpu {
HWY_EXPORT(Dot);
HWY_EXPORT(Dot4);
HWY_EXPORT(Dot4Rows);
HWY_EXPORT(ToF32);
HWY_EXPORT(AccumulatePV);
HWY_EXPORT(TargetName);

float dot(const float* x, const void* w, DType wtype, size_t n) {
  return HWY_DYNAMIC_DISPATCH(Dot)(x, w, wtype, n);
}
void dot4(const float* const x[4], const void* w, DType wtype, size_t n, float out[4]) {
  HWY_DYNAMIC_DISPATCH(Dot4)(x, w, wtype, n, out);
}
void dot4_rows(const float* const x[4], const float* rows, size_t D, int64_t nk, float scale, float* const out[4]) {
  HWY_DYNAMIC_DISPATCH(Dot4Rows)(x, rows, D, nk, scale, out);
}
void accumulate_pv(float* const* outs, const float* const* ps, int m, const float* V, int64_t nk, size_t D) {
  HWY_DYNAMIC_DISPATCH(AccumulatePV)(outs, ps, m, V, nk, D);
}
void to_f32(const void* src, DType t, size_t n, float* dst) {
  if (is_quantized(t)) return quant::dequantize_row(t, src, static_cast<int64_t>(n), dst);
  HWY_DYNAMIC_DISPATCH(ToF32)(src, t, n, dst);
}
const char* simd_target_name() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }
}  // namespace eg::cpu
#endif
