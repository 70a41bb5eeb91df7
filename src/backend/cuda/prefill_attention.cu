// Causal attention of a prefill chunk against the device KV cache (prefill.h: attention_prefill).
//
// CTA (query tile, q head), 8 warps; each warp owns kQW queries of the tile. The CTA walks the
// keys its queries can see in tiles of 32 (read as 16-byte vectors, all of a tile's loads in
// flight together, and converted to f32 in shared memory; K rows
// padded to hd + 4 floats so the lanes' float4 reads hit distinct banks). Per tile, lane i scores
// key i against the warp's queries (the query rows are shared-memory broadcasts), the warp does
// the online-softmax update with shuffles, then each lane accumulates its columns
// (4·lane + 128·c) of Σ p·v, the probabilities broadcast by shuffle. f32 throughout; the result,
// divided by the softmax sum, is rounded to the 16-bit GEMM type.
//
// Split keys (with scratch): the chunk's key range [kb0, pos0 + T − 1] is cut into n_splits spans
// of S keys (grid.z); a CTA walks its keys inside span z only. A CTA whose keys lie in one span
// writes the result itself; otherwise each of its spans writes (m, l, Σ p·v unnormalised) for its
// rows and attn_combine_kernel merges them (the online-softmax merge: weights e^(m_z − max m)).
// Without it the CTA of the chunk's last queries walks every key while the first walks a few, and
// a 512-token chunk has about one CTA per multiprocessor: the longest CTA is the kernel's time.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/prefill.h"

namespace eg::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kBK = 32;  // keys per tile (one per lane)

template <KVElem kT>
__device__ __forceinline__ float kv_load_t(const void* base, int64_t i) {
  if constexpr (kT == KVElem::F16) return __half2float(__ushort_as_half(static_cast<const uint16_t*>(base)[i]));
  else if constexpr (kT == KVElem::BF16) return __uint_as_float(static_cast<unsigned>(static_cast<const uint16_t*>(base)[i]) << 16);
  else return static_cast<const float*>(base)[i];
}

__device__ __forceinline__ uint16_t to16(float v, int t) {
  return t == static_cast<int>(GemmType::BF16) ? __bfloat16_as_ushort(__float2bfloat16_rn(v))
                                               : __half_as_ushort(__float2half_rn(v));
}

template <int kNC, int kQW, KVElem kT>
__global__ void __launch_bounds__(kWarps * 32) attn_prefill_kernel(AttentionArgs a, int T, int pos0, const float* q,
                                                                  const void* kc, const void* vc, int out_t,
                                                                  uint16_t* out, int kb0, int S, int n_splits,
                                                                  float* part_acc, float* part_ml,
                                                                  const int* key_end) {
  extern __shared__ float4 smem4[];
  constexpr int BQ = kWarps * kQW;
  const int hd = a.head_dim, ks = hd + 4;
  float* sQ = reinterpret_cast<float*>(smem4);  // [BQ][hd]
  float* sK = sQ + BQ * hd;                     // [kBK][hd + 4]
  float* sV = sK + kBK * ks;                    // [kBK][hd]
  const int h = blockIdx.y, t0 = blockIdx.x * BQ;
  const int kvh = h / (a.n_heads / a.n_kv_heads);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t qstride = static_cast<int64_t>(a.n_heads) * hd;
  const int p_first = pos0 + t0, p_last = pos0 + min(T, t0 + BQ) - 1;
  const int k_begin = a.window > 0 ? max(0, p_first - a.window + 1) : 0;
  // The last key any of this CTA's rows sees (a bidirectional span's rows: key_end; never split).
  int c_last = p_last;
  if (key_end)
    for (int t = t0; t < min(T, t0 + BQ); ++t) c_last = max(c_last, key_end[t]);
  // This CTA's keys: [k_lo, k_hi] (span z of the split, or all of them).
  int k_lo = k_begin, k_hi = c_last;
  bool direct = true;
  const int z = blockIdx.z;
  if (n_splits > 1) {
    const int z_lo = (k_begin - kb0) / S, z_hi = (p_last - kb0) / S;
    if (z < z_lo || z > z_hi) return;  // CTA-uniform, before any barrier
    k_lo = max(k_begin, kb0 + z * S);
    k_hi = min(p_last, kb0 + (z + 1) * S - 1);
    direct = z_lo == z_hi;
  }
  for (int i = threadIdx.x; i < BQ * hd; i += blockDim.x) {
    const int r = i / hd, c = i - r * hd;
    sQ[i] = t0 + r < T ? q[static_cast<int64_t>(t0 + r) * qstride + static_cast<int64_t>(h) * hd + c] : 0.0f;
  }
  int qp[kQW], qe[kQW], lo[kQW];
  bool qv[kQW];
  float m[kQW], l[kQW], acc[kQW][kNC][4];
#pragma unroll
  for (int j = 0; j < kQW; ++j) {
    const int tq = t0 + warp * kQW + j;
    qv[j] = tq < T;
    qp[j] = pos0 + tq;
    qe[j] = key_end && qv[j] ? max(key_end[tq], qp[j]) : qp[j];  // the row's last key
    lo[j] = a.window > 0 ? max(0, qp[j] - a.window + 1) : 0;
    m[j] = -INFINITY;
    l[j] = 0.0f;
#pragma unroll
    for (int c = 0; c < kNC; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][c][e] = 0.0f;
  }
  // The warp's key range: tiles outside it are skipped (warp-uniform).
  int w_hi = lo[0];
#pragma unroll
  for (int j = 0; j < kQW; ++j)
    if (qv[j]) w_hi = max(w_hi, qe[j]);
  const int w_lo = lo[0];
  for (int kt = k_lo; kt <= k_hi; kt += kBK) {
    __syncthreads();  // the previous tile is consumed (first time: sQ is complete)
    {
      // 16-byte vectors of K and V: all loads of the tile in flight first, then converted to f32.
      constexpr int kEv = kT == KVElem::F32 ? 4 : 8;   // elements per vector
      constexpr int kIt = (kT == KVElem::F32 ? 4 : 2) * kNC;  // ≥ kBK·hd / kEv / threads
      const int per_row = hd / kEv, total = kBK * per_row;
      const size_t eb = kT == KVElem::F32 ? 4 : 2;
      uint4 kr4[kIt], vr4[kIt];
#pragma unroll
      for (int it = 0; it < kIt; ++it) {
        const int g = threadIdx.x + it * kWarps * 32;
        const int r = g / per_row, cv = g - r * per_row;
        kr4[it] = vr4[it] = make_uint4(0u, 0u, 0u, 0u);
        if (g < total && kt + r <= k_hi) {
          const size_t off = ((static_cast<size_t>(kt + r) * a.n_kv_heads + kvh) * hd + static_cast<size_t>(cv) * kEv) * eb;
          kr4[it] = *reinterpret_cast<const uint4*>(static_cast<const char*>(kc) + off);
          vr4[it] = *reinterpret_cast<const uint4*>(static_cast<const char*>(vc) + off);
        }
      }
#pragma unroll
      for (int it = 0; it < kIt; ++it) {
        const int g = threadIdx.x + it * kWarps * 32;
        if (g >= total) continue;
        const int r = g / per_row, c0 = (g - r * per_row) * kEv;
        float* dk = sK + r * ks + c0;
        float* dv = sV + r * hd + c0;
        if constexpr (kT == KVElem::F32) {
          *reinterpret_cast<uint4*>(dk) = kr4[it];
          *reinterpret_cast<uint4*>(dv) = vr4[it];
        } else {
          const uint16_t* k16 = reinterpret_cast<const uint16_t*>(&kr4[it]);
          const uint16_t* v16 = reinterpret_cast<const uint16_t*>(&vr4[it]);
          float kf[8], vf[8];
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            kf[e] = kv_load_t<kT>(k16, e);
            vf[e] = kv_load_t<kT>(v16, e);
          }
          *reinterpret_cast<float4*>(dk) = make_float4(kf[0], kf[1], kf[2], kf[3]);
          *reinterpret_cast<float4*>(dk + 4) = make_float4(kf[4], kf[5], kf[6], kf[7]);
          *reinterpret_cast<float4*>(dv) = make_float4(vf[0], vf[1], vf[2], vf[3]);
          *reinterpret_cast<float4*>(dv + 4) = make_float4(vf[4], vf[5], vf[6], vf[7]);
        }
      }
    }
    __syncthreads();
    if (!qv[0] || kt > w_hi || kt + kBK - 1 < w_lo) continue;
    const int key = kt + lane;
    float s[kQW];
#pragma unroll
    for (int j = 0; j < kQW; ++j) s[j] = 0.0f;
    const float4* kr = reinterpret_cast<const float4*>(sK + lane * ks);
#pragma unroll 4
    for (int d4 = 0; d4 < hd / 4; ++d4) {
      const float4 k4 = kr[d4];
#pragma unroll
      for (int j = 0; j < kQW; ++j) {
        const float4 q4 = reinterpret_cast<const float4*>(sQ + (warp * kQW + j) * hd)[d4];
        s[j] = fmaf(q4.x, k4.x, s[j]);
        s[j] = fmaf(q4.y, k4.y, s[j]);
        s[j] = fmaf(q4.z, k4.z, s[j]);
        s[j] = fmaf(q4.w, k4.w, s[j]);
      }
    }
    float pj[kQW];
#pragma unroll
    for (int j = 0; j < kQW; ++j) {
      float sc = s[j] * a.scale;
      if (a.softcap > 0.0f) sc = a.softcap * tanhf(sc / a.softcap);
      const bool ok = qv[j] && key <= qe[j] && key >= lo[j] && key <= k_hi;
      sc = ok ? sc : -INFINITY;
      float mx = sc;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
      const float mn = fmaxf(m[j], mx);
      float corr = 1.0f, p = 0.0f;
      if (mn != -INFINITY) {
        corr = expf(m[j] - mn);
        p = ok ? expf(sc - mn) : 0.0f;
      }
      float ps = p;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(0xFFFFFFFFu, ps, o);
      l[j] = l[j] * corr + ps;
      m[j] = mn;
#pragma unroll
      for (int c = 0; c < kNC; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][c][e] *= corr;
      pj[j] = p;
    }
#pragma unroll 4
    for (int k = 0; k < kBK; ++k) {
      float pk[kQW];
#pragma unroll
      for (int j = 0; j < kQW; ++j) pk[j] = __shfl_sync(0xFFFFFFFFu, pj[j], k);
      const float* vr = sV + k * hd;
#pragma unroll
      for (int c = 0; c < kNC; ++c) {
        const int col = 4 * lane + 128 * c;
        if (col < hd) {
          const float4 v4 = *reinterpret_cast<const float4*>(vr + col);
#pragma unroll
          for (int j = 0; j < kQW; ++j) {
            acc[j][c][0] = fmaf(pk[j], v4.x, acc[j][c][0]);
            acc[j][c][1] = fmaf(pk[j], v4.y, acc[j][c][1]);
            acc[j][c][2] = fmaf(pk[j], v4.z, acc[j][c][2]);
            acc[j][c][3] = fmaf(pk[j], v4.w, acc[j][c][3]);
          }
        }
      }
    }
  }
  if (!direct) {  // this span's (m, l, Σ p·v) of each row, for attn_combine_kernel
#pragma unroll
    for (int j = 0; j < kQW; ++j) {
      if (!qv[j]) continue;
      const int64_t idx = (static_cast<int64_t>(z) * T + t0 + warp * kQW + j) * a.n_heads + h;
      if (lane == 0) {
        part_ml[2 * idx] = m[j];
        part_ml[2 * idx + 1] = l[j];
      }
      float* pa = part_acc + idx * hd;
#pragma unroll
      for (int c = 0; c < kNC; ++c) {
        const int col = 4 * lane + 128 * c;
        if (col < hd) *reinterpret_cast<float4*>(pa + col) = make_float4(acc[j][c][0], acc[j][c][1], acc[j][c][2], acc[j][c][3]);
      }
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < kQW; ++j) {
    if (!qv[j]) continue;
    uint16_t* o = out + static_cast<int64_t>(t0 + warp * kQW + j) * qstride + static_cast<int64_t>(h) * hd;
#pragma unroll
    for (int c = 0; c < kNC; ++c) {
      const int col = 4 * lane + 128 * c;
      if (col < hd)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[col + e] = to16(acc[j][c][e] / l[j], out_t);
    }
  }
}

// One CTA per (query row, head) of a CTA that split its keys: out = Σ_z w_z·acc_z / Σ_z w_z·l_z,
// w_z = e^(m_z − max m) over the spans z_lo..z_hi of the row's query tile (spans without keys for
// the row have l = 0 and weigh nothing).
__global__ void attn_combine_kernel(AttentionArgs a, int T, int pos0, int BQ, int kb0, int S, const float* part_acc,
                                    const float* part_ml, int out_t, uint16_t* out) {
  const int t = blockIdx.x, h = blockIdx.y, hd = a.head_dim;
  const int t0 = t / BQ * BQ;
  const int p_first = pos0 + t0, p_last = pos0 + min(T, t0 + BQ) - 1;
  const int k_begin = a.window > 0 ? max(0, p_first - a.window + 1) : 0;
  const int z_lo = (k_begin - kb0) / S, z_hi = (p_last - kb0) / S;
  if (z_lo == z_hi) return;  // written by the attention kernel
  float M = -INFINITY;
  for (int z = z_lo; z <= z_hi; ++z) {
    const int64_t idx = (static_cast<int64_t>(z) * T + t) * a.n_heads + h;
    if (part_ml[2 * idx + 1] > 0.0f) M = fmaxf(M, part_ml[2 * idx]);
  }
  float L = 0.0f;
  for (int z = z_lo; z <= z_hi; ++z) {
    const int64_t idx = (static_cast<int64_t>(z) * T + t) * a.n_heads + h;
    const float l = part_ml[2 * idx + 1];
    if (l > 0.0f) L += expf(part_ml[2 * idx] - M) * l;
  }
  uint16_t* o = out + (static_cast<int64_t>(t) * a.n_heads + h) * hd;
  for (int col = threadIdx.x; col < hd; col += blockDim.x) {
    float v = 0.0f;
    for (int z = z_lo; z <= z_hi; ++z) {
      const int64_t idx = (static_cast<int64_t>(z) * T + t) * a.n_heads + h;
      const float l = part_ml[2 * idx + 1];
      if (l > 0.0f) v = fmaf(expf(part_ml[2 * idx] - M), part_acc[idx * hd + col], v);
    }
    o[col] = to16(v / L, out_t);
  }
}

using Kernel = void (*)(AttentionArgs, int, int, const float*, const void*, const void*, int, uint16_t*, int, int,
                        int, float*, float*, const int*);

constexpr int kMaxSplits = 4;
constexpr int kSplitKeys = 128;  // at least this many keys per span (64–256 and up to 8 spans: within ±2%)

// The first key any query of the chunk sees.
int chunk_first_key(const AttentionArgs& a, int pos0) { return a.window > 0 ? std::max(0, pos0 - a.window + 1) : 0; }

template <int kNC, int kQW>
Kernel pick_kv(KVElem t) {
  switch (t) {
    case KVElem::F16: return attn_prefill_kernel<kNC, kQW, KVElem::F16>;
    case KVElem::BF16: return attn_prefill_kernel<kNC, kQW, KVElem::BF16>;
    default: return attn_prefill_kernel<kNC, kQW, KVElem::F32>;
  }
}

template <int kQW>
Kernel pick(int nc, KVElem t) {
  switch (nc) {
    case 1: return pick_kv<1, kQW>(t);
    case 2: return pick_kv<2, kQW>(t);
    case 3: return pick_kv<3, kQW>(t);
    default: return pick_kv<4, kQW>(t);
  }
}

}  // namespace

size_t attention_prefill_scratch_bytes(const AttentionArgs& a, int T) {
  return static_cast<size_t>(kMaxSplits) * static_cast<size_t>(std::max(T, 0)) * static_cast<size_t>(std::max(a.n_heads, 0)) *
         static_cast<size_t>(std::max(a.head_dim, 0) + 2) * sizeof(float);
}

int attention_prefill_splits(const Stream& s, const AttentionArgs& a, int T, int pos0, size_t scratch_bytes) {
  if (T <= 0 || scratch_bytes < attention_prefill_scratch_bytes(a, T)) return 1;
  // Only where the unsplit grid leaves multiprocessors short of work (ceil(T/32)·nh CTAs of 32 queries).
  if (static_cast<int64_t>((T + 31) / 32) * a.n_heads >= 4LL * s.sm_count()) return 1;
  const int range = pos0 + T - chunk_first_key(a, pos0);
  return std::clamp((range + kSplitKeys - 1) / kSplitKeys, 1, kMaxSplits);
}

void attention_prefill(const Stream& s, const AttentionArgs& a, int T, int pos0, const float* q_dev,
                       const void* k_cache_dev, const void* v_cache_dev, GemmType t, void* out_dev, void* scratch_dev,
                       size_t scratch_bytes, const int32_t* key_end_dev) {
  const int hd = a.head_dim;
  if (hd <= 0 || hd > 512 || hd % 32 != 0 || a.n_heads <= 0 || a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0 ||
      T <= 0 || pos0 < 0 || a.n_heads > 65535)
    throw Error("CUDA attention_prefill: bad shape");
  const int nc = (hd + 127) / 128;
  const int n_splits = scratch_dev && !key_end_dev ? attention_prefill_splits(s, a, T, pos0, scratch_bytes) : 1;
  const int kb0 = chunk_first_key(a, pos0), range = pos0 + T - kb0;
  const int S = n_splits > 1 ? ((range + n_splits - 1) / n_splits + 31) / 32 * 32 : range;
  // 4 queries per warp when that still gives every multiprocessor a CTA, else 2 (more CTAs).
  const int qw = static_cast<int64_t>((T + 31) / 32) * a.n_heads * n_splits >= s.sm_count() ? 4 : 2;
  const Kernel k = qw == 4 ? pick<4>(nc, a.kv) : pick<2>(nc, a.kv);
  const int bq = kWarps * qw;
  const size_t smem = static_cast<size_t>(bq * hd + kBK * (hd + 4) + kBK * hd) * sizeof(float);
  detail::ensure_dynamic_smem(k, smem, "attention_prefill");
  const dim3 grid(static_cast<unsigned>((T + bq - 1) / bq), static_cast<unsigned>(a.n_heads),
                  static_cast<unsigned>(n_splits));
  // Scratch: part_acc [n_splits][T][nh][hd], then part_ml [n_splits][T][nh][2].
  float* part_acc = n_splits > 1 ? static_cast<float*>(scratch_dev) : nullptr;
  float* part_ml = part_acc ? part_acc + static_cast<size_t>(n_splits) * T * a.n_heads * hd : nullptr;
  cudaStream_t st = detail::stream_of(s.handle());
  k<<<grid, kWarps * 32, smem, st>>>(a, T, pos0, q_dev, k_cache_dev, v_cache_dev, static_cast<int>(t),
                                     static_cast<uint16_t*>(out_dev), kb0, S, n_splits, part_acc, part_ml,
                                     reinterpret_cast<const int*>(key_end_dev));
  EG_CUDA_CHECK_LAUNCH();
  if (n_splits > 1) {
    attn_combine_kernel<<<dim3(static_cast<unsigned>(T), static_cast<unsigned>(a.n_heads)), 128, 0, st>>>(
        a, T, pos0, bq, kb0, S, part_acc, part_ml, static_cast<int>(t), static_cast<uint16_t*>(out_dev));
    EG_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace eg::cuda
