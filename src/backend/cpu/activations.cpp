// Element-wise activation kernels (activations.h), compiled once per Highway SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/activations.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/activations.h"

HWY_BEFORE_NAMESPACE();
namespace eg::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr float kK0 = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kK1 = 0.044715f;
constexpr float kMaxExpArg = 88.0f;         // exp(88) < FLT_MAX: the division stays finite

// gelu_tanh(z) = 0.5·z·(1 + tanh(u)) = z / (1 + exp(−2u)), u = √(2/π)·(z + 0.044715·z³).
HWY_INLINE float GeluScalar(float z) {
  const float u = kK0 * (z + kK1 * z * z * z);
  return z / (1.0f + std::exp(std::min(-2.0f * u, kMaxExpArg)));
}

void GeluTanhMul(const float* HWY_RESTRICT gate, const float* HWY_RESTRICT up, size_t n, float* out) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto k0 = hn::Set(d, kK0), k1 = hn::Set(d, kK1), m2 = hn::Set(d, -2.0f);
  const auto one = hn::Set(d, 1.0f), cap = hn::Set(d, kMaxExpArg);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto z = hn::LoadU(d, gate + i);
    const auto z3 = hn::Mul(hn::Mul(z, z), z);
    const auto u = hn::Mul(k0, hn::Add(z, hn::Mul(k1, z3)));
    const auto e = hn::Exp(d, hn::Min(hn::Mul(m2, u), cap));
    const auto g = hn::Div(z, hn::Add(one, e));
    hn::StoreU(hn::Mul(g, hn::LoadU(d, up + i)), d, out + i);
  }
  for (; i < n; ++i) out[i] = GeluScalar(gate[i]) * up[i];
}

// x = cap·tanh(x/cap), tanh(y) = expm1(2y) / (expm1(2y) + 2) (no cancellation near 0), with
// |2y| capped at 20 where tanh is ±1 to within f32 rounding.
HWY_INLINE float SoftcapScalar(float x, float cap, float inv_cap) {
  const float t = std::clamp(2.0f * (x * inv_cap), -20.0f, 20.0f);
  const float e = std::expm1(t);
  return cap * (e / (e + 2.0f));
}

void Softcap(float* HWY_RESTRICT x, size_t n, float cap) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const float inv_cap = 1.0f / cap;
  const auto vcap = hn::Set(d, cap), vinv = hn::Set(d, inv_cap), two = hn::Set(d, 2.0f);
  const auto lo = hn::Set(d, -20.0f), hi = hn::Set(d, 20.0f);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto t = hn::Min(hn::Max(hn::Mul(two, hn::Mul(hn::LoadU(d, x + i), vinv)), lo), hi);
    const auto e = hn::Expm1(d, t);
    hn::StoreU(hn::Mul(vcap, hn::Div(e, hn::Add(e, two))), d, x + i);
  }
  for (; i < n; ++i) x[i] = SoftcapScalar(x[i], cap, inv_cap);
}

}  // namespace HWY_NAMESPACE
}  // namespace eg::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace eg::cpu {
HWY_EXPORT(GeluTanhMul);
HWY_EXPORT(Softcap);

void softcap(float* x, size_t n, float cap) { HWY_DYNAMIC_DISPATCH(Softcap)(x, n, cap); }

void gelu_tanh_mul(const float* gate, const float* up, size_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(GeluTanhMul)(gate, up, n, out);
}
}  // namespace eg::cpu
#endif
