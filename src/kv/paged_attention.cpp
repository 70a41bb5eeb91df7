#include "kv/paged_attention.h"

#include <algorithm>
#include <cmath>
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

// One (query, head) pair: out_h [D] = softmax(q_h · K) · V over the keys position qp can see,
// serially in key order. Scratch: thread-local (the pair may run on any pool thread).
void attend_one(const float* qh, int64_t qp, int64_t last, int64_t h, const KVLayerView& kv,
                const ops::AttentionParams& p, float* oh) {
  const int64_t KVH = p.n_kv_heads, D = p.head_dim, P = kv.page_tokens;
  thread_local std::vector<float> scores, buf;
  if (scores.size() < static_cast<size_t>(last + 1)) scores.resize(static_cast<size_t>(last + 1));
  if (buf.size() < static_cast<size_t>(D)) buf.resize(static_cast<size_t>(D));
  const int64_t first = p.window > 0 ? std::max<int64_t>(0, qp - p.window + 1) : 0;
  const int64_t n = last - first + 1;  // keys first .. last (last = qp when causal)
  const int64_t kvh = h / (p.n_heads / KVH);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t kp = first + j;
    const uint8_t* page = kv.pages[kp / P];
    const size_t row = static_cast<size_t>((kp % P) * KVH + kvh);
    float sc;
    if (kv.type == KVType::F16 || kv.type == KVType::BF16) {  // the dot converts in registers
      const uint8_t* kr = page + kv.k_off + row * D * 2;
      sc = cpu::dot(qh, kr, kv.type == KVType::F16 ? DType::F16 : DType::BF16, static_cast<size_t>(D)) * p.scale;
    } else {
      const float* kr = row_f32(kv, page, kv.k_off, kv.ks_off, row, buf.data());
      sc = cpu::dot(qh, kr, DType::F32, static_cast<size_t>(D)) * p.scale;
    }
    if (p.softcap > 0.0f) sc = p.softcap * std::tanh(sc / p.softcap);
    scores[j] = sc;
  }
  ops::softmax(scores.data(), n);
  std::fill(oh, oh + D, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t kp = first + j;
    const uint8_t* page = kv.pages[kp / P];
    const size_t row = static_cast<size_t>((kp % P) * KVH + kvh);
    const float* vr = row_f32(kv, page, kv.v_off, kv.vs_off, row, buf.data());
    const float pj = scores[j];
    for (int64_t d = 0; d < D; ++d) oh[d] += pj * vr[d];
  }
}

}  // namespace

void paged_attention(const float* q, int64_t T, const int32_t* pos, const KVLayerView& kv,
                     const ops::AttentionParams& p, float* out, const int32_t* key_end) {
  if (T <= 0) return;
  check_view(pos, T, kv, p, key_end);
  const int64_t H = p.n_heads, D = p.head_dim;
  // One dispatch over (query, head) pairs.
  cpu::parallel_for(T * H, [&](int64_t th, int) {
    const int64_t t = th / H, h = th % H;
    attend_one(q + (t * H + h) * D, pos[t], key_end ? std::max(key_end[t], pos[t]) : pos[t], h, kv, p,
               out + (t * H + h) * D);
  });
}

void paged_attention_rows(const float* q, int64_t B, const int32_t* pos, const KVLayerView* views,
                          const ops::AttentionParams& p, float* out) {
  if (B <= 0) return;
  for (int64_t b = 0; b < B; ++b) check_view(pos + b, 1, views[b], p);
  const int64_t H = p.n_heads, D = p.head_dim;
  cpu::parallel_for(B * H, [&](int64_t bh, int) {
    const int64_t b = bh / H, h = bh % H;
    attend_one(q + (b * H + h) * D, pos[b], pos[b], h, views[b], p, out + (b * H + h) * D);
  });
}

}  // namespace eg::kv
