// Helpers of the CUDA kernel tests: random non-zero normal vectors and device round trips.
// Header-only; every function is inline.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
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

/// The path of a tiny GGUF (`file`, e.g. "tiny-gemma3-q8_0.gguf") in $EG_CUDA_TEST_MODELS (flat)
/// or in <shared>/models/gguf/<model>/ (shared: the test's EG_SHARED_DIR); "" when neither has it.
inline std::string find_gguf(const std::string& shared, const std::string& model, const std::string& file) {
  namespace fs = std::filesystem;
  if (const char* d = std::getenv("EG_CUDA_TEST_MODELS"))
    if (fs::exists(fs::path(d) / file)) return (fs::path(d) / file).string();
  const fs::path p = fs::path(shared) / "models" / "gguf" / model / file;
  return !shared.empty() && fs::exists(p) ? p.string() : "";
}

}  // namespace eg::cudatest
