#include "cli/gen_flags.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <random>

#include "cli/commands.h"
#include "core/error.h"

namespace eg::cli {

void add_gen_flags(CLI::App& app, const std::shared_ptr<GenFlags>& f) {
  std::string names;
  for (const auto& p : sampling_presets())
  {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s (temp %.2g, top-p %.2g)", p.name.c_str(), p.temperature, p.top_p);
    names += (names.empty() ? "" : ", ") + std::string(buf);
  }
  app.add_option("--preset", f->preset, "sampling preset: " + names + "; explicit flags override it");
  f->o_temp = app.add_option("--temp", f->temp, "sampling temperature; <= 0 = greedy (default 0)");
  f->o_top_k = app.add_option("--top-k", f->top_k, "keep the K most likely tokens (0 = off)")->check(kCount);
  f->o_top_p = app.add_option("--top-p", f->top_p, "nucleus sampling mass in (0, 1] (1 = off)");
  f->o_min_p = app.add_option("--min-p", f->min_p,
                              "drop tokens below min-p x top probability, in [0, 1] (0 = off)");
  app.add_option("--seed", f->seed,
                 "random seed: same seed, same text (default -1; any negative value picks a random seed)");
  f->o_rep = app.add_option("--repeat-penalty", f->repeat_penalty,
                            "divide positive (multiply negative) logits of tokens seen in the last N by this (1 = off)");
  f->o_rep_n = app.add_option("--repeat-last-n", f->repeat_last_n,
                              "penalty window N in tokens for all penalties (default 64; 0 = penalties off)")
                   ->check(kCount);
  f->o_pres = app.add_option("--presence-penalty", f->presence_penalty,
                             "subtract this from the logit of every token seen in the window (0 = off)");
  f->o_freq = app.add_option("--frequency-penalty", f->frequency_penalty,
                             "subtract this times its count in the window from a token's logit (0 = off)");
  app.add_option("--stop", f->stops, "stop when this text appears (repeatable); it is never printed")
      ->allow_extra_args(false);
  app.add_option("--kv-type", f->kv_type, "KV-cache storage: f16 (default), bf16, f32, int8");
  app.add_option("--max-memory", f->max_memory,
                 "memory budget: weights + KV + scratch, bytes with K/M/G suffix (e.g. 2G)");
  app.add_option("--device", f->device, "where steps run: auto (default: the CPU until a GPU backend is built in), cpu, cuda");
  app.add_flag("--warmup", f->warmup, "page in all weights before the prompt (chat: then one tiny forward pass)");
}

SamplingParams resolve_gen_sampling(const GenFlags& f, uint64_t seed) {
  for (float v : {f.temp, f.top_p, f.min_p, f.repeat_penalty, f.presence_penalty, f.frequency_penalty})
    if (!std::isfinite(v)) throw Error("sampling flags must be finite numbers");
  SamplingOverrides o;
  if (f.o_temp && f.o_temp->count()) o.temperature = f.temp;
  if (f.o_top_k && f.o_top_k->count()) o.top_k = f.top_k;
  if (f.o_top_p && f.o_top_p->count()) o.top_p = f.top_p;
  if (f.o_min_p && f.o_min_p->count()) o.min_p = f.min_p;
  if (f.o_rep && f.o_rep->count()) o.repeat_penalty = f.repeat_penalty;
  if (f.o_rep_n && f.o_rep_n->count()) o.repeat_last_n = f.repeat_last_n;
  if (f.o_pres && f.o_pres->count()) o.presence_penalty = f.presence_penalty;
  if (f.o_freq && f.o_freq->count()) o.frequency_penalty = f.frequency_penalty;
  o.seed = seed;
  return resolve_sampling(f.preset, o);
}

uint64_t pick_seed(int64_t seed) {
  return seed >= 0 ? static_cast<uint64_t>(seed) : std::random_device{}();
}

size_t parse_bytes(const std::string& s) {
  const auto bad = [&] { return Error("not a byte count: '" + s + "' (e.g. 1500000, 512M, 1.5G)"); };
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) throw bad();
  double v = 0;
  try {
    size_t used = 0;
    v = std::stod(s.substr(0, i), &used);
    if (used != i) throw bad();
  } catch (const std::logic_error&) {
    throw bad();
  }
  std::string suf = s.substr(i);
  for (auto& c : suf) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mul = 1;
  if (suf.empty() || suf == "B") mul = 1;
  else if (suf == "K" || suf == "KB" || suf == "KIB") mul = 1024.0;
  else if (suf == "M" || suf == "MB" || suf == "MIB") mul = 1024.0 * 1024;
  else if (suf == "G" || suf == "GB" || suf == "GIB") mul = 1024.0 * 1024 * 1024;
  else if (suf == "T" || suf == "TB" || suf == "TIB") mul = 1024.0 * 1024 * 1024 * 1024;
  else throw bad();
  const double bytes = std::floor(v * mul);
  if (!(bytes >= 1) || bytes > 1.8e19) throw bad();
  return static_cast<size_t>(bytes);
}

}  // namespace eg::cli
