// Prefill while typing: time from Enter to the first token of the answer for a question typed at
// a human pace, with and without Session::update_input prefilling the draft in the background.
//
// Simulated clock (no sleeps). The typist presses one key every 1/cps seconds (keystroke k at
// k/cps). After each keystroke the draft goes to update_input(); the background work it starts is
// timed for real and synchronously (update_input + wait_idle = compute_k) and placed on a virtual
// timeline behind any earlier work still running: start_k = max(key time, previous work end),
// end_k = start_k + compute_k. Enter comes one interval after the last character. The answer's
// TTFT is then lag + chat() TTFT, where lag = max(0, end of the last background work - Enter)
// and chat() (max_new_tokens = 1, worker already idle) prefills what is left (the held-back tail
// and the generation prompt) and samples the first token. Without prefill-while-typing the same
// question goes to a fresh session: TTFT = chat()'s TTFT (whole prompt prefilled). Both sessions
// have paged the weights in first (Session::warmup).
//
// The question is English text from ../shared/data/corpus/valid.txt cut to --tokens tokens.
//
// Usage: typing_bench [--tokens 300] [--cps 6] [--threads N] [--reps R] MODEL_DIR...
// Prints one Markdown table row per model (docs/performance-serving.md, "Prefill while typing").
// (A plain executable: its own main() replaces Google Benchmark's, which this folder links.)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "engine/loaded_model.h"
#include "engine/session.h"
#include "tokenizer/chat_template.h"

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool ascii_line(const std::string& l) {
  for (unsigned char c : l)
    if (c >= 0x80 || (c < 0x20 && c != '\t')) return false;
  return true;
}

// English text of about `tokens` tokens (as a user message of this model).
std::string question(const eg::Session& s, int tokens) {
  std::ifstream f(std::string(EG_SHARED_DIR) + "/data/corpus/valid.txt");
  if (!f) throw eg::Error("cannot read " + std::string(EG_SHARED_DIR) + "/data/corpus/valid.txt");
  std::string text, line;
  while (std::getline(f, line)) {
    size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos || !ascii_line(line) || line.size() < 20) continue;
    std::istringstream words(line.substr(b));
    std::string w;
    while (words >> w) {
      const std::string next = text.empty() ? w : text + " " + w;
      if (s.count_tokens(next) > tokens) return text;
      text = next;
    }
  }
  return text;
}

int g_threads = 0;  // --threads: also for the session's background worker thread

eg::SessionOptions options(const std::string& dir) {
  eg::SessionOptions o;
  o.threads = g_threads;
  o.chat_template = eg::load_chat_template(dir);
  o.context_tokens = 1024;
  return o;
}

struct Result {
  int tokens = 0;
  size_t chars = 0;
  double typing_s = 0, ttft_without_ms = 0, ttft_with_ms = 0, lag_ms = 0, busy_s = 0, max_compute_ms = 0;
  int reused = 0, prompt_tokens = 0;
};

Result measure(const std::shared_ptr<const eg::LoadedModel>& lm, const std::string& dir, int tokens, double cps) {
  Result r;
  eg::GenerateParams one;
  one.max_new_tokens = 1;
  const double interval_ms = 1000.0 / cps;

  // Without: the whole question prefilled after Enter.
  {
    eg::Session s(lm, options(dir));
    s.warmup();
    const std::string q = question(s, tokens);
    r.tokens = s.count_tokens(q);
    r.chars = q.size();
    const eg::TurnResult t = s.chat(q, one);
    r.ttft_without_ms = t.stats.ttft_ms;
  }
  // With: update_input after every keystroke.
  eg::Session s(lm, options(dir));
  s.warmup();
  const std::string q = question(s, tokens);
  double work_end = 0;  // virtual ms
  size_t k = 0, pos = 0;
  while (pos < q.size()) {
    size_t n = 1;  // one UTF-8 character per keystroke
    while (pos + n < q.size() && (static_cast<unsigned char>(q[pos + n]) & 0xC0) == 0x80) ++n;
    pos += n;
    const double key_t = static_cast<double>(k++) * interval_ms;
    const double t0 = now_ms();
    s.update_input(q.substr(0, pos));
    s.wait_idle();
    const double compute = now_ms() - t0;
    r.busy_s += compute / 1000.0;
    r.max_compute_ms = std::max(r.max_compute_ms, compute);
    work_end = std::max(key_t, work_end) + compute;
  }
  const double enter_t = static_cast<double>(k) * interval_ms;
  r.typing_s = enter_t / 1000.0;
  r.lag_ms = std::max(0.0, work_end - enter_t);
  const eg::TurnResult t = s.chat(q, one);
  r.ttft_with_ms = r.lag_ms + t.stats.ttft_ms;
  r.reused = t.stats.reused_tokens;
  r.prompt_tokens = t.stats.prompt_tokens;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int tokens = 300, reps = 1, threads = 0;
  double cps = 6.0;
  std::vector<std::string> models;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "typing_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--tokens") tokens = std::stoi(val());
    else if (a == "--cps") cps = std::stod(val());
    else if (a == "--reps") reps = std::stoi(val());
    else if (a == "--threads") threads = std::stoi(val());
    else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr, "usage: typing_bench [--tokens N] [--cps C] [--threads N] [--reps R] MODEL_DIR...\n");
      return 2;
    } else models.push_back(a);
  }
  if (models.empty()) models.push_back(std::string(EG_SHARED_DIR) + "/models/tiny-gemma3");
  if (threads > 0) eg::cpu::set_default_num_threads(threads);
  g_threads = threads;
  std::printf("| model | question tokens (chars) | typing time | TTFT without | TTFT with | prompt tokens reused | "
              "background compute (max per key) | lag at Enter |\n|---|---|---|---|---|---|---|---|\n");
  try {
    for (const auto& dir : models) {
      std::shared_ptr<const eg::LoadedModel> lm = eg::LoadedModel::load_dir(dir);
      std::vector<Result> rs;
      for (int i = 0; i < reps; ++i) rs.push_back(measure(lm, dir, tokens, cps));
      // Median by TTFT with (the other columns of the same run).
      std::sort(rs.begin(), rs.end(), [](const Result& a, const Result& b) { return a.ttft_with_ms < b.ttft_with_ms; });
      std::vector<double> wo;
      for (const auto& x : rs) wo.push_back(x.ttft_without_ms);
      std::sort(wo.begin(), wo.end());
      const Result& r = rs[rs.size() / 2];
      std::string name = dir;
      while (!name.empty() && name.back() == '/') name.pop_back();
      name = name.substr(name.find_last_of('/') + 1);
      std::printf("| %s | %d (%zu) | %.1f s | %.0f ms | %.0f ms | %d / %d | %.1f s (%.0f ms) | %.0f ms |\n", name.c_str(),
                  r.tokens, r.chars, r.typing_s, wo[wo.size() / 2], r.ttft_with_ms, r.reused, r.prompt_tokens,
                  r.busy_s, r.max_compute_ms, r.lag_ms);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "typing_bench: error: %s\n", e.what());
    return 1;
  }
  std::printf("(%d threads, %.1f characters per second, median of %d run%s)\n", eg::cpu::num_threads(), cps, reps,
              reps == 1 ? "" : "s");
  return 0;
}
