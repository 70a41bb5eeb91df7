// Paged KV cache: the keys (after RoPE) and values of every processed position, per layer.
//
// Storage is split into fixed-size pages of `page_tokens` positions. A page belongs to one layer
// and holds K [page_tokens, n_kv_heads, head_dim] and V [same] in the storage type (F16 by
// default, BF16, F32, or INT8 with one f32 scale per token and kv head for K and for V). Each layer
// has its own page pool: pages it no longer needs go to its free list and are reused before a new
// page is allocated (the pool never shrinks until release_free_pages() or destruction).
//
//   * Full-attention (global) layers grow page by page: ceil(n_past / page_tokens) pages.
//   * Sliding-window layers (window W) keep only the positions a future query can still need,
//     plus a rollback margin M: before the page that starts at position a is allocated, every page
//     whose positions all lie below a - W + 1 - M is recycled. Their memory is bounded by
//     ceil((W + M - 1) / page_tokens) + 1 pages, whatever the context length.
//   * Gemma 4 KV-shared layers (LayerConfig::kv_source >= 0) allocate nothing; they read the pages
//     of their source layer.
//
// Model::forward splits its work at page boundaries (one sub-pass per page-aligned run of
// positions) and calls begin_append() before each sub-pass, so the pages a layer holds depend only
// on the positions written, never on how the caller batched the tokens: kv_bytes_for_context()
// gives exactly what the cache allocates, and a KV-shared layer always finds every position its
// queries need in its source layer.
//
// Conversions into the cache: F16 / BF16 round to nearest even (core/dtype.h); INT8 is symmetric
// per token and kv head: scale = amax / 127, q = round(x / scale) clamped to [-127, 127] (scale 0
// and q = 0 for an all-zero row). Reading converts back to f32 (x ≈ q · scale).
//
// Range (docs/sessions.md, "KV cache types"): F16 holds at most ±65504. When a finite value beyond
// that (|x| >= 65520, which rounds to inf) is written to an F16 layer, that layer switches to
// BF16 (f32's exponent range, same page size): its pages in use are re-encoded in place (each F16
// value rounded to BF16), the write is stored as BF16, and so is every later write to the layer,
// until clear() (an empty cache starts in the configured type again). layer_type() / view() tell
// a layer's current type; KV-shared layers follow their source. Warned once per process
// (core/warning.h). The check is three integer operations per stored value, fused into the
// conversion loop; the rest runs only when it fires.
// Non-finite inputs (NaN, inf: the model's activations are broken) are never hidden as finite
// values: F16/BF16/F32 store them as such, INT8 stores the row with a NaN scale (it reads back as
// NaN), and a warning is printed once. INT8 cannot overflow (the scale follows amax); BF16/F32
// hold every finite f32 (BF16 rounds only |x| > 3.39e38 to inf, warned as non-finite).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"

namespace eg {

/// Element type of the stored K/V.
enum class KVType : uint8_t { F16 = 0, BF16 = 1, F32 = 2, INT8 = 3 };

/// "f16", "bf16", "f32", "int8".
const char* kv_type_name(KVType t);
/// Parses "f16" | "bf16" | "f32" | "int8" (case-insensitive). Throws eg::Error naming the value.
KVType parse_kv_type(const std::string& s);

struct KVCacheOptions {
  KVType type = KVType::F16;
  /// Positions per page (> 0).
  int page_tokens = 128;
  /// Extra positions a sliding-window layer keeps before its window so that truncate() of up to
  /// this many positions stays exact without re-prefill. -1 = one page (the default); otherwise
  /// must be >= page_tokens.
  int rollback_margin_tokens = -1;
  /// The context limit in tokens (> 0): forward() refuses to store more positions than this.
  int max_tokens = 0;
};

/// Bytes one page of `layer` occupies (0 for a KV-shared layer), for `opt`.
size_t kv_page_bytes(const ModelConfig& cfg, int layer, const KVCacheOptions& opt);

/// Exactly the bytes the cache reserves (bytes_reserved()) after storing `tokens` positions into a
/// fresh cache of `cfg` with `opt`, however the positions were batched (0 <= tokens). Used by the
/// memory budget. Does not check tokens against opt.max_tokens. Throws eg::Error on bad options.
size_t kv_bytes_for_context(const ModelConfig& cfg, int tokens, const KVCacheOptions& opt);

/// Logical pages [first, end) of one layer (page j holds positions j·page_tokens ... ).
struct KVPageRange {
  int first = 0;
  int end = 0;
};

/// The pages `layer` holds right after positions 0 .. n-1 were stored into an empty cache with
/// `opt` by one Model::forward call (whose sub-passes start at page boundaries): end =
/// ceil(n / page_tokens); first = 0 for a global layer, and for a sliding layer the first page not
/// recycled by the last begin_append (at the start of the page holding n-1). {0, 0} for a KV-shared
/// layer or n = 0. These are the pages KVCache::import_pages(n, ...) needs; they include every
/// position a query at n can see, plus the rollback margin. Throws eg::Error on bad options / n < 0.
KVPageRange kv_pages_held(const ModelConfig& cfg, int layer, int n, const KVCacheOptions& opt);

/// The pages `layer` must hold so that the next token, at position n, can be computed: every page
/// with a position its query can see, [max(0, n - W + 1), n) for a sliding layer of window W and
/// [0, n) for a global layer; {0, 0} for a KV-shared layer or n = 0. A subset of
/// kv_pages_held(): the pages between the two are the sliding layers' rollback margin.
KVPageRange kv_pages_needed(const ModelConfig& cfg, int layer, int n, const KVCacheOptions& opt);

/// One page handed to KVCache::import_pages: its bytes and the type they are encoded in (the
/// layer_type() of the cache they came from). data = nullptr: not available.
struct KVPageRef {
  const uint8_t* data = nullptr;
  KVType type = KVType::F16;
};

/// Read-only view of one layer's pages for attention (kv/paged_attention.h).
struct KVLayerView {
  KVType type = KVType::F32;  // the layer's current type (layer_type())
  int page_tokens = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  /// pages[j] = base of the page holding positions j·page_tokens ... (j+1)·page_tokens - 1, or
  /// nullptr if the page was recycled / never written. n_pages entries.
  const uint8_t* const* pages = nullptr;
  int64_t n_pages = 0;
  // Byte offsets inside a page: K data, V data, K scales (f32 [page_tokens, n_kv_heads], INT8 only),
  // V scales (INT8 only).
  size_t k_off = 0, v_off = 0, ks_off = 0, vs_off = 0;
};

class KVCache {
 public:
  /// An empty cache for `cfg` (no page allocated yet). Throws eg::Error on bad options
  /// (max_tokens <= 0, page_tokens <= 0, margin < page_tokens).
  KVCache(const ModelConfig& cfg, const KVCacheOptions& opt);
  /// Compatibility form: exact F32 storage, default pages, max_tokens = capacity. Used by the tests
  /// that compare logits with transformers' float32 path.
  KVCache(const ModelConfig& cfg, int capacity);

  KVCache(KVCache&&) noexcept;
  KVCache& operator=(KVCache&&) noexcept;
  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;
  ~KVCache();

  const KVCacheOptions& options() const { return opt_; }  // margin resolved (never -1)
  /// The configured type (options().type). A layer may have been widened: see layer_type().
  KVType type() const { return opt_.type; }
  /// The type `layer`'s pages are encoded in now (its source layer's for a KV-shared layer):
  /// type(), or BF16 for an F16 layer that overflowed (see the top of this file).
  KVType layer_type(int layer) const;
  int n_layers() const { return static_cast<int>(layers_.size()); }
  /// The context limit (tokens). capacity() is the same number.
  int max_tokens() const { return opt_.max_tokens; }
  int capacity() const { return opt_.max_tokens; }
  /// Number of positions already stored (the next token's position).
  int n_past() const { return n_past_; }

  /// Rolls the cache back so that it holds positions 0 .. n-1 only (n is clamped to
  /// [0, n_past()]). Returns how many positions are actually kept: n, or 0 when some
  /// sliding-window layer has already recycled a position that a query at position n would need
  /// (positions max(0, n-W+1) .. n-1). This never happens when n >= n_past() - rollback margin.
  /// The caller re-runs the forward pass from the returned position. Pages past the kept
  /// positions return to the free lists; never leaves stale K/V visible.
  int truncate(int n);
  /// Empties the cache (n_past() = 0); every page returns to its layer's free list.
  void clear();
  /// Frees the pages in the free lists (bytes_reserved() drops to bytes_in_use()).
  void release_free_pages();

  /// Bytes of the pages currently holding positions (all layers).
  size_t bytes_in_use() const;
  /// Bytes of every page allocated, including free (recycled) ones.
  size_t bytes_reserved() const;
  /// Page counts matching the two numbers above.
  int64_t pages_in_use() const;
  int64_t pages_reserved() const;
  /// Bytes per page of `layer` (0 for a KV-shared layer) and bytes per stored position of K+V.
  size_t page_bytes(int layer) const { return layers_[layer].page_bytes; }
  size_t bytes_per_token(int layer) const;

  // --- used by the forward pass -------------------------------------------------------------
  /// Prepares positions [pos0, pos0 + T): they must not cross a page boundary and pos0 must equal
  /// n_past(); pos0 + T <= max_tokens(). Recycles sliding-window pages no longer needed and makes
  /// sure the page holding these positions exists in every layer that owns storage.
  /// Throws eg::Error otherwise.
  void begin_append(int pos0, int T);
  /// Converts and stores k, v [T, n_kv_heads, head_dim] (f32) of `layer` at positions
  /// pos0 .. pos0+T-1 (prepared by begin_append). `layer` must own its storage. A finite value
  /// beyond F16's range switches an F16 layer to BF16 first; NaN/inf are warned about (top of file).
  void write(int layer, int pos0, int T, const float* k, const float* v);
  /// Marks positions up to n (exclusive) as stored: n_past() = n (after a sub-pass).
  void commit(int n);
  /// The pages attention of `layer` reads (its source layer's for a KV-shared layer).
  KVLayerView view(int layer) const;
  /// First position still stored by the (owner of the) layer; 0 for global layers.
  int first_live_position(int layer) const;

  // --- page export / import (prefix cache: kv/prefix_cache.h) --------------------------------
  /// The bytes of logical page `page` of `layer` (page_bytes(layer) bytes, laid out as in
  /// KVLayerView: K, V, INT8 scales; encoded in layer_type(layer)), or nullptr when the layer owns no storage (KV-shared) or does
  /// not hold that page (recycled, never allocated, or out of range). Positions >= n_past() inside
  /// the page are unspecified. The pointer is valid until the cache is next modified.
  const uint8_t* page_data(int layer, int page) const;
  /// Rebuilds the cache as holding positions 0 .. n-1 (0 <= n <= max_tokens()) from imported
  /// pages, each page_bytes(layer) bytes of a cache with the same options and model, returned by
  /// page_src(layer, j) with the type its bytes are encoded in (data nullptr: not available). A
  /// layer whose pages are all of type() keeps type(); if some are BF16 in an F16 cache (widened
  /// in the cache they came from), the layer becomes BF16 and its F16 pages are re-encoded, so one
  /// layer never mixes encodings. Any other type is an error. For every layer that owns storage, the pages of
  /// kv_pages_needed(cfg, layer, n, options()) are required; below them, the further pages of
  /// kv_pages_held() (the rollback margin) are imported too as far as they are available
  /// contiguously. Pages are copied. The cache then continues bit-identically to one that stored
  /// the positions itself; only a later truncate() into a margin page that was not available
  /// returns 0 (re-prefill) where that cache would have kept the positions. Throws eg::Error naming
  /// the layer and page, before changing the cache, if a required page is missing or n is out of
  /// range.
  void import_pages(int n, const std::function<KVPageRef(int layer, int page)>& page_src);

  // --- serialization (sessions) ---------------------------------------------------------------
  /// Writes a versioned header, the options, the per-layer shapes and types (layer_type()),
  /// n_past and the raw bytes of the pages in use (not the free ones). Throws eg::Error if the
  /// stream fails.
  void save(std::ostream& os) const;
  /// Reads what save() wrote. The restored cache is bit-identical in every live page (same
  /// attention results). Throws eg::Error on a bad magic/version, a layer shape that does not
  /// match `cfg`, invalid options, or truncated input. Reads version 1 streams (written before
  /// per-layer types existed: every layer has the configured type) and version 2.
  static KVCache load(std::istream& is, const ModelConfig& cfg);

  // --- device side (exec/executor.h) ----------------------------------------------------------
  /// What a device executor keeps with a cache it made (e.g. the CUDA executor's device pages),
  /// owned by the cache and destroyed with it; nullptr for a host (CPU) cache. The host-side
  /// bookkeeping above (n_past, options, truncate) stays the one source of truth for positions.
  ///
  /// A device cache's K/V live on the device: its host pages are allocated (begin_append) but
  /// only filled on demand. page_data() and save() first copy the page's stored positions from
  /// the device (read_rows); import_pages() (prefix cache, session restore) copies the imported
  /// positions to the device (write_rows). A device cache stores type() in every layer (the
  /// device never widens F16): import_pages() refuses pages of another encoding.
  struct DeviceState {
    virtual ~DeviceState() = default;
    /// Copies positions [pos0, pos0 + n) of `layer` (one that owns storage) from the device into
    /// host rows k and v, each [n, n_kv_heads, head_dim] in type(): the K and V parts of a page
    /// (KVLayerView's k_off / v_off). Throws eg::Error when the copy fails.
    virtual void read_rows(int layer, int pos0, int n, uint8_t* k, uint8_t* v) const = 0;
    /// The reverse: host rows k and v (same layout) to the device's positions [pos0, pos0 + n).
    virtual void write_rows(int layer, int pos0, int n, const uint8_t* k, const uint8_t* v) = 0;
  };
  void set_device_state(std::unique_ptr<DeviceState> s) { device_ = std::move(s); }
  DeviceState* device_state() const { return device_.get(); }

 private:
  struct Layer {
    int owner = 0;           // layer whose pages this one reads
    KVType type = KVType::F16;  // encoding of this layer's pages (opt_.type or its widening)
    bool sliding = false;    // owns storage and recycles
    int window = 0;
    int n_kv_heads = 0, head_dim = 0;
    size_t page_bytes = 0;   // 0 for KV-shared layers
    size_t k_off = 0, v_off = 0, ks_off = 0, vs_off = 0;
    std::vector<std::unique_ptr<uint8_t[]>> pool;  // every page allocated
    std::vector<uint8_t*> free_list;
    std::vector<uint8_t*> table;  // logical page -> page (nullptr: recycled / none)
    int first_page = 0;            // first logical page still held (sliding layers)
  };
  KVCache() = default;
  void init(const ModelConfig& cfg, const KVCacheOptions& opt);
  uint8_t* take_page(Layer& l);
  // A device cache: copies the stored positions of page `page` of owning layer `layer` from the
  // device into its host page (no-op for a host cache or a page not held).
  void pull_page(int layer, int page) const;
  void drop_pages_from(Layer& l, int first_dropped);
  // Re-encodes every page `l` holds from F16 to BF16 (page layout unchanged) and sets its type.
  static void widen_to_bf16(Layer& l);
  // write()'s slow path, after some stored value was not finite: widens the layer and stores the
  // rows again when a finite value overflowed F16; warns.
  void handle_flagged_write(int layer, int pos0, int T, const float* k, const float* v);
  // Stores the rows in l.type; returns whether some stored value is not finite.
  bool store_rows(Layer& l, int pos0, int T, const float* k, const float* v);

  KVCacheOptions opt_;
  int n_past_ = 0;
  std::vector<Layer> layers_;
  std::unique_ptr<DeviceState> device_;
};

}  // namespace eg
