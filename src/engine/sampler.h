// Token sampling from a logits row.
//
// Order: penalties first (repetition, then presence/frequency, as llama.cpp's penalties sampler),
// then (as transformers' logits processors apply them) temperature, top-k, top-p (nucleus), min-p,
// then a draw from the renormalised distribution. temperature <= 0 means greedy (argmax over the
// penalised logits; ties go to the lowest id, as torch.argmax). The RNG is a seeded 64-bit
// Mersenne Twister with a hand-written uniform draw, so the same seed gives the same tokens on
// every platform.
//
// Penalties act on the token history window: the last `repeat_last_n` ids passed to accept()
// (generate() accepts the prompt, then each generated token, as llama.cpp does and as
// transformers' repetition penalty sees input_ids; a chat session decides the same). Only the
// ids in the window are touched, so the cost is O(window), not O(vocab), per token:
//  - repetition penalty (CTRL, Keskar et al. 2019, with llama.cpp's sign rule): for every id
//    in the window, logit / p when logit > 0, logit * p otherwise (p = 1: off);
//  - presence / frequency penalty (OpenAI API semantics): logit -= presence * [count > 0]
//    + frequency * count, count = occurrences of the id in the window (0: off).
#pragma once
#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace eg {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  int top_k = 0;             // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  uint64_t seed = 0;
  float repeat_penalty = 1.0f;     // > 0; 1: off (llama.cpp --repeat-penalty)
  int repeat_last_n = 64;          // penalty window in tokens, >= 0 (0: penalties off)
  float presence_penalty = 0.0f;   // OpenAI presence_penalty (0: off; negative encourages)
  float frequency_penalty = 0.0f;  // OpenAI frequency_penalty (0: off)
};

/// Throws eg::Error naming the field for invalid parameters: negative top_k, top_p outside
/// (0, 1], min_p outside [0, 1], NaN temperature, repeat_penalty <= 0 or not finite,
/// repeat_last_n < 0, non-finite presence/frequency penalties.
void validate(const SamplingParams& p);

class Sampler {
 public:
  /// Throws eg::Error for invalid parameters (see validate()).
  explicit Sampler(const SamplingParams& p);
  /// Picks a token id from logits[0..n) after applying the penalties. Does not modify logits
  /// (penalised values go to an internal copy, made only when a penalty is active).
  int32_t sample(const float* logits, int n);
  /// Records a token in the penalty window (call once per generated token, in order).
  void accept(int32_t id);
  /// Clears the penalty window (the RNG state is kept).
  void clear_history();
  /// The penalty window, oldest first (at most repeat_last_n ids).
  std::vector<int32_t> history() const { return {hist_.begin(), hist_.end()}; }

  /// Replaces the parameters (e.g. a new preset mid-chat) keeping the RNG state and the window
  /// (trimmed to the new repeat_last_n). The seed field is ignored here; use reseed(). Throws
  /// eg::Error for invalid parameters.
  void set_params(const SamplingParams& p);
  /// Restarts the RNG from `seed` (also stored in params().seed).
  void reseed(uint64_t seed);
  const SamplingParams& params() const { return p_; }

  /// The RNG state as portable text (the C++ standard's textual mt19937_64 state).
  std::string rng_state() const;
  /// Restores a state written by rng_state(); throws eg::Error when it is not one.
  void set_rng_state(const std::string& s);
  /// Everything that makes the next draws reproducible: RNG state and penalty window, as one
  /// text blob ("egsampler 1\n" header). Parameters are not included.
  std::string save_state() const;
  /// Restores save_state() output; throws eg::Error ("sampler state: ...") on malformed input.
  void restore_state(const std::string& s);

  /// Applies the penalties of `p` for the window `counts` (id -> occurrences) to logits in
  /// place; ids outside [0, n) are ignored. Exposed for tests and for callers that sample
  /// themselves.
  static void apply_penalties(const SamplingParams& p,
                              const std::unordered_map<int32_t, int>& counts, float* logits, int n);

 private:
  double uniform();  // [0, 1)
  bool penalties_active() const;
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
  std::vector<float> work_;                  // penalised copy of the logits
  std::vector<double> prob_;                 // weights / probabilities of the current draw
  std::deque<int32_t> hist_;                 // penalty window, oldest first
  std::unordered_map<int32_t, int> counts_;  // id -> occurrences in hist_
};

/// Index of the largest value (lowest index on ties).
int32_t argmax(const float* x, int n);

}  // namespace eg
