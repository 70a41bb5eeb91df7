// ops::matmul / ops::matmul_fused / ops::matmul_gelu_mul for every weight dtype (ops.h contract).
//   F32 / F16 / BF16: f32 dot products (backend/cpu/kernels.h), 4 tokens per weight-row read.
//   Block-quantized weights: the activation rows are quantized once per call and weight type
//   (ActQ8 or Q8_K, backend/cpu/quant_kernels.h), then integer block dots; weights with a packed
//   copy (Weight::packed, backend/cpu/packed.h) go to the interleaved kernels, 64 rows per task
//   (and chunks of the tokens when a task would be long). matmul_gelu_mul forms each GeGLU input
//   row just before quantizing it.
// Threads (backend/cpu/thread_pool.h): one dispatch over chunks of 16 output rows of every
// product of the call (the q/k/v projections of a layer are one dispatch, not three). Each output
// element is one dot product with a fixed arithmetic order, so it does not depend on T, on
// batching, on the chunking or on the thread count.
#include <algorithm>
#include <string>
#include <vector>

#include "backend/cpu/activations.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/packed.h"
#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "ops/ops.h"

namespace eg::ops {
namespace {

constexpr int64_t kRowChunk = 16;     // output rows per task
constexpr int64_t kPackedChunk = 64;  // output rows per task of a packed weight (4 groups of 16)
// A packed task also splits the tokens when its rows × tokens × K would exceed this many MACs
// (prefill's MLP down projection: 64 × 512 × 6912 = 226 M, ~1.3 ms on this VM), into chunks of a
// multiple of 16 tokens (the kernels' token tiles: 8 for VNNI, 16 for AMX), so that the last tasks of a dispatch leave
// little idle time. A token's result does not depend on the chunk it is in.
constexpr int64_t kPackedTaskMacs = int64_t{48} << 20;

// Rows [n0, n1) of y = x·Wᵀ for float weights.
void float_rows(const float* x, int64_t T, const Weight& W, int64_t n0, int64_t n1, float* y) {
  const int64_t N = W.rows, K = W.cols;
  const size_t row_bytes = dtype_row_bytes(W.dtype, K);
  const auto* wbase = static_cast<const uint8_t*>(W.data);
  for (int64_t n = n0; n < n1; ++n) {
    const void* wrow = wbase + static_cast<size_t>(n) * row_bytes;
    int64_t t = 0;
    for (; t + 4 <= T; t += 4) {
      const float* xs[4] = {x + t * K, x + (t + 1) * K, x + (t + 2) * K, x + (t + 3) * K};
      float out[4];
      cpu::dot4(xs, wrow, W.dtype, static_cast<size_t>(K), out);
      for (int j = 0; j < 4; ++j) y[(t + j) * N + n] = out[j];
    }
    for (; t < T; ++t) y[t * N + n] = cpu::dot(x + t * K, wrow, W.dtype, static_cast<size_t>(K));
  }
}

void check_weight(const Weight& W) {
  if (!is_quantized(W.dtype)) return;
  if (!cpu::qgemm_supports(W.dtype))
    throw Error(std::string("matmul: weight type ") + dtype_name(W.dtype) + " is not supported as a weight");
  if (!row_fits_blocks(W.dtype, W.cols))
    throw Error("matmul: " + std::string(dtype_name(W.dtype)) + " weight with " + std::to_string(W.cols) +
                " columns (not a multiple of the block size " + std::to_string(dtype_block_elems(W.dtype)) + ")");
}

// One product of a fused call: its weight, output, first task and (quantized) activations.
struct Part {
  const Weight* W;
  float* y;
  int64_t first_task = 0;
  int acts = -1;  // index into the quantized activation sets, -1 for float weights
  int64_t chunk = kRowChunk;
  int64_t t_chunk = 0;  // tokens per task (packed weights); 0: all T
  int64_t t_tasks = 1;  // token chunks per row chunk
  bool packed = false;
};

struct ActSet {
  DType dtype;
  size_t row_bytes;
  std::vector<uint8_t> data;
};

// matmul_fused, with the activation rows made on the fly as gelu_tanh(x_t) ⊙ up_t when up is
// given (only for quantized weights: matmul_gelu_mul).
void matmul_impl(const float* x, const float* up, int64_t T, std::initializer_list<MatmulOut> outs) {
  if (outs.size() == 0) return;
  const int64_t K = outs.begin()->W->cols;
  std::vector<Part> parts;
  std::vector<ActSet> acts;
  parts.reserve(outs.size());
  int64_t tasks = 0, work = 0;
  for (const MatmulOut& o : outs) {
    if (o.W->cols != K)
      throw Error("matmul_fused: weights of " + std::to_string(o.W->cols) + " and " + std::to_string(K) + " columns");
    check_weight(*o.W);
    if (!up) notify_matmul_observer(*o.W, x, T);  // AWQ calibration hook (ops.h); no-op unless set
    Part p{o.W, o.y, tasks};
    if (is_quantized(o.W->dtype)) {
      for (size_t a = 0; a < acts.size() && p.acts < 0; ++a)
        if (acts[a].dtype == o.W->dtype) p.acts = static_cast<int>(a);
      if (p.acts < 0) {
        p.acts = static_cast<int>(acts.size());
        const size_t rb = cpu::act_row_bytes(o.W->dtype, K);
        acts.push_back({o.W->dtype, rb, std::vector<uint8_t>(static_cast<size_t>(T) * rb)});
      }
    }
    p.packed = o.W->packed != nullptr && cpu::packed_available(o.W->dtype);
    if (p.packed) {
      p.chunk = kPackedChunk;
      const int64_t macs = kPackedChunk * T * K;
      if (p.acts >= 0 && T > 8 && macs > kPackedTaskMacs) {
        const int64_t n = (macs + kPackedTaskMacs - 1) / kPackedTaskMacs;
        p.t_chunk = ((T + n - 1) / n + 15) / 16 * 16;
        p.t_tasks = (T + p.t_chunk - 1) / p.t_chunk;
      }
    }
    parts.push_back(p);
    tasks += (o.W->rows + p.chunk - 1) / p.chunk * p.t_tasks;
    work += o.W->rows * K * T;
  }
  // Tiny products (router logits, toy models) stay on the calling thread: a dispatch costs more.
  const int threads = work >= (1 << 16) ? 0 : 1;

  // Activation rows, once per weight type (one task per (type, row)).
  const int64_t n_act = static_cast<int64_t>(acts.size()) * T;
  cpu::parallel_for(n_act, [&](int64_t i, int) {
    ActSet& a = acts[i / T];
    const int64_t t = i % T;
    const float* row = x + t * K;
    if (up) {  // the GeGLU product's row t, in this thread's buffer (cache-resident)
      thread_local std::vector<float> prod;
      prod.resize(static_cast<size_t>(K));
      cpu::gelu_tanh_mul(row, up + t * K, static_cast<size_t>(K), prod.data());
      row = prod.data();
    }
    cpu::quantize_act_row(a.dtype, row, K, a.data.data() + static_cast<size_t>(t) * a.row_bytes);
  }, T > 1 ? threads : 1);

  cpu::parallel_for(tasks, [&](int64_t task, int) {
    size_t pi = parts.size() - 1;
    while (parts[pi].first_task > task) --pi;
    const Part& p = parts[pi];
    const Weight& W = *p.W;
    const int64_t local = task - p.first_task, rc = local / p.t_tasks, tc = local % p.t_tasks;
    const int64_t n0 = rc * p.chunk, n1 = std::min(W.rows, n0 + p.chunk);
    if (p.acts < 0 && p.packed) {
      cpu::packed_gemm_float(W.dtype, W.packed, K, n0, n1, x, T, p.y, W.rows);
    } else if (p.acts < 0) {
      float_rows(x, T, W, n0, n1, p.y);
    } else if (p.packed) {
      const ActSet& a = acts[p.acts];
      const int64_t t0 = p.t_chunk > 0 ? tc * p.t_chunk : 0, nt = p.t_chunk > 0 ? std::min(p.t_chunk, T - t0) : T;
      cpu::packed_gemm(W.dtype, W.packed, K, n0, n1, a.data.data() + static_cast<size_t>(t0) * a.row_bytes, a.row_bytes,
                       nt, p.y + t0 * W.rows, W.rows);
    } else {
      const ActSet& a = acts[p.acts];
      cpu::qgemm(W.dtype, W.data, dtype_row_bytes(W.dtype, K), n0, n1, a.data.data(), a.row_bytes, T, K, p.y, W.rows);
    }
  }, threads);
}

}  // namespace

void matmul_fused(const float* x, int64_t T, std::initializer_list<MatmulOut> outs) { matmul_impl(x, nullptr, T, outs); }

void matmul(const float* x, int64_t T, const Weight& W, float* y) { matmul_fused(x, T, {{&W, y}}); }

void matmul_gelu_mul(float* gate, const float* up, int64_t T, const Weight& W, float* y) {
  if (!is_quantized(W.dtype) || matmul_observer_set()) {  // float weights read f32 rows; the observer sees them
    gelu_tanh_mul(gate, up, T * W.cols, gate);
    matmul(gate, T, W, y);
    return;
  }
  matmul_impl(gate, up, T, {{&W, y}});
}

}  // namespace eg::ops
