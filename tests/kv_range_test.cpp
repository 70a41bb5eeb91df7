// The KV cache's value range (kv/kv_cache.h, "Range"): a finite value beyond F16's ±65504 switches
// that layer to BF16 (its earlier pages re-encoded, nothing becomes inf), one warning per process;
// NaN/inf are never stored as finite values and are warned about; INT8/BF16/F32 hold large values
// as they are; save/load and prefix-cache import keep each layer's encoding (never mixing them).
// The end-to-end check with a checkpoint that produces large values: kv_overflow_model_test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/warning.h"
#include "kv/kv_cache.h"
#include "kv/paged_attention.h"
#include "kv/prefix_cache.h"

namespace {

// Captures the library's warnings (core/warning.h) for the duration of a test.
std::vector<std::string>& captured() {
  static std::vector<std::string> w;
  return w;
}
class KVRange : public ::testing::Test {
 protected:
  void SetUp() override {
    captured().clear();
    eg::reset_warnings_for_testing();
    old_ = eg::set_warning_sink([](const char* t) { captured().push_back(t); });
  }
  void TearDown() override { eg::set_warning_sink(old_); }
  eg::WarningSink old_ = nullptr;
};

constexpr int kHd = 16, kP = 4;

// Layer 0 global (2 kv heads), layer 1 sliding (window 8), layer 2 reads layer 0's K/V.
eg::ModelConfig config() {
  eg::ModelConfig c;
  c.n_layers = 3;
  c.sliding_window = 8;
  for (int i = 0; i < 3; ++i) {
    eg::LayerConfig l;
    l.type = i == 1 ? eg::LayerType::Sliding : eg::LayerType::Full;
    l.n_kv_heads = 2;
    l.head_dim = kHd;
    if (i == 2) l.kv_source = 0;
    c.layers.push_back(l);
  }
  return c;
}

eg::KVCacheOptions options(eg::KVType t, int max_tokens = 64) {
  eg::KVCacheOptions o;
  o.type = t;
  o.page_tokens = kP;
  o.max_tokens = max_tokens;
  return o;
}

// K/V rows [n, 2 heads, kHd] of one layer: normal(0, 1) values, reproducible per (seed, position).
std::vector<float> rows(int pos0, int n, uint32_t seed) {
  std::vector<float> x;
  for (int p = pos0; p < pos0 + n; ++p) {
    std::mt19937 rng(seed * 1000003u + static_cast<uint32_t>(p));
    std::normal_distribution<float> nd;
    for (int i = 0; i < 2 * kHd; ++i) x.push_back(nd(rng));
  }
  return x;
}

// Appends n positions; layer 0 gets K = rows(seed 1), V = rows(seed 2) scaled by vscale at the
// position `big` (if in range), layer 1 gets rows(seed 3) / rows(seed 4).
void append(eg::KVCache& kv, int n, int big = -1, float vscale = 1.0f, float special = 0.0f) {
  const int p0 = kv.n_past();
  int p = p0;
  while (p < p0 + n) {
    const int T = std::min(p0 + n - p, kP - p % kP);
    kv.begin_append(p, T);
    std::vector<float> k0 = rows(p, T, 1), v0 = rows(p, T, 2);
    if (big >= p && big < p + T) {
      float* r = v0.data() + static_cast<size_t>(big - p) * 2 * kHd;
      for (int i = 0; i < 2 * kHd; ++i) r[i] *= vscale;
      if (special != 0.0f) r[3] = special;
    }
    kv.write(0, p, T, k0.data(), v0.data());
    kv.write(1, p, T, rows(p, T, 3).data(), rows(p, T, 4).data());
    kv.commit(p + T);
    p += T;
  }
}

// Element i of the V row (position, head) of a layer view, decoded from the documented layout.
float v_at(const eg::KVLayerView& v, int pos, int head, int i) {
  const uint8_t* page = v.pages[pos / v.page_tokens];
  const size_t row = static_cast<size_t>(pos % v.page_tokens) * v.n_kv_heads + head;
  const size_t idx = row * v.head_dim + i;
  switch (v.type) {
    case eg::KVType::F32: {
      float f;
      std::memcpy(&f, page + v.v_off + 4 * idx, 4);
      return f;
    }
    case eg::KVType::F16:
    case eg::KVType::BF16: {
      uint16_t h;
      std::memcpy(&h, page + v.v_off + 2 * idx, 2);
      return v.type == eg::KVType::F16 ? eg::f16_to_f32(h) : eg::bf16_to_f32(h);
    }
    case eg::KVType::INT8: {
      float s;
      std::memcpy(&s, page + v.vs_off + row * 4, 4);
      return static_cast<float>(reinterpret_cast<const int8_t*>(page + v.v_off)[idx]) * s;
    }
  }
  return 0;
}

// Every stored V value of layer 0 at positions [0, n) is within rel of the written value.
void expect_v_close(const eg::KVCache& kv, int n, int big, float vscale, float rel) {
  const eg::KVLayerView v = kv.view(0);
  for (int p = 0; p < n; ++p) {
    const std::vector<float> want = rows(p, 1, 2);
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < kHd; ++i) {
        const float w = want[h * kHd + i] * (p == big ? vscale : 1.0f);
        const float g = v_at(v, p, h, i);
        ASSERT_TRUE(std::isfinite(g)) << "position " << p;
        ASSERT_LE(std::fabs(g - w), rel * std::fabs(w) + 1e-7f) << "position " << p << " head " << h << " i " << i;
      }
  }
}

std::vector<float> attend(const eg::KVCache& kv, int layer, int pos) {
  std::vector<float> q(4 * kHd, 0.25f), out(q.size());
  const int32_t qp = pos;
  const eg::ops::AttentionParams ap{4, 2, kHd, 0.25f, 0.0f, 0};
  eg::kv::paged_attention(q.data(), 1, &qp, kv.view(layer), ap, out.data());
  return out;
}

TEST_F(KVRange, F16OverflowSwitchesTheLayerToBF16AndKeepsEveryValue) {
  const auto cfg = config();
  eg::KVCache kv(cfg, options(eg::KVType::F16));
  eg::KVCache ref(cfg, options(eg::KVType::F32));
  // Positions 0..9 hold ordinary values (three pages); position 10 holds a V row of ~1e6.
  append(kv, 10);
  append(ref, 10);
  EXPECT_TRUE(captured().empty());
  append(kv, 6, 10, 1e6f);
  append(ref, 6, 10, 1e6f);
  EXPECT_EQ(kv.layer_type(0), eg::KVType::BF16);
  EXPECT_EQ(kv.layer_type(2), eg::KVType::BF16) << "a KV-shared layer reads its source's encoding";
  EXPECT_EQ(kv.layer_type(1), eg::KVType::F16) << "only the layer that overflowed switches";
  EXPECT_EQ(kv.type(), eg::KVType::F16);
  EXPECT_EQ(kv.view(0).type, eg::KVType::BF16);
  // Every value, the earlier pages' re-encoded ones and the large row, within BF16's rounding
  // (2^-8 relative; the earlier values went through F16 first: + 2^-11).
  expect_v_close(kv, 16, 10, 1e6f, 1.0f / 256 + 1.0f / 2048);
  // Attention of layer 0 (and of layer 2 through it) is finite and close to the F32 cache's.
  for (int layer : {0, 2}) {
    const auto got = attend(kv, layer, 15), want = attend(ref, layer, 15);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << "layer " << layer << " output " << i;
      EXPECT_NEAR(got[i], want[i], 1e-2f * (1.0f + std::fabs(want[i]))) << "layer " << layer;
    }
  }
  // The memory did not change (BF16 pages have F16's size).
  EXPECT_EQ(kv.bytes_reserved(), eg::kv_bytes_for_context(cfg, 16, options(eg::KVType::F16)));
  // One warning naming the layer, however often it happens again (here, in another cache).
  ASSERT_EQ(captured().size(), 1u);
  EXPECT_NE(captured()[0].find("layer 0"), std::string::npos) << captured()[0];
  EXPECT_NE(captured()[0].find("bf16"), std::string::npos) << captured()[0];
  eg::KVCache other(cfg, options(eg::KVType::F16));
  append(other, 16, 3, 1e6f);
  append(kv, 8, 20, 1e7f);
  EXPECT_EQ(captured().size(), 1u);
  EXPECT_EQ(other.layer_type(0), eg::KVType::BF16);

  // truncate keeps the encoding of what it keeps; clear starts over in F16.
  EXPECT_EQ(kv.truncate(20), 20);
  EXPECT_EQ(kv.layer_type(0), eg::KVType::BF16);
  kv.clear();
  EXPECT_EQ(kv.layer_type(0), eg::KVType::F16);
  append(kv, 12);
  EXPECT_EQ(kv.layer_type(0), eg::KVType::F16);
  expect_v_close(kv, 12, -1, 1.0f, 1.0f / 2048);
}

TEST_F(KVRange, TheF16LimitIsWhereRoundingReachesInfinity) {
  const auto cfg = config();
  for (float x : {65504.0f, 65519.0f, -65519.0f}) {  // round to ±65504: no switch
    eg::KVCache kv(cfg, options(eg::KVType::F16));
    append(kv, 2, 1, 1.0f, x);
    EXPECT_EQ(kv.layer_type(0), eg::KVType::F16) << x;
    EXPECT_EQ(std::fabs(v_at(kv.view(0), 1, 0, 3)), 65504.0f) << x;
  }
  for (float x : {65520.0f, -65520.0f, 3e38f}) {  // would round to ±inf
    eg::KVCache kv(cfg, options(eg::KVType::F16));
    append(kv, 2, 1, 1.0f, x);
    EXPECT_EQ(kv.layer_type(0), eg::KVType::BF16) << x;
    const float g = v_at(kv.view(0), 1, 0, 3);
    EXPECT_TRUE(std::isfinite(g)) << x;
    EXPECT_NEAR(g, x, std::fabs(x) / 256) << x;
  }
  EXPECT_EQ(captured().size(), 1u);
}

TEST_F(KVRange, OtherTypesHoldLargeValuesAsTheyAre) {
  const auto cfg = config();
  const struct { eg::KVType t; float rel; } cases[] = {
      {eg::KVType::F32, 0.0f}, {eg::KVType::BF16, 1.0f / 256}, {eg::KVType::INT8, 1.0f / 127}};
  for (const auto& c : cases) {
    SCOPED_TRACE(eg::kv_type_name(c.t));
    for (float scale : {1e6f, 1e30f}) {
      eg::KVCache kv(cfg, options(c.t));
      append(kv, 9, 5, scale);
      EXPECT_EQ(kv.layer_type(0), c.t);
      // INT8 scales per row: a row's error is relative to its largest value.
      if (c.t == eg::KVType::INT8) {
        const eg::KVLayerView v = kv.view(0);
        const std::vector<float> want = rows(5, 1, 2);
        float amax = 0;
        for (int i = 0; i < kHd; ++i) amax = std::max(amax, std::fabs(want[i] * scale));
        for (int i = 0; i < kHd; ++i) EXPECT_NEAR(v_at(v, 5, 0, i), want[i] * scale, amax / 254 * 1.0001f);
      } else {
        expect_v_close(kv, 9, 5, scale, c.rel);
      }
    }
  }
  EXPECT_TRUE(captured().empty());
}

TEST_F(KVRange, NonFiniteValuesAreNeverStoredAsFiniteAndAreWarnedOnce) {
  const auto cfg = config();
  for (eg::KVType t : {eg::KVType::F16, eg::KVType::BF16, eg::KVType::F32, eg::KVType::INT8}) {
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      SCOPED_TRACE(std::string(eg::kv_type_name(t)) + " " + std::to_string(bad));
      eg::KVCache kv(cfg, options(t));
      append(kv, 6, 5, 1.0f, bad);
      EXPECT_EQ(kv.layer_type(0), t) << "a non-finite value is no reason to switch";
      const float g = v_at(kv.view(0), 5, 0, 3);
      EXPECT_FALSE(std::isfinite(g)) << g;
      if (t != eg::KVType::INT8 && !std::isnan(bad)) EXPECT_EQ(g, bad);
      // The other values of the cache are intact.
      EXPECT_NEAR(v_at(kv.view(0), 4, 0, 3), rows(4, 1, 2)[3], 0.01f);
      EXPECT_NEAR(v_at(kv.view(0), 5, 1, 3), rows(5, 1, 2)[kHd + 3], t == eg::KVType::INT8 ? 0.05f : 0.01f);
    }
  }
  ASSERT_EQ(captured().size(), 1u);
  EXPECT_NE(captured()[0].find("NaN"), std::string::npos) << captured()[0];
}

TEST_F(KVRange, SaveLoadKeepsEachLayersEncodingAndReadsVersion1) {
  const auto cfg = config();
  eg::KVCache kv(cfg, options(eg::KVType::F16));
  append(kv, 11, 6, 1e6f);
  ASSERT_EQ(kv.layer_type(0), eg::KVType::BF16);
  std::stringstream ss;
  kv.save(ss);
  const std::string bytes = ss.str();
  eg::KVCache back = eg::KVCache::load(ss, cfg);
  EXPECT_EQ(back.layer_type(0), eg::KVType::BF16);
  EXPECT_EQ(back.layer_type(1), eg::KVType::F16);
  EXPECT_EQ(back.layer_type(2), eg::KVType::BF16);
  expect_v_close(back, 11, 6, 1e6f, 1.0f / 256 + 1.0f / 2048);
  std::stringstream again;
  back.save(again);
  EXPECT_EQ(again.str(), bytes);

  // The documented header: magic 8, u32 version, u8 type, 4 x i32, then per layer 4 x i32 + u64
  // and (version 2) one type byte.
  uint32_t version;
  std::memcpy(&version, bytes.data() + 8, 4);
  EXPECT_EQ(version, 2u);
  const size_t head = 8 + 4 + 1 + 4 * 4, per_layer = 4 * 4 + 8;
  for (int l = 0; l < 3; ++l)
    EXPECT_EQ(static_cast<int>(bytes[head + l * (per_layer + 1) + per_layer]),
              static_cast<int>(l == 1 ? eg::KVType::F16 : eg::KVType::BF16));
  // A type the cache cannot have is refused.
  std::string bad = bytes;
  bad[head + per_layer] = static_cast<char>(eg::KVType::INT8);
  std::stringstream bs(bad);
  EXPECT_THROW(eg::KVCache::load(bs, cfg), eg::Error);

  // A version 1 stream (written before per-layer types: no type bytes) of an F16 cache loads with
  // every layer F16 and the same pages.
  eg::KVCache plain(cfg, options(eg::KVType::F16));
  append(plain, 11);
  std::stringstream ps;
  plain.save(ps);
  std::string v2 = ps.str(), v1 = v2.substr(0, head);
  v1[8] = 1;
  for (int l = 0; l < 3; ++l) v1 += v2.substr(head + l * (per_layer + 1), per_layer);
  v1 += v2.substr(head + 3 * (per_layer + 1));
  std::stringstream s1(v1);
  eg::KVCache old = eg::KVCache::load(s1, cfg);
  EXPECT_EQ(old.n_past(), 11);
  for (int l = 0; l < 3; ++l) EXPECT_EQ(old.layer_type(l), eg::KVType::F16);
  expect_v_close(old, 11, -1, 1.0f, 1.0f / 2048);
  std::stringstream resaved;
  old.save(resaved);
  EXPECT_EQ(resaved.str(), v2);
}

TEST_F(KVRange, PrefixCacheImportNeverMixesEncodings) {
  const auto cfg = config();
  const auto o = options(eg::KVType::F16, 64);
  eg::PrefixCache pc(cfg, o, size_t{1} << 20);
  std::vector<int32_t> ids(20);
  for (int i = 0; i < 20; ++i) ids[i] = 100 + i;
  // Request A stores blocks 0-1 (positions 0..7) in F16. Request B, same tokens, overflows at
  // position 9: its layer 0 is BF16, and it adds block 2 (positions 8..11) in BF16.
  eg::KVCache a(cfg, o), b(cfg, o);
  append(a, 8);
  pc.insert(ids, a);
  append(b, 12, 9, 1e6f);
  ASSERT_EQ(b.layer_type(0), eg::KVType::BF16);
  pc.insert(ids, b);
  // C loads 12 positions: pages 0-1 of layer 0 come from A (F16), page 2 from B (BF16).
  eg::KVCache c(cfg, o);
  ASSERT_EQ(pc.load_longest_prefix(std::vector<int32_t>(ids.begin(), ids.begin() + 13), c), 12);
  EXPECT_EQ(c.layer_type(0), eg::KVType::BF16);
  EXPECT_EQ(c.layer_type(1), eg::KVType::F16);
  expect_v_close(c, 12, 9, 1e6f, 1.0f / 256 + 1.0f / 2048);
  EXPECT_EQ(std::memcmp(c.page_data(0, 2), b.page_data(0, 2), c.page_bytes(0)), 0);
  // D loads only blocks 0-1 (all F16): layer 0 stays F16, bytes equal A's.
  eg::KVCache d(cfg, o);
  ASSERT_EQ(pc.load_longest_prefix(std::vector<int32_t>(ids.begin(), ids.begin() + 9), d), 8);
  EXPECT_EQ(d.layer_type(0), eg::KVType::F16);
  for (int j = 0; j < 2; ++j) EXPECT_EQ(std::memcmp(d.page_data(0, j), a.page_data(0, j), d.page_bytes(0)), 0);
  // A page of a type the cache cannot hold is refused, leaving the cache as it was.
  std::vector<uint8_t> page(d.page_bytes(0));
  EXPECT_THROW(d.import_pages(4, [&](int, int) { return eg::KVPageRef{page.data(), eg::KVType::INT8}; }), eg::Error);
  EXPECT_EQ(d.n_past(), 8);
}

}  // namespace
