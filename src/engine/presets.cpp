#include "engine/presets.h"

#include "core/error.h"

namespace eg {

const std::vector<SamplingPreset>& sampling_presets() {
  static const std::vector<SamplingPreset> k = {
      {"precise", 0.3f, 0.8f, "factual answers, low variance"},
      {"balanced", 0.6f, 0.9f, "general chat"},
      {"creative", 0.9f, 0.95f, "stories, brainstorming"},
      {"code", 0.2f, 0.6f, "code, structured output"},
  };
  return k;
}

const SamplingPreset& find_preset(const std::string& name) {
  std::string names;
  for (const auto& p : sampling_presets()) {
    if (p.name == name) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  throw Error("unknown preset '" + name + "' (" + names + ")");
}

SamplingParams resolve_sampling(const std::string& preset, const SamplingOverrides& o) {
  SamplingParams p;
  if (!preset.empty()) {
    const SamplingPreset& s = find_preset(preset);
    p.temperature = s.temperature;
    p.top_p = s.top_p;
  }
  if (o.temperature) p.temperature = *o.temperature;
  if (o.top_k) p.top_k = *o.top_k;
  if (o.top_p) p.top_p = *o.top_p;
  if (o.min_p) p.min_p = *o.min_p;
  if (o.seed) p.seed = *o.seed;
  if (o.repeat_penalty) p.repeat_penalty = *o.repeat_penalty;
  if (o.repeat_last_n) p.repeat_last_n = *o.repeat_last_n;
  if (o.presence_penalty) p.presence_penalty = *o.presence_penalty;
  if (o.frequency_penalty) p.frequency_penalty = *o.frequency_penalty;
  validate(p);
  return p;
}

}  // namespace eg
