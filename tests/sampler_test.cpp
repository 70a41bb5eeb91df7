// Sampler: greedy, temperature, top-k, top-p, min-p, seeding, penalties, state save/restore and
// presets, against distributions and penalised logits computed independently here.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "engine/presets.h"
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

// ---- penalties -------------------------------------------------------------------------------

// Reference: the last `last_n` ids of `hist` counted by a plain loop, then the formulas of the
// header written out in double (repetition: / p if > 0 else * p; then - presence - freq * count).
std::vector<double> penalised_ref(const std::vector<float>& logits, const std::vector<int32_t>& hist,
                                  int last_n, double rep, double pres, double freq) {
  std::vector<double> out(logits.begin(), logits.end());
  std::vector<int> count(logits.size(), 0);
  const int start = std::max(0, static_cast<int>(hist.size()) - last_n);
  for (int i = start; i < static_cast<int>(hist.size()); ++i) count[hist[i]]++;
  for (size_t id = 0; id < logits.size(); ++id) {
    if (count[id] == 0) continue;
    double l = out[id];
    l = l > 0 ? l / rep : l * rep;
    out[id] = l - pres - freq * count[id];
  }
  return out;
}

TEST(SamplerPenalties, HandComputedExample) {
  // logits {2, -1, 0.5, 3, 0}; window counts: id0 x2, id1 x1, id4 x3; p = 1.5, presence 0.25,
  // frequency 0.1. By hand: id0: 2/1.5 - 0.25 - 0.2 = 0.883333; id1: -1*1.5 - 0.25 - 0.1 = -1.85;
  // id4: 0*1.5 - 0.25 - 0.3 = -0.55; ids 2 and 3 unchanged.
  std::vector<float> l = {2.0f, -1.0f, 0.5f, 3.0f, 0.0f};
  eg::SamplingParams sp;
  sp.repeat_penalty = 1.5f;
  sp.presence_penalty = 0.25f;
  sp.frequency_penalty = 0.1f;
  eg::Sampler::apply_penalties(sp, {{0, 2}, {1, 1}, {4, 3}, {99, 5}, {-3, 1}}, l.data(), 5);
  EXPECT_NEAR(l[0], 0.8833333, 1e-6);
  EXPECT_NEAR(l[1], -1.85, 1e-6);
  EXPECT_FLOAT_EQ(l[2], 0.5f);
  EXPECT_FLOAT_EQ(l[3], 3.0f);
  EXPECT_NEAR(l[4], -0.55, 1e-6);
}

TEST(SamplerPenalties, GreedyFollowsPenalisedLogitsAndWindow) {
  // id 1 (3.0) beats id 5 (2.9) until it is in the window; penalty 1.1 makes it 2.727 < 2.9.
  eg::SamplingParams sp;
  sp.repeat_penalty = 1.1f;
  sp.repeat_last_n = 3;
  eg::Sampler s(sp);
  EXPECT_EQ(s.sample(kLogits.data(), 8), 1);
  s.accept(1);
  EXPECT_EQ(s.sample(kLogits.data(), 8), 5);
  s.accept(0);
  s.accept(0);
  EXPECT_EQ(s.sample(kLogits.data(), 8), 5);  // 1 still in the last 3
  s.accept(0);                                 // 1 leaves the window
  EXPECT_EQ(s.sample(kLogits.data(), 8), 1);
  EXPECT_EQ(s.history(), (std::vector<int32_t>{0, 0, 0}));
  // A negative presence penalty pushes a seen token up: id 7 (1.5) + 2.0 = 3.5 wins.
  sp.repeat_penalty = 1.0f;
  sp.presence_penalty = -2.0f;
  eg::Sampler t(sp);
  t.accept(7);
  EXPECT_EQ(t.sample(kLogits.data(), 8), 7);
  // repeat_last_n = 0 turns penalties off.
  sp.repeat_last_n = 0;
  eg::Sampler u(sp);
  u.accept(7);
  EXPECT_EQ(u.sample(kLogits.data(), 8), 1);
}

TEST(SamplerPenalties, DistributionMatchesSoftmaxOfPenalisedReference) {
  const int draws = 200000;
  eg::SamplingParams sp;
  sp.temperature = 0.8f;
  sp.seed = 99;
  sp.repeat_penalty = 1.3f;
  sp.presence_penalty = 0.4f;
  sp.frequency_penalty = 0.2f;
  sp.repeat_last_n = 5;
  const std::vector<int32_t> hist = {6, 1, 1, 3, 5, 5, 5};  // window: 1, 3, 5, 5, 5
  eg::Sampler s(sp);
  for (int32_t id : hist) s.accept(id);
  const auto ref = penalised_ref(kLogits, hist, 5, 1.3, 0.4, 0.2);
  std::vector<float> reff(ref.begin(), ref.end());
  const auto p = softmax_t(reff, 0.8);
  std::vector<double> f(kLogits.size(), 0.0);
  for (int i = 0; i < draws; ++i) f[s.sample(kLogits.data(), 8)] += 1.0 / draws;
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(f[i], p[i], 5 * std::sqrt(p[i] / draws) + 1e-4) << i;
}

TEST(SamplerPenalties, RandomHistoriesOnALargeVocabTouchOnlySeenTokens) {
  // 262144-entry vocab, random non-zero logits, random histories: the penalised argmax equals
  // the reference's, and apply_penalties leaves every unseen id bit-identical.
  const int n = 262144;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> logits(n);
  for (auto& v : logits) v = nd(rng) + 0.01f;
  for (int trial = 0; trial < 5; ++trial) {
    eg::SamplingParams sp;
    sp.repeat_penalty = 1.0f + 0.3f * trial;
    sp.presence_penalty = 0.5f * (trial % 3);
    sp.frequency_penalty = 0.7f * (trial % 2);
    sp.repeat_last_n = 16 + trial * 8;
    std::vector<int32_t> hist;
    // Favour the current top tokens so penalties change the argmax.
    std::vector<int32_t> order(n);
    for (int i = 0; i < n; ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + 10, order.end(),
                      [&](int a, int b) { return logits[a] > logits[b]; });
    for (int i = 0; i < 60; ++i) hist.push_back(i % 2 ? order[rng() % 10] : static_cast<int32_t>(rng() % n));
    eg::Sampler s(sp);
    for (int32_t id : hist) s.accept(id);
    const auto ref = penalised_ref(logits, hist, sp.repeat_last_n, sp.repeat_penalty,
                                   sp.presence_penalty, sp.frequency_penalty);
    int32_t best = 0;
    for (int i = 1; i < n; ++i)
      if (static_cast<float>(ref[i]) > static_cast<float>(ref[best])) best = i;
    EXPECT_EQ(s.sample(logits.data(), n), best) << trial;

    std::unordered_map<int32_t, int> counts;
    for (size_t i = hist.size() - sp.repeat_last_n; i < hist.size(); ++i) counts[hist[i]]++;
    std::vector<float> l = logits;
    eg::Sampler::apply_penalties(sp, counts, l.data(), n);
    for (int i = 0; i < n; ++i) {
      if (counts.count(i))
        EXPECT_NEAR(l[i], ref[i], 1e-5 * (1 + std::abs(ref[i]))) << i;
      else
        ASSERT_EQ(l[i], logits[i]) << i;
    }
  }
}

TEST(SamplerPenalties, RejectsInvalidPenalties) {
  eg::SamplingParams sp;
  sp.repeat_penalty = 0.0f;
  EXPECT_THROW(eg::Sampler{sp}, eg::Error);
  sp.repeat_penalty = std::nanf("");
  EXPECT_THROW(eg::Sampler{sp}, eg::Error);
  sp.repeat_penalty = 1.0f;
  sp.repeat_last_n = -1;
  EXPECT_THROW(eg::Sampler{sp}, eg::Error);
  sp.repeat_last_n = 64;
  sp.presence_penalty = INFINITY;
  EXPECT_THROW(eg::Sampler{sp}, eg::Error);
}

// ---- state save / restore --------------------------------------------------------------------

TEST(SamplerState, SaveRestoreContinuesIdentically) {
  eg::SamplingParams sp;
  sp.temperature = 1.0f;
  sp.seed = 2024;
  sp.repeat_penalty = 1.2f;
  sp.repeat_last_n = 4;
  eg::Sampler a(sp);
  for (int i = 0; i < 37; ++i) a.accept(a.sample(kLogits.data(), 8));
  const std::string st = a.save_state();
  sp.seed = 1;  // a different seed: restore must override it
  eg::Sampler b(sp);
  b.restore_state(st);
  EXPECT_EQ(b.history(), a.history());
  for (int i = 0; i < 100; ++i) {
    const int32_t x = a.sample(kLogits.data(), 8), y = b.sample(kLogits.data(), 8);
    ASSERT_EQ(x, y) << i;
    a.accept(x);
    b.accept(y);
  }
  // RNG state alone.
  eg::Sampler c(sp), d(sp);
  d.reseed(77);
  c.set_rng_state(d.rng_state());
  for (int i = 0; i < 50; ++i) ASSERT_EQ(c.sample(kLogits.data(), 8), d.sample(kLogits.data(), 8));
}

TEST(SamplerState, MalformedStateIsAnError) {
  eg::Sampler s(eg::SamplingParams{});
  EXPECT_THROW(s.restore_state(""), eg::Error);
  EXPECT_THROW(s.restore_state("egsampler 2\n1 2 3"), eg::Error);
  const std::string good = s.save_state();
  EXPECT_NO_THROW(s.restore_state(good));
  EXPECT_THROW(s.restore_state(good.substr(0, good.size() / 2)), eg::Error);
  EXPECT_THROW(s.restore_state(good + " junk"), eg::Error);
  EXPECT_THROW(s.set_rng_state("not a state"), eg::Error);
}

TEST(SamplerState, SetParamsKeepsTheRng) {
  eg::SamplingParams sp;
  sp.temperature = 1.0f;
  sp.seed = 3;
  eg::Sampler a(sp), b(sp);
  for (int i = 0; i < 10; ++i) a.sample(kLogits.data(), 8), b.sample(kLogits.data(), 8);
  eg::SamplingParams sp2 = sp;
  sp2.temperature = 0.5f;
  sp2.seed = 999;  // ignored by set_params
  a.set_params(sp2);
  EXPECT_EQ(a.params().seed, 3u);
  EXPECT_EQ(a.params().temperature, 0.5f);
  b.set_params(sp2);
  for (int i = 0; i < 50; ++i) ASSERT_EQ(a.sample(kLogits.data(), 8), b.sample(kLogits.data(), 8));
}

// ---- presets ---------------------------------------------------------------------------------

TEST(Presets, ValuesAndOverridePrecedence) {
  const std::map<std::string, std::pair<float, float>> want = {
      {"precise", {0.3f, 0.8f}}, {"balanced", {0.6f, 0.9f}}, {"creative", {0.9f, 0.95f}}, {"code", {0.2f, 0.6f}}};
  EXPECT_EQ(eg::sampling_presets().size(), want.size());
  for (const auto& [name, tp] : want) {
    const eg::SamplingParams p = eg::resolve_sampling(name, {});
    EXPECT_EQ(p.temperature, tp.first) << name;
    EXPECT_EQ(p.top_p, tp.second) << name;
    EXPECT_EQ(p.top_k, 0) << name;
    EXPECT_EQ(p.repeat_penalty, 1.0f) << name;
  }
  // No preset: the defaults (greedy).
  EXPECT_EQ(eg::resolve_sampling("", {}).temperature, 0.0f);
  EXPECT_EQ(eg::resolve_sampling("", {}).top_p, 1.0f);
  // Explicit values win over the preset; unset ones keep it.
  eg::SamplingOverrides o;
  o.temperature = 1.3f;
  o.top_k = 40;
  o.repeat_penalty = 1.1f;
  o.seed = 5;
  eg::SamplingParams p = eg::resolve_sampling("code", o);
  EXPECT_EQ(p.temperature, 1.3f);
  EXPECT_EQ(p.top_p, 0.6f);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_EQ(p.repeat_penalty, 1.1f);
  EXPECT_EQ(p.seed, 5u);
  o = {};
  o.top_p = 0.5f;
  o.temperature = 0.0f;  // an explicit 0 (greedy) still overrides
  p = eg::resolve_sampling("creative", o);
  EXPECT_EQ(p.temperature, 0.0f);
  EXPECT_EQ(p.top_p, 0.5f);
}

TEST(Presets, UnknownPresetAndInvalidOverrideAreErrors) {
  try {
    eg::resolve_sampling("wild", {});
    FAIL();
  } catch (const eg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown preset 'wild'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("balanced"), std::string::npos);
  }
  eg::SamplingOverrides o;
  o.top_p = 1.5f;
  EXPECT_THROW(eg::resolve_sampling("balanced", o), eg::Error);
}

}  // namespace
