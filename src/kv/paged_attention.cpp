#include "kv/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"
#include "core/error.h"

namespace eg::kv {

namespace {

size_t elem_bytes(KVType t) { return t == KVType::F32 ? 4 : t == KVType::INT8 ? 1 : 2; }

// One stored row (position, kv head) as f32: F32 rows are used in place, others converted into buf.
const float* row_f32(const KVLayerView& kv, const uint8_t* page, size_t data_off, size_t scale_off,
                     size_t row, float* buf) {
  const int64_t D = kv.head_dim;
  const uint8_t* src = page + data_off + row * D * elem_bytes(kv.type);
  switch (kv.type) {
    case KVType::F32: return reinterpret_cast<const float*>(src);
    case KVType::F16: cpu::to_f32(src, DType::F16, D, buf); return buf;
    case KVType::BF16: cpu::to_f32(src, DType::BF16, D, buf); return buf;
    case KVType::INT8: {
      float s;
      std::memcpy(&s, page + scale_off + row * sizeof(float), sizeof s);
      const auto* q = reinterpret_cast<const int8_t*>(src);
      for (int64_t d = 0; d < D; ++d) buf[d] = static_cast<float>(q[d]) * s;
      return buf;
    }
  }
  return buf;
}

// Throws unless the view fits the params and holds every position the queries pos[0..T) can see.
void check_view(const int32_t* pos, int64_t T, const KVLayerView& kv, const ops::AttentionParams& p,
                const int32_t* key_end = nullptr) {
  const int64_t H = p.n_heads, KVH = p.n_kv_heads, D = p.head_dim, P = kv.page_tokens;
  if (KVH != kv.n_kv_heads || D != kv.head_dim || KVH <= 0 || H % KVH != 0)
    throw Error("paged attention: shape mismatch (" + std::to_string(H) + " heads, " + std::to_string(KVH) +
                " kv heads x " + std::to_string(D) + " vs cache " + std::to_string(kv.n_kv_heads) + " x " +
                std::to_string(kv.head_dim) + ")");
  const int64_t lo = p.window > 0 ? std::max<int64_t>(0, pos[0] - p.window + 1) : 0;
  int64_t hi = pos[T - 1];
  if (key_end)
    for (int64_t t = 0; t < T; ++t) hi = std::max<int64_t>(hi, key_end[t]);
  for (int64_t j = lo / P; j <= hi / P; ++j)
    if (j >= kv.n_pages || !kv.pages[j])
      throw Error("paged attention: KV positions " + std::to_string(j * P) + ".." + std::to_string(j * P + P - 1) +
                  " are not in the cache (recycled or never written)");
}

// n floats of a thread's scratch v starting on a 64-byte boundary, so that full-width vector loads
// of rows whose length is a multiple of 16 floats never straddle two cache lines (a split load costs
// about twice as much: the q·K and p·V kernels load every operand from these buffers).
float* aligned_scratch(std::vector<float>& v, size_t n) {
  if (v.size() < n + 16) v.resize(n + 16);
  const auto a = reinterpret_cast<uintptr_t>(v.data());
  return v.data() + (64 - a % 64) % 64 / sizeof(float);
}

// One query row of a group: its vector, output, and the keys first .. last it sees.
struct QueryRef {
  const float* q;
  float* out;
  int64_t first, last;
};

// Queries that share one kv head (the GQA group's heads of up to kTileQ positions): every K and
// V row is converted from the page's type once and used by all of them. Per query the arithmetic
// is exactly the serial one — scores in key order (dot of f32 rows: a converted F16/BF16 row
// gives the same products as converting in registers), ops::softmax, then out += p·v in key
// order — so a query's result does not depend on which others share its group.
void attend_group(const QueryRef* qs, int nq, int64_t kvh, const KVLayerView& kv, const ops::AttentionParams& p) {
  const int64_t KVH = p.n_kv_heads, D = p.head_dim, P = kv.page_tokens;
  int64_t lo = qs[0].first, hi = qs[0].last;
  for (int i = 1; i < nq; ++i) {
    lo = std::min(lo, qs[i].first);
    hi = std::max(hi, qs[i].last);
  }
  const int64_t span = hi - lo + 1;
  thread_local std::vector<float> scores;
  if (scores.size() < static_cast<size_t>(nq * span)) scores.resize(static_cast<size_t>(nq * span));
  // q·K by chunks of keys: each chunk's K rows converted once, then each block of 4 queries walks
  // the chunk with its rows in L1; four visible queries share a key's loads (dot4 is bit-identical
  // to dot), so every score is the one serial dot of kernels.h.
  constexpr int64_t kKeyChunk = 64;
  thread_local std::vector<float> kbuf, qbuf;
  float* const krows = aligned_scratch(kbuf, static_cast<size_t>(kKeyChunk * D));
  // The queries, copied once per group into aligned rows (exact copies: the same scores).
  const int64_t Dq = (D + 15) / 16 * 16;
  float* const qrows = aligned_scratch(qbuf, static_cast<size_t>(nq * Dq));
  for (int i = 0; i < nq; ++i) std::memcpy(qrows + i * Dq, qs[i].q, static_cast<size_t>(D) * sizeof(float));
  const DType kt = kv.type == KVType::F16 ? DType::F16 : DType::BF16;
  for (int64_t c0 = lo; c0 <= hi; c0 += kKeyChunk) {
    const int64_t c1 = std::min(hi + 1, c0 + kKeyChunk);
    for (int64_t kp = c0; kp < c1; ++kp) {
      const uint8_t* page = kv.pages[kp / P];
      const size_t row = static_cast<size_t>((kp % P) * KVH + kvh);
      float* dst = krows + (kp - c0) * D;
      if (kv.type == KVType::F16 || kv.type == KVType::BF16) {
        cpu::to_f32(page + kv.k_off + row * D * 2, kt, static_cast<size_t>(D), dst);
      } else {
        const float* kr = row_f32(kv, page, kv.k_off, kv.ks_off, row, dst);
        if (kr != dst) std::memcpy(dst, kr, static_cast<size_t>(D) * sizeof(float));
      }
    }
    for (int i0 = 0; i0 < nq; i0 += 4) {
      const int n4 = std::min(4, nq - i0);
      const float* xs[4];
      for (int j = 0; j < n4; ++j) xs[j] = qrows + (i0 + j) * Dq;
      // Keys all four see ([f, l] within the chunk): two rows per pass (dot4_rows); the rest
      // one key at a time. Both give each score the serial dot's bits.
      int64_t f = c1, l = c1 - 1;
      if (n4 == 4) {
        f = c0, l = c1 - 1;
        for (int j = 0; j < 4; ++j) {
          f = std::max(f, qs[i0 + j].first);
          l = std::min(l, qs[i0 + j].last);
        }
        if (f <= l) {
          float* outs[4];
          for (int j = 0; j < 4; ++j) outs[j] = scores.data() + (i0 + j) * span + (f - lo);
          cpu::dot4_rows(xs, krows + (f - c0) * D, static_cast<size_t>(D), l - f + 1, p.scale, outs);
        } else {
          f = c1, l = c1 - 1;
        }
      }
      for (int64_t kp = c0; kp < c1; ++kp) {
        if (kp >= f && kp <= l) continue;
        const float* kr = krows + (kp - c0) * D;
        bool all = n4 == 4;
        for (int j = 0; j < n4 && all; ++j) all = kp >= qs[i0 + j].first && kp <= qs[i0 + j].last;
        if (all) {
          float o[4];
          cpu::dot4(xs, kr, DType::F32, static_cast<size_t>(D), o);
          for (int j = 0; j < 4; ++j) scores[(i0 + j) * span + (kp - lo)] = o[j] * p.scale;
        } else {
          for (int j = 0; j < n4; ++j)
            if (kp >= qs[i0 + j].first && kp <= qs[i0 + j].last)
              scores[(i0 + j) * span + (kp - lo)] = cpu::dot(xs[j], kr, DType::F32, static_cast<size_t>(D)) * p.scale;
        }
      }
    }
  }
  for (int i = 0; i < nq; ++i) {
    float* sc = scores.data() + i * span + (qs[i].first - lo);
    const int64_t n = qs[i].last - qs[i].first + 1;
    if (p.softcap > 0.0f)
      for (int64_t j = 0; j < n; ++j) sc[j] = p.softcap * std::tanh(sc[j] / p.softcap);
    ops::softmax(sc, n);
    std::fill(qs[i].out, qs[i].out + D, 0.0f);
  }
  // p·V by chunks of keys: each chunk's V rows converted once, then every run of up to 4 queries
  // with the same key range (the heads of one position) accumulates over the chunk in registers.
  // Per query and element the sums are still in key order from 0 (kernels.h accumulate_pv).
  thread_local std::vector<float> vbuf;
  float* const vrows = aligned_scratch(vbuf, static_cast<size_t>(kKeyChunk * D));
  for (int64_t c0 = lo; c0 <= hi; c0 += kKeyChunk) {
    const int64_t c1 = std::min(hi + 1, c0 + kKeyChunk);
    for (int64_t kp = c0; kp < c1; ++kp) {
      const uint8_t* page = kv.pages[kp / P];
      const size_t row = static_cast<size_t>((kp % P) * KVH + kvh);
      float* dst = vrows + (kp - c0) * D;
      const float* vr = row_f32(kv, page, kv.v_off, kv.vs_off, row, dst);
      if (vr != dst) std::memcpy(dst, vr, static_cast<size_t>(D) * sizeof(float));
    }
    for (int i = 0; i < nq;) {
      int j = i + 1;
      while (j < nq && j - i < 4 && qs[j].first == qs[i].first && qs[j].last == qs[i].last) ++j;
      const int64_t r0 = std::max(qs[i].first, c0), r1 = std::min(qs[i].last, c1 - 1);
      if (r0 <= r1) {
        float* outs[4];
        const float* ps[4];
        for (int q = i; q < j; ++q) {
          outs[q - i] = qs[q].out;
          ps[q - i] = scores.data() + q * span + (r0 - lo);
        }
        cpu::accumulate_pv(outs, ps, j - i, vrows + (r0 - c0) * D, r1 - r0 + 1, static_cast<size_t>(D));
      }
      i = j;
    }
  }
}

constexpr int64_t kTileQ = 8;  // query positions per task (times the heads of one kv head)

}  // namespace

// Heads of one kv head per task: all G when there are enough tasks, else fewer (a task per head
// at most), so that small dispatches (one decode row, one kv head) still use every thread.
int64_t heads_per_task(int64_t G, int64_t groups) {
  const int64_t want = 2 * cpu::num_threads();
  if (groups >= want) return G;
  const int64_t split = std::min<int64_t>(G, (want + groups - 1) / groups);
  return (G + split - 1) / split;
}

void paged_attention(const float* q, int64_t T, const int32_t* pos, const KVLayerView& kv,
                     const ops::AttentionParams& p, float* out, const int32_t* key_end) {
  if (T <= 0) return;
  if (p.symmetric && !key_end) throw Error("paged attention: a symmetric window needs key_end");
  check_view(pos, T, kv, p, key_end);
  const int64_t H = p.n_heads, D = p.head_dim, KVH = p.n_kv_heads, G = H / KVH;
  const int64_t tiles = (T + kTileQ - 1) / kTileQ;
  const int64_t hpt = heads_per_task(G, KVH * tiles), hsplit = (G + hpt - 1) / hpt;
  // One dispatch over (kv head, tile of query positions, slice of the kv head's query heads).
  cpu::parallel_for(KVH * tiles * hsplit, [&](int64_t task, int) {
    const int64_t hs = task % hsplit, tile = (task / hsplit) % tiles, kvh = task / (hsplit * tiles);
    const int64_t t0 = tile * kTileQ, t1 = std::min(T, t0 + kTileQ);
    const int64_t h0 = kvh * G + hs * hpt, h1 = std::min((kvh + 1) * G, h0 + hpt);
    thread_local std::vector<QueryRef> refs;  // reused: no allocation per task on the hot path
    refs.clear();
    for (int64_t t = t0; t < t1; ++t) {
      int64_t last = key_end ? std::max<int64_t>(key_end[t], pos[t]) : pos[t];
      int64_t first = p.window > 0 ? std::max<int64_t>(0, pos[t] - p.window + 1) : 0;
      if (p.symmetric && p.window > 0) {  // |q - k| <= window/2 (model/config.h: bidirectional)
        first = std::max<int64_t>(0, pos[t] - p.window / 2);
        last = std::min<int64_t>(last, pos[t] + p.window / 2);
      }
      for (int64_t h = h0; h < h1; ++h) refs.push_back({q + (t * H + h) * D, out + (t * H + h) * D, first, last});
    }
    attend_group(refs.data(), static_cast<int>(refs.size()), kvh, kv, p);
  });
}

void paged_attention_rows(const float* q, int64_t B, const int32_t* pos, const KVLayerView* views,
                          const ops::AttentionParams& p, float* out) {
  if (B <= 0) return;
  if (p.symmetric) throw Error("paged attention: batched decode rows cannot be bidirectional");
  for (int64_t b = 0; b < B; ++b) check_view(pos + b, 1, views[b], p);
  const int64_t H = p.n_heads, D = p.head_dim, KVH = p.n_kv_heads, G = H / KVH;
  const int64_t hpt = heads_per_task(G, B * KVH), hsplit = (G + hpt - 1) / hpt;
  // One dispatch over (row, kv head, slice of its query heads).
  cpu::parallel_for(B * KVH * hsplit, [&](int64_t task, int) {
    const int64_t hs = task % hsplit, kvh = (task / hsplit) % KVH, b = task / (hsplit * KVH);
    const int64_t h0 = kvh * G + hs * hpt, h1 = std::min((kvh + 1) * G, h0 + hpt);
    const int64_t first = p.window > 0 ? std::max<int64_t>(0, pos[b] - p.window + 1) : 0;
    thread_local std::vector<QueryRef> refs;  // as in paged_attention
    refs.clear();
    for (int64_t h = h0; h < h1; ++h) refs.push_back({q + (b * H + h) * D, out + (b * H + h) * D, first, pos[b]});
    attend_group(refs.data(), static_cast<int>(refs.size()), kvh, views[b], p);
  });
}

}  // namespace eg::kv
