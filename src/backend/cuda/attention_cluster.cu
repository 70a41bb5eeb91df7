// attention_cluster (fused.h): decode attention of one query on thread-block clusters (sm_90):
// a cluster of 8 or 16 CTAs per q head (or per heads_per_cta q heads of one KV group). The CTAs
// of a cluster split the keys first..p evenly; keys and values go to shared memory by cp.async in
// tiles of `tk` rows, two stages; the first two tiles are requested before the programmatic-launch
// wait, since rows < p were written by earlier steps (row p is this step's: computed here, or for
// a KV-shared layer read after the wait), and so is the RoPE cos/sin table of p (inv_freq is a
// weight). The CTAs merge their partials {m, l, o} through distributed shared memory (mapa +
// ld.shared::cluster): no partial buffer in global memory, no counters, no last-CTA round trip.
//
// The q/k norm sums follow block_sum over a 128-thread CTA (head_norm_rope), so the new K/V row
// is bit-identical to qkv_heads'; the scores, softmax and merge order differ from attention_fused
// (a different split), within float rounding (tests/cuda_fused_test.cpp).
//
// PTX: cp.async (sm_80), barrier.cluster / mapa / ld.shared::cluster (sm_90, PTX ISA 7.8, CUDA
// 11.8+); the launch needs CUDA 12 (cluster + PDL attributes). Compiled out below sm_90 (the
// kernel traps; attention_cluster_supported says no).
#include <cuda_fp16.h>

#include <string>
#include <type_traits>

#include "backend/cuda/attention_device.cuh"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/fused.h"

namespace eg::cuda {
namespace {

constexpr int kClWarps = 8;
constexpr int kClThreads = kClWarps * 32;

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// Every thread of every CTA of the cluster: writes before it are visible to all of them after
// (arrive has release and wait acquire semantics by default; PTX 7.8 has no explicit qualifiers).
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
#endif
}

// The float at `local`'s offset in the shared memory of cluster CTA `rank`.
__device__ __forceinline__ float ld_cluster(const float* local, unsigned rank) {
  float v = 0.0f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned a;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(smem_u32(local)), "r"(rank));
  // volatile (kept after cluster_sync) but no memory clobber: several loads can be in flight.
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(a));
#endif
  return v;
}

// Σ x² of a head held by one warp (lane L: x[e] = element 32e + L), summed in the order of
// block_sum over a 128-thread CTA whose thread t loops i = t, t + 128, ... (head_norm_rope):
// virtual thread 32k + L sums e ≡ k (mod 4), then the four virtual warps' butterflies, in order.
template <int kE>
__device__ __forceinline__ float sumsq_as_128(const float (&x)[kE], int E) {
  float t = 0.0f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    float ss = 0.0f;
#pragma unroll
    for (int e = k; e < kE; e += 4)
      if (e < E) ss = fmaf(x[e], x[e], ss);
    t += warp_sum(ss);
  }
  return t;
}

// head_norm_rope for one warp. kStrided: out[e] = element 32e + lane of rope(rmsnorm(src; nw)) at
// pos; else out[k] = element kE·lane + k (the layout of load_row). tmp: hd floats of this warp's
// shared memory; rc / rs: cosf / sinf of pos·inv_freq[i], i < rope_dims / 2 (rope_table).
template <int kE, bool kStrided>
__device__ __forceinline__ void warp_norm_rope(const QKVHeadArgs& a, const float* src, const float* nw,
                                               const float* rc, const float* rs, float* tmp, float (&out)[kE]) {
  const int lane = threadIdx.x & 31, hd = a.head_dim, E = hd / 32;
  float x[kE];
#pragma unroll
  for (int e = 0; e < kE; ++e) x[e] = e < E ? __ldcg(src + 32 * e + lane) : 0.0f;
  if (nw) {
    const float inv = 1.0f / sqrtf(sumsq_as_128<kE>(x, E) / static_cast<float>(hd) + a.eps);
#pragma unroll
    for (int e = 0; e < kE; ++e)
      if (e < E) x[e] = (x[e] * inv) * (a.w_offset + nw[32 * e + lane]);
  }
#pragma unroll
  for (int e = 0; e < kE; ++e)
    if (e < E) tmp[32 * e + lane] = x[e];
  __syncwarp();
  const int half = a.rope_dims / 2;
#pragma unroll
  for (int e = 0; e < kE; ++e) {
    const int i = 32 * e + lane;
    float v = 0.0f;
    if (e < E) {
      if (i < 2 * half) {
        const int p = i < half ? i : i - half;
        const float c = rc[p], s = rs[p];
        const float x1 = tmp[p], x2 = tmp[p + half];
        v = i < half ? __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)) : __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
      } else {
        v = tmp[i];
      }
    }
    out[e] = v;
  }
  __syncwarp();
  if constexpr (!kStrided) {
#pragma unroll
    for (int e = 0; e < kE; ++e) tmp[32 * e + lane] = out[e];
    __syncwarp();
#pragma unroll
    for (int k = 0; k < kE; ++k) out[k] = tmp[kE * lane + k];
    __syncwarp();
  }
}

// The RoPE angles' cosf / sinf at pos (head_norm_rope's values), by the whole CTA.
__device__ __forceinline__ void rope_table(const QKVHeadArgs& a, int pos, float* rc, float* rs) {
  for (int i = threadIdx.x; i < a.rope_dims / 2; i += blockDim.x) {
    const float ang = static_cast<float>(pos) * a.inv_freq_dev[i];
    rc[i] = cosf(ang);
    rs[i] = sinf(ang);
  }
}

// Two 16-bit K/V elements of one word (element 2k low) as floats.
template <KVElem kT>
__device__ __forceinline__ void unpack2(unsigned u, float& a, float& b) {
  if constexpr (kT == KVElem::F16) {
    a = f16_to_f32_dev(static_cast<uint16_t>(u & 0xFFFFu));
    b = f16_to_f32_dev(static_cast<uint16_t>(u >> 16));
  } else {
    a = __uint_as_float(u << 16);
    b = __uint_as_float(u & 0xFFFF0000u);
  }
}

// Lane `lane`'s kE consecutive elements (kE·lane ..) of one K/V row in shared memory, with the
// widest loads their alignment allows (16 bytes for head_dim 256 / 512).
template <int kE, KVElem kT>
__device__ __forceinline__ void load_row(const unsigned char* row, int lane, float (&out)[kE]) {
  constexpr int kEs = kT == KVElem::F32 ? 4 : 2;
  constexpr int kBytes = kE * kEs;
  const unsigned char* p = row + lane * kBytes;
  if constexpr (kT == KVElem::F32) {
    if constexpr (kBytes % 16 == 0) {
#pragma unroll
      for (int c = 0; c < kBytes / 16; ++c) {
        const float4 v = reinterpret_cast<const float4*>(p)[c];
        out[4 * c] = v.x;
        out[4 * c + 1] = v.y;
        out[4 * c + 2] = v.z;
        out[4 * c + 3] = v.w;
      }
    } else {
#pragma unroll
      for (int k = 0; k < kE; ++k) out[k] = reinterpret_cast<const float*>(p)[k];
    }
  } else if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int c = 0; c < kBytes / 16; ++c) {
      const uint4 v = reinterpret_cast<const uint4*>(p)[c];
      unpack2<kT>(v.x, out[8 * c], out[8 * c + 1]);
      unpack2<kT>(v.y, out[8 * c + 2], out[8 * c + 3]);
      unpack2<kT>(v.z, out[8 * c + 4], out[8 * c + 5]);
      unpack2<kT>(v.w, out[8 * c + 6], out[8 * c + 7]);
    }
  } else if constexpr (kBytes % 8 == 0) {
#pragma unroll
    for (int c = 0; c < kBytes / 8; ++c) {
      const uint2 v = reinterpret_cast<const uint2*>(p)[c];
      unpack2<kT>(v.x, out[4 * c], out[4 * c + 1]);
      unpack2<kT>(v.y, out[4 * c + 2], out[4 * c + 3]);
    }
  } else if constexpr (kBytes % 4 == 0) {
#pragma unroll
    for (int c = 0; c < kBytes / 4; ++c) unpack2<kT>(reinterpret_cast<const unsigned*>(p)[c], out[2 * c], out[2 * c + 1]);
  } else {
#pragma unroll
    for (int k = 0; k < kE; ++k) {
      float b;
      unpack2<kT>(reinterpret_cast<const uint16_t*>(p)[k], out[k], b);
    }
  }
}

template <KVElem kT>
__device__ __forceinline__ float kv_load_cg(const void* base, int64_t i) {
  if constexpr (kT == KVElem::F32) return __ldcg(static_cast<const float*>(base) + i);
  else if constexpr (kT == KVElem::F16) return f16_to_f32_dev(__ldcg(static_cast<const unsigned short*>(base) + i));
  else return __uint_as_float(static_cast<unsigned>(__ldcg(static_cast<const unsigned short*>(base) + i)) << 16);
}

// Grid (kC, n_heads / hpc), cluster (kC, 1, 1), kClThreads threads; dynamic shared memory:
// cluster_smem_bytes(). Cluster y serves q heads y·hpc .. y·hpc + hpc − 1 (one KV head: hpc
// divides the group), kClWarps / hpc warps per head. Lane L of a warp holds elements kE·L ..
// kE·L + kE − 1 of a head (head_dim = 32·kE). act: the merged heads quantized (o's input), may
// be null; outp may be null.
template <int kE, KVElem kT, int kC>
__global__ void __launch_bounds__(kClThreads) attn_cluster_kernel(QKVHeadArgs qa, AttentionArgs a, const float* qkv,
                                                                  const StepArgs* args, void* kc, void* vc,
                                                                  float* outp, int8_t* act, int tk, int hpc) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int G = kE >= 16 ? 2 : 4;  // keys per warp step (register arrays of 2·G·kE floats)
  constexpr int kEs = kT == KVElem::F32 ? 4 : 2;
  extern __shared__ __align__(16) unsigned char dyn[];
  const int hd = 32 * kE;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gq = a.n_heads / a.n_kv_heads, wph = kClWarps / hpc;
  const int hq = warp / wph, ws = warp % wph;
  const int rank = blockIdx.x, h0 = blockIdx.y * hpc, kvh = h0 / gq;
  const bool writer = h0 % gq == 0;  // the first cluster of a KV group writes its new row
  // The step's position: written by the host before the graph started (safe before the wait).
  const int p = args->pos;
  const int first = a.window > 0 ? max(0, p - a.window + 1) : 0;
  const int n = p - first + 1;
  const int chunk = (n + kC - 1) / kC;
  const int j0 = first + rank * chunk;
  const int j1 = min(p + 1, j0 + chunk);
  const int nt = j1 > j0 ? (j1 - j0 + tk - 1) / tk : 0;
  const int row_bytes = hd * kEs;
  const int tile_bytes = tk * row_bytes;
  unsigned char* kvs = dyn;  // stage s: K tile at 2s·tile_bytes, V tile at (2s + 1)·tile_bytes
  float* wrow = reinterpret_cast<float*>(dyn + 4 * static_cast<size_t>(tile_bytes));  // kClWarps × hd
  float* shead = wrow + kClWarps * hd;  // hpc × (2 + hd): {M, L, o} of this CTA's keys per q head
  float* snk = shead + hpc * (hd + 2);  // row p: K, V as the cache holds them (f32)
  float* snv = snk + hd;
  float* sm = snv + hd;
  float* sl = sm + kClWarps;
  float* rc = sl + kClWarps;  // RoPE cos / sin at p: hd / 2 each
  float* rs = rc + hd / 2;
  const int64_t pos_stride = static_cast<int64_t>(a.n_kv_heads) * hd;

  auto issue = [&](int t) {
    const int s = t & 1;
    const int r0 = j0 + t * tk, r1 = min(j1, r0 + tk);
    const int per_row = row_bytes / 16;
    const unsigned kd = smem_u32(kvs + 2 * s * tile_bytes), vd = smem_u32(kvs + (2 * s + 1) * tile_bytes);
    for (int i = threadIdx.x; i < (r1 - r0) * per_row; i += kClThreads) {
      const int r = i / per_row, c = i - r * per_row;
      const int j = r0 + r;
      if (j == p) continue;  // this step's row: after the wait
      const size_t off = static_cast<size_t>(j * pos_stride + static_cast<int64_t>(kvh) * hd) * kEs + 16 * c;
      cp_async16(kd + r * row_bytes + 16 * c, static_cast<const unsigned char*>(kc) + off);
      cp_async16(vd + r * row_bytes + 16 * c, static_cast<const unsigned char*>(vc) + off);
    }
    cp_async_commit();
  };
  if (nt > 0) issue(0);
  if (nt > 1) issue(1);
  rope_table(qa, p, rc, rs);  // inv_freq is a weight: also before the wait
  __syncthreads();
  detail::pdl_trigger();
  detail::pdl_wait();

  const int h = h0 + hq;
  float qr[kE];
  warp_norm_rope<kE, false>(qa, qkv + static_cast<int64_t>(h) * hd, qa.q_norm_dev, rc, rs, wrow + warp * hd, qr);
  const bool has_p = j0 <= p && p < j1;
  if (has_p) {
    const int64_t base = static_cast<int64_t>(p) * pos_stride + static_cast<int64_t>(kvh) * hd;
    if (qa.q_only) {
      // A KV-shared layer: row p was written earlier in this step by the source layer.
      for (int i = threadIdx.x; i < hd; i += kClThreads) {
        snk[i] = kv_load_cg<kT>(kc, base + i);
        snv[i] = kv_load_cg<kT>(vc, base + i);
      }
    } else if (warp == 0) {
      float kr[kE];
      warp_norm_rope<kE, true>(qa, qkv + static_cast<int64_t>(a.n_heads + kvh) * hd, qa.k_norm_dev, rc, rs, wrow, kr);
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        snk[32 * e + lane] = kv_round(kr[e], a.kv);
        if (writer) kv_store(kc, base + 32 * e + lane, kr[e], a.kv);
      }
    } else if (warp == 1) {
      // V: the v slot, or the raw k projection (K=V); Gemma 4's v_norm: rmsnorm without a weight.
      const float* vsrc = qkv + static_cast<int64_t>(a.n_heads + (qa.v_from_k ? 0 : a.n_kv_heads) + kvh) * hd;
      float x[kE];
#pragma unroll
      for (int e = 0; e < kE; ++e) x[e] = __ldcg(vsrc + 32 * e + lane);
      const float vinv = qa.v_norm ? 1.0f / sqrtf(sumsq_as_128<kE>(x, kE) / static_cast<float>(hd) + qa.eps) : 1.0f;
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        const float v = qa.v_norm ? x[e] * vinv : x[e];
        snv[32 * e + lane] = kv_round(v, a.kv);
        if (writer) kv_store(vc, base + 32 * e + lane, v, a.kv);
      }
    }
  }

  float acc[kE];
#pragma unroll
  for (int k = 0; k < kE; ++k) acc[k] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int t = 0; t < nt; ++t) {
    if (t + 1 < nt) cp_async_wait<1>();
    else cp_async_wait<0>();
    __syncthreads();  // tile t (and row p's snk / snv) visible to every thread
    const int s = t & 1;
    unsigned char* kt = kvs + 2 * s * tile_bytes;
    unsigned char* vt = kvs + (2 * s + 1) * tile_bytes;
    const int r0 = j0 + t * tk, r1 = min(j1, r0 + tk);
    if (has_p && r0 <= p && p < r1) {
      // Row p into its slot (the values are KV-representable: stored exactly).
      for (int i = threadIdx.x; i < hd; i += kClThreads) {
        kv_store(kt + (p - r0) * row_bytes, i, snk[i], a.kv);
        kv_store(vt + (p - r0) * row_bytes, i, snv[i], a.kv);
      }
      __syncthreads();
    }
    for (int j = r0 + ws * G; j < r1; j += wph * G) {
      float kr[G][kE], vr[G][kE];
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const int row = j + g < r1 ? j + g - r0 : 0;  // rows past the tile: row 0, weight 0
        load_row<kE, kT>(kt + row * row_bytes, lane, kr[g]);
        load_row<kE, kT>(vt + row * row_bytes, lane, vr[g]);
      }
      online_softmax_keys<G, kE>(a, qr, kr, vr, j, r1, m, l, acc);
    }
    __syncthreads();  // every warp is done with stage s
    if (t + 2 < nt) issue(t + 2);
  }

  // This CTA's partial per q head: its warps merged in a fixed order.
#pragma unroll
  for (int k = 0; k < kE; ++k) wrow[warp * hd + kE * lane + k] = acc[k];
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < hpc * hd; idx += kClThreads) {
    const int hh = idx / hd, d = idx - hh * hd;
    float M = -INFINITY;
    for (int w = hh * wph; w < (hh + 1) * wph; ++w) M = fmaxf(M, sm[w]);
    float L = 0.0f, o = 0.0f;
    for (int w = hh * wph; w < (hh + 1) * wph; ++w) {
      const float wg = M == -INFINITY ? 0.0f : expf(sm[w] - M);
      L += wg * sl[w];
      o += wg * wrow[w * hd + d];
    }
    float* ph = shead + hh * (hd + 2);
    ph[2 + d] = o;
    if (d == 0) {
      ph[0] = M;
      ph[1] = L;
    }
  }
  cluster_sync();
  // The merge across the cluster, by 32-element blocks: block b of the hpc·hd outputs goes to
  // warp (b / kC) % kClWarps of CTA b % kC, a lane per element; the kC partials in rank order.
  const int nblocks = hpc * kE;
  for (int b = rank + kC * warp; b < nblocks; b += kC * kClWarps) {
    const int hh = b / kE, d = 32 * (b - hh * kE) + lane;
    const float* ph = shead + hh * (hd + 2);
    float mc[kC], lc[kC], oc[kC];
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      mc[c] = ld_cluster(ph, c);
      lc[c] = ld_cluster(ph + 1, c);
      oc[c] = ld_cluster(ph + 2 + d, c);
    }
    float MM = -INFINITY;
#pragma unroll
    for (int c = 0; c < kC; ++c) MM = fmaxf(MM, mc[c]);
    float LL = 0.0f, o = 0.0f;
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const float w = mc[c] == -INFINITY ? 0.0f : expf(mc[c] - MM);
      LL += w * lc[c];
      o += w * oc[c];
    }
    const float v = o / LL;
    const int64_t i = static_cast<int64_t>(h0 + hh) * hd + d;
    if (outp) outp[i] = v;
    if (act) {
      const int64_t K = static_cast<int64_t>(a.n_heads) * hd;
      detail::quantize_block_warp(v, lane, i / 32, act, reinterpret_cast<int2*>(act + K));
    }
  }
  cluster_sync();  // this CTA's shared memory stays until every CTA has read it
#else
  __trap();
#endif
}

using ClusterKernel = void (*)(QKVHeadArgs, AttentionArgs, const float*, const StepArgs*, void*, void*, float*,
                               int8_t*, int, int);

// head_dim / 32 → the table row (head dims 32, 64, 96, 128, 256, 512); -1 otherwise.
int e_index(int hd) {
  switch (hd / 32) {
    case 1: return 0;
    case 2: return 1;
    case 3: return 2;
    case 4: return 3;
    case 8: return 4;
    case 16: return 5;
    default: return -1;
  }
}

template <int kC>
ClusterKernel cluster_kernel_c(int hd, KVElem kv) {
#define EG_CL_ROW(E) {attn_cluster_kernel<E, KVElem::F16, kC>, attn_cluster_kernel<E, KVElem::BF16, kC>, \
                      attn_cluster_kernel<E, KVElem::F32, kC>}
  static const ClusterKernel table[6][3] = {EG_CL_ROW(1), EG_CL_ROW(2), EG_CL_ROW(3),
                                            EG_CL_ROW(4), EG_CL_ROW(8), EG_CL_ROW(16)};
#undef EG_CL_ROW
  return table[e_index(hd)][static_cast<int>(kv)];
}

ClusterKernel cluster_kernel(int hd, KVElem kv, int ctas) {
  return ctas == 16 ? cluster_kernel_c<16>(hd, kv) : cluster_kernel_c<8>(hd, kv);
}

int elem_bytes(KVElem kv) { return kv == KVElem::F32 ? 4 : 2; }

// Keys per tile: two stages of K and V in at most 64 KB, a multiple of 4, 4..64.
int default_tile_keys(int hd, KVElem kv) {
  int tk = (64 * 1024) / (4 * hd * elem_bytes(kv));
  tk = tk > 64 ? 64 : tk;
  tk = tk / 4 * 4;
  return tk < 4 ? 4 : tk;
}

size_t cluster_smem_bytes(int hd, KVElem kv, int hpc, int tk) {
  const size_t kvb = 4ull * tk * hd * elem_bytes(kv);
  return kvb + 4ull * (static_cast<size_t>(kClWarps) * hd + static_cast<size_t>(hpc) * (hd + 2) + 3ull * hd + 2ull * kClWarps);
}

bool shape_ok(const QKVHeadArgs& qa, const AttentionArgs& aa) {
  if (aa.n_heads <= 0 || aa.n_kv_heads <= 0 || aa.n_heads % aa.n_kv_heads != 0) return false;
  return aa.head_dim % 32 == 0 && e_index(aa.head_dim) >= 0 && qa.n_heads == aa.n_heads &&
         qa.n_kv_heads == aa.n_kv_heads && qa.head_dim == aa.head_dim && qa.rope_dims >= 0 &&
         qa.rope_dims <= qa.head_dim && qa.rope_dims % 2 == 0 && aa.n_heads <= 65535;
}

}  // namespace

bool attention_cluster_supported(const QKVHeadArgs& qa, const AttentionArgs& aa) {
#if CUDART_VERSION >= 12000
  if (!shape_ok(qa, aa)) return false;
  // The kernel image the device runs must be sm_90 code (a PTX JIT of an older target would trap).
  static const bool device_ok = [] {
    cudaFuncAttributes fa{};
    if (cudaFuncGetAttributes(&fa, attn_cluster_kernel<8, KVElem::F16, 8>) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return major >= 9 && fa.binaryVersion >= 90;
  }();
  return device_ok;
#else
  (void)qa;
  (void)aa;
  return false;
#endif
}

void attention_cluster(const Stream& s, const QKVHeadArgs& qa, const AttentionArgs& aa, const float* qkv_dev,
                       const StepArgs* args_dev, void* k_cache_dev, void* v_cache_dev, float* out_dev, void* act_dev,
                       int tile_keys, int cluster_ctas, int heads_per_cta) {
  if (!shape_ok(qa, aa)) throw Error("CUDA attention_cluster: bad shape");
  if (!attention_cluster_supported(qa, aa)) throw Error("CUDA attention_cluster: needs an sm_90 device and CUDA 12");
  if (!qkv_dev || !args_dev || !k_cache_dev || !v_cache_dev || (!out_dev && !act_dev))
    throw Error("CUDA attention_cluster: missing buffer");
  if (tile_keys < 0 || tile_keys > 256 || tile_keys % 4 != 0)
    throw Error("CUDA attention_cluster: tile_keys " + std::to_string(tile_keys) + " is not a multiple of 4 in 0..256");
  if (cluster_ctas != 8 && cluster_ctas != 16)
    throw Error("CUDA attention_cluster: cluster_ctas must be 8 or 16, not " + std::to_string(cluster_ctas));
  const int gq = aa.n_heads / aa.n_kv_heads;
  if (heads_per_cta < 1 || gq % heads_per_cta != 0 || kClWarps % heads_per_cta != 0)
    throw Error("CUDA attention_cluster: heads_per_cta " + std::to_string(heads_per_cta) +
                " must divide the q heads per KV head (" + std::to_string(gq) + ") and 8");
#if CUDART_VERSION >= 12000
  const int hd = aa.head_dim;
  const int tk = tile_keys > 0 ? tile_keys : default_tile_keys(hd, aa.kv);
  const size_t smem = cluster_smem_bytes(hd, aa.kv, heads_per_cta, tk);
  const ClusterKernel k = cluster_kernel(hd, aa.kv, cluster_ctas);
  detail::ensure_dynamic_smem(k, smem, "attention_cluster");
  if (cluster_ctas > 8) EG_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(static_cast<unsigned>(cluster_ctas), static_cast<unsigned>(aa.n_heads / heads_per_cta));
  lc.blockDim = dim3(kClThreads);
  lc.dynamicSmemBytes = smem;
  lc.stream = detail::stream_of(s.handle());
  cudaLaunchAttribute at[2];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = static_cast<unsigned>(cluster_ctas);
  at[0].val.clusterDim.y = 1;
  at[0].val.clusterDim.z = 1;
  at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[1].val.programmaticStreamSerializationAllowed = 1;
  lc.attrs = at;
  lc.numAttrs = detail::pdl_enabled() ? 2 : 1;
  EG_CUDA_CHECK(cudaLaunchKernelEx(&lc, k, qa, aa, qkv_dev, args_dev, k_cache_dev, v_cache_dev, out_dev,
                                   static_cast<int8_t*>(act_dev), tk, heads_per_cta));
#endif
}

}  // namespace eg::cuda
