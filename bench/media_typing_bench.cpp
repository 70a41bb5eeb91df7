// Media while typing / speaking: time from the user's last action to the first token of the answer
// when the image or the audio clip is encoded (and prefilled) before it, versus after it.
//
// Simulated clock, as typing_bench: every action's background work is timed for real and
// synchronously (the call + Session::wait_idle) and queued on a virtual timeline behind earlier
// work: start = max(action time, previous work end), end = start + compute. At the final action
// (Enter, or the end of speech) lag = max(0, end of the last background work - that time), and the
// time to the first token is lag + what runs after it (timed for real). Every session is warmed up
// (weights paged in) first; chat() generates one token.
//
// Images (--images): a question of --tokens tokens typed at --cps characters per second, with
// update_input after every keystroke in both variants (so the text itself is prefilled while
// typing either way):
//   "attached at Enter": add_image() after the last keystroke, then chat();
//   "attached at start": add_image() at time 0 (encoded, its block prefilled in the background),
//                        then the typing, then chat().
// Audio (--audio): a --seconds clip (a chirp with noise, 16 kHz) arriving in real time in 100 ms
// chunks; the text "Transcribe this." is sent when the speech ends:
//   "whole clip at the end": add_audio(clip) + chat() after the last chunk;
//   "streamed": append_audio() of every chunk as it arrives (completed 30 s segments encoded and
//               prefilled in the background), then end_audio() + chat().
// Also printed: the tower's encode time per image / per 30 s segment, to scale to real towers (the
// fixtures' towers are tiny).
//
// Usage: media_typing_bench [--tokens 40] [--cps 6] [--seconds 65] [--threads N] [--reps R]
//                           [--images DIR]... [--audio DIR]...
// Defaults: --images ../shared/models/tiny-gemma3-vision --images ../shared/models/tiny-gemma4-mm
//           --audio ../shared/models/tiny-gemma4-mm. Prints Markdown tables (docs/performance-serving.md,
//           "Media while typing and speaking").
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "audio/audio.h"
#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "engine/loaded_model.h"
#include "engine/session.h"
#include "tokenizer/chat_template.h"
#include "vision/image.h"

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

int g_threads = 0;

eg::SessionOptions options(const std::string& dir) {
  eg::SessionOptions o;
  o.threads = g_threads;
  o.chat_template = eg::load_chat_template(dir);
  o.context_tokens = 4096;
  return o;
}

std::string base_name(std::string dir) {
  while (!dir.empty() && dir.back() == '/') dir.pop_back();
  return dir.substr(dir.find_last_of('/') + 1);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The virtual timeline of background work.
struct Timeline {
  double work_end = 0, busy = 0;
  // Runs f (timed) for an action at virtual time t.
  template <class F>
  void at(double t, F&& f) {
    const double t0 = now_ms();
    f();
    const double c = now_ms() - t0;
    busy += c;
    work_end = std::max(t, work_end) + c;
  }
  double lag(double t) const { return std::max(0.0, work_end - t); }
};

struct ImageResult {
  double at_enter_ms = 0, at_start_ms = 0, lag_ms = 0, encode_ms = 0;
  int soft = 0, prompt = 0, reused = 0;
};

ImageResult measure_image(const std::shared_ptr<const eg::LoadedModel>& lm, const std::string& dir, int tokens,
                          double cps) {
  const eg::vision::RgbImage img = eg::vision::load_image_file(dir + "/inputs/img_shapes_640x480.jpg");
  eg::GenerateParams one;
  one.max_new_tokens = 1;
  const double interval = 1000.0 / cps;
  ImageResult r;
  auto type = [&](eg::Session& s, const std::string& q, Timeline& tl) {
    size_t k = 0, pos = 0;
    while (pos < q.size()) {
      ++pos;
      tl.at(static_cast<double>(k++) * interval, [&] {
        s.update_input(q.substr(0, pos));
        s.wait_idle();
      });
    }
    return static_cast<double>(k) * interval;  // Enter
  };
  {  // encode time alone
    eg::Session s(lm, options(dir));
    s.warmup();
    std::vector<double> t;
    for (int i = 0; i < 3; ++i) {
      const double t0 = now_ms();
      r.soft = s.encode_image(img)->n;
      t.push_back(now_ms() - t0);
    }
    r.encode_ms = median(t);
  }
  {  // attached at Enter
    eg::Session s(lm, options(dir));
    s.warmup();
    const std::string q = question(s, tokens);
    Timeline tl;
    const double enter = type(s, q, tl);
    const double t0 = now_ms();
    s.add_image(img);
    const eg::TurnResult t = s.chat(q, one);
    r.at_enter_ms = tl.lag(enter) + (now_ms() - t0);
  }
  {  // attached at the start of typing
    eg::Session s(lm, options(dir));
    s.warmup();
    const std::string q = question(s, tokens);
    Timeline tl;
    tl.at(0, [&] {
      s.add_image(img);
      s.wait_idle();
    });
    const double enter = type(s, q, tl);
    r.lag_ms = tl.lag(enter);
    const double t0 = now_ms();
    const eg::TurnResult t = s.chat(q, one);
    r.at_start_ms = r.lag_ms + (now_ms() - t0);
    r.prompt = t.stats.prompt_tokens;
    r.reused = t.stats.reused_tokens;
  }
  return r;
}

struct AudioResult {
  double whole_ms = 0, streamed_ms = 0, lag_ms = 0, max_chunk_ms = 0, busy_s = 0, segment_ms = 0, clip_ms = 0;
  int prompt = 0, reused = 0;
};

std::vector<float> speech(double seconds) {
  std::vector<float> v(static_cast<size_t>(seconds * eg::audio::kModelRate));
  uint32_t s = 1;
  for (size_t i = 0; i < v.size(); ++i) {
    s = s * 1664525u + 1013904223u;
    const double t = static_cast<double>(i) / eg::audio::kModelRate;
    v[i] = static_cast<float>(0.4 * std::sin(2 * M_PI * (150 + 40 * std::fmod(t, 7.0)) * t) +
                              0.1 * ((s >> 8) / 16777216.0 - 0.5));
  }
  return v;
}

AudioResult measure_audio(const std::shared_ptr<const eg::LoadedModel>& lm, const std::string& dir, double seconds) {
  const std::vector<float> x = speech(seconds);
  const eg::audio::Pcm clip{x, eg::audio::kModelRate};
  const std::string text = "Transcribe this.";
  eg::GenerateParams one;
  one.max_new_tokens = 1;
  AudioResult r;
  {  // encode times alone
    eg::Session s(lm, options(dir));
    s.warmup();
    std::vector<double> seg, all;
    const eg::audio::Pcm first{std::vector<float>(x.begin(), x.begin() + std::min<size_t>(x.size(), 480000)),
                               eg::audio::kModelRate};
    for (int i = 0; i < 3; ++i) {
      double t0 = now_ms();
      (void)s.encode_audio(first);
      seg.push_back(now_ms() - t0);
      t0 = now_ms();
      (void)s.encode_audio(clip);
      all.push_back(now_ms() - t0);
    }
    r.segment_ms = median(seg);
    r.clip_ms = median(all);
  }
  const size_t chunk = eg::audio::kModelRate / 10;  // 100 ms
  const double end_of_speech = 100.0 * std::ceil(static_cast<double>(x.size()) / chunk);
  {  // the whole clip after the end of speech
    eg::Session s(lm, options(dir));
    s.warmup();
    const double t0 = now_ms();
    s.add_audio(clip);
    s.chat(text, one);
    r.whole_ms = now_ms() - t0;
  }
  {  // streamed
    eg::Session s(lm, options(dir));
    s.warmup();
    Timeline tl;
    size_t k = 0;
    for (size_t at = 0; at < x.size(); at += chunk, ++k) {
      const double arrives = 100.0 * static_cast<double>(k + 1);  // a chunk is handed over once recorded
      const double before = tl.busy;
      tl.at(arrives, [&] {
        s.append_audio(x.data() + at, std::min(chunk, x.size() - at), eg::audio::kModelRate);
        s.wait_idle();
      });
      r.max_chunk_ms = std::max(r.max_chunk_ms, tl.busy - before);
    }
    r.busy_s = tl.busy / 1000.0;
    r.lag_ms = tl.lag(end_of_speech);
    const double t0 = now_ms();
    s.end_audio();
    const eg::TurnResult t = s.chat(text, one);
    r.streamed_ms = r.lag_ms + (now_ms() - t0);
    r.prompt = t.stats.prompt_tokens;
    r.reused = t.stats.reused_tokens;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int tokens = 40, reps = 1, threads = 0;
  double cps = 6.0, seconds = 65.0;
  std::vector<std::string> images, audios;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "media_typing_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--tokens") tokens = std::stoi(val());
    else if (a == "--cps") cps = std::stod(val());
    else if (a == "--seconds") seconds = std::stod(val());
    else if (a == "--reps") reps = std::stoi(val());
    else if (a == "--threads") threads = std::stoi(val());
    else if (a == "--images") images.push_back(val());
    else if (a == "--audio") audios.push_back(val());
    else {
      std::fprintf(stderr,
                   "usage: media_typing_bench [--tokens N] [--cps C] [--seconds S] [--threads N] [--reps R] "
                   "[--images DIR]... [--audio DIR]...\n");
      return 2;
    }
  }
  const std::string models = std::string(EG_SHARED_DIR) + "/models/";
  if (images.empty() && audios.empty()) {
    images = {models + "tiny-gemma3-vision", models + "tiny-gemma4-mm"};
    audios = {models + "tiny-gemma4-mm"};
  }
  if (threads > 0) eg::cpu::set_default_num_threads(threads);
  g_threads = threads;
  try {
    if (!images.empty())
      std::printf("| model | question tokens | image soft tokens | encode per image | Enter → first token, attached at "
                  "Enter | attached at start | lag at Enter | prompt tokens reused |\n|---|---|---|---|---|---|---|---|\n");
    for (const auto& dir : images) {
      std::shared_ptr<const eg::LoadedModel> lm = eg::LoadedModel::load_dir(dir);
      std::vector<ImageResult> rs;
      for (int i = 0; i < reps; ++i) rs.push_back(measure_image(lm, dir, tokens, cps));
      std::vector<double> e, s, enc;
      for (const auto& x : rs) {
        e.push_back(x.at_enter_ms);
        s.push_back(x.at_start_ms);
        enc.push_back(x.encode_ms);
      }
      const ImageResult& r = rs[0];
      std::printf("| %s | %d | %d | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %d / %d |\n", base_name(dir).c_str(), tokens,
                  r.soft, median(enc), median(e), median(s), r.lag_ms, r.reused, r.prompt);
      std::fflush(stdout);
    }
    if (!audios.empty())
      std::printf("\n| model | clip | encode per 30 s segment (whole clip) | end of speech → first token, whole clip "
                  "at the end | streamed | lag at the end | background compute (max per chunk) | prompt tokens reused |\n"
                  "|---|---|---|---|---|---|---|---|\n");
    for (const auto& dir : audios) {
      std::shared_ptr<const eg::LoadedModel> lm = eg::LoadedModel::load_dir(dir);
      std::vector<AudioResult> rs;
      for (int i = 0; i < reps; ++i) rs.push_back(measure_audio(lm, dir, seconds));
      std::vector<double> w, st;
      for (const auto& x : rs) {
        w.push_back(x.whole_ms);
        st.push_back(x.streamed_ms);
      }
      const AudioResult& r = rs[0];
      std::printf("| %s | %.1f s in 100 ms chunks | %.1f ms (%.1f ms) | %.1f ms | %.1f ms | %.1f ms | %.2f s (%.1f ms) | "
                  "%d / %d |\n",
                  base_name(dir).c_str(), seconds, r.segment_ms, r.clip_ms, median(w), median(st), r.lag_ms, r.busy_s,
                  r.max_chunk_ms, r.reused, r.prompt);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "media_typing_bench: error: %s\n", e.what());
    return 1;
  }
  std::printf("(%d threads, %.1f characters per second, median of %d run%s)\n", eg::cpu::num_threads(), cps, reps,
              reps == 1 ? "" : "s");
  return 0;
}
