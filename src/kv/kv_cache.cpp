// Paged KV cache: pages, recycling, truncation and accounting (kv_cache.h).
#include "kv/kv_cache.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "kv/kv_store.h"

namespace eg {

using kvstore::elem_bytes;

const char* kv_type_name(KVType t) {
  switch (t) {
    case KVType::F16: return "f16";
    case KVType::BF16: return "bf16";
    case KVType::F32: return "f32";
    case KVType::INT8: return "int8";
  }
  return "?";
}

KVType parse_kv_type(const std::string& s) {
  std::string l = s;
  for (char& c : l) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (l == "f16") return KVType::F16;
  if (l == "bf16") return KVType::BF16;
  if (l == "f32") return KVType::F32;
  if (l == "int8") return KVType::INT8;
  throw Error("unknown KV cache type '" + s + "' (expected f16, bf16, f32 or int8)");
}

namespace {

KVCacheOptions resolve(const KVCacheOptions& in) {
  KVCacheOptions o = in;
  if (o.page_tokens <= 0) throw Error("KV cache page size must be positive (got " + std::to_string(o.page_tokens) + ")");
  if (o.max_tokens <= 0) throw Error("KV cache capacity must be positive (got " + std::to_string(o.max_tokens) + ")");
  if (o.rollback_margin_tokens == -1) o.rollback_margin_tokens = o.page_tokens;
  if (o.rollback_margin_tokens < o.page_tokens)
    throw Error("KV cache rollback margin " + std::to_string(o.rollback_margin_tokens) +
                " is smaller than one page (" + std::to_string(o.page_tokens) + " tokens)");
  if (static_cast<uint8_t>(o.type) > static_cast<uint8_t>(KVType::INT8)) throw Error("invalid KV cache type");
  return o;
}

struct PageLayout {
  size_t k_off = 0, v_off = 0, ks_off = 0, vs_off = 0, bytes = 0;
};

PageLayout page_layout(KVType t, int P, int nkv, int hd) {
  PageLayout L;
  const size_t data = static_cast<size_t>(P) * nkv * hd * elem_bytes(t);
  L.k_off = 0;
  L.v_off = data;
  L.ks_off = (2 * data + 7) / 8 * 8;
  if (t == KVType::INT8) {
    const size_t sc = static_cast<size_t>(P) * nkv * sizeof(float);
    L.vs_off = L.ks_off + sc;
    L.bytes = L.vs_off + sc;
  } else {
    L.vs_off = L.ks_off;
    L.bytes = 2 * data;
  }
  return L;
}

int first_kept_page(int pos0, int window, int margin, int P) {
  const int keep_from = pos0 - window + 1 - margin;  // lowest position a rollback may still need
  return keep_from > 0 ? keep_from / P : 0;
}

// Pages a sliding layer holds at most while `tokens` positions are stored from empty: the largest
// live count right after allocating page k (when pages below first_kept_page(kP) were recycled).
int64_t sliding_peak_pages(int tokens, int window, int margin, int P) {
  const int64_t n_pages = (static_cast<int64_t>(tokens) + P - 1) / P;
  int64_t peak = 0;
  for (int64_t k = 0; k < n_pages; ++k) {
    const int64_t live = k - first_kept_page(static_cast<int>(k * P), window, margin, P) + 1;
    peak = std::max(peak, live);
  }
  return peak;
}

// kv_pages_held() for one layer: a sliding layer recycles in begin_append exactly as below.
KVPageRange held_range(bool owns, int window, int n, const KVCacheOptions& o) {
  KVPageRange r;
  if (!owns || n <= 0) return r;
  const int P = o.page_tokens;
  const int last = (n - 1) / P;  // the page of the last sub-pass, which began at last·P
  r.end = last + 1;
  r.first = window > 0 ? std::min(first_kept_page(last * P, window, o.rollback_margin_tokens, P), last) : 0;
  return r;
}

KVPageRange needed_range(bool owns, int window, int n, const KVCacheOptions& o) {
  KVPageRange r;
  if (!owns || n <= 0) return r;
  const int P = o.page_tokens;
  r.end = (n - 1) / P + 1;
  r.first = window > 0 ? std::max(0, n - window + 1) / P : 0;
  return r;
}

}  // namespace

KVPageRange kv_pages_needed(const ModelConfig& cfg, int layer, int n, const KVCacheOptions& opt) {
  KVCacheOptions o = opt;
  if (o.max_tokens <= 0) o.max_tokens = std::max(n, 1);
  o = resolve(o);
  if (n < 0) throw Error("kv_pages_needed: negative token count " + std::to_string(n));
  const LayerConfig& l = cfg.layers.at(layer);
  return needed_range(l.kv_source < 0, l.type == LayerType::Sliding ? cfg.sliding_window : 0, n, o);
}

KVPageRange kv_pages_held(const ModelConfig& cfg, int layer, int n, const KVCacheOptions& opt) {
  KVCacheOptions o = opt;
  if (o.max_tokens <= 0) o.max_tokens = std::max(n, 1);
  o = resolve(o);
  if (n < 0) throw Error("kv_pages_held: negative token count " + std::to_string(n));
  const LayerConfig& l = cfg.layers.at(layer);
  return held_range(l.kv_source < 0, l.type == LayerType::Sliding ? cfg.sliding_window : 0, n, o);
}

size_t kv_page_bytes(const ModelConfig& cfg, int layer, const KVCacheOptions& opt) {
  const KVCacheOptions o = resolve(opt);
  const LayerConfig& l = cfg.layers.at(layer);
  if (l.kv_source >= 0) return 0;
  return page_layout(o.type, o.page_tokens, l.n_kv_heads, l.head_dim).bytes;
}

size_t kv_bytes_for_context(const ModelConfig& cfg, int tokens, const KVCacheOptions& opt) {
  KVCacheOptions o = opt;
  if (o.max_tokens <= 0) o.max_tokens = std::max(tokens, 1);
  o = resolve(o);
  if (tokens < 0) throw Error("kv_bytes_for_context: negative token count " + std::to_string(tokens));
  size_t total = 0;
  const int P = o.page_tokens;
  for (int i = 0; i < cfg.n_layers; ++i) {
    const LayerConfig& l = cfg.layers[i];
    if (l.kv_source >= 0) continue;
    const size_t pb = page_layout(o.type, P, l.n_kv_heads, l.head_dim).bytes;
    const int64_t pages = l.type == LayerType::Sliding
                              ? sliding_peak_pages(tokens, cfg.sliding_window, o.rollback_margin_tokens, P)
                              : (static_cast<int64_t>(tokens) + P - 1) / P;
    total += static_cast<size_t>(pages) * pb;
  }
  return total;
}

KVCache::KVCache(const ModelConfig& cfg, const KVCacheOptions& opt) { init(cfg, opt); }

KVCache::KVCache(const ModelConfig& cfg, int capacity) {
  KVCacheOptions o;
  o.type = KVType::F32;
  o.max_tokens = capacity;
  init(cfg, o);
}

KVCache::KVCache(KVCache&&) noexcept = default;
KVCache& KVCache::operator=(KVCache&&) noexcept = default;
KVCache::~KVCache() = default;

void KVCache::init(const ModelConfig& cfg, const KVCacheOptions& opt) {
  opt_ = resolve(opt);
  n_past_ = 0;
  layers_.clear();
  layers_.resize(cfg.n_layers);
  for (int i = 0; i < cfg.n_layers; ++i) {
    const LayerConfig& lc = cfg.layers[i];
    Layer& l = layers_[i];
    if (lc.kv_source >= i) throw Error("layer " + std::to_string(i) + ": KV source must be an earlier layer");
    l.owner = lc.kv_source >= 0 ? lc.kv_source : i;
    l.type = opt_.type;
    l.n_kv_heads = lc.n_kv_heads;
    l.head_dim = lc.head_dim;
    l.window = lc.type == LayerType::Sliding ? cfg.sliding_window : 0;
    if (lc.kv_source >= 0) continue;
    if (lc.n_kv_heads <= 0 || lc.head_dim <= 0)
      throw Error("layer " + std::to_string(i) + ": bad KV shape for the cache");
    l.sliding = l.window > 0;
    const PageLayout pl = page_layout(opt_.type, opt_.page_tokens, lc.n_kv_heads, lc.head_dim);
    l.page_bytes = pl.bytes;
    l.k_off = pl.k_off;
    l.v_off = pl.v_off;
    l.ks_off = pl.ks_off;
    l.vs_off = pl.vs_off;
  }
}

uint8_t* KVCache::take_page(Layer& l) {
  if (!l.free_list.empty()) {
    uint8_t* p = l.free_list.back();
    l.free_list.pop_back();
    return p;
  }
  l.pool.push_back(std::make_unique<uint8_t[]>(l.page_bytes));  // zero-filled
  return l.pool.back().get();
}

void KVCache::drop_pages_from(Layer& l, int first_dropped) {
  for (size_t j = std::max(first_dropped, 0); j < l.table.size(); ++j)
    if (l.table[j]) {
      l.free_list.push_back(l.table[j]);
      l.table[j] = nullptr;
    }
  if (static_cast<int>(l.table.size()) > first_dropped) l.table.resize(std::max(first_dropped, 0));
}

void KVCache::begin_append(int pos0, int T) {
  const int P = opt_.page_tokens;
  if (pos0 != n_past_)
    throw Error("KV cache: append at position " + std::to_string(pos0) + " but the cache holds " +
                std::to_string(n_past_) + " positions");
  if (T <= 0 || pos0 + T > opt_.max_tokens)
    throw Error("context full: " + std::to_string(pos0 + T) + " tokens do not fit the KV cache of " +
                std::to_string(opt_.max_tokens));
  if (pos0 / P != (pos0 + T - 1) / P)
    throw Error("KV cache: append of positions " + std::to_string(pos0) + ".." + std::to_string(pos0 + T - 1) +
                " crosses a page boundary");
  const int page = pos0 / P;
  for (Layer& l : layers_) {
    if (l.page_bytes == 0) continue;
    if (l.sliding) {
      const int keep = std::min(first_kept_page(pos0, l.window, opt_.rollback_margin_tokens, P), page);
      for (int j = l.first_page; j < keep && j < static_cast<int>(l.table.size()); ++j)
        if (l.table[j]) {
          l.free_list.push_back(l.table[j]);
          l.table[j] = nullptr;
        }
      l.first_page = std::max(l.first_page, keep);
    }
    if (static_cast<int>(l.table.size()) <= page) l.table.resize(page + 1, nullptr);
    if (!l.table[page]) l.table[page] = take_page(l);
  }
}

void KVCache::write(int layer, int pos0, int T, const float* k, const float* v) {
  Layer& l = layers_.at(layer);
  if (l.page_bytes == 0) throw Error("KV cache: layer " + std::to_string(layer) + " is KV-shared and stores nothing");
  const int P = opt_.page_tokens;
  const int page = pos0 / P;
  if (T <= 0 || page >= static_cast<int>(l.table.size()) || !l.table[page] || (pos0 + T - 1) / P != page)
    throw Error("KV cache: positions " + std::to_string(pos0) + ".." + std::to_string(pos0 + T - 1) +
                " of layer " + std::to_string(layer) + " were not prepared by begin_append");
  if (store_rows(l, pos0, T, k, v)) handle_flagged_write(layer, pos0, T, k, v);
}

bool KVCache::store_rows(Layer& l, int pos0, int T, const float* k, const float* v) {
  uint8_t* base = l.table[pos0 / opt_.page_tokens];
  const int nkv = l.n_kv_heads, hd = l.head_dim;
  const size_t es = elem_bytes(l.type);
  bool flag = false;
  for (int t = 0; t < T; ++t) {
    const int r = (pos0 + t) % opt_.page_tokens;
    for (int h = 0; h < nkv; ++h) {
      const size_t row = static_cast<size_t>(r) * nkv + h;
      const size_t src = (static_cast<size_t>(t) * nkv + h) * hd;
      const float ks = kvstore::store_row(l.type, k + src, hd, base + l.k_off + row * hd * es, flag);
      const float vs = kvstore::store_row(l.type, v + src, hd, base + l.v_off + row * hd * es, flag);
      if (l.type == KVType::INT8) {
        std::memcpy(base + l.ks_off + row * sizeof(float), &ks, sizeof(float));
        std::memcpy(base + l.vs_off + row * sizeof(float), &vs, sizeof(float));
      }
    }
  }
  return flag;
}

void KVCache::handle_flagged_write(int layer, int pos0, int T, const float* k, const float* v) {
  Layer& l = layers_[layer];
  const size_t n = static_cast<size_t>(T) * l.n_kv_heads * l.head_dim;
  const kvstore::InputCheck c = kvstore::check_inputs(l.type, v, n, kvstore::check_inputs(l.type, k, n));
  if (c.overflow) {
    const KVType wide = kvstore::widened(l.type);
    if (wide != l.type) {
      const KVType from = l.type;
      widen_to_bf16(l);
      kvstore::warn_widened(layer, c.max_finite, from, wide);
      if (store_rows(l, pos0, T, k, v) && kvstore::check_inputs(wide, v, n, kvstore::check_inputs(wide, k, n)).overflow)
        kvstore::warn_non_finite(layer, wide, true);  // |x| > 3.39e38: beyond BF16 too
    } else {
      kvstore::warn_non_finite(layer, l.type, true);
    }
  }
  if (c.non_finite) kvstore::warn_non_finite(layer, l.type, false);
}

void KVCache::widen_to_bf16(Layer& l) {
  // K and V data are the first 2·(page_tokens·n_kv_heads·head_dim) elements of a page (no scales).
  const size_t values = l.page_bytes / 2;
  for (uint8_t* p : l.table)
    if (p) kvstore::f16_to_bf16_inplace(p, values);
  l.type = KVType::BF16;
}

KVType KVCache::layer_type(int layer) const { return layers_[layers_.at(layer).owner].type; }

void KVCache::commit(int n) {
  if (n < n_past_ || n > opt_.max_tokens) throw Error("KV cache: bad commit to " + std::to_string(n));
  n_past_ = n;
}

KVLayerView KVCache::view(int layer) const {
  const Layer& me = layers_.at(layer);
  const Layer& l = layers_[me.owner];
  KVLayerView v;
  v.type = l.type;
  v.page_tokens = opt_.page_tokens;
  v.n_kv_heads = l.n_kv_heads;
  v.head_dim = l.head_dim;
  v.pages = l.table.data();
  v.n_pages = static_cast<int64_t>(l.table.size());
  v.k_off = l.k_off;
  v.v_off = l.v_off;
  v.ks_off = l.ks_off;
  v.vs_off = l.vs_off;
  return v;
}

int KVCache::first_live_position(int layer) const {
  const Layer& l = layers_.at(layers_.at(layer).owner);
  return l.sliding ? l.first_page * opt_.page_tokens : 0;
}

const uint8_t* KVCache::page_data(int layer, int page) const {
  const Layer& l = layers_.at(layer);
  if (l.page_bytes == 0 || page < 0 || page >= static_cast<int>(l.table.size())) return nullptr;
  pull_page(layer, page);
  return l.table[page];
}

void KVCache::pull_page(int layer, int page) const {
  const Layer& l = layers_[layer];
  if (!device_ || !l.page_bytes || page >= static_cast<int>(l.table.size()) || !l.table[page]) return;
  const int P = opt_.page_tokens, pos0 = page * P, n = std::min(P, n_past_ - pos0);
  if (n <= 0) return;
  device_->read_rows(layer, pos0, n, l.table[page] + l.k_off, l.table[page] + l.v_off);
}

void KVCache::import_pages(int n, const std::function<KVPageRef(int layer, int page)>& page_src) {
  if (n < 0 || n > opt_.max_tokens)
    throw Error("KV cache import: " + std::to_string(n) + " positions do not fit the KV cache of " +
                std::to_string(opt_.max_tokens));
  // Collect (and check) every page first: src[i][j - first[i]] for j in [first[i], end).
  // Per layer the pages' encodings must be the configured type or its widening (an F16 layer
  // that overflowed in the source cache); a layer with any widened page is imported widened.
  const KVType wide = kvstore::widened(opt_.type);
  std::vector<std::vector<KVPageRef>> src(layers_.size());
  std::vector<int> first(layers_.size(), 0);
  std::vector<KVType> types(layers_.size(), opt_.type);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    const KVPageRange need = needed_range(l.page_bytes > 0, l.window, n, opt_);
    const KVPageRange held = held_range(l.page_bytes > 0, l.window, n, opt_);
    auto check_type = [&](const KVPageRef& p, int j) {
      if (device_ && p.type != opt_.type)  // the device never widens (DeviceState)
        throw Error("KV cache import: page " + std::to_string(j) + " of layer " + std::to_string(i) + " is " +
                    kv_type_name(p.type) + ", a GPU KV cache stores " + kv_type_name(opt_.type) + " only");
      if (p.type != opt_.type && p.type != wide)
        throw Error("KV cache import: page " + std::to_string(j) + " of layer " + std::to_string(i) + " is " +
                    kv_type_name(p.type) + ", the cache stores " + kv_type_name(opt_.type));
      if (p.type != opt_.type) types[i] = p.type;
    };
    for (int j = need.first; j < need.end; ++j) {
      const KVPageRef p = page_src(static_cast<int>(i), j);
      if (!p.data)
        throw Error("KV cache import: page " + std::to_string(j) + " (positions from " +
                    std::to_string(j * opt_.page_tokens) + ") of layer " + std::to_string(i) + " is missing");
      check_type(p, j);
      src[i].push_back(p);
    }
    first[i] = need.first;
    std::vector<KVPageRef> margin;  // optional pages below, nearest first
    for (int j = need.first - 1; j >= held.first; --j) {
      const KVPageRef p = page_src(static_cast<int>(i), j);
      if (!p.data) break;
      check_type(p, j);
      margin.push_back(p);
      first[i] = j;
    }
    src[i].insert(src[i].begin(), margin.rbegin(), margin.rend());
  }
  clear();
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = layers_[i];
    if (src[i].empty()) continue;
    const int end = first[i] + static_cast<int>(src[i].size());
    l.table.assign(end, nullptr);
    for (int j = first[i]; j < end; ++j) {
      const KVPageRef& p = src[i][j - first[i]];
      l.table[j] = take_page(l);
      std::memcpy(l.table[j], p.data, l.page_bytes);
      if (p.type != types[i]) kvstore::f16_to_bf16_inplace(l.table[j], l.page_bytes / 2);  // F16 -> BF16
    }
    l.type = types[i];
    l.first_page = first[i];
  }
  n_past_ = n;
  if (!device_) return;
  const int P = opt_.page_tokens;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    for (int j = l.first_page; j < static_cast<int>(l.table.size()) && l.page_bytes; ++j) {
      const int rows = std::min(P, n - j * P);
      if (l.table[j] && rows > 0)
        device_->write_rows(static_cast<int>(i), j * P, rows, l.table[j] + l.k_off, l.table[j] + l.v_off);
    }
  }
}

int KVCache::truncate(int n) {
  n = std::clamp(n, 0, n_past_);
  if (n == n_past_) return n;
  for (const Layer& l : layers_) {
    if (!l.sliding || n == 0) continue;
    const int need = std::max(0, n - l.window + 1);
    if (need < l.first_page * opt_.page_tokens) {  // a needed position was recycled
      n = 0;
      break;
    }
  }
  if (n == 0) {
    clear();
    return 0;
  }
  const int P = opt_.page_tokens;
  const int keep_pages = (n + P - 1) / P;
  for (Layer& l : layers_)
    if (l.page_bytes) drop_pages_from(l, keep_pages);
  n_past_ = n;
  return n;
}

void KVCache::clear() {
  for (Layer& l : layers_) {
    if (!l.page_bytes) continue;
    drop_pages_from(l, 0);
    l.first_page = 0;
    l.type = opt_.type;  // an empty cache starts in the configured type again
  }
  n_past_ = 0;
}

void KVCache::release_free_pages() {
  for (Layer& l : layers_) {
    if (l.free_list.empty()) continue;
    auto is_free = [&](const std::unique_ptr<uint8_t[]>& p) {
      return std::find(l.free_list.begin(), l.free_list.end(), p.get()) != l.free_list.end();
    };
    l.pool.erase(std::remove_if(l.pool.begin(), l.pool.end(), is_free), l.pool.end());
    l.free_list.clear();
  }
}

int64_t KVCache::pages_in_use() const {
  int64_t n = 0;
  for (const Layer& l : layers_)
    for (const uint8_t* p : l.table) n += p != nullptr;
  return n;
}

int64_t KVCache::pages_reserved() const {
  int64_t n = 0;
  for (const Layer& l : layers_) n += static_cast<int64_t>(l.pool.size());
  return n;
}

size_t KVCache::bytes_in_use() const {
  size_t n = 0;
  for (const Layer& l : layers_)
    for (const uint8_t* p : l.table) n += p ? l.page_bytes : 0;
  return n;
}

size_t KVCache::bytes_reserved() const {
  size_t n = 0;
  for (const Layer& l : layers_) n += l.pool.size() * l.page_bytes;
  return n;
}

size_t KVCache::bytes_per_token(int layer) const {
  const Layer& l = layers_.at(layer);
  if (l.page_bytes == 0) return 0;
  const size_t row = static_cast<size_t>(l.n_kv_heads) * l.head_dim;
  return 2 * row * elem_bytes(l.type) + (l.type == KVType::INT8 ? 2 * l.n_kv_heads * sizeof(float) : 0);
}

}  // namespace eg
