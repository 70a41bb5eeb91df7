// `edgegemma chat`: an interactive multi-turn conversation on one Session (KV reused between
// turns), streaming answers. Terminal: libedit line editing and history, prefill while typing
// (every keystroke hands the draft to Session::update_input, which prefills its stable part in
// the background), Ctrl-C stops an answer (the session and the partial answer are kept) or
// clears the line at the prompt, Ctrl-D exits. Pipes: one message per line, same commands.
// A line ending in '\' continues the message on the next line. `/image FILE` attaches an image to
// the message being typed (Session::add_image: encoded at once, then prefilled in the background);
// `/audio FILE` does the same for an audio clip (Session::add_audio).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "backend/cpu/thread_pool.h"
#include "cli/commands.h"
#include "cli/gen_flags.h"
#include "cli/kb_open.h"
#include "kb/rag_prompt.h"
#include "cli/line_reader.h"
#include "core/error.h"
#include "engine/loaded_model.h"
#include "engine/memory_budget.h"
#include "engine/session.h"
#include "tokenizer/chat_template.h"
#include "audio/audio.h"
#include "vision/image.h"

namespace eg::cli {

namespace {

struct ChatArgs {
  std::string model_dir;
  std::string mmproj;  // --mmproj FILE
  std::string system;
  int n_predict = 1024;
  int ctx = 0;
  int threads = 0;
  bool ignore_eos = false;
  bool plain = false;
  bool pan_and_scan = false;
  std::string kb, kb_model;  // --kb: retrieval-augmented answers (docs/knowledge-base.md)
  int kb_passages = 4, kb_budget = 1024;
  std::shared_ptr<GenFlags> gen = std::make_shared<GenFlags>();
};

const char* kHelp =
    "commands:\n"
    "  /help            this list\n"
    "  /reset           forget the conversation (the system message stays)\n"
    "  /save FILE       save the session (conversation, KV cache, sampler state) to FILE\n"
    "  /load FILE       restore a session saved with /save (same model)\n"
    "  /system TEXT     set the system message (\"/system\" alone shows it, \"/system -\" removes it)\n"
    "  /preset NAME     switch sampling preset: precise, balanced, creative, code\n"
    "  /image FILE      attach an image (JPEG, PNG, WebP, GIF, BMP) to the message being typed\n"
    "  /audio FILE      attach an audio clip (WAV, FLAC, OGG, MP3; Gemma 4 E2B/E4B) to the message being typed\n"
    "                   (models with a vision tower; encoded at once, shown before the text)\n"
    "  /stats           timings and token counts of the last answer\n"
    "  /quit, /exit     leave (as Ctrl-D)\n"
    "a line ending in '\\' continues on the next line; Ctrl-C stops an answer or clears the line\n";

void out(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

void note(const std::string& s) {
  std::fflush(stdout);
  std::fprintf(stderr, "%s\n", s.c_str());
}

// The context-usage indicator: tokens of the conversation so far / context size.
std::string usage(const Session& s) {
  const size_t used = std::max<size_t>(static_cast<size_t>(s.cached_tokens()), s.context_tokens().size());
  return "[" + std::to_string(used) + "/" + std::to_string(s.context_size()) + " tokens]";
}

std::string stats_text(const SessionStats& st) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "prompt tokens: %d (reused from the KV cache: %d, prefilled: %d) | TTFT: %.1f ms | "
                "prefill: %.1f tok/s | generated tokens: %d | decode: %.1f tok/s | dropped messages: %d | "
                "context: %d/%d tokens | KV cache: %s | peak RSS: %s | threads: %d\n",
                st.prompt_tokens, st.reused_tokens, st.prefilled_tokens, st.ttft_ms, st.prefill_tok_s,
                st.generated_tokens, st.decode_tok_s, st.dropped_messages, st.context_used, st.context_size,
                format_bytes(st.kv_bytes).c_str(), format_bytes(peak_rss_bytes()).c_str(),
                cpu::num_threads());
  std::string s = buf;
  if (st.images > 0 || st.audio_clips > 0) {  // the media of that turn's message
    s.pop_back();
    if (st.images > 0) {
      std::snprintf(buf, sizeof buf, " | images: %d (%d soft tokens, %.0f ms to encode)", st.images,
                    st.image_soft_tokens, st.image_encode_ms);
      s += buf;
    }
    if (st.audio_clips > 0) {
      std::snprintf(buf, sizeof buf, " | audio clips: %d (%d soft tokens, %.0f ms to encode)", st.audio_clips,
                    st.audio_soft_tokens, st.audio_encode_ms);
      s += buf;
    }
    s += "\n";
  }
  return s;
}

class Repl {
 public:
  Repl(const ChatArgs& a, Session& s, std::string system, kb::KnowledgeBase* base, const Tokenizer* tok)
      : a_(a), s_(s), system_(std::move(system)), kb_(base), tok_(tok) {}

  // Handles one /command; returns false for /quit.
  bool command(const std::string& line) {
    const size_t sp = line.find(' ');
    const std::string cmd = line.substr(0, sp);
    std::string arg = sp == std::string::npos ? "" : line.substr(sp + 1);
    while (!arg.empty() && arg.front() == ' ') arg.erase(0, 1);
    while (!arg.empty() && arg.back() == ' ') arg.pop_back();
    if (cmd == "/quit" || cmd == "/exit") return false;
    if (cmd == "/help") {
      out(kHelp);
    } else if (cmd == "/reset") {
      s_.reset();
      if (!system_.empty()) s_.set_system(system_);
      out("(conversation cleared) " + usage(s_) + "\n");
    } else if (cmd == "/save") {
      if (arg.empty()) throw Error("/save needs a file name");
      s_.save(arg);
      out("(saved " + std::to_string(s_.messages().size()) + " messages, " +
          std::to_string(s_.cached_tokens()) + " tokens to " + arg + ")\n");
    } else if (cmd == "/load") {
      if (arg.empty()) throw Error("/load needs a file name");
      s_.restore(arg);
      system_.clear();
      if (!s_.messages().empty() && s_.messages()[0].role == "system") system_ = s_.messages()[0].content;
      out("(loaded " + std::to_string(s_.messages().size()) + " messages from " + arg + ") " + usage(s_) + "\n");
    } else if (cmd == "/system") {
      if (arg.empty()) {
        out(system_.empty() ? "(no system message)\n" : "system: " + system_ + "\n");
      } else {
        system_ = arg == "-" ? "" : arg;
        s_.set_system(system_);
        out(system_.empty() ? "(system message removed)\n" : "(system message set)\n");
      }
    } else if (cmd == "/preset") {
      if (arg.empty()) throw Error("/preset needs a name (precise, balanced, creative, code)");
      GenFlags g = *a_.gen;
      g.preset = arg;
      const SamplingParams p = resolve_gen_sampling(g, s_.sampler().params().seed);
      s_.set_sampling(p);
      char buf[160];
      std::snprintf(buf, sizeof buf, "(preset %s: temperature %.2g, top-p %.2g)\n", arg.c_str(), p.temperature,
                    p.top_p);
      out(buf);
    } else if (cmd == "/image") {
      if (arg.empty()) throw Error("/image needs a file name");
      const auto t0 = std::chrono::steady_clock::now();
      s_.add_image(vision::load_image_file(arg));
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      char buf[200];
      std::snprintf(buf, sizeof buf, "(image %zu attached to your next message: %.0f ms to encode) ", s_.pending_images(),
                    ms);
      out(buf + usage(s_) + "\n");
    } else if (cmd == "/audio") {
      if (arg.empty()) throw Error("/audio needs a file name");
      const auto t0 = std::chrono::steady_clock::now();
      s_.add_audio(audio::load_audio_file(arg));
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      char buf[200];
      std::snprintf(buf, sizeof buf, "(audio clip %zu attached to your next message: %.0f ms to encode) ",
                    s_.pending_audio(), ms);
      out(buf + usage(s_) + "\n");
    } else if (cmd == "/stats") {
      out(stats_text(s_.last_stats()));
    } else {
      throw Error("unknown command '" + cmd + "' (see /help)");
    }
    return true;
  }

  // --kb: the message sent is the question with the top passages (kb/rag_prompt.h).
  std::string with_passages(const std::string& text, std::vector<kb::SearchHit>& used) {
    kb::SearchOptions so;
    so.k = a_.kb_passages;
    const auto hits = kb_->search(text, so);
    const int budget = std::max(64, std::min(a_.kb_budget, s_.context_size() / 2));
    kb::RagPrompt rp = kb::build_rag_prompt(text, hits, budget, [this](const std::string& s) {
      return static_cast<int>(tok_->encode(s, false, false).size());
    });
    used = std::move(rp.used);
    return rp.message;
  }

  void answer(const std::string& text) {
    std::vector<kb::SearchHit> used;
    const std::string message = kb_ ? with_passages(text, used) : text;
    GenerateParams gp;
    gp.max_new_tokens = a_.n_predict;
    gp.stop_strings = a_.gen->stops;
    std::atomic<bool>& cancel = sigint_flag();
    cancel.store(false);
    gp.cancel = &cancel;
    const TurnResult r = s_.chat(message, gp, [](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;
    });
    cancel.store(false);
    out("\n");
    std::string tail;
    if (r.finish == FinishReason::Cancelled) tail = " (stopped)";
    if (r.finish == FinishReason::ContextFull) tail = " (the context is full)";
    if (r.stats.dropped_messages > 0)
      tail += " (" + std::to_string(r.stats.dropped_messages) + " oldest messages dropped to fit the context)";
    if (kb_) {
      std::string src = used.empty() ? "(no passages from the knowledge base)" : "sources:";
      for (size_t i = 0; i < used.size(); ++i)
        src += " [" + std::to_string(i + 1) + "] " + used[i].source + " (offset " + std::to_string(used[i].offset) + ")";
      note(src);
    }
    note(usage(s_) + tail);
  }

 private:
  const ChatArgs& a_;
  Session& s_;
  std::string system_;
  kb::KnowledgeBase* kb_;
  const Tokenizer* tok_;
};

int chat(const ChatArgs& a) {
  const GenFlags& g = *a.gen;
  apply_threads(a.threads);
  const uint64_t seed = pick_seed(g.seed);
  SessionOptions opt;
  opt.sampling = resolve_gen_sampling(g, seed);
  opt.kv.type = parse_kv_type(g.kv_type);
  opt.context_tokens = a.ctx;
  opt.threads = a.threads;
  opt.ignore_eos = a.ignore_eos;
  opt.pan_and_scan = a.pan_and_scan;
  if (!g.max_memory.empty()) opt.memory_budget_bytes = parse_bytes(g.max_memory);
  for (const auto& s : g.stops)
    if (s.empty()) throw Error("--stop: empty stop string");
  const std::string dir = model_path(a.model_dir);
  auto loaded = LoadedModel::load(dir, device_for_media(parse_device(a.gen->device), !a.mmproj.empty()));
  if (!a.mmproj.empty()) loaded->attach_mmproj(a.mmproj);
  std::shared_ptr<const LoadedModel> lm = std::move(loaded);
  for (const auto& n : lm->notes()) note("edgegemma: note: " + n);
  Session session(lm, opt);
  if (g.warmup) {
    const WarmupResult w = session.warmup();
    char buf[160];
    std::snprintf(buf, sizeof buf, "warmup: %s paged in (%.1f ms), first forward %.1f ms",
                  format_bytes(w.bytes_touched).c_str(), w.touch_ms, w.forward_ms);
    note(buf);
  }
  if (!a.system.empty()) session.set_system(a.system);

  install_sigint_handler();
  std::unique_ptr<LineReader> in = LineReader::create(a.plain);
  if (in->interactive()) {
    note("edgegemma chat: " + dir + " | context " + std::to_string(session.context_size()) +
         " tokens | seed " + std::to_string(seed) + " | /help for commands, Ctrl-D to quit");
    // Prefill while typing: hand every change of the draft to the session's background prefill.
    in->set_typing_callback([&session](const std::string& typed) {
      if (typed.empty() || typed[0] == '/') return;
      try {
        session.update_input(typed);
      } catch (const Error&) {
        // e.g. a draft that does not fit: reported when the message is sent
      }
    });
  }
  OpenedKb base;
  if (!a.kb.empty()) base = open_kb(a.kb, a.kb_model, false);
  Repl repl(a, session, a.system, base.kb.get(), &lm->tokenizer());
  std::string line;
  for (;;) {
    const std::string prompt = in->interactive() ? usage(session) + " > " : "";
    if (!in->read(prompt, line)) break;
    if (line.find_first_not_of(" \t\n") == std::string::npos) continue;
    in->add_history(line);
    try {
      if (line[0] == '/') {
        if (!repl.command(line)) break;
      } else {
        repl.answer(line);
      }
    } catch (const Error& e) {
      note(std::string("error: ") + e.what());
    }
  }
  std::fflush(stdout);
  if (std::ferror(stdout)) throw Error("cannot write the output (stdout)");
  return 0;
}

}  // namespace

Action register_chat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  app.add_option("-m,--model", a->model_dir, "model directory (default: bundled tiny-gemma3)");
  app.add_option("--mmproj", a->mmproj, "llama.cpp mmproj GGUF with the vision tower (Gemma 4: and the audio tower) for a text GGUF (edgegemma quantize --mmproj writes one; not found automatically)");
  app.add_option("--system", a->system, "system message (Gemma 2/3 fold it into the first user turn)");
  app.add_option("-n,--n-predict", a->n_predict, "max new tokens per answer (default 1024)")->check(kCount);
  app.add_option("-c,--ctx", a->ctx, "context size in tokens, all turns (default: min(4096, the model's))")
      ->check(kCount);
  app.add_option("-t,--threads", a->threads, "CPU threads, 1..1024 (default: all cores)")
      ->check(CLI::Range(0, 1024, "a thread count"));
  app.add_flag("--ignore-eos", a->ignore_eos, "keep generating through <eos>/<end_of_turn> (until -n or Ctrl-C)");
  app.add_flag("--pan-and-scan", a->pan_and_scan,
               "Gemma 3: also show the model 2-4 crops of each wide or tall /image (more soft tokens; docs/vision.md)");
  app.add_flag("--plain", a->plain, "read plain lines even on a terminal (no libedit, no prefill while typing)");
  app.add_option("--kb", a->kb, "knowledge base (edgegemma kb add): each message gets its top passages, cited as [n]");
  app.add_option("--kb-model", a->kb_model, "embedding model for --kb (default: the one recorded in the base)");
  app.add_option("--kb-passages", a->kb_passages, "passages retrieved per message (default 4)")->check(CLI::Range(1, 64));
  app.add_option("--kb-budget", a->kb_budget, "tokens of the passages and question at most (default 1024)")
      ->check(CLI::Range(64, 1 << 20));
  add_gen_flags(app, a->gen);
  return [a] { return chat(*a); };
}

}  // namespace eg::cli
