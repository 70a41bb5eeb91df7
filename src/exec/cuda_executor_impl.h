// Internal to the CUDA executor (cuda_executor.cpp: construction, caches, the step entry points;
// cuda_executor_steps.cpp: the graph steps and the persistent step; cuda_executor_prefill.cpp:
// the GEMM prefill). The device state of a model, a KV cache and a workspace, and the executor
// class. docs/cuda.md "The executor".
#pragma once
#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include "backend/cpu/kernels.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/decode_kernels.h"
#include "backend/cuda/fused.h"
#include "backend/cuda/ple.h"
#include "backend/cuda/prefill.h"
#include "backend/cuda/step_kernel.h"
#include "core/error.h"
#include "exec/cuda_persistent.h"
#include "ops/ops.h"
#include "exec/cuda_executor.h"

namespace eg::cudaexec {

namespace gpu = eg::cuda;

/// Device copies of host data (cuda_executor.cpp).
gpu::DeviceBuffer upload_floats(const std::vector<float>& v);
gpu::DeviceBuffer upload_norm(const NormWeight& w);
gpu::DeviceWeight upload(const ops::Weight& w);
/// Rows of several weights of one dtype and width, stacked into one matrix.
gpu::DeviceWeight upload_stacked(const std::vector<const ops::Weight*>& ws);
bool same_kind(const ops::Weight& a, const ops::Weight& b);
/// Serial numbers of the KV caches this process made (CudaKV::serial).
extern std::atomic<uint64_t> g_kv_serial;

struct DevLayer {
  bool qkv_fused = false, gu_fused = false;
  gpu::DeviceWeight qkv, q, k, v, o, gu, gate, up, down;
  gpu::DeviceBuffer input_norm, post_attn_norm, pre_ffw_norm, post_ffw_norm, q_norm, k_norm, inv_freq;
  // Gemma 4: the layer whose K/V cache this layer reads (itself unless KV-shared), K=V, the PLE
  // gate / projection / norm (E2B, E4B) and the layer scalar (gemma-architectures.md §3.3.2).
  int kv_layer = 0;
  bool v_from_k = false;
  gpu::DeviceWeight ple_gate, ple_proj;
  gpu::DeviceBuffer ple_post_norm;
  float scalar = 1.0f;
  // EG_CUDA_PREFILL_WEIGHTS=once: the matrices above dequantized to 16-bit, row-major, keyed by
  // the DeviceWeight they come from (empty in the default per-matrix mode).
  std::vector<std::pair<const gpu::DeviceWeight*, gpu::DeviceBuffer>> w16;
};

// The GEMM prefill's scratch for chunks of up to `tokens` rows (made on first use).
struct PrefillScratch {
  int tokens = 0;
  std::unique_ptr<gpu::Gemm> gemm;
  gpu::DeviceBuffer ids, x, proj, h16, qkv, q, gu, w16, result;
  gpu::DeviceBuffer key_end;       // int32 [tokens]: a media chunk's last key per row (bidirectional spans)
  gpu::DeviceBuffer attn_part;     // attention_prefill's split scratch (partial softmax sums)
  gpu::DeviceBuffer ple, ple_tok;  // Gemma 4 PLE inputs [tokens, L·P] and their token part
  std::vector<float> ple_host;     // ... the token part gathered on the host (dtypes dequant_rows lacks)
  // The chunk's rows of E_ple as stored, staged in pinned memory for the upload (ple.h).
  gpu::PinnedBuffer ple_stage;
  gpu::DeviceBuffer ple_rows;
  gpu::Event ple_staged;  // recorded after the upload: ple_stage may be rewritten once it is reached
  // EG_CUDA_TIMING=3: device ms of each prefill stage (events between stages), summed over chunks.
  static constexpr int kStages = 7;
  double stage_ms[kStages] = {};
  int64_t profiled_tokens = 0;
  std::vector<gpu::Event> marks;
  std::vector<int> mark_stage;
  void mark(const gpu::Stream& s, int stage) {  // the work enqueued since the last mark was `stage`
    marks.emplace_back();
    marks.back().record(s);
    mark_stage.push_back(stage);
  }
  bool first_chunk_done = false;  // the first chunk (allocations, GEMM plans) is not profiled
  void flush_marks(int T) {
    if (!first_chunk_done) {
      first_chunk_done = true;
      marks.clear();
      mark_stage.clear();
      return;
    }
    for (size_t i = 1; i < marks.size(); ++i) stage_ms[mark_stage[i]] += gpu::Event::ms_between(marks[i - 1], marks[i]);
    profiled_tokens += T;
    marks.clear();
    mark_stage.clear();
  }
};

// The device K/V of one KV cache: per layer that owns storage, K and V [max_tokens, n_kv_heads,
// head_dim] in the cache's type, position-major, so positions pos0.. of a layer are one
// contiguous span, laid out as a host page's K or V part (kv/kv_cache.h DeviceState).
struct CudaKV final : KVCache::DeviceState {
  uint64_t serial = 0;
  int max_tokens = 0;
  gpu::KVElem elem = gpu::KVElem::F16;
  std::vector<gpu::DeviceBuffer> k, v;
  std::vector<size_t> row_bytes;  // bytes of one position of K (= of V) per layer; 0 for KV-shared

  void read_rows(int layer, int pos0, int n, uint8_t* kh, uint8_t* vh) const override {
    const size_t off = check_rows(layer, pos0, n), len = static_cast<size_t>(n) * row_bytes[layer];
    k[layer].download(kh, len, off);
    v[layer].download(vh, len, off);
  }
  void write_rows(int layer, int pos0, int n, const uint8_t* kh, const uint8_t* vh) override {
    const size_t off = check_rows(layer, pos0, n), len = static_cast<size_t>(n) * row_bytes[layer];
    k[layer].upload(kh, len, off);
    v[layer].upload(vh, len, off);
  }

 private:
  size_t check_rows(int layer, int pos0, int n) const {
    if (layer < 0 || layer >= static_cast<int>(row_bytes.size()) || row_bytes[layer] == 0 || pos0 < 0 || n < 0 ||
        pos0 + n > max_tokens)
      throw Error("CUDA KV cache: rows " + std::to_string(pos0) + "+" + std::to_string(n) + " of layer " +
                  std::to_string(layer) + " are outside the device cache");
    return static_cast<size_t>(pos0) * row_bytes[layer];
  }
};

struct CudaWorkspace final : StepWorkspace {
  ~CudaWorkspace() override {
    if (profiled_steps > 0) {
      static const char* names[kGroups] = {"embed+norm", "qkv matvec", "q/k norm+rope+kv", "attention", "o matvec",
                                           "residual+norms", "gate|up matvec", "gelu*mul", "down matvec", "lm head",
                                           "ple"};
      double total = 0.0;
      for (double g : group_ms) total += g;
      std::fprintf(stderr, "cuda profile (%lld eager steps, us/step, each kernel timed alone):", static_cast<long long>(profiled_steps));
      for (int i = 0; i < kGroups; ++i) std::fprintf(stderr, " %s %.1f;", names[i], 1e3 * group_ms[i] / static_cast<double>(profiled_steps));
      std::fprintf(stderr, " total %.1f\n", 1e3 * total / static_cast<double>(profiled_steps));
    }
    if (pf.profiled_tokens > 0) {
      static const char* names[PrefillScratch::kStages] = {"embed+ple inputs", "dequant", "gemm", "q/k norm+rope+kv",
                                                           "attention", "norms+gelu rows", "lm head"};
      double total = 0.0;
      for (double g : pf.stage_ms) total += g;
      std::fprintf(stderr, "cuda prefill profile (%lld tokens, ms, EG_CUDA_TIMING=3):", static_cast<long long>(pf.profiled_tokens));
      for (int i = 0; i < PrefillScratch::kStages; ++i) std::fprintf(stderr, " %s %.2f;", names[i], pf.stage_ms[i]);
      std::fprintf(stderr, " total %.2f\n", total);
    }
    if (timed_steps > 0)
      std::fprintf(stderr, "cuda: %lld graph replays, %.1f us of GPU time each, %lld captures (EG_CUDA_TIMING)\n",
                   static_cast<long long>(timed_steps), 1e3 * timed_ms / static_cast<double>(timed_steps),
                   static_cast<long long>(graph_captures));
  }
  gpu::Stream stream{0};
  std::unique_ptr<gpu::EventTimer> timer;  // EG_CUDA_TIMING=1: GPU time of every replay
  double timed_ms = 0.0;
  int64_t timed_steps = 0;
  // EG_CUDA_TIMING=2: eager steps (no graph), each kernel group timed alone (µs per step).
  static constexpr int kGroups = 11;
  double group_ms[kGroups] = {};
  int64_t profiled_steps = 0;
  gpu::DeviceBuffer args, x, x2, counters, h, act, qkv, q, attn, partial, proj, gu, g, logits, result;
  gpu::DeviceBuffer ple, ple_tok;  // Gemma 4 PLE inputs [L·P] of the step and their token part
  std::vector<float> ple_host;
  // The graph step captured per KV cache stepped in this workspace (the server's batched decode
  // steps every slot's cache in one workspace): at most CudaExecutor::max_graphs_ (16;
  // EG_CUDA_GRAPHS=N), the least recently used dropped; all dropped when the attention scratch
  // they point to is reallocated.
  struct CapturedStep {
    uint64_t kv = 0;  // CudaKV::serial of the cache it was captured for
    bool long_keys = false;  // captured for a context past cluster_max_keys_ (no cluster attention)
    uint64_t used = 0;
    std::unique_ptr<gpu::Graph> graph;
  };
  std::vector<CapturedStep> graphs;
  uint64_t graph_clock = 0;
  bool long_keys = false;  // this step's context is past CudaExecutor::cluster_max_keys_
  int64_t graph_captures = 0;  // how many captures this workspace made (tests, EG_CUDA_TIMING)
  PersistentStep persistent;  // EG_CUDA_STEP=persistent
  PrefillScratch pf;
};

class CudaExecutor final : public StepExecutor {
 public:
  explicit CudaExecutor(const Model& m) : m_(m), cfg_(m.config()) {
    const gpu::DeviceInfo info = gpu::device_info(0);
    desc_ = "cuda: " + info.name + " (sm_" + std::to_string(info.cc_major) + std::to_string(info.cc_minor) + ")";
    sm_count_ = info.sm_count;
    const char* t = std::getenv("EG_CUDA_TIMING");
    timing_ = t && *t ? std::atoi(t) : 0;
    if (const char* k = std::getenv("EG_CUDA_SPLIT_KEYS")) split_keys_ = std::max(1, std::atoi(k));  // tuning
    if (const char* k = std::getenv("EG_CUDA_SPLIT_MIN_KEYS")) {
      split_min_keys_ = std::max(1, std::atoi(k));
      split_min_keys_set_ = true;
    }
    const ModelWeights& w = m.weights();
    // The fused step (fused.h: 5 kernels per layer) needs stacked q|k|v and an interleaved
    // gate|up; EG_CUDA_FUSED=0 keeps the step of separate kernels (for comparisons).
    const char* fz = std::getenv("EG_CUDA_FUSED");
    fused_ = !(fz && std::string(fz) == "0");
    // Decode attention of the fused step: cluster (attention_cluster while the context is at
    // most cluster_max_keys_ keys, on sm_90), fused (attention_fused always), split (qkv_heads +
    // attention_decode).
    if (const char* at = std::getenv("EG_CUDA_ATTN"); at && *at) {
      const std::string v = at;
      if (v != "cluster" && v != "fused" && v != "split")
        throw Error("EG_CUDA_ATTN must be cluster, fused or split, not '" + v + "'");
      attn_split_ = v == "split";
      attn_cluster_ = v == "cluster";
    }
    if (const char* ck = std::getenv("EG_CUDA_CLUSTER_KEYS"); ck && *ck) {  // tuning
      char* end = nullptr;
      const long n = std::strtol(ck, &end, 10);
      if (*end != '\0' || n < 1 || n > (1 << 20))
        throw Error("EG_CUDA_CLUSTER_KEYS must be a number of keys from 1 to 1048576, not '" + std::string(ck) + "'");
      cluster_max_keys_ = static_cast<int>(n);
    }
    if (const char* mw = std::getenv("EG_CUDA_MV_WK"); mw && *mw && std::string(mw) != "legacy")  // matvec.cu reads it
      throw Error("EG_CUDA_MV_WK must be legacy or unset, not '" + std::string(mw) + "'");
    if (const char* cc = std::getenv("EG_CUDA_CLUSTER_CTAS"); cc && *cc) {  // tuning: 8 or 16
      const std::string v = cc;
      if (v != "8" && v != "16") throw Error("EG_CUDA_CLUSTER_CTAS must be 8 or 16, not '" + v + "'");
      cluster_ctas_ = std::atoi(cc);
    }
    if (const char* ch = std::getenv("EG_CUDA_CLUSTER_HEADS"); ch && *ch) {  // tuning: q heads per CTA
      const std::string v = ch;
      if (v != "1" && v != "2" && v != "4" && v != "8")
        throw Error("EG_CUDA_CLUSTER_HEADS must be 1, 2, 4 or 8, not '" + v + "'");
      cluster_heads_ = std::atoi(ch);
    }
    if (const char* gr = std::getenv("EG_CUDA_GRAPHS"); gr && *gr) {  // graphs kept per workspace
      char* end = nullptr;
      const long n = std::strtol(gr, &end, 10);
      if (*end != '\0' || n < 1 || n > 4096)
        throw Error("EG_CUDA_GRAPHS must be a number of graphs from 1 to 4096, not '" + std::string(gr) + "'");
      max_graphs_ = static_cast<size_t>(n);
    }
    if (const char* pl = std::getenv("EG_CUDA_PLE"); pl && *pl) {  // tuning: separate = the PLE gate in 3 kernels
      const std::string v = pl;
      if (v != "separate" && v != "fused") throw Error("EG_CUDA_PLE must be fused or separate, not '" + v + "'");
      ple_separate_ = v == "separate";
    }
    const char* dn = std::getenv("EG_CUDA_DOWN");
    down_quant_ = !(dn && std::string(dn) == "stage");
    read_prefill_options();
    const char* sp = std::getenv("EG_CUDA_STEP");
    const std::string step_mode = sp ? sp : "";
    if (!step_mode.empty() && step_mode != "graph" && step_mode != "persistent")
      throw Error("EG_CUDA_STEP must be graph or persistent, not '" + step_mode + "'");
    // Gemma 4 and a Q6_K embedding (q6k.h) take the fused graph step (enqueue_step_fused: the
    // layer scalar in the input stages, PLE as two kernels, KV sharing / K=V / v_norm in the
    // fused attention, a Q6_K LM head as residual_norm + lm_head_argmax), not the persistent one.
    gemma4_ = cfg_.family == ModelFamily::Gemma4;
    q6k_embed_ = w.embed.dtype == DType::Q6_K;
    // Programmatic dependent launch (cuda_backend.h; every kernel waits before touching memory):
    // on by default (EG_CUDA_PDL=0|1 forces it; process-wide). It hides part of each launch, and
    // the cluster attention and the matvecs do their weight / old-key loads before the wait
    // (H200, 2026-12-03, decode_argmax tok/s, PDL off → on: gemma-3-1b graph step 982 → 1,171,
    // gemma-4-e2b 495 → 566, gemma-2-2b 545 → 613; the persistent step 902 → 905).
    if (const char* pd = std::getenv("EG_CUDA_PDL"); pd && *pd) {
      const std::string v = pd;
      if (v != "0" && v != "1") throw Error("EG_CUDA_PDL must be 0 or 1, not '" + v + "'");
      gpu::set_programmatic_launch(v == "1");
    } else {
      gpu::set_programmatic_launch(true);
    }
    for (int li = 0; li < cfg_.n_layers && fused_; ++li) {
      const LayerWeights& lw = w.layers[li];
      const LayerConfig& lc = cfg_.layers[li];
      // q|k|v stacked (only the parts the layer has: q alone when KV-shared, q|k for K=V).
      const bool own_kv = lc.kv_source < 0;
      fused_ = (!own_kv || same_kind(lw.q, lw.k)) && (!own_kv || lc.k_eq_v || same_kind(lw.q, lw.v)) &&
               same_kind(lw.gate, lw.up) && lw.gate.rows % 4 == 0 && lc.intermediate_size == lw.gate.rows;
    }
    embed_ = upload(w.embed);
    final_norm_ = upload_norm(w.final_norm);
    if (cfg_.ple_dim > 0) {
      // per_layer_model_projection: f32 as the quantizers keep it (row-major, matvec_f32 / F32
      // GEMM) or any matvec dtype (tiled). The table E_ple stays in host memory (ple.h).
      ple_LP_ = static_cast<int64_t>(cfg_.n_layers) * cfg_.ple_dim;
      if (w.ple_model_proj.dtype == DType::F32) {
        ple_raw_ = gpu::DeviceBuffer(static_cast<size_t>(w.ple_model_proj.rows * w.ple_model_proj.cols) * 4);
        ple_raw_.upload(w.ple_model_proj.data, ple_raw_.bytes());
      } else {
        ple_tiled_ = upload(w.ple_model_proj);
      }
      ple_norm_ = upload_norm(w.ple_proj_norm);
    }
    embed_scale_ = embedding_scale(cfg_.hidden_size, DType::F32);
    for (int li = 0; li < cfg_.n_layers; ++li) {
      const LayerConfig& lc = cfg_.layers[li];
      const LayerWeights& lw = w.layers[li];
      DevLayer d;
      // q|k|v; a KV-shared layer has only q, a K=V layer q|k (gemma-architectures.md §3.3.2).
      d.kv_layer = lc.kv_source >= 0 ? lc.kv_source : li;
      d.v_from_k = lc.kv_source < 0 && lc.k_eq_v;
      std::vector<const ops::Weight*> parts{&lw.q};
      if (lc.kv_source < 0) parts.push_back(&lw.k);
      if (lc.kv_source < 0 && !lc.k_eq_v) parts.push_back(&lw.v);
      d.qkv_fused = true;
      for (const ops::Weight* p : parts) d.qkv_fused = d.qkv_fused && same_kind(lw.q, *p);
      if (d.qkv_fused) {
        d.qkv = upload_stacked(parts);
      } else {
        d.q = upload(lw.q);
        if (parts.size() > 1) d.k = upload(lw.k);
        if (parts.size() > 2) d.v = upload(lw.v);
      }
      d.o = upload(lw.o);
      d.gu_fused = same_kind(lw.gate, lw.up);
      if (fused_) {
        const std::string il = gpu::interleave_gate_up(lw.gate.data, lw.up.data, lw.gate.dtype, lw.gate.rows, lw.gate.cols);
        d.gu = gpu::upload_weight(il.data(), lw.gate.dtype, 2 * lw.gate.rows, lw.gate.cols);
      } else if (d.gu_fused) {
        d.gu = upload_stacked({&lw.gate, &lw.up});
      } else {
        d.gate = upload(lw.gate);
        d.up = upload(lw.up);
      }
      d.down = upload(lw.down);
      d.input_norm = upload_norm(lw.input_norm);
      d.post_attn_norm = upload_norm(lw.post_attn_norm);
      d.pre_ffw_norm = upload_norm(lw.pre_ffw_norm);
      d.post_ffw_norm = upload_norm(lw.post_ffw_norm);
      if (cfg_.qk_norm) {
        d.q_norm = upload_norm(lw.q_norm);
        if (lc.kv_source < 0) d.k_norm = upload_norm(lw.k_norm);
      }
      if (cfg_.layer_scalar) d.scalar = lw.layer_scalar;
      if (cfg_.ple_dim > 0) {
        d.ple_gate = upload(lw.ple_gate);
        d.ple_proj = upload(lw.ple_proj);
        d.ple_post_norm = upload_norm(lw.ple_post_norm);
      }
      // As Model's constructor: frequencies of the pairs past rope_pairs are 0.
      std::vector<float> inv(static_cast<size_t>(lc.rope_dims / 2), 0.0f);
      ops::rope_inv_freq(lc.rope_theta, lc.rope_dims, lc.rope_linear_factor, inv.data());
      for (size_t i = static_cast<size_t>(lc.rope_pairs); i < inv.size(); ++i) inv[i] = 0.0f;
      if (inv.empty()) inv.push_back(0.0f);
      d.inv_freq = upload_floats(inv);
      max_qkv_ = std::max<int64_t>(max_qkv_, static_cast<int64_t>(cfg_.n_heads + 2 * lc.n_kv_heads) * lc.head_dim);
      max_q_ = std::max<int64_t>(max_q_, static_cast<int64_t>(cfg_.n_heads) * lc.head_dim);
      max_i_ = std::max<int64_t>(max_i_, std::max<int64_t>(lc.intermediate_size, cfg_.ple_dim));
      max_hd_ = std::max(max_hd_, lc.head_dim);
      layers_.push_back(std::move(d));
    }
    // The graph step is the default: with the cluster attention and the preloading matvecs it
    // runs gemma-3-1b at 1,171 tok/s against the persistent step's 905 (H200, 2026-12-03,
    // docs/cuda.md); EG_CUDA_STEP=persistent asks for the persistent one where it applies.
    if (step_mode == "persistent") build_persistent_shape(true);
    if (prefill_gemm_ && pf_once_) {
      // EG_CUDA_PREFILL_WEIGHTS=once: every matrix dequantized to 16-bit now (2 bytes per weight).
      gpu::Stream s(0);
      for (DevLayer& d : layers_) {
        for (const gpu::DeviceWeight* W : {&d.qkv, &d.q, &d.k, &d.v, &d.o, &d.gu, &d.gate, &d.up, &d.down, &d.ple_gate,
                                           &d.ple_proj}) {
          if (W->rows == 0) continue;
          gpu::DeviceBuffer b(gpu::dequant_bytes(*W));
          gpu::dequant_weight(s, *W, pf_type_, b.data());
          pf_once_bytes_ += b.bytes();
          d.w16.emplace_back(W, std::move(b));
        }
      }
      s.sync();
    }
  }

  Device device() const override { return Device::CUDA; }
  std::string description() const override { return desc_; }
  const ModelConfig& config() const override { return cfg_; }

  std::unique_ptr<StepWorkspace> new_workspace() const override {
    auto ws = std::make_unique<CudaWorkspace>();
    const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
    const int64_t act_k = std::max({H, max_q_, max_i_});
    ws->args = gpu::DeviceBuffer(sizeof(gpu::StepArgs));
    ws->x = gpu::DeviceBuffer(H * 4);
    ws->x2 = gpu::DeviceBuffer(H * 4);
    ws->counters = gpu::DeviceBuffer(static_cast<size_t>(cfg_.n_heads) * 4);
    ws->counters.zero();
    ws->h = gpu::DeviceBuffer(H * 4);
    ws->act = gpu::DeviceBuffer(gpu::act_q8_bytes(act_k));
    ws->qkv = gpu::DeviceBuffer(max_qkv_ * 4);
    ws->q = gpu::DeviceBuffer(max_q_ * 4);
    ws->attn = gpu::DeviceBuffer(max_q_ * 4);
    ws->proj = gpu::DeviceBuffer(H * 4);
    ws->gu = gpu::DeviceBuffer(2 * max_i_ * 4);
    ws->g = gpu::DeviceBuffer(max_i_ * 4);
    ws->logits = gpu::DeviceBuffer(V * 4);
    ws->result = gpu::DeviceBuffer(8);
    if (ple_LP_ > 0) {
      ws->ple = gpu::DeviceBuffer(static_cast<size_t>(ple_LP_) * 4);
      ws->ple_tok = gpu::DeviceBuffer(static_cast<size_t>(ple_LP_) * 4);
    }
    return ws;
  }

  std::unique_ptr<KVCache> new_kv_cache(const KVCacheOptions& opt) const override {
    if (opt.type == KVType::INT8)
      throw Error("--device cuda: an int8 KV cache is not supported on the GPU yet (use --kv-type f16, bf16 or f32)");
    auto kv = std::make_unique<KVCache>(cfg_, opt);
    auto st = std::make_unique<CudaKV>();
    st->serial = g_kv_serial.fetch_add(1);
    st->max_tokens = opt.max_tokens;
    st->elem = opt.type == KVType::F16 ? gpu::KVElem::F16 : opt.type == KVType::BF16 ? gpu::KVElem::BF16 : gpu::KVElem::F32;
    const size_t eb = opt.type == KVType::F32 ? 4 : 2;
    for (int li = 0; li < cfg_.n_layers; ++li) {
      const LayerConfig& lc = cfg_.layers[li];
      if (lc.kv_source >= 0) {  // KV-shared (Gemma 4): reads layer kv_source's cache
        st->k.emplace_back();
        st->v.emplace_back();
        st->row_bytes.push_back(0);
        continue;
      }
      st->row_bytes.push_back(static_cast<size_t>(lc.n_kv_heads) * lc.head_dim * eb);
      const size_t bytes = static_cast<size_t>(opt.max_tokens) * lc.n_kv_heads * lc.head_dim * eb;
      st->k.emplace_back(bytes);
      st->v.emplace_back(bytes);
    }
    kv->set_device_state(std::move(st));
    return kv;
  }

  void prefill(const int32_t* tokens, int T, KVCache& kv, StepWorkspace& ws, LogitsMode mode,
               std::vector<float>& logits) const override {
    if (T <= 0) throw Error("forward: no tokens");
    CudaKV& st = check_cache(kv);
    check_room(kv, T, -1);
    for (int t = 0; t < T; ++t) check_token(tokens[t]);
    auto& w = static_cast<CudaWorkspace&>(ws);
    const int64_t V = cfg_.vocab_size;
    if (mode == LogitsMode::Last) logits.resize(static_cast<size_t>(V));
    if (mode == LogitsMode::All) logits.resize(static_cast<size_t>(T) * V);
    if (prefill_gemm_ && T >= pf_min_tokens_) {
      for (int c0 = 0; c0 < T; c0 += pf_chunk_) {
        const int n = std::min(pf_chunk_, T - c0);
        const bool last = c0 + n == T;
        float* out = mode == LogitsMode::All ? logits.data() + static_cast<size_t>(c0) * V
                     : mode == LogitsMode::Last && last ? logits.data() : nullptr;
        prefill_chunk(tokens + c0, n, kv, st, w, out, mode == LogitsMode::All);
      }
      w.stream.sync();
      return;
    }
    for (int t = 0; t < T; ++t) {
      step(tokens[t], kv, st, w);
      const bool want = mode == LogitsMode::All || (mode == LogitsMode::Last && t == T - 1);
      if (want) {
        float* dst = logits.data() + (mode == LogitsMode::All ? static_cast<size_t>(t) * V : 0);
        gpu::copy_to_host_async(w.stream, dst, w.logits.data(), static_cast<size_t>(V) * 4);
        w.stream.sync();
      }
    }
    w.stream.sync();
  }

  // Images' / audio's soft tokens (Model::forward's EmbedSpan): the GEMM prefill with those rows
  // in place of the token embeddings, their PLE rows the pad row (0), and bidirectional spans'
  // rows seeing keys to the span's end (attention_prefill's key_end; Gemma 4 "vision": sliding
  // layers only). Chunks never cut a bidirectional span (cuda_executor_prefill.cpp).
  void prefill_media(const int32_t* tokens, int T, const std::vector<EmbedSpan>& media, KVCache& kv,
                     StepWorkspace& ws, LogitsMode mode, std::vector<float>& logits) const override;

  void decode(const int32_t* tokens, int B, KVCache* const* kvs, StepWorkspace& ws,
              std::vector<float>& logits) const override {
    check_batch(tokens, B, kvs);
    auto& w = static_cast<CudaWorkspace&>(ws);
    const int64_t V = cfg_.vocab_size;
    logits.resize(static_cast<size_t>(B) * V);
    for (int b = 0; b < B; ++b) {
      step(tokens[b], *kvs[b], check_cache(*kvs[b]), w);
      gpu::copy_to_host_async(w.stream, logits.data() + static_cast<size_t>(b) * V, w.logits.data(),
                              static_cast<size_t>(V) * 4);
    }
    w.stream.sync();
  }

  void decode_argmax(const int32_t* tokens, int B, KVCache* const* kvs, StepWorkspace& ws,
                     int32_t* out) const override {
    check_batch(tokens, B, kvs);
    auto& w = static_cast<CudaWorkspace&>(ws);
    std::vector<uint64_t> keys(static_cast<size_t>(B));
    for (int b = 0; b < B; ++b) {
      step(tokens[b], *kvs[b], check_cache(*kvs[b]), w);
      gpu::copy_to_host_async(w.stream, &keys[b], w.result.data(), 8);
    }
    w.stream.sync();
    for (int b = 0; b < B; ++b) {
      const gpu::ArgmaxResult r = gpu::decode_argmax(keys[b]);
      out[b] = r.id < 0 ? 0 : r.id;
    }
  }

 private:
  CudaKV& check_cache(KVCache& kv) const {
    auto* st = dynamic_cast<CudaKV*>(kv.device_state());
    if (!st) throw Error("CUDA executor: this KV cache was not made by the CUDA executor (new_kv_cache)");
    if (kv.n_layers() != cfg_.n_layers)
      throw Error("KV cache has " + std::to_string(kv.n_layers()) + " layers, the model " + std::to_string(cfg_.n_layers));
    return *st;
  }
  void check_room(const KVCache& kv, int T, int row) const {
    if (kv.n_past() + T > kv.capacity())
      throw Error("context full: " + std::to_string(kv.n_past() + T) + " tokens do not fit the KV cache of " +
                  std::to_string(kv.capacity()) + (row >= 0 ? " (row " + std::to_string(row) + ")" : ""));
  }
  void check_token(int32_t id) const {
    if (id < 0 || id >= cfg_.vocab_size)
      throw Error("token id " + std::to_string(id) + " outside the vocabulary (size " + std::to_string(cfg_.vocab_size) + ")");
    if (cfg_.ple_dim > 0 && id >= cfg_.ple_vocab)
      throw Error("token id " + std::to_string(id) + " outside the per-layer-embedding vocabulary (size " +
                  std::to_string(cfg_.ple_vocab) + ")");
  }

  // Gemma 4 PLE: out [T, L·P] = E_ple[tokens[t]]·√P (blocks::ple_inputs' token part, on the host).
  void ple_token_rows(const int32_t* tokens, int T, std::vector<float>& out) const {
    const ops::Weight& E = m_.weights().ple_embed;
    const size_t rb = dtype_row_bytes(E.dtype, ple_LP_);
    const float sc = static_cast<float>(std::sqrt(static_cast<double>(cfg_.ple_dim)));
    out.resize(static_cast<size_t>(T) * ple_LP_);
    for (int t = 0; t < T; ++t) {
      float* r = out.data() + static_cast<size_t>(t) * ple_LP_;
      cpu::to_f32(static_cast<const uint8_t*>(E.data) + static_cast<size_t>(tokens[t]) * rb, E.dtype,
                  static_cast<size_t>(ple_LP_), r);
      for (int64_t i = 0; i < ple_LP_; ++i) r[i] *= sc;
    }
  }

  // Gemma 4 PLE inputs of T rows into ple_dev [T, L·P] from x0_dev [T, H] (the scaled embedding)
  // and tok_dev (E_ple[id]·√P on the device): the context projection (ple_context), then
  // ple_combine. T > 1 takes the GEMM (gemm: the chunk's cuBLAS handle; x16: scratch for a 16-bit
  // copy of x0). The prefill runs the two halves apart, the host's row gather in between.
  void ple_inputs(const gpu::Stream& s, int T, const float* x0_dev, void* act, const float* tok_dev, float* ple_dev,
                  const gpu::Gemm* gemm, void* x16, void* w16) const {
    ple_context(s, T, x0_dev, act, ple_dev, gemm, x16, w16);
    ple_mix(s, T, tok_dev, ple_dev);
  }
  // ple_dev ← x0·W_plmpᵀ (the PLE inputs' context part, before the norm and the mix).
  void ple_context(const gpu::Stream& s, int T, const float* x0_dev, void* act, float* ple_dev, const gpu::Gemm* gemm,
                   void* x16, void* w16) const {
    const int64_t H = cfg_.hidden_size;
    if (ple_raw_.data()) {
      if (gemm) gemm->run(gpu::GemmType::F32, ple_raw_.data(), ple_LP_, H, x0_dev, T, ple_dev, ple_LP_);
      else gpu::matvec_f32(s, ple_raw_.as<const float>(), ple_LP_, H, x0_dev, T, ple_dev, ple_LP_);
    } else if (gemm) {
      gpu::convert_rows(s, T, H, x0_dev, pf_type_, x16);
      gpu::dequant_weight(s, ple_tiled_, pf_type_, w16);
      gemm->run(pf_type_, w16, ple_LP_, H, x16, T, ple_dev, ple_LP_);
    } else {
      if (is_quantized(ple_tiled_.dtype)) gpu::quantize_act(s, x0_dev, H, act);
      gpu::matvec(s, ple_tiled_, x0_dev, act, ple_dev);
    }
  }
  // ple_dev ← (rmsnorm(ple_dev·H^-½) + tok)·2^-½ per layer slice (ple_combine).
  void ple_mix(const gpu::Stream& s, int T, const float* tok_dev, float* ple_dev) const {
    const int64_t H = cfg_.hidden_size;
    gpu::ple_combine(s, T, cfg_.n_layers, cfg_.ple_dim, ple_dev, tok_dev, ple_norm_.as<const float>(),
                     static_cast<float>(std::pow(static_cast<double>(H), -0.5)), cfg_.rms_norm_eps,
                     static_cast<float>(std::pow(2.0, -0.5)));
  }

  // Gemma 4's layer end on the decode step: x += rmsnorm(proj; post_ffw); the PLE gate (E2B,
  // E4B); x ·= layer scalar; h = rmsnorm(x; w_next) and its act (ple_block + forward's scalar).
  void layer_end_step(CudaWorkspace& w, bool prof, int li, const float* w_next) const;
  void check_batch(const int32_t* tokens, int B, KVCache* const* kvs) const {
    if (B <= 0) throw Error("decode: no rows");
    for (int b = 0; b < B; ++b) {
      if (!kvs[b]) throw Error("decode: row " + std::to_string(b) + " has no KV cache");
      for (int c = 0; c < b; ++c)
        if (kvs[c] == kvs[b]) throw Error("decode: rows " + std::to_string(c) + " and " + std::to_string(b) + " share a KV cache");
      check_cache(*kvs[b]);
      check_room(*kvs[b], 1, b);
      check_token(tokens[b]);
    }
  }

  // One token at kv.n_past(): host bookkeeping, args upload, graph replay (captured on first use).
  void step(int32_t token, KVCache& kv, CudaKV& st, CudaWorkspace& w) const {
    const int pos = kv.n_past();
    kv.begin_append(pos, 1);
    if (persistent_.grid > 0 && timing_ != 2) {
      step_persistent(token, pos, st, w);
      kv.commit(pos + 1);
      return;
    }
    const gpu::StepArgs a{token, pos};
    // Only the cluster attention depends on it: other steps keep one graph per cache.
    w.long_keys = fused_ && attn_cluster_ && pos + 1 > cluster_max_keys_;
    gpu::copy_to_device_async(w.stream, w.args.data(), &a, sizeof a);
    if (ple_LP_ > 0) {  // the token part of the PLE inputs, read by the captured step
      ple_token_rows(&token, 1, w.ple_host);
      gpu::copy_to_device_async(w.stream, w.ple_tok.data(), w.ple_host.data(), static_cast<size_t>(ple_LP_) * 4);
    }
    if (timing_ == 2) {
      ensure_partial(w, st);
      if (!w.timer) w.timer = std::make_unique<gpu::EventTimer>(w.stream);
      if (fused_) enqueue_step_fused(st, w, true);
      else enqueue_step(st, w, true);
      ++w.profiled_steps;
      kv.commit(pos + 1);
      return;
    }
    gpu::Graph& graph = step_graph(st, w);
    if (timing_ == 1) {
      if (!w.timer) w.timer = std::make_unique<gpu::EventTimer>(w.stream);
      w.timer->start();
      graph.launch();
      w.timer->stop();
      w.timed_ms += w.timer->elapsed_ms();
      ++w.timed_steps;
    } else {
      graph.launch();
    }
    kv.commit(pos + 1);
  }

  // The attention scratch for a cache of st.max_tokens; growing it drops the captured graphs
  // (they point to the old buffer).
  void ensure_partial(CudaWorkspace& w, const CudaKV& st) const;
  // The graph of the step for this cache in this workspace: found, or captured now (evicting
  // the least recently used beyond max_graphs_).
  gpu::Graph& step_graph(CudaKV& st, CudaWorkspace& w) const;

  // EG_CUDA_PREFILL=gemm|steps, EG_CUDA_PREFILL_CHUNK=N (tokens per chunk, default 512),
  // EG_CUDA_PREFILL_MIN=N (calls with fewer tokens take the step loop, default 2),
  // EG_CUDA_PREFILL_WEIGHTS=layer|once, EG_CUDA_PREFILL_TYPE=bf16|f16 (docs/cuda.md).
  void read_prefill_options() {
    auto env = [](const char* n) { const char* v = std::getenv(n); return std::string(v ? v : ""); };
    const std::string mode = env("EG_CUDA_PREFILL");
    if (!mode.empty() && mode != "gemm" && mode != "steps") throw Error("EG_CUDA_PREFILL must be gemm or steps, not '" + mode + "'");
    prefill_gemm_ = mode != "steps";
    if (!env("EG_CUDA_PREFILL_CHUNK").empty()) pf_chunk_ = std::max(1, std::atoi(env("EG_CUDA_PREFILL_CHUNK").c_str()));
    pf_chunk_ = std::min(pf_chunk_, 65535);
    if (!env("EG_CUDA_PREFILL_MIN").empty()) pf_min_tokens_ = std::max(1, std::atoi(env("EG_CUDA_PREFILL_MIN").c_str()));
    const std::string wm = env("EG_CUDA_PREFILL_WEIGHTS");
    if (!wm.empty() && wm != "layer" && wm != "once") throw Error("EG_CUDA_PREFILL_WEIGHTS must be layer or once, not '" + wm + "'");
    pf_once_ = wm == "once";
    const std::string ty = env("EG_CUDA_PREFILL_TYPE");
    if (!ty.empty() && ty != "bf16" && ty != "f16") throw Error("EG_CUDA_PREFILL_TYPE must be bf16 or f16, not '" + ty + "'");
    pf_type_ = ty == "f16" ? gpu::GemmType::F16 : gpu::GemmType::BF16;
    const std::string as = env("EG_CUDA_PREFILL_ATTN_SPLIT");
    if (!as.empty() && as != "0" && as != "1") throw Error("EG_CUDA_PREFILL_ATTN_SPLIT must be 0 or 1, not '" + as + "'");
    pf_attn_split_ = as != "0";
  }

  void ensure_prefill_scratch(CudaWorkspace& w, int n) const;

  // p.ple_tok [T, L·P] ← E_ple[tokens[t]]·√P: the rows as stored, staged and expanded on the
  // device (dequant_rows), or gathered on the host as ple_token_rows for a dtype it lacks.
  void upload_ple_token_rows(const int32_t* tokens, int T, PrefillScratch& p, const gpu::Stream& s) const;

  // y[t·ldy + n] = W·x_t: W's 16-bit copy (once) or W dequantized into the scratch now.
  void gemm(CudaWorkspace& w, const DevLayer& d, const gpu::DeviceWeight& W, const void* x16, int T, float* y,
            int64_t ldy) const;

  // One chunk of T tokens at kv.n_past() through every layer (prefill.h), then the LM head of
  // the last row (logits_out non-null) or of every row (all).
  // media (optional): embedding rows replacing rows of the chunk (relative to it), key_end
  // (optional, host [T]): each row's last key (absolute), for bidirectional spans.
  void prefill_chunk(const int32_t* tokens, int T, KVCache& kv, CudaKV& st, CudaWorkspace& w, float* logits_out,
                     bool all, const std::vector<EmbedSpan>* media = nullptr, const int32_t* key_end = nullptr) const;

  void matvec(const gpu::Stream& s, const gpu::DeviceWeight& W, const float* x, const void* act, float* y) const;

  // Runs f; when profiling, alone between two events, its time added to group g.
  template <class F>
  void op(CudaWorkspace& w, bool prof, int g, F&& f) const;

  void enqueue_step(CudaKV& st, CudaWorkspace& w, bool prof) const;

  // EG_CUDA_STEP=persistent (step_kernel.h): every layer in one cooperative launch, then the
  // fused LM head. Needs the fused step's weights (stacked q|k|v, interleaved gate|up), Q4_0/Q8_0
  // layer matrices and one head_dim; otherwise the graph step stays (the reason on stderr).
  void build_persistent_shape(bool asked);

  void step_persistent(int32_t token, int pos, CudaKV& st, CudaWorkspace& w) const;

  gpu::QKVHeadArgs qkv_args(const LayerConfig& lc, const DevLayer& d, gpu::KVElem kv) const {
    gpu::QKVHeadArgs qa;
    qa.n_heads = cfg_.n_heads;
    qa.n_kv_heads = lc.n_kv_heads;
    qa.head_dim = lc.head_dim;
    qa.rope_dims = lc.rope_dims;
    qa.q_norm_dev = cfg_.qk_norm ? d.q_norm.as<const float>() : nullptr;
    qa.k_norm_dev = cfg_.qk_norm ? d.k_norm.as<const float>() : nullptr;
    qa.w_offset = cfg_.norm_offset;
    qa.eps = cfg_.rms_norm_eps;
    qa.inv_freq_dev = d.inv_freq.as<const float>();
    qa.kv = kv;
    qa.v_norm = cfg_.v_norm;
    qa.v_from_k = d.v_from_k;
    qa.q_only = lc.kv_source >= 0;
    return qa;
  }
  gpu::AttentionArgs attn_args(const LayerConfig& lc, gpu::KVElem kv, int n_splits) const {
    gpu::AttentionArgs aa;
    aa.n_heads = cfg_.n_heads;
    aa.n_kv_heads = lc.n_kv_heads;
    aa.head_dim = lc.head_dim;
    aa.scale = cfg_.query_scale;
    aa.softcap = cfg_.attn_softcap;
    aa.window = lc.type == LayerType::Sliding ? cfg_.sliding_window : 0;
    aa.n_splits = n_splits;
    aa.kv = kv;
    return aa;
  }

  // The fused step (fused.h): embed; per layer qkv (residual + input norm in its input stage),
  // attention (q/k norm, RoPE, K/V write, splits and combine), o (quantize stage), gate|up
  // (residual + post-attn norm + pre-ffw norm stage, GELU·up epilogue), quantize_act + down
  // (or the down on a quantize stage: EG_CUDA_DOWN=stage); LM head (residual + post-ffw norm +
  // final norm stage, argmax). 6 kernels per layer (5 with EG_CUDA_DOWN=stage). Gemma 4: the
  // layer scalar in the next input stage, KV sharing / K=V / v_norm in the fused attention, and
  // with PLE 2 more kernels (gate on the FFW joint's stage with GELU·row in its epilogue, the
  // projection; 3 with EG_CUDA_PLE=separate): 8 per layer.
  // A Q6_K LM head: residual_norm + lm_head_argmax. The residual alternates between x and x2,
  // each input stage that applies a joint writing the other one.
  void enqueue_step_fused(CudaKV& st, CudaWorkspace& w, bool prof) const;

  int splits(int max_tokens) const {
    // About split_keys_ keys per split at a full context (default 8: 2 per warp), at most ~4 CTAs
    // per multiprocessor in total.
    const int by_len = (max_tokens + split_keys_ - 1) / split_keys_;
    const int cap = std::max(1, 4 * sm_count_ / std::max(1, cfg_.n_heads));
    return std::max(1, std::min(by_len, cap));
  }
  size_t partial_bytes(int max_tokens) const {
    return static_cast<size_t>(gpu::attention_partial_floats(cfg_.n_heads, max_hd_, splits(max_tokens))) * 4;
  }

  const Model& m_;
  const ModelConfig& cfg_;
  std::string desc_;
  int sm_count_ = 1;
  int split_keys_ = 8;
  bool split_min_keys_set_ = false;
  int split_min_keys_ = 32;  // fused attention: keys per used split at least (EG_CUDA_SPLIT_MIN_KEYS)
  bool fused_ = true;  // the fused step (EG_CUDA_FUSED=0: separate kernels)
  bool attn_split_ = false;  // fused step with qkv_heads + split attention (EG_CUDA_ATTN=split)
  bool attn_cluster_ = true;  // attention_cluster for contexts of ≤ cluster_max_keys_ keys (EG_CUDA_ATTN)
  int cluster_max_keys_ = 1024;  // EG_CUDA_CLUSTER_KEYS
  int cluster_ctas_ = 16;  // CTAs per cluster of attention_cluster (EG_CUDA_CLUSTER_CTAS)
  int cluster_heads_ = 1;  // q heads per cluster (EG_CUDA_CLUSTER_HEADS; 1 where it does not divide the group)
  size_t max_graphs_ = 16;  // captured graph steps kept per workspace (EG_CUDA_GRAPHS=N; 1 = the old behaviour)
  bool ple_separate_ = false;  // fused step, Gemma 4 PLE gate: matvec + gelu_mul_by + matvec (EG_CUDA_PLE=separate)
  // Fused step: quantize_act + plain down matvec (default; measured faster than the per-CTA input
  // stage over 6912 values), or EG_CUDA_DOWN=stage for the fused down.
  bool down_quant_ = true;
  // The GEMM prefill (read_prefill_options).
  bool prefill_gemm_ = true;
  int pf_chunk_ = 512, pf_min_tokens_ = 2;
  bool pf_once_ = false;
  size_t pf_once_bytes_ = 0;  // the 16-bit weight copies of EG_CUDA_PREFILL_WEIGHTS=once
  gpu::GemmType pf_type_ = gpu::GemmType::BF16;
  bool pf_attn_split_ = true;  // attention_prefill splits a chunk's keys (EG_CUDA_PREFILL_ATTN_SPLIT=0: never)
  int timing_ = 0;  // EG_CUDA_TIMING: 1 = GPU time per graph replay, 2 = eager per-kernel-group profile,
                  // 3 = prefill stage profile
  gpu::DeviceWeight embed_;
  gpu::DeviceBuffer final_norm_;
  bool gemma4_ = false;
  bool q6k_embed_ = false;  // the embedding / LM head is Q6_K (q6k.h)
  int64_t ple_LP_ = 0;             // Gemma 4 PLE: L·P (0: none)
  gpu::DeviceBuffer ple_raw_;      // per_layer_model_projection, f32 row-major (or:)
  gpu::DeviceWeight ple_tiled_;    // ... in a matvec dtype, tiled
  gpu::DeviceBuffer ple_norm_;     // per_layer_projection_norm [P]
  float embed_scale_ = 1.0f;
  std::vector<DevLayer> layers_;
  PersistentShape persistent_;  // grid 0: the graph step
  int64_t max_qkv_ = 0, max_q_ = 0, max_i_ = 0;
  int max_hd_ = 0;
};

}  // namespace eg::cudaexec
