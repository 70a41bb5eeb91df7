// Paged attention (kv/paged_attention.h) against the contiguous ops::attention (F32 pages: bit
// identical, any page size) and against a float64 reference on the values each storage type
// keeps (F16 / BF16 rounding, INT8 per-token/head scale recomputed here independently).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kv/kv_cache.h"
#include "kv/paged_attention.h"
#include "ops/ops.h"

namespace {

// One-layer model config whose layer stores KV of the given shape.
eg::ModelConfig one_layer(int n_kv_heads, int head_dim, int window) {
  eg::ModelConfig c;
  c.n_layers = 1;
  c.sliding_window = window;
  eg::LayerConfig l;
  l.type = window > 0 ? eg::LayerType::Sliding : eg::LayerType::Full;
  l.n_kv_heads = n_kv_heads;
  l.head_dim = head_dim;
  c.layers.push_back(l);
  return c;
}

std::vector<float> random_vec(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) {
    x = d(rng);
    if (x == 0.0f) x = 0.25f;
  }
  return v;
}

// Stores n positions of k/v [n, KVH, D] into the cache page-aligned, with random batch sizes.
void fill(eg::KVCache& kv, const std::vector<float>& k, const std::vector<float>& v, int n, int row,
          std::mt19937& rng) {
  const int P = kv.options().page_tokens;
  int p = kv.n_past();
  while (p < n) {
    int T = std::min(n - p, 1 + static_cast<int>(rng() % 7));
    T = std::min(T, P - p % P);
    kv.begin_append(p, T);
    kv.write(0, p, T, k.data() + static_cast<size_t>(p) * row, v.data() + static_cast<size_t>(p) * row);
    kv.commit(p + T);
    p += T;
  }
}

// What the cache keeps of one row of D values (independent restatement of the storage rules).
std::vector<double> stored(eg::KVType t, const float* x, int D) {
  std::vector<double> r(D);
  if (t == eg::KVType::INT8) {
    double amax = 0;
    for (int d = 0; d < D; ++d) amax = std::max(amax, std::abs(static_cast<double>(x[d])));
    const float s = static_cast<float>(amax) / 127.0f;
    for (int d = 0; d < D; ++d) r[d] = s == 0 ? 0.0 : std::max(-127.0, std::min(127.0, std::round(x[d] / static_cast<double>(s)))) * s;
    return r;
  }
  for (int d = 0; d < D; ++d) {
    if (t == eg::KVType::F16) r[d] = eg::f16_to_f32(eg::f32_to_f16(x[d]));
    else if (t == eg::KVType::BF16) r[d] = eg::bf16_to_f32(eg::f32_to_bf16(x[d]));
    else r[d] = x[d];
  }
  return r;
}

// float64 attention on the stored values.
std::vector<double> reference(eg::KVType type, const std::vector<float>& q, int T, const std::vector<int32_t>& pos,
                              const std::vector<float>& k, const std::vector<float>& v, const eg::ops::AttentionParams& p) {
  const int H = static_cast<int>(p.n_heads), KVH = static_cast<int>(p.n_kv_heads), D = static_cast<int>(p.head_dim);
  std::vector<double> out(static_cast<size_t>(T) * H * D, 0.0);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      const int kvh = h / (H / KVH);
      const int qp = pos[t];
      const int first = p.window > 0 ? std::max<int>(0, qp - static_cast<int>(p.window) + 1) : 0;
      std::vector<double> sc;
      for (int j = first; j <= qp; ++j) {
        const auto kr = stored(type, k.data() + (static_cast<size_t>(j) * KVH + kvh) * D, D);
        double s = 0;
        for (int d = 0; d < D; ++d) s += static_cast<double>(q[(static_cast<size_t>(t) * H + h) * D + d]) * kr[d];
        s *= p.scale;
        if (p.softcap > 0) s = p.softcap * std::tanh(s / p.softcap);
        sc.push_back(s);
      }
      const double mx = *std::max_element(sc.begin(), sc.end());
      double sum = 0;
      for (double& s : sc) sum += (s = std::exp(s - mx));
      for (int j = first; j <= qp; ++j) {
        const auto vr = stored(type, v.data() + (static_cast<size_t>(j) * KVH + kvh) * D, D);
        for (int d = 0; d < D; ++d) out[(static_cast<size_t>(t) * H + h) * D + d] += sc[j - first] / sum * vr[d];
      }
    }
  return out;
}

struct Case {
  int page, window, H, KVH, D;
  float softcap;
};

const Case kCases[] = {
    {1, 0, 4, 2, 8, 0.0f},    {3, 0, 4, 1, 16, 0.0f},   {16, 0, 2, 2, 8, 50.0f}, {128, 0, 8, 2, 32, 0.0f},
    {1, 5, 4, 2, 8, 0.0f},    {3, 7, 3, 1, 16, 20.0f},  {16, 17, 4, 4, 8, 0.0f}, {128, 33, 6, 2, 16, 0.0f},
    {5, 16, 4, 2, 64, 30.0f}, {16, 16, 2, 1, 256, 0.0f},
};

// Paged F32 vs the contiguous ops::attention on the same keys/values: bit-identical.
TEST(PagedAttention, F32EqualsContiguousAttentionForAnyPageSize) {
  std::mt19937 rng(7);
  for (const Case& c : kCases) {
    for (bool sliding_cache : {false, true}) {
      if (sliding_cache && c.window == 0) continue;
      const int n = 150, T = std::min(9, c.page + 1);
      const int row = c.KVH * c.D;
      auto k = random_vec(static_cast<size_t>(n) * row, rng), v = random_vec(static_cast<size_t>(n) * row, rng);
      auto q = random_vec(static_cast<size_t>(T) * c.H * c.D, rng);
      eg::KVCacheOptions o;
      o.type = eg::KVType::F32;
      o.page_tokens = c.page;
      o.rollback_margin_tokens = std::max(c.page, 16);
      o.max_tokens = n;
      // A sliding cache recycles old pages; the last T queries must still find their window.
      eg::KVCache kv(one_layer(c.KVH, c.D, sliding_cache ? c.window : 0), o);
      fill(kv, k, v, n, row, rng);
      std::vector<int32_t> pos(T);
      for (int t = 0; t < T; ++t) pos[t] = n - T + t;
      eg::ops::AttentionParams p;
      p.n_heads = c.H;
      p.n_kv_heads = c.KVH;
      p.head_dim = c.D;
      p.scale = 1.0f / std::sqrt(static_cast<float>(c.D));
      p.softcap = c.softcap;
      p.window = c.window;
      std::vector<float> want(static_cast<size_t>(T) * c.H * c.D), got(want.size());
      eg::ops::attention(q.data(), T, pos.data(), k.data(), v.data(), p, want.data());
      eg::kv::paged_attention(q.data(), T, pos.data(), kv.view(0), p, got.data());
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(got[i], want[i]) << "page " << c.page << " window " << c.window << " sliding cache " << sliding_cache
                                   << " i " << i;
      if (sliding_cache && c.page < 64) EXPECT_GT(kv.first_live_position(0), 0) << "pages were recycled";
    }
  }
}

// Every storage type against a float64 reference on the values that type keeps.
TEST(PagedAttention, EveryKVTypeMatchesFloat64Reference) {
  std::mt19937 rng(11);
  for (eg::KVType t : {eg::KVType::F32, eg::KVType::F16, eg::KVType::BF16, eg::KVType::INT8}) {
    for (const Case& c : kCases) {
      const int n = 70, T = 5, row = c.KVH * c.D;
      auto k = random_vec(static_cast<size_t>(n) * row, rng), v = random_vec(static_cast<size_t>(n) * row, rng);
      auto q = random_vec(static_cast<size_t>(T) * c.H * c.D, rng, 0.5f);
      eg::KVCacheOptions o;
      o.type = t;
      o.page_tokens = c.page;
      o.max_tokens = n;
      eg::KVCache kv(one_layer(c.KVH, c.D, 0), o);
      fill(kv, k, v, n, row, rng);
      std::vector<int32_t> pos = {3, 20, 41, 68, 69};
      eg::ops::AttentionParams p;
      p.n_heads = c.H;
      p.n_kv_heads = c.KVH;
      p.head_dim = c.D;
      p.scale = 1.0f / std::sqrt(static_cast<float>(c.D));
      p.softcap = c.softcap;
      p.window = c.window;
      std::vector<float> got(static_cast<size_t>(T) * c.H * c.D);
      eg::kv::paged_attention(q.data(), T, pos.data(), kv.view(0), p, got.data());
      const auto want = reference(t, q, T, pos, k, v, p);
      double max_err = 0;
      for (size_t i = 0; i < got.size(); ++i) max_err = std::max(max_err, std::abs(got[i] - want[i]));
      EXPECT_LT(max_err, 2e-5) << eg::kv_type_name(t) << " page " << c.page << " D " << c.D;
    }
  }
}

// Same output whatever the page size, the query batching and the number of threads.
TEST(PagedAttention, DeterministicAcrossPageSizeBatchingAndThreads) {
  std::mt19937 rng(3);
  const int n = 200, H = 4, KVH = 2, D = 32, row = KVH * D, T = 12;
  auto k = random_vec(static_cast<size_t>(n) * row, rng), v = random_vec(static_cast<size_t>(n) * row, rng);
  auto q = random_vec(static_cast<size_t>(T) * H * D, rng);
  std::vector<int32_t> pos(T);
  for (int t = 0; t < T; ++t) pos[t] = n - T + t;
  eg::ops::AttentionParams p;
  p.n_heads = H;
  p.n_kv_heads = KVH;
  p.head_dim = D;
  p.scale = 0.2f;
  p.window = 50;
  for (eg::KVType t : {eg::KVType::F16, eg::KVType::BF16, eg::KVType::INT8, eg::KVType::F32}) {
    std::vector<float> first;
    for (int page : {1, 3, 16, 128}) {
      eg::KVCacheOptions o;
      o.type = t;
      o.page_tokens = page;
      o.rollback_margin_tokens = std::max(page, T);  // the last T queries were stored as one batch
      o.max_tokens = n;
      eg::KVCache kv(one_layer(KVH, D, 50), o);
      fill(kv, k, v, n, row, rng);
      for (int threads : {1, 2, 3, 8}) {
        eg::cpu::set_num_threads(threads);
        std::vector<float> all(static_cast<size_t>(T) * H * D), one(all.size());
        eg::kv::paged_attention(q.data(), T, pos.data(), kv.view(0), p, all.data());
        for (int i = 0; i < T; ++i)
          eg::kv::paged_attention(q.data() + static_cast<size_t>(i) * H * D, 1, pos.data() + i, kv.view(0), p,
                                  one.data() + static_cast<size_t>(i) * H * D);
        ASSERT_EQ(all, one) << eg::kv_type_name(t) << " page " << page;
        if (first.empty()) first = all;
        ASSERT_EQ(all, first) << eg::kv_type_name(t) << " page " << page << " threads " << threads;
      }
    }
  }
  eg::cpu::set_num_threads(0);
}

// INT8 storage: the per-row quantization error stays within half a step of amax/127.
TEST(PagedAttention, Int8RowsRoundTripWithinHalfAStep) {
  std::mt19937 rng(5);
  const int D = 64, n = 10;
  auto k = random_vec(static_cast<size_t>(n) * D, rng, 3.0f), v = random_vec(static_cast<size_t>(n) * D, rng);
  for (int d = 0; d < D; ++d) k[d] = 0.0f;  // an all-zero row: scale 0
  eg::KVCacheOptions o;
  o.type = eg::KVType::INT8;
  o.page_tokens = 4;
  o.max_tokens = n;
  eg::KVCache kv(one_layer(1, D, 0), o);
  fill(kv, k, v, n, D, rng);
  // Attention of a one-hot query at position 0 returns v row 0 as stored: compare with the input.
  const auto view = kv.view(0);
  for (int p = 0; p < n; ++p) {
    const uint8_t* page = view.pages[p / 4];
    float ks;
    std::memcpy(&ks, page + view.ks_off + (p % 4) * sizeof(float), sizeof ks);
    double amax = 0;
    for (int d = 0; d < D; ++d) amax = std::max(amax, std::abs(static_cast<double>(k[p * D + d])));
    EXPECT_FLOAT_EQ(ks, static_cast<float>(amax) / 127.0f) << p;
    const auto* q8 = reinterpret_cast<const int8_t*>(page + view.k_off + (p % 4) * D);
    for (int d = 0; d < D; ++d) EXPECT_LE(std::abs(q8[d] * ks - k[p * D + d]), 0.5 * ks + 1e-6) << p << " " << d;
  }
}

TEST(PagedAttention, MissingPagesAndShapeMismatchAreErrors) {
  std::mt19937 rng(9);
  const int n = 100, D = 8;
  auto k = random_vec(static_cast<size_t>(n) * D, rng), v = random_vec(static_cast<size_t>(n) * D, rng);
  eg::KVCacheOptions o;
  o.type = eg::KVType::F32;
  o.page_tokens = 4;
  o.max_tokens = n;
  eg::KVCache kv(one_layer(1, D, 10), o);
  fill(kv, k, v, n, D, rng);
  std::vector<float> q(D, 0.1f), out(D);
  eg::ops::AttentionParams p;
  p.n_heads = 1;
  p.n_kv_heads = 1;
  p.head_dim = D;
  int32_t pos = 40;  // its window starts at 31, recycled long ago
  p.window = 10;
  EXPECT_THROW(eg::kv::paged_attention(q.data(), 1, &pos, kv.view(0), p, out.data()), eg::Error);
  pos = 99;
  p.window = 0;  // full attention would need position 0
  EXPECT_THROW(eg::kv::paged_attention(q.data(), 1, &pos, kv.view(0), p, out.data()), eg::Error);
  p.window = 10;
  EXPECT_NO_THROW(eg::kv::paged_attention(q.data(), 1, &pos, kv.view(0), p, out.data()));
  p.head_dim = 16;
  EXPECT_THROW(eg::kv::paged_attention(q.data(), 1, &pos, kv.view(0), p, out.data()), eg::Error);
}

}  // namespace
