// Helpers of the session tests: shared models and references computed WITHOUT the Session code
// (a fresh KV cache, one batched forward pass, HF-style rendering + tokenization).
#pragma once
#include <cmath>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/loaded_model.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "kv/kv_cache.h"
#include "test_util.h"
#include "tokenizer/chat_template.h"

namespace sessiontest {

/// A model from ../shared/models, loaded once per test process.
inline std::shared_ptr<const eg::LoadedModel> model(const std::string& name) {
  static std::map<std::string, std::shared_ptr<const eg::LoadedModel>> cache;
  auto& m = cache[name];
  if (!m) m = eg::LoadedModel::load_dir(egtest::shared_dir() + "/models/" + name);
  return m;
}

inline eg::KVCacheOptions kv_opts(eg::KVType t, int max_tokens) {
  eg::KVCacheOptions o;
  o.type = t;
  o.max_tokens = max_tokens;
  return o;
}

/// Logits [V] of the last token after one batched pass over `ids` on a fresh cache.
inline std::vector<float> one_shot_logits(const eg::LoadedModel& lm, const std::vector<int32_t>& ids,
                                          eg::KVType t = eg::KVType::F32) {
  eg::KVCache kv(lm.model().config(), kv_opts(t, static_cast<int>(ids.size()) + 1));
  eg::ForwardScratch s;
  std::vector<float> logits;
  lm.model().forward(ids.data(), static_cast<int>(ids.size()), kv, s, eg::LogitsMode::Last, logits);
  return logits;
}

/// Greedy continuation of `ids` on a fresh cache: n tokens (stops after a stop id, included).
inline std::vector<int32_t> greedy(const eg::LoadedModel& lm, const std::vector<int32_t>& ids, int n,
                                   eg::KVType t = eg::KVType::F32) {
  eg::KVCache kv(lm.model().config(), kv_opts(t, static_cast<int>(ids.size()) + n + 1));
  eg::ForwardScratch s;
  std::vector<float> logits;
  lm.model().forward(ids.data(), static_cast<int>(ids.size()), kv, s, eg::LogitsMode::Last, logits);
  std::vector<int32_t> out;
  const int V = lm.model().config().vocab_size;
  for (int i = 0; i < n; ++i) {
    int32_t next = eg::argmax(logits.data(), V);
    out.push_back(next);
    const auto& st = lm.stop_ids();
    if (std::find(st.begin(), st.end(), next) != st.end()) break;
    if (i + 1 < n) lm.model().forward(&next, 1, kv, s, eg::LogitsMode::Last, logits);
  }
  return out;
}

/// transformers' apply_chat_template(tokenize=True): render, then encode with special tokens
/// parsed, no extra BOS (valid as a reference when no content holds special-token text).
inline std::vector<int32_t> hf_chat_ids(const eg::LoadedModel& lm, const std::vector<eg::ChatMessage>& msgs,
                                        bool gen_prompt = true) {
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (const auto& m : msgs) arr.push_back({{"role", m.role}, {"content", m.content}});
  eg::ChatOptions opt;
  opt.add_generation_prompt = gen_prompt;
  const auto& tok = lm.tokenizer();
  opt.bos_token = tok.piece(tok.bos_id());
  opt.eos_token = tok.piece(tok.eos_id());
  const std::string text = eg::ChatTemplate(tok.chat_template()).render(arr, opt);
  return tok.encode(text, false, true);
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace sessiontest
