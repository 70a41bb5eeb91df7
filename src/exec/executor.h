// The backend boundary: a step executor runs the decoder on one device.
//
// Everything above this layer (engine: Session, generate, perplexity; the server's scheduler; the
// CLI's bench) asks an executor for steps and never calls a device's kernels itself:
//
//   * prefill: T tokens of one sequence (a prompt chunk), appended to that sequence's KV cache;
//     logits for the last token, for every token, or none;
//   * decode: one token for each of B independent sequences (the server's slots), logits [B, V];
//   * decode_argmax: the same, but only the greedy token id of each row comes back (on a GPU the
//     [B, V] logits never cross to the host).
//
// Results are defined by the CPU executor (Model::forward / Model::forward_batch, equal to
// transformers' float32 path; tests/model_reference_test.cpp). Another device must give the same
// greedy ids on the reference prompts and logits within its documented tolerance.
//
// KV caches: a sequence's KV cache lives where its steps run. Callers make caches with
// new_kv_cache() (the CPU executor's are plain host pages: kv/kv_cache.h) and pass each cache only
// to the executor that made it. Host-side cache operations (truncate, save/restore, prefix-cache page
// import) keep working on every device: a device cache copies its pages to and from the host for them.
//
// Workspaces: the activation buffers of a step. One per thread that runs steps (a Session, the
// scheduler's compute thread); an executor itself is shared read-only, like the Model.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "model/config.h"
#include "model/model.h"

namespace eg {

/// Where steps run.
enum class Device : uint8_t { CPU = 0, CUDA = 1 };

/// "cpu", "cuda".
const char* device_name(Device d);

/// What the user asked for: a device, or Auto (CUDA when this build has it, a GPU is present and
/// the model fits; the CPU otherwise).
struct DeviceRequest {
  bool automatic = true;
  Device device = Device::CPU;
};

/// Parses "auto" | "cpu" | "cuda" (case-insensitive). Throws eg::Error naming the value and the
/// choices.
DeviceRequest parse_device(const std::string& s);

/// The device for a run that may take images or audio (an mmproj attached, media in the prompt).
/// Until 2026-12-03 `auto` became the CPU then; now the CPU and the CUDA executor both take media
/// embeddings (prefill_media), so the request is kept as it is.
DeviceRequest device_for_media(DeviceRequest r, bool may_have_media);

/// True when this build has the device's backend compiled in (CPU: always).
bool device_compiled_in(Device d);

/// Opaque per-thread activation buffers of one executor (made by StepExecutor::new_workspace).
class StepWorkspace {
 public:
  virtual ~StepWorkspace() = default;
};

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;

  virtual Device device() const = 0;
  /// One line for --stats and logs, e.g. "cpu (AVX3, 2 threads)" or "cuda: NVIDIA H200 (sm_90)".
  virtual std::string description() const = 0;
  /// The model this executor runs (shapes, vocabulary size, layer types).
  virtual const ModelConfig& config() const = 0;

  /// Fresh activation buffers for one thread of steps.
  virtual std::unique_ptr<StepWorkspace> new_workspace() const = 0;
  /// An empty KV cache for one sequence on this executor's device (KVCache's options and errors).
  virtual std::unique_ptr<KVCache> new_kv_cache(const KVCacheOptions& opt) const = 0;

  /// Runs tokens[0..T) at positions kv.n_past() .. +T-1 of one sequence, appends their K/V and
  /// advances kv. logits: [V] (Last), [T, V] (All) or untouched (None), f32, resized.
  /// Throws eg::Error (context full, id outside the vocabulary, cache of another model) before
  /// changing the cache.
  virtual void prefill(const int32_t* tokens, int T, KVCache& kv, StepWorkspace& ws, LogitsMode mode,
                       std::vector<float>& logits) const = 0;

  /// prefill() with embedding overrides (images' soft tokens, Model::forward's EmbedSpan). The
  /// default runs prefill() when `media` is empty and otherwise throws eg::Error ("images are not
  /// supported on the <device> device yet"); the CPU executor runs Model::forward with them.
  virtual void prefill_media(const int32_t* tokens, int T, const std::vector<EmbedSpan>& media, KVCache& kv,
                             StepWorkspace& ws, LogitsMode mode, std::vector<float>& logits) const;
  /// One decode step for B sequences: row b appends tokens[b] to kvs[b] (distinct caches).
  /// logits: [B, V] f32 (resized); row b equals prefill(&tokens[b], 1, *kvs[b], ..., Last) alone.
  /// Throws eg::Error before changing any cache (Model::forward_batch's conditions).
  virtual void decode(const int32_t* tokens, int B, KVCache* const* kvs, StepWorkspace& ws,
                      std::vector<float>& logits) const = 0;

  /// decode(), then out[b] = the id of row b's largest logit (the lowest id on ties). The default
  /// computes the logits and takes the argmax on the host; a GPU executor overrides it so that only
  /// the ids leave the device.
  virtual void decode_argmax(const int32_t* tokens, int B, KVCache* const* kvs, StepWorkspace& ws,
                             int32_t* out) const;
};

/// The executor for `model` on the requested device. Throws eg::Error when an explicitly requested
/// device is not compiled in or not present ("--device cuda: this build has no CUDA backend").
/// `model` must outlive the executor.
std::unique_ptr<StepExecutor> make_executor(const Model& model, DeviceRequest request);

/// The CPU executor alone (Model::forward / forward_batch; the CPU thread pool).
std::unique_ptr<StepExecutor> make_cpu_executor(const Model& model);

/// Index of the largest of n values (the lowest index on ties; NaN never wins).
int32_t argmax_row(const float* x, int64_t n);

}  // namespace eg
