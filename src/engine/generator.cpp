#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace eg {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

GenerationResult generate(const Model& model, const std::vector<int32_t>& prompt,
                          const std::vector<int32_t>& stop_ids, const GenerateOptions& opt,
                          const TokenCallback& on_token) {
  return generate(*make_cpu_executor(model), prompt, stop_ids, opt, on_token);
}

GenerationResult generate(const StepExecutor& exec, const std::vector<int32_t>& prompt,
                          const std::vector<int32_t>& stop_ids, const GenerateOptions& opt,
                          const TokenCallback& on_token) {
  const ModelConfig& cfg = exec.config();
  if (prompt.empty()) throw Error("empty prompt");
  if (opt.max_new_tokens < 0) throw Error("max new tokens must be >= 0");
  if (opt.context_size > cfg.max_position_embeddings)
    throw Error("context size " + std::to_string(opt.context_size) + " exceeds the model's " +
                std::to_string(cfg.max_position_embeddings) + " tokens");
  if (opt.context_size < 0) throw Error("context size must be >= 0");
  const int ctx = opt.context_size > 0 ? opt.context_size : cfg.max_position_embeddings;
  const int n_prompt = static_cast<int>(prompt.size());
  if (n_prompt > ctx)
    throw Error("prompt of " + std::to_string(n_prompt) + " tokens exceeds the context of " +
                std::to_string(ctx) + " tokens");
  Sampler sampler(opt.sampling);
  // The penalty window starts with the prompt, as llama.cpp and transformers' repetition penalty.
  for (int32_t id : prompt) sampler.accept(id);
  GenerationResult r;
  r.stats.prompt_tokens = n_prompt;
  r.finish_reason = "length";
  if (opt.max_new_tokens == 0) return r;

  // Room for the prompt and every new token but the last (its K/V is never needed).
  const int capacity = std::min(ctx, n_prompt + opt.max_new_tokens);
  KVCacheOptions kv_opt = opt.kv;
  kv_opt.max_tokens = capacity;
  std::unique_ptr<KVCache> kv_owner = exec.new_kv_cache(kv_opt);
  KVCache& kv = *kv_owner;
  std::unique_ptr<StepWorkspace> ws = exec.new_workspace();
  std::vector<float> logits;

  const auto t0 = std::chrono::steady_clock::now();
  exec.prefill_media(prompt.data(), n_prompt, opt.media, kv, *ws, LogitsMode::Last, logits);
  r.stats.prefill_ms = ms_since(t0);
  int32_t next = sampler.sample(logits.data(), cfg.vocab_size);
  r.stats.ttft_ms = ms_since(t0);

  const auto t1 = std::chrono::steady_clock::now();
  for (;;) {
    r.ids.push_back(next);
    sampler.accept(next);  // penalty window (repetition / presence / frequency)
    if (on_token && !on_token(next)) {
      r.finish_reason = "cancelled";
      break;
    }
    if (!opt.ignore_eos && std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) {
      r.finish_reason = "stop";
      break;
    }
    if (static_cast<int>(r.ids.size()) >= opt.max_new_tokens) break;
    if (kv.n_past() >= capacity) {  // no room for the next token's K/V
      r.context_full = kv.n_past() >= ctx;
      break;
    }
    exec.prefill(&next, 1, kv, *ws, LogitsMode::Last, logits);
    next = sampler.sample(logits.data(), cfg.vocab_size);
  }
  r.stats.decode_ms = ms_since(t1);
  r.stats.generated_tokens = static_cast<int>(r.ids.size());
  if (r.stats.prefill_ms > 0) r.stats.prefill_tok_s = n_prompt * 1000.0 / r.stats.prefill_ms;
  if (r.ids.size() > 1 && r.stats.decode_ms > 0)
    r.stats.decode_tok_s = (r.ids.size() - 1) * 1000.0 / r.stats.decode_ms;
  return r;
}

}  // namespace eg
