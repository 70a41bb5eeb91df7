// Sampler: greedy, temperature, top-k, top-p, min-p and seeding, against distributions computed
// independently here.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/error.h"
#include "engine/sampler.h"

namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.5f, -1.0f, 0.0f, 2.9f, -4.0f, 1.5f};

std::vector<double> softmax_t(const std::vector<float>& l, double temp) {
  std::vector<double> p(l.size());
  double mx = -1e300, s = 0;
  for (float v : l) mx = std::max(mx, v / temp);
  for (size_t i = 0; i < l.size(); ++i) s += p[i] = std::exp(l[i] / temp - mx);
  for (auto& v : p) v /= s;
  return p;
}

std::vector<double> frequencies(eg::SamplingParams sp, int draws) {
  eg::Sampler s(sp);
  std::vector<double> f(kLogits.size(), 0.0);
  for (int i = 0; i < draws; ++i) f[s.sample(kLogits.data(), static_cast<int>(kLogits.size()))] += 1.0 / draws;
  return f;
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  eg::Sampler s(eg::SamplingParams{});
  EXPECT_EQ(s.sample(kLogits.data(), 8), 1);
  const std::vector<float> tie = {0.0f, 5.0f, 5.0f};
  EXPECT_EQ(s.sample(tie.data(), 3), 1);
}

TEST(Sampler, TemperatureMatchesSoftmax) {
  const int draws = 200000;
  for (double temp : {0.7, 1.0, 1.5}) {
    eg::SamplingParams sp;
    sp.temperature = static_cast<float>(temp);
    sp.seed = 42;
    const auto f = frequencies(sp, draws);
    const auto p = softmax_t(kLogits, temp);
    for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(f[i], p[i], 5 * std::sqrt(p[i] / draws) + 1e-4) << i;
  }
}

TEST(Sampler, TopKTopPMinPRestrictTheSupport) {
  const int draws = 100000;
  eg::SamplingParams sp;
  sp.temperature = 1.0f;
  sp.seed = 7;
  sp.top_k = 3;  // ids 1, 5, 2
  auto f = frequencies(sp, draws);
  auto p = softmax_t({3.0f, 2.9f, 2.5f}, 1.0);
  EXPECT_NEAR(f[1], p[0], 0.01);
  EXPECT_NEAR(f[5], p[1], 0.01);
  EXPECT_NEAR(f[2], p[2], 0.01);
  EXPECT_EQ(f[0] + f[3] + f[4] + f[6] + f[7], 0.0);

  sp.top_k = 0;
  const auto full = softmax_t(kLogits, 1.0);
  sp.top_p = static_cast<float>(full[1] + full[5] * 0.5);  // nucleus = {1, 5}
  f = frequencies(sp, draws);
  EXPECT_NEAR(f[1], full[1] / (full[1] + full[5]), 0.01);
  EXPECT_NEAR(f[1] + f[5], 1.0, 1e-12);

  sp.top_p = 1.0f;
  sp.min_p = static_cast<float>(full[2] / full[1] - 1e-3);  // keeps 1, 5, 2
  f = frequencies(sp, draws);
  EXPECT_NEAR(f[1] + f[5] + f[2], 1.0, 1e-12);
  EXPECT_GT(f[2], 0.0);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
  eg::SamplingParams sp;
  sp.temperature = 1.0f;
  sp.seed = 123;
  eg::Sampler a(sp), b(sp);
  sp.seed = 124;
  eg::Sampler c(sp);
  std::vector<int> ta, tb, tc;
  for (int i = 0; i < 200; ++i) {
    ta.push_back(a.sample(kLogits.data(), 8));
    tb.push_back(b.sample(kLogits.data(), 8));
    tc.push_back(c.sample(kLogits.data(), 8));
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
}

TEST(Sampler, RejectsInvalidParameters) {
  eg::SamplingParams sp;
  sp.top_p = 0.0f;
  EXPECT_THROW(eg::Sampler{sp}, eg::Error);
  sp.top_p = 1.0f;
  sp.min_p = 1.5f;
  EXPECT_THROW(eg::Sampler{sp}, eg::Error);
  sp.min_p = 0.0f;
  sp.top_k = -1;
  EXPECT_THROW(eg::Sampler{sp}, eg::Error);
}

}  // namespace
