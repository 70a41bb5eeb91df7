#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"

namespace eg {

int32_t argmax(const float* x, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

void validate(const SamplingParams& p) {
  if (p.top_k < 0) throw Error("top-k must be >= 0");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) throw Error("top-p must be in (0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) throw Error("min-p must be in [0, 1]");
  if (std::isnan(p.temperature)) throw Error("temperature must be a number");
  if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty))
    throw Error("repeat penalty must be a finite number > 0 (1 = off), got " +
                std::to_string(p.repeat_penalty));
  if (p.repeat_last_n < 0) throw Error("repeat-last-n must be >= 0");
  if (!std::isfinite(p.presence_penalty)) throw Error("presence penalty must be a finite number");
  if (!std::isfinite(p.frequency_penalty)) throw Error("frequency penalty must be a finite number");
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) { validate(p); }

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0); }

bool Sampler::penalties_active() const {
  return p_.repeat_last_n > 0 && !counts_.empty() &&
         (p_.repeat_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f);
}

void Sampler::apply_penalties(const SamplingParams& p, const std::unordered_map<int32_t, int>& counts,
                              float* logits, int n) {
  for (const auto& [id, count] : counts) {
    if (id < 0 || id >= n || count <= 0) continue;
    float& l = logits[id];
    if (p.repeat_penalty != 1.0f) l = l > 0.0f ? l / p.repeat_penalty : l * p.repeat_penalty;
    l -= static_cast<float>(count) * p.frequency_penalty + p.presence_penalty;
  }
}

void Sampler::accept(int32_t id) {
  if (p_.repeat_last_n <= 0) return;
  hist_.push_back(id);
  ++counts_[id];
  while (static_cast<int>(hist_.size()) > p_.repeat_last_n) {
    auto it = counts_.find(hist_.front());
    if (--it->second == 0) counts_.erase(it);
    hist_.pop_front();
  }
}

void Sampler::clear_history() {
  hist_.clear();
  counts_.clear();
}

void Sampler::set_params(const SamplingParams& p) {
  validate(p);
  const uint64_t seed = p_.seed;
  p_ = p;
  p_.seed = seed;
  while (static_cast<int>(hist_.size()) > p_.repeat_last_n) {
    auto it = counts_.find(hist_.front());
    if (--it->second == 0) counts_.erase(it);
    hist_.pop_front();
  }
}

void Sampler::reseed(uint64_t seed) {
  p_.seed = seed;
  rng_.seed(seed);
}

std::string Sampler::rng_state() const {
  std::ostringstream os;
  os << rng_;
  return os.str();
}

void Sampler::set_rng_state(const std::string& s) {
  std::istringstream is(s);
  std::mt19937_64 r;
  is >> r;
  if (is.fail()) throw Error("sampler state: not an RNG state");
  is >> std::ws;
  if (!is.eof()) throw Error("sampler state: trailing data after the RNG state");
  rng_ = r;
}

std::string Sampler::save_state() const {
  std::ostringstream os;
  os << "egsampler 1\n" << rng_ << "\n" << hist_.size();
  for (int32_t id : hist_) os << ' ' << id;
  os << '\n';
  return os.str();
}

void Sampler::restore_state(const std::string& s) {
  std::istringstream is(s);
  std::string magic;
  int version = 0;
  is >> magic >> version;
  if (is.fail() || magic != "egsampler" || version != 1)
    throw Error("sampler state: missing 'egsampler 1' header");
  std::mt19937_64 r;
  is >> r;
  if (is.fail()) throw Error("sampler state: bad RNG state");
  long long count = -1;
  is >> count;
  if (is.fail() || count < 0 || count > (1 << 24)) throw Error("sampler state: bad history length");
  std::deque<int32_t> h;
  for (long long i = 0; i < count; ++i) {
    long long id = 0;
    is >> id;
    if (is.fail() || id < 0 || id > INT32_MAX) throw Error("sampler state: bad history id");
    h.push_back(static_cast<int32_t>(id));
  }
  is >> std::ws;
  if (!is.eof()) throw Error("sampler state: trailing data");
  rng_ = r;
  clear_history();
  for (int32_t id : h) accept(id);  // re-trims to the current repeat_last_n
}

int32_t Sampler::sample(const float* logits, int n) {
  if (penalties_active()) {
    work_.assign(logits, logits + n);
    apply_penalties(p_, counts_, work_.data(), n);
    logits = work_.data();
  }
  if (p_.temperature <= 0.0f) return argmax(logits, n);
  // Weights w_i = exp((l_i - max) / T), in double.
  const float inv_t = 1.0f / p_.temperature;
  const float mx = logits[argmax(logits, n)] * inv_t;
  cand_.resize(n);
  for (int i = 0; i < n; ++i) cand_[i] = {logits[i] * inv_t, i};
  const bool truncate = (p_.top_k > 0 && p_.top_k < n) || p_.top_p < 1.0f || p_.min_p > 0.0f;
  if (!truncate) {
    // The full distribution: no order is needed, so draw walking the ids in order (O(V), no sort:
    // sorting 262k candidates cost ~20 ms per token).
    prob_.resize(n);
    double sum = 0.0;
    for (int i = 0; i < n; ++i) sum += prob_[i] = std::exp(static_cast<double>(cand_[i].first - mx));
    double r = uniform() * sum;
    for (int i = 0; i < n; ++i) {
      r -= prob_[i];
      if (r < 0.0) return i;
    }
    for (int i = n; i-- > 0;)  // rounding left r >= 0: the last id with non-zero weight
      if (prob_[i] > 0.0) return i;
    return n - 1;
  }
  // Truncation needs candidates in order (descending logit, ties by id), but only as far as the
  // kept set reaches: the sorted prefix grows on demand (nth_element + sort of the next range).
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t sorted = 0;
  auto ensure_sorted = [&](size_t k) {
    k = std::min(k, cand_.size());
    if (k <= sorted) return;
    if (k < cand_.size())
      std::nth_element(cand_.begin() + sorted, cand_.begin() + k, cand_.end(), by_logit);
    std::sort(cand_.begin() + sorted, cand_.begin() + k, by_logit);
    sorted = k;
  };
  size_t keep = cand_.size();
  double total = 0.0;
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) {
    keep = p_.top_k;
    ensure_sorted(keep);
    cand_.resize(keep);
    for (size_t i = 0; i < keep; ++i) total += std::exp(static_cast<double>(cand_[i].first - mx));
  } else {
    ensure_sorted(64);
    for (size_t i = 0; i < cand_.size(); ++i) total += std::exp(static_cast<double>(cand_[i].first - mx));
  }
  // Probabilities of the sorted prefix, computed as it grows.
  prob_.clear();
  auto prob_at = [&](size_t i) {
    while (prob_.size() <= i) {
      if (prob_.size() >= sorted) ensure_sorted(std::max<size_t>(2 * sorted, 64));
      prob_.push_back(std::exp(static_cast<double>(cand_[prob_.size()].first - mx)) / total);
    }
    return prob_[i];
  };
  // top-p: smallest prefix whose mass reaches top_p (always at least one token).
  if (p_.top_p < 1.0f) {
    double cum = 0.0;
    size_t k = 0;
    while (k < keep) {
      cum += prob_at(k++);
      if (cum >= p_.top_p) break;
    }
    keep = k;
  }
  // min-p: drop tokens whose probability is below min_p times the top probability.
  if (p_.min_p > 0.0f) {
    const double thr = p_.min_p * prob_at(0);
    size_t k = 1;
    while (k < keep && prob_at(k) >= thr) ++k;
    keep = k;
  }
  double mass = 0.0;
  for (size_t i = 0; i < keep; ++i) mass += prob_at(i);
  double r = uniform() * mass;
  for (size_t i = 0; i < keep; ++i) {
    r -= prob_at(i);
    if (r < 0.0) return cand_[i].second;
  }
  return cand_[keep - 1].second;
}

}  // namespace eg
