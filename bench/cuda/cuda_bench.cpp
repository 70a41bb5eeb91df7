// cuda_bench: the CUDA matvec kernels on gemma-3-1b's decode shapes (batch 1), docs/cuda.md.
//
// Per shape and dtype: µs per matvec and GB/s (the weight's GGUF bytes / time), with enough
// distinct copies of the weight (≥ 4× L2) that every launch reads from HBM, all launches of one
// measurement captured in one CUDA graph (so the time excludes host launch overhead but includes
// each kernel's start and drain). Then one whole decode step's matvecs (26 layers × q, k, v, o,
// gate, up, down + LM head, distinct weights) as one graph, against the bandwidth bound
// (bytes / measured device-to-device copy bandwidth).
// Usage: cuda_bench [--quick]   (quick: fewer repetitions)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "quant/quant.h"

namespace gpu = eg::cuda;
using eg::DType;

namespace {

int g_reps = 20;

// A random weight in its file layout (values are random, so its bytes are valid blocks).
std::vector<uint8_t> make_weight(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  std::vector<float> row(static_cast<size_t>(cols));
  const size_t rb = eg::dtype_row_bytes(t, cols);
  std::vector<uint8_t> w(static_cast<size_t>(rows) * rb);
  for (int64_t n = 0; n < rows; ++n) {
    for (auto& v : row) v = u(rng);
    uint8_t* dst = w.data() + static_cast<size_t>(n) * rb;
    if (t == DType::BF16 || t == DType::F16) {
      auto* h = reinterpret_cast<uint16_t*>(dst);
      for (int64_t k = 0; k < cols; ++k) h[k] = t == DType::BF16 ? eg::f32_to_bf16(row[k]) : eg::f32_to_f16(row[k]);
    } else {
      eg::quant::quantize_row(t, row.data(), cols, dst);
    }
  }
  return w;
}

double copy_bandwidth_gbps(gpu::Stream& s) {
  const size_t bytes = size_t{2} << 30;  // 2 GiB each way
  gpu::DeviceBuffer a(bytes), b(bytes);
  auto st = static_cast<cudaStream_t>(s.handle());
  cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, st);
  gpu::EventTimer t(s);
  t.start();
  for (int i = 0; i < 5; ++i) cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, st);
  t.stop();
  const double ms = t.elapsed_ms() / 5;
  return 2.0 * bytes / (ms * 1e-3) / 1e9;  // read + write
}

struct Activations {
  gpu::DeviceBuffer x, act, y;
  explicit Activations(int64_t K, int64_t N)
      : x(static_cast<size_t>(K) * 4), act(gpu::act_q8_bytes(K)), y(static_cast<size_t>(N) * 4) {}
};

void fill_input(gpu::Stream& s, Activations& a, int64_t K) {
  std::vector<float> x(static_cast<size_t>(K));
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0, 1);
  for (auto& v : x) v = d(rng);
  a.x.upload(x.data(), x.size() * 4);
  gpu::quantize_act(s, a.x.as<float>(), K, a.act.data());
  s.sync();
}

// Median-free simple timing: capture `per_graph` launches in one graph, replay it g_reps times.
template <class F>
double time_us_per_call(gpu::Stream& s, int per_graph, F enqueue) {
  gpu::Graph g;
  g.begin_capture(s);
  for (int i = 0; i < per_graph; ++i) enqueue(i);
  g.end_capture();
  g.launch();  // warm-up
  s.sync();
  gpu::EventTimer t(s);
  t.start();
  for (int r = 0; r < g_reps; ++r) g.launch();
  t.stop();
  return t.elapsed_ms() * 1e3 / (static_cast<double>(g_reps) * per_graph);
}

struct ShapeRow {
  const char* name;
  int64_t rows, cols;
  int per_step;  // how many of these in one decode step
};

void bench_shapes(gpu::Stream& s, DType t, const std::vector<ShapeRow>& shapes, double bw_gbps,
                  size_t l2_bytes) {
  std::printf("\n%s weights: one matvec (x quantized beforehand; graph of distinct copies)\n", eg::dtype_name(t));
  std::printf("| shape | MB | µs (auto wk) | GB/s | %% of copy bw | best wk | µs (best) | GB/s (best) | µs (PDL) | GB/s (PDL) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  double step_us = 0, step_pdl_us = 0, step_bytes = 0;
  for (const ShapeRow& sh : shapes) {
    const std::vector<uint8_t> host = make_weight(t, sh.rows, sh.cols, 1);
    const size_t bytes = static_cast<size_t>(sh.rows) * eg::dtype_row_bytes(t, sh.cols);
    const int copies = static_cast<int>(std::max<size_t>(1, (4 * l2_bytes + bytes - 1) / bytes));
    std::vector<gpu::DeviceWeight> ws;
    for (int c = 0; c < copies; ++c) ws.push_back(gpu::upload_weight(host.data(), t, sh.rows, sh.cols));
    Activations a(sh.cols, sh.rows);
    fill_input(s, a, sh.cols);
    const bool quant = eg::is_quantized(t);
    const int per_graph = std::max(copies, 64);
    auto run = [&](int wk) {
      gpu::MatvecConfig cfg;
      cfg.warps_per_tile = wk;
      return time_us_per_call(s, per_graph, [&](int i) {
        gpu::matvec(s, ws[i % copies], quant ? nullptr : a.x.as<float>(), quant ? a.act.data() : nullptr,
                    a.y.as<float>(), cfg);
      });
    };
    const double us_auto = run(0);
    double best = us_auto;
    int best_wk = 0;
    for (int wk : {1, 2, 4, 8}) {
      const double us = run(wk);
      if (us < best) best = us, best_wk = wk;
    }
    gpu::set_programmatic_launch(true);
    const double us_pdl = run(0);
    gpu::set_programmatic_launch(false);
    const double gbps = bytes / (us_auto * 1e-6) / 1e9, gbps_best = bytes / (best * 1e-6) / 1e9;
    std::printf("| %s %lldx%lld | %.2f | %.2f | %.0f | %.0f%% | %s | %.2f | %.0f | %.2f | %.0f |\n", sh.name,
                static_cast<long long>(sh.rows), static_cast<long long>(sh.cols), bytes / 1e6, us_auto, gbps,
                100.0 * gbps / bw_gbps, best_wk ? std::to_string(best_wk).c_str() : "auto", best, gbps_best,
                us_pdl, bytes / (us_pdl * 1e-6) / 1e9);
    step_us += sh.per_step * us_auto;
    step_pdl_us += sh.per_step * us_pdl;
    step_bytes += static_cast<double>(sh.per_step) * bytes;
  }
  std::printf("sum over one decode step (counts × µs, auto wk): %.1f µs (PDL: %.1f µs) for %.1f MB; bound at %.0f GB/s: %.1f µs\n",
              step_us, step_pdl_us, step_bytes / 1e6, bw_gbps, step_bytes / (bw_gbps * 1e3));
}

// One decode step's matvecs with distinct per-layer weights, captured as one graph.
void bench_step(gpu::Stream& s, DType t, DType lm_t, double bw_gbps, bool pdl) {
  gpu::set_programmatic_launch(pdl);
  constexpr int kLayers = 26;
  const int64_t H = 1152, Q = 1024, KV = 256, F = 6912, V = 262144;
  struct W7 {
    gpu::DeviceWeight q, k, v, o, gate, up, down;
  };
  const auto hq = make_weight(t, Q, H, 1), hk = make_weight(t, KV, H, 2), ho = make_weight(t, H, Q, 3),
             hg = make_weight(t, F, H, 4), hd = make_weight(t, H, F, 5), hl = make_weight(lm_t, V, H, 6);
  std::vector<W7> L(kLayers);
  double bytes = 0;
  for (auto& l : L) {
    l.q = gpu::upload_weight(hq.data(), t, Q, H);
    l.k = gpu::upload_weight(hk.data(), t, KV, H);
    l.v = gpu::upload_weight(hk.data(), t, KV, H);
    l.o = gpu::upload_weight(ho.data(), t, H, Q);
    l.gate = gpu::upload_weight(hg.data(), t, F, H);
    l.up = gpu::upload_weight(hg.data(), t, F, H);
    l.down = gpu::upload_weight(hd.data(), t, H, F);
    for (auto* w : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) bytes += w->gguf_bytes();
  }
  const gpu::DeviceWeight lm = gpu::upload_weight(hl.data(), lm_t, V, H);
  const double lm_bytes = lm.gguf_bytes();
  Activations ah(H, F), aq(Q, H), af(F, H);
  fill_input(s, ah, H);
  fill_input(s, aq, Q);
  fill_input(s, af, F);
  gpu::DeviceBuffer yq(Q * 4), yk(KV * 4), yv(KV * 4), yo(H * 4), yg(F * 4), yu(F * 4), yd(H * 4), res(8);
  const bool quant = eg::is_quantized(t), lm_quant = eg::is_quantized(lm_t);
  auto mv = [&](const gpu::DeviceWeight& w, Activations& a, gpu::DeviceBuffer& y) {
    gpu::matvec(s, w, quant ? nullptr : a.x.as<float>(), quant ? a.act.data() : nullptr, y.as<float>());
  };
  auto step = [&](bool with_quantize) {
    for (auto& l : L) {
      if (with_quantize && quant) gpu::quantize_act(s, ah.x.as<float>(), H, ah.act.data());
      mv(l.q, ah, yq);
      mv(l.k, ah, yk);
      mv(l.v, ah, yv);
      if (with_quantize && quant) gpu::quantize_act(s, aq.x.as<float>(), Q, aq.act.data());
      mv(l.o, aq, yo);
      if (with_quantize && quant) gpu::quantize_act(s, ah.x.as<float>(), H, ah.act.data());
      mv(l.gate, ah, yg);
      mv(l.up, ah, yu);
      if (with_quantize && quant) gpu::quantize_act(s, af.x.as<float>(), F, af.act.data());
      mv(l.down, af, yd);
    }
  };
  const double layers_us = time_us_per_call(s, 1, [&](int) { step(false); });
  const double layers_q_us = time_us_per_call(s, 1, [&](int) { step(true); });
  const double lm_us = time_us_per_call(s, 1, [&](int) {
    gpu::lm_head_argmax(s, lm, lm_quant ? nullptr : ah.x.as<float>(), lm_quant ? ah.act.data() : nullptr,
                        0.0f, res.as<uint64_t>());
  });
  const double all_us = time_us_per_call(s, 1, [&](int) {
    step(true);
    gpu::lm_head_argmax(s, lm, lm_quant ? nullptr : ah.x.as<float>(), lm_quant ? ah.act.data() : nullptr,
                        0.0f, res.as<uint64_t>());
  });
  const double bound_layers = bytes / (bw_gbps * 1e3), bound_lm = lm_bytes / (bw_gbps * 1e3);
  gpu::set_programmatic_launch(false);
  std::printf("\ndecode step of gemma-3-1b, %s layers + %s LM head, one graph (26 × 7 matvecs = 182 kernels), PDL %s\n",
              eg::dtype_name(t), eg::dtype_name(lm_t), pdl ? "on" : "off");
  std::printf("| part | MB | µs | bound µs | GB/s | %% of bound |\n|---|---|---|---|---|---|\n");
  std::printf("| 182 layer matvecs | %.1f | %.1f | %.1f | %.0f | %.0f%% |\n", bytes / 1e6, layers_us, bound_layers,
              bytes / (layers_us * 1e3), 100 * bound_layers / layers_us);
  std::printf("| + 104 quantize_act launches | %.1f | %.1f | %.1f | %.0f | %.0f%% |\n", bytes / 1e6, layers_q_us,
              bound_layers, bytes / (layers_q_us * 1e3), 100 * bound_layers / layers_q_us);
  std::printf("| LM head + argmax 262144x1152 | %.1f | %.1f | %.1f | %.0f | %.0f%% |\n", lm_bytes / 1e6, lm_us,
              bound_lm, lm_bytes / (lm_us * 1e3), 100 * bound_lm / lm_us);
  std::printf("| whole step (matvecs + quantize + LM head) | %.1f | %.1f | %.1f | %.0f | %.0f%% |\n",
              (bytes + lm_bytes) / 1e6, all_us, bound_layers + bound_lm, (bytes + lm_bytes) / (all_us * 1e3),
              100 * (bound_layers + bound_lm) / all_us);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::string(argv[1]) == "--quick") g_reps = 5;
    if (!gpu::device_available()) {
      std::printf("cuda_bench: no CUDA device\n");
      return 0;
    }
    const gpu::DeviceInfo info = gpu::device_info();
    gpu::Stream s;
    const double bw = copy_bandwidth_gbps(s);
    std::printf("%s, %d SMs, L2 %.0f MB; device-to-device copy: %.0f GB/s (read + write)\n", info.name.c_str(),
                info.sm_count, info.l2_bytes / 1e6, bw);
    const std::vector<ShapeRow> shapes = {
        {"q", 1024, 1152, 26},      {"k/v", 256, 1152, 52},      {"o", 1152, 1024, 26},
        {"gate/up", 6912, 1152, 52}, {"down", 1152, 6912, 26},   {"lm_head", 262144, 1152, 1}};
    for (DType t : {DType::Q4_0, DType::Q8_0, DType::BF16}) bench_shapes(s, t, shapes, bw, info.l2_bytes);
    {  // the floor: a one-CTA kernel (quantize_act of 32 values), 256 of them in one graph
      gpu::DeviceBuffer x(32 * 4), act(gpu::act_q8_bytes(32));
      x.zero();
      for (bool pdl : {false, true}) {
        gpu::set_programmatic_launch(pdl);
        const double us = time_us_per_call(s, 256, [&](int) { gpu::quantize_act(s, x.as<float>(), 32, act.data()); });
        std::printf("\nfloor: one tiny kernel in a graph, PDL %s: %.2f µs\n", pdl ? "on" : "off", us);
      }
      gpu::set_programmatic_launch(false);
    }
    for (bool pdl : {false, true}) {
      bench_step(s, DType::Q4_0, DType::Q4_0, bw, pdl);
      bench_step(s, DType::Q4_0, DType::Q8_0, bw, pdl);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_bench: %s\n", e.what());
    return 1;
  }
}
