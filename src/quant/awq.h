// Activation-aware weight scaling (AWQ) for weight-only quantization.
//
// Source: Lin et al. 2023, "AWQ: Activation-aware Weight Quantization for LLM Compression and
// Acceleration", arXiv:2306.00978 (§3.2: per-input-channel scales s = mean|x|^α, grid search of α
// on the output error of the quantized layer; the optional clipping search of the weights' range).
// Our own implementation on top of the engine's forward pass.
//
// A linear y = W·x is unchanged by W' = W·diag(s), x' = x / s. AWQ picks s so that the channels
// with large activations get larger weights, which the quantizer then represents more precisely.
// x / s is folded exactly into whatever produces x:
//   * q/k/v (input: input_layernorm output)   → input_norm:   (off + w) / s − off
//   * gate/up (input: pre_feedforward_layernorm output) → pre_ffw_norm: (off + w) / s − off
//   * down (input: gelu(gate)·up)             → up's rows ÷ s
//   * o (input: attention output)             → v's rows ÷ s, only where exact: one s per KV head
//     shared by its query heads (GQA), and never with Gemma 4's scale-less v_norm, on K=V layers
//     or on KV-shared layers (their V belongs to another layer)
// (off = ModelConfig::norm_offset: 1 for Gemma 2/3's "1 + w" norms, 0 for Gemma 4.)
// Not scaled: the embedding / LM head, Gemma 4 PLE projections, MoE router and experts.
//
// Calibration: the float model runs over calibration tokens (spans of `span` tokens, each its own
// sequence); ops::set_matmul_observer records, for every linear input, the per-channel mean |x|
// (over all calibration tokens) and a deterministic sample of activation rows (every k-th token)
// used for the search. For each group, α ∈ {0, 1/grid, ..., 1}; s = max(mean|x|, 1e-4)^α
// normalised by sqrt(max(s)·min(s)); the error is Σ_i ||x_s·Q(W_i·diag(s))ᵀ − x·W_iᵀ||² over the
// group's weights on the sample (x_s = x / s), Q = the target type's quantize_row + dequantize_row.
// α = 0 (s = 1, plain quantization) is in the grid, so on the sample AWQ is never worse.
// The result is deterministic for given inputs (fixed summation orders, no randomness).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace eg {
class ProgressSink;  // core/progress.h
}

namespace eg::quant {

/// The tensors AWQ may modify, per layer.
enum class AwqSlot : uint8_t { Q, K, V, O, Gate, Up, Down, InputNorm, PreFfwNorm };

/// "q", "k", "v", "o", "gate", "up", "down", "input_norm", "pre_ffw_norm".
const char* awq_slot_name(AwqSlot s);

/// Hugging Face tensor name of a slot, e.g. prefix "model." → "model.layers.3.self_attn.q_proj.weight",
/// "model.layers.3.input_layernorm.weight", "model.layers.3.mlp.up_proj.weight".
std::string awq_hf_tensor_name(const std::string& prefix, int layer, AwqSlot s);

/// In-place quantize→dequantize round trip of one row of n values (n a multiple of the block).
using RowRoundTrip = std::function<void(const float* in, int64_t n, float* out)>;

/// The round trip of a block type via quantize_row + dequantize_row (quant.h).
RowRoundTrip round_trip_of(DType t);

struct AwqOptions {
  /// Target type of a layer's weight slot (the quantize recipe: e.g. Q6_K for some attn_v /
  /// ffn_down under Q4_K_M). Empty: `target` everywhere.
  std::function<DType(int layer, AwqSlot slot)> target_for;
  DType target = DType::Q4_0;
  int grid = 20;            // α steps: α = i / grid, i = 0..grid
  bool clip = false;        // also search a per-block clipping ratio of each weight (--awq-clip)
  int clip_steps = 10;      // clipping ratios 1, 1 − 0.5/clip_steps, ..., 0.5
  int sample_rows = 256;    // activation rows kept per linear input for the searches
  int span = 512;           // calibration sequence length (tokens per forward pass)
  bool fold_o_into_v = true;
  /// The choice of each group (one line each); may be empty.
  std::function<void(const std::string&)> log;
  /// Progress: "awq: calibration" (tokens run), then "awq: search" (layers done); may be nullptr.
  ProgressSink* progress = nullptr;
};

/// One modified tensor: f32, row-major, in the checkpoint's convention: weights [out, in] as
/// nn.Linear; norm vectors [H] are the stored w (the runtime multiplies by norm_offset + w;
/// a GGUF writer that stores 1 + w for Gemma 2/3 adds 1 as for the original).
struct AwqTensor {
  int layer = 0;
  AwqSlot slot = AwqSlot::Q;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

/// What the search chose for one group of linears sharing an input.
struct AwqGroupReport {
  int layer = 0;
  std::string group;     // "qkv", "gate_up", "down", "o"
  float alpha = 0;       // chosen exponent (0 = unscaled)
  double err_plain = 0;  // output squared error on the sample without scaling (after clipping if on)
  double err_awq = 0;    // with the chosen scales
  std::string note;      // why a group was skipped ("v_norm", "K=V", "row not a block multiple", ...)
};

struct AwqResult {
  std::vector<AwqTensor> tensors;      // every modified tensor, ordered by (layer, slot)
  std::vector<AwqGroupReport> groups;  // in processing order
  int64_t calib_tokens = 0;
  /// nullptr if (layer, slot) was not modified (write the original).
  const AwqTensor* find(int layer, AwqSlot slot) const;
};

/// Runs calibration over `calib_tokens` (split into spans of opt.span) and the searches, and
/// returns the folded tensors. The model must have F32/F16/BF16 weights. Throws eg::Error for a
/// quantized model, fewer than 2 calibration tokens, or a bad option (grid < 1, sample_rows < 1).
AwqResult awq(const Model& model, const std::vector<int32_t>& calib_tokens, const AwqOptions& opt);

/// Default calibration tokens: the first n_tokens of `text` (e.g. ../shared/data/corpus/train.txt)
/// as the perplexity default method builds its stream (documents split at "\n\n\n", each
/// <bos> text <eos>; engine/perplexity.h document_stream). Fewer if the text is shorter.
std::vector<int32_t> awq_calibration_tokens(const Tokenizer& tok, const std::string& text, int64_t n_tokens);

// ---- building blocks (used by awq(); exposed for tests) ----

/// Result of the scale search for one group of weights sharing one input.
struct AwqScaleSearch {
  std::vector<float> scales;  // [K]; all 1 when alpha == 0
  float alpha = 0;
  double err_plain = 0, err_best = 0;
};

/// Grid search of α for weights W_i [rows[i], K] (f32, row-major) sharing the input x [S, K]
/// with per-channel mean |x| `mean_abs` [K]; q[i] is W_i's round trip. See the header comment.
AwqScaleSearch awq_search_scales(const std::vector<const float*>& weights, const std::vector<int64_t>& rows,
                                 int64_t K, const float* x, int64_t S, const std::vector<double>& mean_abs,
                                 int grid, const std::vector<RowRoundTrip>& q);

/// Clipping search (AWQ's auto_clip): for every row of W [N, K] and every block of `block`
/// consecutive inputs, the ratio r ∈ {1, ..., 0.5} minimising Σ_t (Σ_{k∈block} x[t,k]·(Q(c_r(w))−w)[k])²
/// where c_r clamps the block to ±r·max|w_block|; W is clipped in place.
void awq_clip_weight(float* W, int64_t N, int64_t K, const float* x, int64_t S, int64_t block, int steps,
                     const RowRoundTrip& q);

}  // namespace eg::quant
