// The generate loop: one batched prefill of the prompt, then decode one token at a time against
// the KV cache, sampling each next token, until max_new_tokens, a stop id, or the context end.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "exec/executor.h"
#include "model/model.h"

namespace eg {

struct GenerateOptions {
  int max_new_tokens = 256;
  bool ignore_eos = false;  // keep generating through stop ids
  int context_size = 0;     // tokens; 0: the model's max_position_embeddings (larger: error)
  SamplingParams sampling;
  KVCacheOptions kv;        // KV storage type and paging (default F16); max_tokens is set from the context
  /// Embedding overrides of the prompt (images' soft tokens: Model::forward's EmbedSpan, rows
  /// relative to the prompt); the rows must stay alive during generate().
  std::vector<EmbedSpan> media;
};

/// Timings in milliseconds; rates in tokens per second.
struct GenerationStats {
  int prompt_tokens = 0;
  int generated_tokens = 0;
  double prefill_ms = 0;  // the batched prompt pass
  double ttft_ms = 0;     // prefill + first sample: time to first token
  double decode_ms = 0;   // all decode steps after the first token
  double prefill_tok_s = 0;
  double decode_tok_s = 0;
};

struct GenerationResult {
  std::vector<int32_t> ids;   // generated ids (a stop id that ended generation is included last)
  std::string finish_reason;  // "stop" (stop id), "length" (max_new_tokens or context end), "cancelled"
  bool context_full = false;  // generation ended because the context was full
  GenerationStats stats;
};

/// Called with each generated id as soon as it is sampled; return false to stop ("cancelled").
using TokenCallback = std::function<bool(int32_t id)>;

/// Throws eg::Error for an empty prompt, a prompt that does not fit the context, or a context
/// size larger than the model's.
GenerationResult generate(const StepExecutor& exec, const std::vector<int32_t>& prompt,
                          const std::vector<int32_t>& stop_ids, const GenerateOptions& opt,
                          const TokenCallback& on_token);
/// The same on the CPU executor of `model`.
GenerationResult generate(const Model& model, const std::vector<int32_t>& prompt,
                          const std::vector<int32_t>& stop_ids, const GenerateOptions& opt,
                          const TokenCallback& on_token);

}  // namespace eg
