// KVCache::save / KVCache::load: a self-describing little-endian stream of the live pages.
//
// Format (version 2): "EGKVCACH" | u32 version | u8 type | i32 page_tokens | i32 margin |
// i32 max_tokens | i32 n_layers | per layer: i32 owner, i32 n_kv_heads, i32 head_dim, i32 window,
// u64 page_bytes, u8 layer type (KVCache::layer_type: the configured type, or BF16 for an F16
// layer widened after an overflow) | i32 n_past | per layer that owns storage: i32 first_page,
// i32 n_pages, then n_pages × (u8 present, page bytes if present) for logical pages
// first_page .. first_page+n_pages-1 | "EGKVEND!".
// Version 1 is the same without the per-layer type byte (every layer has the configured type);
// load() reads both.
#include <algorithm>
#include <cstring>
#include <istream>
#include <ostream>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "kv/kv_store.h"

namespace eg {

namespace {

constexpr char kMagic[8] = {'E', 'G', 'K', 'V', 'C', 'A', 'C', 'H'};
constexpr char kEnd[8] = {'E', 'G', 'K', 'V', 'E', 'N', 'D', '!'};
constexpr uint32_t kVersion = 2;
constexpr uint32_t kOldestVersion = 1;

template <class T>
void put(std::ostream& os, T v) {
  os.write(reinterpret_cast<const char*>(&v), sizeof(T));
}

template <class T>
T get(std::istream& is, const char* what) {
  T v{};
  if (!is.read(reinterpret_cast<char*>(&v), sizeof(T)))
    throw Error(std::string("KV cache stream truncated while reading ") + what);
  return v;
}

void expect_eq(int64_t got, int64_t want, const std::string& what) {
  if (got != want)
    throw Error("KV cache stream does not match the model: " + what + " is " + std::to_string(got) +
                ", the model has " + std::to_string(want));
}

}  // namespace

void KVCache::save(std::ostream& os) const {
  os.write(kMagic, sizeof kMagic);
  put<uint32_t>(os, kVersion);
  put<uint8_t>(os, static_cast<uint8_t>(opt_.type));
  put<int32_t>(os, opt_.page_tokens);
  put<int32_t>(os, opt_.rollback_margin_tokens);
  put<int32_t>(os, opt_.max_tokens);
  put<int32_t>(os, static_cast<int32_t>(layers_.size()));
  for (const Layer& l : layers_) {
    put<int32_t>(os, l.owner);
    put<int32_t>(os, l.n_kv_heads);
    put<int32_t>(os, l.head_dim);
    put<int32_t>(os, l.window);
    put<uint64_t>(os, l.page_bytes);
    put<uint8_t>(os, static_cast<uint8_t>(layers_[l.owner].type));  // layer_type()
  }
  put<int32_t>(os, n_past_);
  const int used_pages = (n_past_ + opt_.page_tokens - 1) / opt_.page_tokens;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    if (!l.page_bytes) continue;
    const int first = std::min(l.first_page, used_pages);
    put<int32_t>(os, first);
    put<int32_t>(os, used_pages - first);
    for (int j = first; j < used_pages; ++j) {
      const uint8_t* p = j < static_cast<int>(l.table.size()) ? l.table[j] : nullptr;
      put<uint8_t>(os, p ? 1 : 0);
      if (p) pull_page(static_cast<int>(i), j);  // a device cache: its K/V from the device first
      if (p) os.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(l.page_bytes));
    }
  }
  os.write(kEnd, sizeof kEnd);
  if (!os) throw Error("KV cache: writing the stream failed");
}

KVCache KVCache::load(std::istream& is, const ModelConfig& cfg) {
  char magic[8];
  if (!is.read(magic, sizeof magic)) throw Error("KV cache stream truncated while reading the magic");
  if (std::memcmp(magic, kMagic, sizeof magic) != 0) throw Error("not a KV cache stream (bad magic)");
  const auto version = get<uint32_t>(is, "the version");
  if (version < kOldestVersion || version > kVersion)
    throw Error("KV cache stream version " + std::to_string(version) + " is not supported (expected " +
                std::to_string(kOldestVersion) + ".." + std::to_string(kVersion) + ")");
  KVCacheOptions o;
  const auto type = get<uint8_t>(is, "the KV type");
  if (type > static_cast<uint8_t>(KVType::INT8)) throw Error("KV cache stream: unknown KV type " + std::to_string(type));
  o.type = static_cast<KVType>(type);
  o.page_tokens = get<int32_t>(is, "the page size");
  o.rollback_margin_tokens = get<int32_t>(is, "the rollback margin");
  o.max_tokens = get<int32_t>(is, "the context limit");
  KVCache kv;
  kv.init(cfg, o);  // validates the options
  expect_eq(get<int32_t>(is, "the layer count"), cfg.n_layers, "the layer count");
  for (int i = 0; i < cfg.n_layers; ++i) {
    Layer& l = kv.layers_[i];
    const std::string li = "layer " + std::to_string(i) + " ";
    expect_eq(get<int32_t>(is, "a layer"), l.owner, li + "KV source");
    expect_eq(get<int32_t>(is, "a layer"), l.n_kv_heads, li + "KV heads");
    expect_eq(get<int32_t>(is, "a layer"), l.head_dim, li + "head_dim");
    expect_eq(get<int32_t>(is, "a layer"), l.window, li + "sliding window");
    expect_eq(static_cast<int64_t>(get<uint64_t>(is, "a layer")), static_cast<int64_t>(l.page_bytes),
              li + "page bytes");
    if (version >= 2) {
      const auto t = get<uint8_t>(is, "a layer type");
      const bool shared = l.owner != i;
      if (shared ? t != static_cast<uint8_t>(kv.layers_[l.owner].type)
                 : t != static_cast<uint8_t>(o.type) && t != static_cast<uint8_t>(kvstore::widened(o.type)))
        throw Error("KV cache stream: " + li + "has type " + std::to_string(t) + " in a " + kv_type_name(o.type) +
                    " cache" + (shared ? " (its KV source has another)" : ""));
      l.type = static_cast<KVType>(t);
    }
  }
  const int n_past = get<int32_t>(is, "n_past");
  if (n_past < 0 || n_past > o.max_tokens)
    throw Error("KV cache stream: n_past " + std::to_string(n_past) + " outside 0.." + std::to_string(o.max_tokens));
  const int P = kv.opt_.page_tokens;
  const int used_pages = (n_past + P - 1) / P;
  for (Layer& l : kv.layers_) {
    if (!l.page_bytes) continue;
    const int first = get<int32_t>(is, "a page table");
    const int count = get<int32_t>(is, "a page table");
    if (first < 0 || count < 0 || first + count != used_pages)
      throw Error("KV cache stream: page table " + std::to_string(first) + "+" + std::to_string(count) +
                  " does not cover " + std::to_string(n_past) + " positions");
    l.first_page = l.sliding ? first : 0;
    if (!l.sliding && first != 0) throw Error("KV cache stream: a full-attention layer starts at page " + std::to_string(first));
    l.table.assign(used_pages, nullptr);
    for (int j = first; j < used_pages; ++j) {
      if (!get<uint8_t>(is, "a page flag")) continue;
      uint8_t* p = kv.take_page(l);
      if (!is.read(reinterpret_cast<char*>(p), static_cast<std::streamsize>(l.page_bytes)))
        throw Error("KV cache stream truncated inside page " + std::to_string(j));
      l.table[j] = p;
    }
  }
  char end[8];
  if (!is.read(end, sizeof end) || std::memcmp(end, kEnd, sizeof end) != 0)
    throw Error("KV cache stream: missing end marker (truncated or corrupt)");
  kv.n_past_ = n_past;
  return kv;
}

}  // namespace eg
