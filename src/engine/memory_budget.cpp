#include "engine/memory_budget.h"

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "core/error.h"

namespace eg {

namespace {

bool ignored(const std::string& name, const ModelWeights& w) {
  for (const std::string& p : w.ignored_prefixes)
    if (name.compare(0, p.size(), p) == 0) return true;
  return false;
}

}  // namespace

std::string format_bytes(size_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (bytes >= (size_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1 << 30));
  else if (bytes >= (size_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1 << 20));
  else if (bytes >= (size_t{1} << 10))
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / (1 << 10));
  else
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
  return buf;
}

std::string MemoryEstimate::describe(int context_tokens) const {
  return "weights " + format_bytes(weights_bytes) + " + KV " + format_bytes(kv_bytes) + " (" +
         std::to_string(context_tokens) + " tokens) + scratch " + format_bytes(scratch_bytes) +
         " = " + format_bytes(total());
}

size_t weights_resident_bytes(const Model& model) {
  const ModelWeights& w = model.weights();
  size_t total = 0;
  for (const std::string& name : w.store.names()) {
    if (ignored(name, w)) continue;
    const TensorInfo* t = w.store.find(name);
    if (t != nullptr) total += t->nbytes;
  }
  return total;
}

size_t scratch_bytes(const ModelConfig& cfg, int chunk_tokens, int context_tokens) {
  const size_t T = static_cast<size_t>(std::max(1, chunk_tokens));
  size_t max_hd = 0, max_kv = 0, max_i = 0;
  for (const LayerConfig& l : cfg.layers) {
    max_hd = std::max(max_hd, static_cast<size_t>(l.head_dim));
    max_kv = std::max(max_kv, static_cast<size_t>(l.n_kv_heads) * l.head_dim);
    max_i = std::max(max_i, static_cast<size_t>(l.intermediate_size));
  }
  const size_t H = cfg.hidden_size;
  const size_t q = static_cast<size_t>(cfg.n_heads) * max_hd;
  size_t floats = T * (4 * H + 2 * q + 2 * max_kv + 2 * max_i);  // x h proj + q attn + k v + gate up
  if (cfg.ple_dim > 0) floats += T * static_cast<size_t>(cfg.n_layers) * cfg.ple_dim;
  if (cfg.n_experts > 0) floats += T * (2 * H + 2 * static_cast<size_t>(cfg.moe_intermediate_size));
  floats += static_cast<size_t>(cfg.n_heads) * std::max(1, context_tokens);  // attention scores
  floats += static_cast<size_t>(cfg.vocab_size);                             // logits row
  return floats * sizeof(float);
}

MemoryEstimate estimate_memory(const Model& model, int context_tokens, const KVCacheOptions& kv,
                               int chunk_tokens) {
  if (context_tokens <= 0) throw Error("memory estimate: context must be > 0 tokens");
  KVCacheOptions o = kv;
  o.max_tokens = context_tokens;
  MemoryEstimate e;
  e.weights_bytes = weights_resident_bytes(model);
  e.kv_bytes = kv_bytes_for_context(model.config(), context_tokens, o);
  e.scratch_bytes = scratch_bytes(model.config(), chunk_tokens, context_tokens);
  return e;
}

int max_context_for_budget(const Model& model, size_t budget_bytes, const KVCacheOptions& kv,
                           int chunk_tokens) {
  // The estimate grows with the context (KV and attention scores), so binary search.
  int lo = 0, hi = std::max(1, model.config().max_position_embeddings);
  auto fits = [&](int c) { return estimate_memory(model, c, kv, chunk_tokens).total() <= budget_bytes; };
  if (fits(hi)) return hi;
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

void check_memory_budget(const Model& model, size_t budget_bytes, int context_tokens,
                         const KVCacheOptions& kv, int chunk_tokens) {
  if (budget_bytes == 0) return;
  const MemoryEstimate e = estimate_memory(model, context_tokens, kv, chunk_tokens);
  if (e.total() <= budget_bytes) return;
  const int fit = max_context_for_budget(model, budget_bytes, kv, chunk_tokens);
  std::string msg = "memory budget " + format_bytes(budget_bytes) + " (" + std::to_string(budget_bytes) +
                    " bytes) is too small for a context of " + std::to_string(context_tokens) +
                    " tokens: " + e.describe(context_tokens) + " (" + std::to_string(e.total()) + " bytes); ";
  if (fit > 0)
    msg += "the largest context that fits is " + std::to_string(fit) + " tokens";
  else
    msg += "not even a 1-token context fits (weights " + format_bytes(e.weights_bytes) + " + scratch " +
           format_bytes(e.scratch_bytes) + ")";
  throw Error(msg);
}

void check_tower_budget(const Model& model, size_t budget_bytes, int context_tokens, const KVCacheOptions& kv,
                        int chunk_tokens, size_t tower_bytes, const std::string& tower) {
  if (budget_bytes == 0) return;
  const MemoryEstimate e = estimate_memory(model, context_tokens, kv, chunk_tokens);
  const size_t total = e.total() + tower_bytes;
  if (total <= budget_bytes) return;
  std::string d = e.describe(context_tokens);
  d = d.substr(0, d.rfind(" = "));
  throw Error("memory budget " + format_bytes(budget_bytes) + " (" + std::to_string(budget_bytes) +
              " bytes) is too small for the " + tower + ": " + d + " + towers " + format_bytes(tower_bytes) + " = " +
              format_bytes(total) + " (" + std::to_string(total) + " bytes)");
}

namespace {
std::atomic<unsigned> touch_sink{0};
}  // namespace

size_t touch_weights(const Model& model) {
  const ModelWeights& w = model.weights();
  size_t total = 0;
  unsigned sum = 0;
  for (const std::string& name : w.store.names()) {
    if (ignored(name, w)) continue;
    const TensorInfo* t = w.store.find(name);
    if (t == nullptr || t->data == nullptr) continue;
    const volatile uint8_t* p = t->data;
    for (size_t off = 0; off < t->nbytes; off += 4096) sum += p[off];
    if (t->nbytes > 0) sum += p[t->nbytes - 1];
    total += t->nbytes;
  }
  touch_sink.store(sum, std::memory_order_relaxed);  // keeps the reads
  return total;
}

}  // namespace eg
