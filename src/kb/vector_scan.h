// Exact nearest-neighbour search over float32 vectors: a SIMD cosine scan (Highway, dynamic
// dispatch like backend/cpu/kernels) and top-k selection. Fast enough for a personal collection
// (docs/knowledge-base.md states the measured rate; bench/kb_scan_bench.cpp measures it).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace eg::kb {

/// out[i] = cos(query, rows[i]) = dot / (|query| |row|) for the n rows of the row-major n x dim
/// float32 matrix `rows`; 0 where either norm is 0. Accumulates in float32 (two SIMD partial
/// sums), so it agrees with a float64 reference to about 1e-6 relative.
void cosine_scan(const float* query, const float* rows, size_t n, size_t dim, float* out);

struct Scored {
  size_t index;  // row
  float score;
};
/// The k highest of scores[0..n), best first; ties by lower index. k > n gives n.
std::vector<Scored> top_k(const float* scores, size_t n, size_t k);

/// The SIMD target in use (e.g. "AVX3", "AVX2").
const char* scan_target_name();

}  // namespace eg::kb
