// KVCache with a device state (kv/kv_cache.h DeviceState), without a GPU: a fake device keeps
// each owning layer's K and V rows in host vectors, as the CUDA executor keeps them in device
// memory. Checks that a device cache's host pages are filled from the device on page_data() and
// save(), that import_pages() copies exactly the imported positions to the device, and that a
// device cache refuses pages of another encoding before changing anything. The expected bytes come
// from an ordinary host cache that stored the same K/V with write() (the independent path).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <sstream>

#include "core/error.h"
#include "kv/kv_cache.h"

namespace {

// 5 layers: sliding (2 kv heads × 16), sliding, full (1 × 32), sliding, and a KV-shared layer
// reading layer 2 (like Gemma 4's).
eg::ModelConfig config() {
  eg::ModelConfig c;
  c.n_layers = 5;
  c.sliding_window = 20;
  for (int i = 0; i < 5; ++i) {
    eg::LayerConfig l;
    l.type = i == 2 || i == 4 ? eg::LayerType::Full : eg::LayerType::Sliding;
    l.n_kv_heads = l.type == eg::LayerType::Full ? 1 : 2;
    l.head_dim = l.type == eg::LayerType::Full ? 32 : 16;
    if (i == 4) l.kv_source = 2;
    c.layers.push_back(l);
  }
  return c;
}

eg::KVCacheOptions options() {
  eg::KVCacheOptions o;
  o.type = eg::KVType::F16;
  o.page_tokens = 8;
  o.rollback_margin_tokens = 8;
  o.max_tokens = 100;
  return o;
}

size_t row_bytes(const eg::ModelConfig& c, int layer) {
  return static_cast<size_t>(c.layers[layer].n_kv_heads) * c.layers[layer].head_dim * 2;  // F16
}

struct FakeDevice final : eg::KVCache::DeviceState {
  FakeDevice(const eg::ModelConfig& c, int max_tokens) : max_tokens(max_tokens) {
    for (int i = 0; i < c.n_layers; ++i) {
      rb.push_back(c.layers[i].kv_source >= 0 ? 0 : row_bytes(c, i));
      k.emplace_back(rb.back() * max_tokens, uint8_t{0xEE});
      v.emplace_back(rb.back() * max_tokens, uint8_t{0xDD});
    }
  }
  void read_rows(int layer, int pos0, int n, uint8_t* kh, uint8_t* vh) const override {
    check(layer, pos0, n);
    std::memcpy(kh, k[layer].data() + pos0 * rb[layer], n * rb[layer]);
    std::memcpy(vh, v[layer].data() + pos0 * rb[layer], n * rb[layer]);
    ++reads;
  }
  void write_rows(int layer, int pos0, int n, const uint8_t* kh, const uint8_t* vh) override {
    check(layer, pos0, n);
    std::memcpy(k[layer].data() + pos0 * rb[layer], kh, n * rb[layer]);
    std::memcpy(v[layer].data() + pos0 * rb[layer], vh, n * rb[layer]);
    ++writes;
  }
  void check(int layer, int pos0, int n) const {
    ASSERT_GT(rb[layer], 0u) << "rows of a KV-shared layer";
    ASSERT_GE(pos0, 0);
    ASSERT_GT(n, 0);
    ASSERT_LE(pos0 + n, max_tokens);
  }
  int max_tokens;
  std::vector<size_t> rb;
  std::vector<std::vector<uint8_t>> k, v;
  mutable int reads = 0;
  int writes = 0;
};

// A host cache holding positions 0 .. n-1 of random K/V (stored with write(), page-aligned runs).
void fill(eg::KVCache& kv, const eg::ModelConfig& c, int n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int P = kv.options().page_tokens;
  while (kv.n_past() < n) {
    const int p = kv.n_past(), T = std::min({n - p, P - p % P, 1 + static_cast<int>(rng() % 5)});
    kv.begin_append(p, T);
    for (int l = 0; l < c.n_layers; ++l) {
      if (c.layers[l].kv_source >= 0) continue;
      std::vector<float> kk(static_cast<size_t>(T) * c.layers[l].n_kv_heads * c.layers[l].head_dim), vv(kk.size());
      for (auto& x : kk) x = nd(rng);
      for (auto& x : vv) x = nd(rng);
      kv.write(l, p, T, kk.data(), vv.data());
    }
    kv.commit(p + T);
  }
}

// Row r (position page·P + r) of a page's K or V part, as the host cache stores it.
const uint8_t* page_row(const eg::KVCache& kv, const uint8_t* page, int layer, bool v, int r, size_t rb) {
  const eg::KVLayerView view = kv.view(layer);
  return page + (v ? view.v_off : view.k_off) + r * rb;
}

TEST(KVDeviceState, PagesAreFilledFromTheDeviceForPageDataAndSave) {
  const eg::ModelConfig c = config();
  std::mt19937 rng(11);
  eg::KVCache ref(c, options());
  const int n = 45;
  fill(ref, c, n, rng);

  // The device cache: positions advanced without write(); its K/V put on the "device" directly.
  eg::KVCache dev(c, options());
  auto fake = std::make_unique<FakeDevice>(c, 100);
  FakeDevice* fd = fake.get();
  dev.set_device_state(std::move(fake));
  while (dev.n_past() < n) {
    const int p = dev.n_past(), T = std::min(n - p, 8 - p % 8);
    dev.begin_append(p, T);
    dev.commit(p + T);
  }
  const int P = 8;
  for (int l = 0; l < c.n_layers; ++l) {
    if (c.layers[l].kv_source >= 0) continue;
    for (int j = 0; j * P < n; ++j) {
      const uint8_t* src = ref.page_data(l, j);
      if (!src) continue;  // recycled
      for (int r = 0; r < P && j * P + r < n; ++r) {
        std::memcpy(fd->k[l].data() + (j * P + r) * fd->rb[l], page_row(ref, src, l, false, r, fd->rb[l]), fd->rb[l]);
        std::memcpy(fd->v[l].data() + (j * P + r) * fd->rb[l], page_row(ref, src, l, true, r, fd->rb[l]), fd->rb[l]);
      }
    }
  }

  auto same_stored_rows = [&](const eg::KVCache& got, int l, int j) {
    const uint8_t* a = ref.page_data(l, j);
    const uint8_t* b = got.page_data(l, j);
    EXPECT_EQ(a == nullptr, b == nullptr) << "layer " << l << " page " << j;
    if (!a || !b) return;
    for (int r = 0; r < P && j * P + r < n; ++r)
      for (bool v : {false, true})
        ASSERT_EQ(std::memcmp(page_row(ref, a, l, v, r, row_bytes(c, l)), page_row(got, b, l, v, r, row_bytes(c, l)),
                              row_bytes(c, l)),
                  0)
            << "layer " << l << " page " << j << " row " << r << (v ? " V" : " K");
  };
  for (int l = 0; l < c.n_layers; ++l) {
    EXPECT_EQ(dev.page_data(l, 0) == nullptr, c.layers[l].kv_source >= 0 || c.layers[l].type == eg::LayerType::Sliding);
    for (int j = 0; j < 6; ++j) {
      // Poison the host page: page_data must copy it from the device again.
      if (const uint8_t* p = dev.page_data(l, j)) std::memset(const_cast<uint8_t*>(p), 0x5A, dev.page_bytes(l));
      same_stored_rows(dev, l, j);
    }
  }
  EXPECT_GT(fd->reads, 0);

  // save(): every live page from the device (host pages poisoned first).
  for (int l = 0; l < c.n_layers; ++l)
    for (int j = 0; j < 6; ++j)
      if (const uint8_t* p = dev.page_data(l, j)) std::memset(const_cast<uint8_t*>(p), 0x5A, dev.page_bytes(l));
  std::stringstream ss;
  dev.save(ss);
  eg::KVCache back = eg::KVCache::load(ss, c);
  ASSERT_EQ(back.n_past(), n);
  for (int l = 0; l < c.n_layers; ++l)
    for (int j = 0; j < 6; ++j) same_stored_rows(back, l, j);
}

TEST(KVDeviceState, ImportCopiesExactlyTheImportedPositionsToTheDevice) {
  const eg::ModelConfig c = config();
  std::mt19937 rng(12);
  eg::KVCache ref(c, options());
  fill(ref, c, 44, rng);
  // A prefix of what ref holds (as the prefix cache imports), ending inside page 4. ref has
  // recycled its sliding layers' page 0, so their import starts at page 1 (the margin as far as
  // available).
  const int n = 37, P = 8;
  auto src = [&](int l, int j) { return eg::KVPageRef{ref.page_data(l, j), ref.layer_type(l)}; };

  eg::KVCache dev(c, options());
  auto fake = std::make_unique<FakeDevice>(c, 100);
  FakeDevice* fd = fake.get();
  dev.set_device_state(std::move(fake));
  dev.import_pages(n, src);
  EXPECT_EQ(dev.n_past(), n);
  for (int l = 0; l < c.n_layers; ++l) {
    if (c.layers[l].kv_source >= 0) {
      EXPECT_EQ(fd->rb[l], 0u);
      continue;
    }
    const int first = c.layers[l].type == eg::LayerType::Sliding ? 8 : 0;
    EXPECT_EQ(dev.first_live_position(l), first);
    const size_t rb = fd->rb[l];
    for (int pos = 0; pos < 100; ++pos) {
      const int j = pos / P;
      const bool imported = pos < n && pos >= first;
      for (bool v : {false, true}) {
        const uint8_t* got = (v ? fd->v[l] : fd->k[l]).data() + pos * rb;
        if (imported) {
          ASSERT_EQ(std::memcmp(got, page_row(ref, ref.page_data(l, j), l, v, pos % P, rb), rb), 0)
              << "layer " << l << " position " << pos;
        } else {
          for (size_t b = 0; b < rb; ++b) ASSERT_EQ(got[b], v ? 0xDD : 0xEE) << "layer " << l << " position " << pos;
        }
      }
    }
  }
}

TEST(KVDeviceState, ADeviceCacheRefusesWidenedPagesBeforeChangingAnything) {
  const eg::ModelConfig c = config();
  std::mt19937 rng(13);
  eg::KVCache ref(c, options());
  fill(ref, c, 24, rng);
  auto widened = [&](int l, int j) {
    return eg::KVPageRef{ref.page_data(l, j), l == 2 ? eg::KVType::BF16 : ref.layer_type(l)};
  };
  // A host cache takes a BF16 (widened) page into an F16 cache: the layer becomes BF16.
  eg::KVCache host(c, options());
  host.import_pages(24, widened);
  EXPECT_EQ(host.layer_type(2), eg::KVType::BF16);

  eg::KVCache dev(c, options());
  auto fake = std::make_unique<FakeDevice>(c, 100);
  FakeDevice* fd = fake.get();
  dev.set_device_state(std::move(fake));
  dev.import_pages(16, [&](int l, int j) { return eg::KVPageRef{ref.page_data(l, j), ref.layer_type(l)}; });
  const int writes = fd->writes;
  const auto k2 = fd->k[2];
  try {
    dev.import_pages(24, widened);
    ADD_FAILURE() << "no error";
  } catch (const eg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("a GPU KV cache stores f16 only"), std::string::npos) << e.what();
  }
  EXPECT_EQ(dev.n_past(), 16);
  EXPECT_EQ(dev.layer_type(2), eg::KVType::F16);
  EXPECT_EQ(fd->writes, writes);
  EXPECT_EQ(fd->k[2], k2);
}

}  // namespace
