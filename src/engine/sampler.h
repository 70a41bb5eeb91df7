// Token sampling from a logits row.
//
// Order (as transformers' logits processors apply them): temperature, top-k, top-p (nucleus),
// min-p, then a draw from the renormalised distribution. temperature <= 0 means greedy (argmax;
// ties go to the lowest id, as torch.argmax). The RNG is a seeded 64-bit Mersenne Twister with a
// hand-written uniform draw, so the same seed gives the same tokens on every platform.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace eg {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  int top_k = 0;             // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  uint64_t seed = 0;
};

class Sampler {
 public:
  /// Throws eg::Error for invalid parameters (negative top_k, top_p outside (0,1], min_p outside [0,1]).
  explicit Sampler(const SamplingParams& p);
  /// Picks a token id from logits[0..n). Does not modify logits.
  int32_t sample(const float* logits, int n);
  const SamplingParams& params() const { return p_; }

 private:
  double uniform();  // [0, 1)
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
};

/// Index of the largest value (lowest index on ties).
int32_t argmax(const float* x, int n);

}  // namespace eg
