// Sampling presets and how explicit flags override them.
//
//   name       temperature  top-p   use
//   precise    0.3          0.8     factual answers, low variance
//   balanced   0.6          0.9     general chat
//   creative   0.9          0.95    stories, brainstorming
//   code       0.2          0.6     code, structured output
//
// A preset sets only temperature and top-p; every other field keeps its default (top-k 0,
// min-p 0, penalties off). Precedence: SamplingParams defaults < preset < explicit values
// (SamplingOverrides): a flag the user gave always wins, whatever the preset.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace eg {

struct SamplingPreset {
  std::string name;
  float temperature;
  float top_p;
  std::string description;
};

/// The presets above, in that order.
const std::vector<SamplingPreset>& sampling_presets();

/// Looks a preset up by exact name; throws eg::Error ("unknown preset 'x' (precise, balanced,
/// creative, code)") otherwise.
const SamplingPreset& find_preset(const std::string& name);

/// Values given explicitly (command-line flags, API fields); unset ones leave the preset's value.
struct SamplingOverrides {
  std::optional<float> temperature;
  std::optional<int> top_k;
  std::optional<float> top_p;
  std::optional<float> min_p;
  std::optional<uint64_t> seed;
  std::optional<float> repeat_penalty;
  std::optional<int> repeat_last_n;
  std::optional<float> presence_penalty;
  std::optional<float> frequency_penalty;
};

/// SamplingParams defaults, then `preset` (empty: none; unknown: eg::Error), then every set
/// field of `o`. The result is validated (eg::Error for invalid values).
SamplingParams resolve_sampling(const std::string& preset, const SamplingOverrides& o);

}  // namespace eg
