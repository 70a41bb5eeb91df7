// Highway implementation of vector_scan.h, compiled once per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kb/vector_scan.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>

#include "kb/vector_scan.h"

HWY_BEFORE_NAMESPACE();
namespace eg::kb {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// dot(q, r) and dot(r, r) in one pass over r.
HWY_INLINE void DotAndNorm(const float* HWY_RESTRICT q, const float* HWY_RESTRICT r, size_t n, float* dot,
                           float* rr) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  auto d0 = hn::Zero(df), d1 = hn::Zero(df), n0 = hn::Zero(df), n1 = hn::Zero(df);
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const auto r0 = hn::LoadU(df, r + i), r1 = hn::LoadU(df, r + i + N);
    d0 = hn::MulAdd(hn::LoadU(df, q + i), r0, d0);
    d1 = hn::MulAdd(hn::LoadU(df, q + i + N), r1, d1);
    n0 = hn::MulAdd(r0, r0, n0);
    n1 = hn::MulAdd(r1, r1, n1);
  }
  for (; i + N <= n; i += N) {
    const auto r0 = hn::LoadU(df, r + i);
    d0 = hn::MulAdd(hn::LoadU(df, q + i), r0, d0);
    n0 = hn::MulAdd(r0, r0, n0);
  }
  float d = hn::GetLane(hn::SumOfLanes(df, hn::Add(d0, d1))), s = hn::GetLane(hn::SumOfLanes(df, hn::Add(n0, n1)));
  for (; i < n; ++i) {
    d += q[i] * r[i];
    s += r[i] * r[i];
  }
  *dot = d;
  *rr = s;
}

void CosineScan(const float* query, const float* rows, size_t n, size_t dim, float* out) {
  float qd = 0, qq = 0;
  DotAndNorm(query, query, dim, &qd, &qq);
  const float qn = std::sqrt(qq);
  for (size_t j = 0; j < n; ++j) {
    float d = 0, rr = 0;
    DotAndNorm(query, rows + j * dim, dim, &d, &rr);
    const float den = qn * std::sqrt(rr);
    out[j] = den > 0 ? d / den : 0.0f;
  }
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace eg::kb
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace eg::kb {
HWY_EXPORT(CosineScan);
HWY_EXPORT(TargetName);

void cosine_scan(const float* query, const float* rows, size_t n, size_t dim, float* out) {
  HWY_DYNAMIC_DISPATCH(CosineScan)(query, rows, n, dim, out);
}

const char* scan_target_name() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

std::vector<Scored> top_k(const float* scores, size_t n, size_t k) {
  k = std::min(k, n);
  std::vector<Scored> all(n);
  for (size_t i = 0; i < n; ++i) all[i] = Scored{i, std::isnan(scores[i]) ? -2.0f : scores[i]};
  auto better = [](const Scored& a, const Scored& b) { return a.score != b.score ? a.score > b.score : a.index < b.index; };
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k), all.end(), better);
  all.resize(k);
  return all;
}
}  // namespace eg::kb
#endif
