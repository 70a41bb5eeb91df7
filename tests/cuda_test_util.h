// Helpers of the CUDA kernel tests: random non-zero normal vectors and device round trips.
// Header-only; every function is inline.
#pragma once
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/cuda_backend.h"

namespace eg::cudatest {

/// n values of N(0, scale²), deterministic in seed; an exact 0 becomes 1e-3 (non-zero inputs).
inline std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = d(rng);
    if (x == 0.0f) x = 1e-3f;
  }
  return v;
}

/// A device copy of v (at least 1 byte, so an empty vector still has a buffer).
template <class T>
cuda::DeviceBuffer to_device(const std::vector<T>& v) {
  cuda::DeviceBuffer b(std::max<size_t>(1, v.size() * sizeof(T)));
  if (!v.empty()) b.upload(v.data(), v.size() * sizeof(T));
  return b;
}

/// The first n elements of b.
template <class T>
std::vector<T> to_host(const cuda::DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  b.download(v.data(), n * sizeof(T));
  return v;
}

}  // namespace eg::cudatest
