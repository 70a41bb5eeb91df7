#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace eg {

int32_t argmax(const float* x, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {
  if (p.top_k < 0) throw Error("top-k must be >= 0");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) throw Error("top-p must be in (0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) throw Error("min-p must be in [0, 1]");
  if (std::isnan(p.temperature)) throw Error("temperature must be a number");
}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0); }

int32_t Sampler::sample(const float* logits, int n) {
  if (p_.temperature <= 0.0f) return argmax(logits, n);
  // Candidates sorted by logit (descending, ties by id) after temperature.
  cand_.resize(n);
  for (int i = 0; i < n; ++i) cand_[i] = {logits[i] / p_.temperature, i};
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = cand_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) {
    keep = p_.top_k;
    std::partial_sort(cand_.begin(), cand_.begin() + keep, cand_.end(), by_logit);
    cand_.resize(keep);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  // Softmax over the kept candidates (double for the cumulative sums).
  const float mx = cand_[0].first;
  std::vector<double> prob(keep);
  double sum = 0.0;
  for (size_t i = 0; i < keep; ++i) sum += prob[i] = std::exp(static_cast<double>(cand_[i].first - mx));
  for (auto& q : prob) q /= sum;
  // top-p: smallest prefix whose mass reaches top_p (always at least one token).
  if (p_.top_p < 1.0f) {
    double cum = 0.0;
    size_t k = 0;
    while (k < keep) {
      cum += prob[k++];
      if (cum >= p_.top_p) break;
    }
    keep = k;
  }
  // min-p: drop tokens whose probability is below min_p times the top probability.
  if (p_.min_p > 0.0f) {
    const double thr = p_.min_p * prob[0];
    size_t k = 1;
    while (k < keep && prob[k] >= thr) ++k;
    keep = k;
  }
  double mass = 0.0;
  for (size_t i = 0; i < keep; ++i) mass += prob[i];
  double r = uniform() * mass;
  for (size_t i = 0; i < keep; ++i) {
    r -= prob[i];
    if (r < 0.0) return cand_[i].second;
  }
  return cand_[keep - 1].second;
}

}  // namespace eg
