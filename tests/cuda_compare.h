// Row comparisons of the CUDA tests against the CPU executor (one row = V logits).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace eg::cudatest {

/// The CUDA executor tests' bound on the tiny GGUFs: 1.5e-2 of a row's logit range (measured and
/// explained in cuda_executor_test.cpp).
constexpr float kLogitBound = 1.5e-2f;

/// max_i |ref_i − got_i| / (max(ref) − min(ref)): the executor tests' measure.
inline float rel_range_err(const float* ref, const float* got, int64_t n) {
  float e = 0.0f, lo = ref[0], hi = ref[0];
  for (int64_t i = 0; i < n; ++i) {
    e = std::max(e, std::fabs(ref[i] - got[i]));
    lo = std::min(lo, ref[i]);
    hi = std::max(hi, ref[i]);
  }
  return e / std::max(1e-6f, hi - lo);
}

/// Whether `id` is an acceptable greedy pick for the reference row: its argmax, or a near-tie,
/// i.e. ref[id] within tol · (max − min of ref) of the maximum. Two correct engines whose logits
/// differ by up to tol of the range cannot be held to the same id below that margin (on the tiny
/// models the CPU's own f16 vs f32 KV choice flips such ids).
inline bool greedy_ok(const float* ref, int64_t n, int32_t id, float tol) {
  if (id < 0 || id >= n) return false;
  const float hi = *std::max_element(ref, ref + n), lo = *std::min_element(ref, ref + n);
  return ref[id] >= hi - tol * std::max(1e-6f, hi - lo);
}

/// greedy_ok for got's argmax.
inline bool same_greedy_or_near_tie(const float* ref, const float* got, int64_t n, float tol) {
  return greedy_ok(ref, n, static_cast<int32_t>(std::max_element(got, got + n) - got), tol);
}

}  // namespace eg::cudatest
