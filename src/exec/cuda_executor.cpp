// The CUDA step executor (cuda_executor.h): Gemma 2/3/4 dense decoders on GPU 0 (Gemma 4: PLE,
// KV sharing, K=V, v_norm and layer scalars on the step of separate kernels and the GEMM prefill).
//
// Weights are uploaded once in the tiled layout (q|k|v and gate|up as one matrix each when their
// dtypes match; gate|up interleaved for the fused step). One decode step of one sequence is one
// captured CUDA graph per (workspace, KV cache). The fused step (default, fused.h): embedding →
// per layer [q|k|v matvec on a residual + norm input stage, fused attention (q/k norm, RoPE, K/V
// write, splits + combine), o matvec, gate|up matvec with GELU·up, quantize, down matvec] → LM
// head on a residual + final-norm stage with argmax. EG_CUDA_FUSED=0: the step of separate
// kernels (q/k/v matvec, q/k norm + RoPE + K/V write, split attention, o matvec, residual +
// norms, gate|up matvec, GELU·mul, down matvec, residual + norms → LM head). The token and position are read from device memory (StepArgs), copied before each
// launch. Prefill (EG_CUDA_PREFILL=gemm, the default) runs chunks of T tokens through 16-bit
// tensor-core GEMMs and the row / attention kernels of prefill.h (enqueue_prefill_chunk below);
// EG_CUDA_PREFILL=steps keeps the loop of decode steps.
//
// KV: the device keeps contiguous [max_tokens, n_kv_heads, head_dim] K and V per layer in the
// cache's type (F16/BF16/F32) in KVCache::DeviceState. The host KVCache stays the bookkeeper
// (n_past, begin_append/commit, truncate); its host pages are allocated but not filled, so
// save/restore and prefix-cache page export of a CUDA cache are not supported yet.
#include "exec/cuda_executor_impl.h"

namespace eg {
namespace cudaexec {

std::atomic<uint64_t> g_kv_serial{1};

gpu::DeviceBuffer upload_floats(const std::vector<float>& v) {
  gpu::DeviceBuffer b(v.size() * sizeof(float));
  b.upload(v.data(), v.size() * sizeof(float));
  return b;
}

gpu::DeviceBuffer upload_norm(const NormWeight& w) {
  std::vector<float> f(static_cast<size_t>(w.n));
  cpu::to_f32(w.data, w.dtype, f.size(), f.data());
  return upload_floats(f);
}

gpu::DeviceWeight upload(const ops::Weight& w) { return gpu::upload_weight(w.data, w.dtype, w.rows, w.cols); }

// Rows of several weights of one dtype and width, stacked into one matrix.
gpu::DeviceWeight upload_stacked(const std::vector<const ops::Weight*>& ws) {
  const DType t = ws[0]->dtype;
  const int64_t cols = ws[0]->cols;
  const size_t rb = dtype_row_bytes(t, cols);
  int64_t rows = 0;
  for (const ops::Weight* w : ws) rows += w->rows;
  std::vector<uint8_t> host(static_cast<size_t>(rows) * rb);
  size_t off = 0;
  for (const ops::Weight* w : ws) {
    std::memcpy(host.data() + off, w->data, static_cast<size_t>(w->rows) * rb);
    off += static_cast<size_t>(w->rows) * rb;
  }
  return gpu::upload_weight(host.data(), t, rows, cols);
}

bool same_kind(const ops::Weight& a, const ops::Weight& b) { return a.dtype == b.dtype && a.cols == b.cols; }

}  // namespace cudaexec

namespace {

using cudaexec::CudaExecutor;
namespace gpu = eg::cuda;

std::string matrix_reason(const std::string& name, const ops::Weight& w) {
  if (!gpu::matvec_supports(w.dtype))
    return name + " is " + dtype_name(w.dtype) + " (the CUDA matvec takes Q4_0, Q8_0, F16 and BF16)";
  const int64_t chunk = is_quantized(w.dtype) ? 32 : 8;
  if (w.cols % chunk != 0) return name + ": " + std::to_string(w.cols) + " columns are not a multiple of " + std::to_string(chunk);
  return "";
}

}  // namespace

std::string cuda_unsupported_reason(const Model& model) {
  const ModelConfig& c = model.config();
  if (c.n_experts > 0) return "mixture of experts (Gemma 4 26B-A4B) is not supported";
  if (c.hidden_size % 32 != 0) return "hidden size " + std::to_string(c.hidden_size) + " is not a multiple of 32";
  const ModelWeights& w = model.weights();
  // The embedding / LM head may also be Q6_K (q6k.h), as llama.cpp's quantizer writes it.
  std::string r = w.embed.dtype == DType::Q6_K ? (w.embed.cols % 256 == 0 ? "" : "the Q6_K embedding's width is not a multiple of 256")
                                               : matrix_reason("the embedding", w.embed);
  if (!r.empty()) return r;
  if (c.ple_dim > 0) {
    if (c.ple_dim % 32 != 0) return "per-layer embedding width " + std::to_string(c.ple_dim) + " is not a multiple of 32";
    if (w.ple_model_proj.dtype != DType::F32) r = matrix_reason("per_layer_model_projection", w.ple_model_proj);
    if (!r.empty()) return r;
  }
  for (int li = 0; li < c.n_layers; ++li) {
    const LayerConfig& lc = c.layers[li];
    const std::string L = "layer " + std::to_string(li);
    if (lc.head_dim % 32 != 0 || lc.head_dim > 512) return L + ": head_dim " + std::to_string(lc.head_dim) + " (need a multiple of 32 up to 512)";
    if (lc.intermediate_size % 32 != 0) return L + ": MLP width not a multiple of 32";
    const LayerWeights& lw = w.layers[li];
    std::vector<std::pair<std::string, const ops::Weight*>> ms = {{"q", &lw.q}, {"o", &lw.o}, {"gate", &lw.gate},
                                                                  {"up", &lw.up}, {"down", &lw.down}};
    if (lc.kv_source < 0) ms.push_back({"k", &lw.k});  // KV-shared layers have no k/v, K=V layers no v
    if (lc.kv_source < 0 && !lc.k_eq_v) ms.push_back({"v", &lw.v});
    if (c.ple_dim > 0) {
      ms.push_back({"per_layer_input_gate", &lw.ple_gate});
      ms.push_back({"per_layer_projection", &lw.ple_proj});
    }
    for (const auto& [n, m] : ms) {
      r = matrix_reason(L + " " + n, *m);
      if (!r.empty()) return r;
    }
  }
  return "";
}

std::unique_ptr<StepExecutor> make_cuda_executor(const Model& model) {
  if (!gpu::device_available()) throw Error("--device cuda: no CUDA device is available");
  const std::string why = cuda_unsupported_reason(model);
  if (!why.empty()) throw Error("--device cuda: " + why + " (use --device cpu)");
  return std::make_unique<CudaExecutor>(model);
}

}  // namespace eg
