// AWQ over a whole model: calibration through the matmul observer, then per layer the scale
// searches and exact folds described in awq.h (Lin et al. 2023, arXiv:2306.00978).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "core/progress.h"
#include "ops/ops.h"
#include "quant/awq.h"

namespace eg::quant {

namespace {

// Per-channel Σ|x| over every row a linear saw, plus every `stride`-th row (up to max_rows).
struct Capture {
  int64_t K = 0;
  std::vector<double> sum_abs;
  int64_t count = 0, stride = 1, max_rows = 0, n_sample = 0;
  std::vector<float> sample;  // [n_sample, K]
  std::vector<double> mean_abs() const {
    std::vector<double> m(K);
    for (int64_t k = 0; k < K; ++k) m[k] = count ? sum_abs[k] / static_cast<double>(count) : 0.0;
    return m;
  }
};

struct CalibState {
  std::unordered_map<const void*, Capture*> by_ptr;
};

void observe(const ops::Weight& W, const float* x, int64_t T, void* user) {
  auto* st = static_cast<CalibState*>(user);
  const auto it = st->by_ptr.find(W.data);
  if (it == st->by_ptr.end()) return;
  Capture& c = *it->second;
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * c.K;
    for (int64_t k = 0; k < c.K; ++k) c.sum_abs[k] += std::fabs(static_cast<double>(xt[k]));
    if (c.count % c.stride == 0 && c.n_sample < c.max_rows) {
      c.sample.insert(c.sample.end(), xt, xt + c.K);
      ++c.n_sample;
    }
    ++c.count;
  }
}

struct ObserverOff {
  ~ObserverOff() { ops::set_matmul_observer(nullptr, nullptr); }
};

// An f32 working copy of one weight or norm.
struct Mat {
  std::vector<float> w;
  int64_t N = 0, K = 0;  // norms: N = 1, K = n
  bool present = false, modified = false;
};

Mat load(const ops::Weight& w, const char* what, int layer) {
  Mat m;
  if (!w.data) return m;
  if (is_quantized(w.dtype))
    throw Error("awq: layer " + std::to_string(layer) + " " + what + " is " + dtype_name(w.dtype) +
                "; AWQ needs a float (F32/F16/BF16) model");
  m.N = w.rows;
  m.K = w.cols;
  m.w.resize(static_cast<size_t>(m.N * m.K));
  cpu::to_f32(w.data, w.dtype, m.w.size(), m.w.data());
  m.present = true;
  return m;
}

Mat load_norm(const NormWeight& w) {
  Mat m;
  if (!w.data) return m;
  m.N = 1;
  m.K = w.n;
  m.w.resize(static_cast<size_t>(w.n));
  cpu::to_f32(w.data, w.dtype, m.w.size(), m.w.data());
  m.present = true;
  return m;
}

struct Member {
  AwqSlot slot;
  Mat* m;
};

}  // namespace

AwqResult awq(const Model& model, const std::vector<int32_t>& calib_tokens, const AwqOptions& opt) {
  const ModelConfig& cfg = model.config();
  const ModelWeights& mw = model.weights();
  if (opt.grid < 1) throw Error("awq: grid must be >= 1");
  if (opt.sample_rows < 1) throw Error("awq: sample_rows must be >= 1");
  if (opt.span < 1) throw Error("awq: span must be >= 1");
  if (calib_tokens.size() < 2) throw Error("awq: need at least 2 calibration tokens");
  auto log = [&](const std::string& s) {
    if (opt.log) opt.log(s);
  };
  auto target = [&](int l, AwqSlot s) { return opt.target_for ? opt.target_for(l, s) : opt.target; };

  // 1. Calibration: one capture per linear input (q for q/k/v, gate for gate/up, o, down).
  const int L = cfg.n_layers;
  const int64_t n_tok = static_cast<int64_t>(calib_tokens.size());
  std::vector<Capture> caps(static_cast<size_t>(L) * 4);
  CalibState state;
  for (int l = 0; l < L; ++l) {
    const LayerWeights& lw = mw.layers[l];
    const ops::Weight* ws[4] = {&lw.q, &lw.o, &lw.gate, &lw.down};
    for (int j = 0; j < 4; ++j) {
      Capture& c = caps[l * 4 + j];
      c.K = ws[j]->cols;
      c.sum_abs.assign(static_cast<size_t>(c.K), 0.0);
      c.max_rows = opt.sample_rows;
      c.stride = std::max<int64_t>(1, n_tok / opt.sample_rows);
      if (ws[j]->data) state.by_ptr[ws[j]->data] = &c;
    }
  }
  {
    ObserverOff off;
    ops::set_matmul_observer(observe, &state);
    ForwardScratch scratch;
    std::vector<float> logits;
    ProgressTask progress(opt.progress, "awq: calibration", n_tok, ProgressUnit::Tokens);
    for (int64_t start = 0; start < n_tok; start += opt.span) {
      const int len = static_cast<int>(std::min<int64_t>(opt.span, n_tok - start));
      KVCache kv(cfg, len);
      model.forward(calib_tokens.data() + start, len, kv, scratch, LogitsMode::None, logits);
      progress.update(start + len);
    }
    progress.finish();
  }

  AwqResult res;
  res.calib_tokens = n_tok;
  const float off = cfg.norm_offset;
  ProgressTask progress(opt.progress, "awq: search", L, ProgressUnit::Layers);
  for (int l = 0; l < L; ++l) {
    const LayerWeights& lw = mw.layers[l];
    const LayerConfig& lc = cfg.layers[l];
    Mat q = load(lw.q, "q_proj", l), k = load(lw.k, "k_proj", l), v = load(lw.v, "v_proj", l),
        o = load(lw.o, "o_proj", l), gate = load(lw.gate, "gate_proj", l), up = load(lw.up, "up_proj", l),
        down = load(lw.down, "down_proj", l);
    Mat in_norm = load_norm(lw.input_norm), ffw_norm = load_norm(lw.pre_ffw_norm);
    Capture& c_qkv = caps[l * 4 + 0];
    Capture& c_o = caps[l * 4 + 1];
    Capture& c_ffn = caps[l * 4 + 2];
    Capture& c_down = caps[l * 4 + 3];

    // Searches one group; returns its scales (empty: unscaled) after scaling the members' columns.
    auto run_group = [&](const char* name, const Capture& cap, const std::vector<Member>& members,
                         const std::vector<double>& mean_abs, const std::string& skip) {
      AwqGroupReport rep;
      rep.layer = l;
      rep.group = name;
      std::vector<float> none;
      if (!skip.empty()) {
        rep.note = skip;
        res.groups.push_back(rep);
        return none;
      }
      std::vector<const float*> ws;
      std::vector<int64_t> rows;
      std::vector<RowRoundTrip> qs;
      for (const Member& mb : members) {
        const DType t = target(l, mb.slot);
        if (!row_fits_blocks(t, mb.m->K)) {
          rep.note = std::string(awq_slot_name(mb.slot)) + " rows of " + std::to_string(mb.m->K) + " are not a multiple of " +
                     dtype_name(t) + "'s block";
          res.groups.push_back(rep);
          return none;
        }
        ws.push_back(mb.m->w.data());
        rows.push_back(mb.m->N);
        qs.push_back(round_trip_of(t));
      }
      const AwqScaleSearch r = awq_search_scales(ws, rows, cap.K, cap.sample.data(), cap.n_sample, mean_abs, opt.grid, qs);
      rep.alpha = r.alpha;
      rep.err_plain = r.err_plain;
      rep.err_awq = r.err_best;
      res.groups.push_back(rep);
      char msg[160];
      std::snprintf(msg, sizeof msg, "awq: layer %d %s: alpha %.2f, sample error %.4g -> %.4g", l, name, r.alpha,
                    r.err_plain, r.err_best);
      log(msg);
      if (r.alpha == 0.0f) return none;
      for (const Member& mb : members) {
        for (int64_t n = 0; n < mb.m->N; ++n)
          for (int64_t kk = 0; kk < mb.m->K; ++kk) mb.m->w[n * mb.m->K + kk] *= r.scales[kk];
        mb.m->modified = true;
      }
      return r.scales;
    };
    auto fold_norm = [&](Mat& nm, const std::vector<float>& s) {
      for (int64_t i = 0; i < nm.K; ++i) nm.w[i] = (off + nm.w[i]) / s[i] - off;
      nm.modified = true;
    };
    auto fold_rows = [&](Mat& m, const std::vector<float>& s_of_row) {
      for (int64_t n = 0; n < m.N; ++n)
        for (int64_t kk = 0; kk < m.K; ++kk) m.w[n * m.K + kk] /= s_of_row[n];
      m.modified = true;
    };

    // q/k/v ← input_layernorm.
    std::vector<Member> qkv = {{AwqSlot::Q, &q}};
    if (k.present) qkv.push_back({AwqSlot::K, &k});
    if (v.present) qkv.push_back({AwqSlot::V, &v});
    const std::vector<float> s_qkv = run_group("qkv", c_qkv, qkv, c_qkv.mean_abs(), "");
    if (!s_qkv.empty()) fold_norm(in_norm, s_qkv);

    // o ← v rows, one scale per (KV head, channel): exact only when V is this layer's own, plain.
    std::string o_skip;
    if (!opt.fold_o_into_v) o_skip = "disabled";
    else if (cfg.v_norm) o_skip = "v_norm (scale-less RMSNorm of V)";
    else if (lc.kv_source >= 0) o_skip = "KV-shared layer";
    else if (lc.k_eq_v) o_skip = "K=V layer";
    else if (!v.present) o_skip = "no v_proj";
    const int64_t hd = lc.head_dim, nh = cfg.n_heads, nkv = lc.n_kv_heads, grp = nkv > 0 ? nh / nkv : 1;
    std::vector<double> a_o = c_o.mean_abs();
    if (o_skip.empty()) {  // average over the query heads of each KV group
      for (int64_t g = 0; g < nkv; ++g)
        for (int64_t d = 0; d < hd; ++d) {
          double m = 0;
          for (int64_t h = g * grp; h < (g + 1) * grp; ++h) m += a_o[h * hd + d];
          m /= static_cast<double>(grp);
          for (int64_t h = g * grp; h < (g + 1) * grp; ++h) a_o[h * hd + d] = m;
        }
    }
    const std::vector<float> s_o = run_group("o", c_o, {{AwqSlot::O, &o}}, a_o, o_skip);
    if (!s_o.empty()) {
      std::vector<float> per_row(static_cast<size_t>(v.N));
      for (int64_t g = 0; g < nkv; ++g)
        for (int64_t d = 0; d < hd; ++d) per_row[g * hd + d] = s_o[(g * grp) * hd + d];
      fold_rows(v, per_row);
    }

    // gate/up ← pre_feedforward_layernorm.
    const std::vector<float> s_ffn =
        run_group("gate_up", c_ffn, {{AwqSlot::Gate, &gate}, {AwqSlot::Up, &up}}, c_ffn.mean_abs(), "");
    if (!s_ffn.empty()) fold_norm(ffw_norm, s_ffn);

    // down ← up's rows (gelu(gate)·(up/s) = (gelu(gate)·up)/s).
    const std::vector<float> s_down = run_group("down", c_down, {{AwqSlot::Down, &down}}, c_down.mean_abs(), "");
    if (!s_down.empty()) fold_rows(up, s_down);

    // Optional clipping, on the scaled weights with their scaled inputs.
    if (opt.clip) {
      auto clip = [&](AwqSlot slot, Mat& m, const Capture& cap, const std::vector<float>& s) {
        if (!m.present) return;
        const DType t = target(l, slot);
        const int64_t block = dtype_block_elems(t);
        if (!is_quantized(t) || !row_fits_blocks(t, m.K)) return;
        const int64_t S = std::min<int64_t>(cap.n_sample, 128);
        std::vector<float> xs(cap.sample.begin(), cap.sample.begin() + S * cap.K);
        if (!s.empty())
          for (int64_t i = 0; i < S; ++i)
            for (int64_t kk = 0; kk < cap.K; ++kk) xs[i * cap.K + kk] /= s[kk];
        awq_clip_weight(m.w.data(), m.N, m.K, xs.data(), S, block, opt.clip_steps, round_trip_of(t));
        m.modified = true;
      };
      clip(AwqSlot::Q, q, c_qkv, s_qkv);
      clip(AwqSlot::K, k, c_qkv, s_qkv);
      clip(AwqSlot::V, v, c_qkv, s_qkv);
      clip(AwqSlot::O, o, c_o, s_o);
      clip(AwqSlot::Gate, gate, c_ffn, s_ffn);
      clip(AwqSlot::Up, up, c_ffn, s_ffn);
      clip(AwqSlot::Down, down, c_down, s_down);
      log("awq: layer " + std::to_string(l) + " clipped");
    }

    const std::pair<AwqSlot, Mat*> out[] = {{AwqSlot::Q, &q},         {AwqSlot::K, &k},         {AwqSlot::V, &v},
                                            {AwqSlot::O, &o},         {AwqSlot::Gate, &gate},   {AwqSlot::Up, &up},
                                            {AwqSlot::Down, &down},   {AwqSlot::InputNorm, &in_norm},
                                            {AwqSlot::PreFfwNorm, &ffw_norm}};
    for (const auto& [slot, m] : out) {
      if (!m->present || !m->modified) continue;
      AwqTensor t;
      t.layer = l;
      t.slot = slot;
      t.shape = m->N == 1 && (slot == AwqSlot::InputNorm || slot == AwqSlot::PreFfwNorm)
                    ? std::vector<int64_t>{m->K}
                    : std::vector<int64_t>{m->N, m->K};
      t.data = std::move(m->w);
      res.tensors.push_back(std::move(t));
    }
    progress.update(l + 1);
  }
  progress.finish();
  return res;
}

}  // namespace eg::quant
