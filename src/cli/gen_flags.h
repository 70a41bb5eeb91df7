// Command-line flags shared by `run` and `chat`: sampling (preset, temperature, top-k/p, min-p,
// penalties, seed), stop strings, KV-cache type and memory budget.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/presets.h"
#include "engine/sampler.h"

namespace eg::cli {

struct GenFlags {
  std::string preset;  // "" = none (greedy unless --temp)
  float temp = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  int64_t seed = -1;  // < 0: random
  float repeat_penalty = 1.0f;
  int repeat_last_n = 64;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::vector<std::string> stops;
  std::string kv_type = "f16";
  std::string max_memory;  // "" = no budget
  bool warmup = false;
  std::string device = "auto";  // --device: auto | cpu | cuda (exec/executor.h)
  // The options, to tell an explicit value from a default (explicit flags override the preset).
  CLI::Option *o_temp = nullptr, *o_top_k = nullptr, *o_top_p = nullptr, *o_min_p = nullptr,
              *o_rep = nullptr, *o_rep_n = nullptr, *o_pres = nullptr, *o_freq = nullptr;
};

/// Registers --preset, --temp, --top-k, --top-p, --min-p, --seed, --repeat-penalty,
/// --repeat-last-n, --presence-penalty, --frequency-penalty, --stop (repeatable), --kv-type,
/// --max-memory, --warmup and --device on `app`, storing into *f (which must outlive parsing).
void add_gen_flags(CLI::App& app, const std::shared_ptr<GenFlags>& f);

/// The sampling parameters: defaults < --preset < explicit flags; the seed is `seed` (the caller
/// resolves a random one for --seed < 0). Throws eg::Error for an unknown preset or invalid
/// values (message names the flag's field).
SamplingParams resolve_gen_sampling(const GenFlags& f, uint64_t seed);

/// `--seed` as given, or a random seed when it is negative.
uint64_t pick_seed(int64_t seed);

/// Parses a byte count: digits with an optional fraction and an optional K/M/G/T suffix (powers
/// of 1024; "KB", "KiB", "k" accepted), e.g. "1500000", "512M", "1.5G". Throws eg::Error naming
/// the value for anything else or for 0.
size_t parse_bytes(const std::string& s);

}  // namespace eg::cli
