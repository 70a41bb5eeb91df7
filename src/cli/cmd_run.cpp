// `edgegemma run`: generate a continuation of a prompt, streamed to stdout.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"
#include "cli/commands.h"
#include "cli/gen_flags.h"
#include "core/error.h"
#include "core/file_util.h"
#include "engine/generator.h"
#include "audio/audio.h"
#include "engine/audio_prompt.h"
#include "engine/image_prompt.h"
#include "engine/loaded_model.h"
#include "engine/memory_budget.h"
#include "engine/stop_strings.h"
#include "kv/kv_cache.h"
#include "tokenizer/chat_template.h"

namespace eg::cli {

namespace {

struct RunArgs {
  std::string model_dir;
  std::string mmproj;  // --mmproj FILE
  std::string prompt;
  bool prompt_given = false;
  std::string prompt_file;
  int n_predict = 256;
  std::shared_ptr<GenFlags> gen = std::make_shared<GenFlags>();  // sampling, stop strings, KV
  int ctx = 0;
  int threads = 0;
  bool chat = false;
  std::string system;
  bool stats = false;
  bool json = false;
  bool no_bos = false;
  bool ignore_eos = false;
  bool pan_and_scan = false;        // --pan-and-scan (Gemma 3)
  std::vector<std::string> images;  // --image FILE, in order
  std::vector<std::string> audios;  // --audio FILE, in order
  std::string media_order;          // 'i' / 'a' per --image / --audio, in command-line order
};

std::string get_prompt(const RunArgs& a) {
  if (a.prompt_given && !a.prompt_file.empty()) throw Error("give either -p or -f, not both");
  if (a.prompt_given) return a.prompt;
  if (!a.prompt_file.empty()) return read_file(a.prompt_file);
  if (isatty(STDIN_FILENO)) throw Error("no prompt: use -p TEXT, -f FILE or pipe text to stdin");
  return read_stream(stdin);
}

nlohmann::json stats_json(const LoadedModel& lm, const GenerationStats& s) {
  return {{"load_ms", lm.load_ms()},
          {"prompt_tokens", s.prompt_tokens},
          {"generated_tokens", s.generated_tokens},
          {"ttft_ms", s.ttft_ms},
          {"prefill_ms", s.prefill_ms},
          {"prefill_tok_s", s.prefill_tok_s},
          {"decode_ms", s.decode_ms},
          {"decode_tok_s", s.decode_tok_s},
          {"peak_rss_bytes", peak_rss_bytes()},
          {"simd", cpu::simd_target_name()},
          {"device", device_name(lm.executor().device())},
          {"executor", lm.executor().description()}};
}

int run(const RunArgs& a) {
  const GenFlags& g = *a.gen;
  if (!std::isfinite(g.temp)) throw Error("--temp must be a finite number");
  apply_threads(a.threads);
  const uint64_t seed = pick_seed(g.seed);
  const SamplingParams sampling = resolve_gen_sampling(g, seed);
  StopStringMatcher stop_text(g.stops);
  const KVType kv_type = parse_kv_type(g.kv_type);
  std::string text = get_prompt(a);
  if (text.empty()) throw Error("empty prompt");
  if (!a.system.empty() && !a.chat) throw Error("--system needs --chat");
  const std::string dir = model_path(a.model_dir);
  // Media are decoded first, in command-line order: a bad file is reported before the model loads.
  std::vector<PromptMedium> media;
  size_t n_images = 0, n_clips = 0;
  for (char k : a.media_order) {
    PromptMedium m;
    if (k == 'i') {
      m.image = vision::load_image_file(a.images.at(n_images++));
    } else {
      m.kind = PromptMedium::Kind::Audio;
      m.audio = audio::to_model_rate(audio::load_audio_file(a.audios.at(n_clips++)));
    }
    media.push_back(std::move(m));
  }
  auto lm = LoadedModel::load(dir, device_for_media(parse_device(g.device), !media.empty() || !a.mmproj.empty()));
  if (!a.mmproj.empty()) lm->attach_mmproj(a.mmproj);
  for (const auto& n : lm->notes()) std::fprintf(stderr, "edgegemma: note: %s\n", n.c_str());
  const Tokenizer& tok = lm->tokenizer();
  const ImageEncoder* encoder = n_images > 0 ? &lm->image_encoder() : nullptr;  // "... no vision tower"
  const AudioEncoder* aenc = n_clips > 0 ? &lm->audio_encoder() : nullptr;  // "... no audio tower"
  MediaPrompt with_media;

  std::vector<int32_t> prompt;
  if (a.chat) {
    // The model's own chat template (chat_template.jinja or tokenizer_config.json); a system
    // message the template rejects (Gemma 2) is folded into the user turn (chat_template.h).
    nlohmann::json msgs = nlohmann::json::array();
    if (!a.system.empty()) msgs.push_back({{"role", "system"}, {"content", a.system}});
    if (media.empty()) {
      msgs.push_back({{"role", "user"}, {"content", text}});
    } else {  // the media first, in the order given, then the text
      nlohmann::json content = nlohmann::json::array();
      for (const auto& m : media)
        content.push_back({{"type", m.kind == PromptMedium::Kind::Image ? "image" : "audio"}});
      content.push_back({{"type", "text"}, {"text", text}});
      msgs.push_back({{"role", "user"}, {"content", content}});
    }
    ChatOptions opt;
    opt.add_generation_prompt = true;
    const int32_t bos = tok.bos_id(), eos = tok.eos_id();
    opt.bos_token = bos >= 0 ? tok.piece(bos) : "";
    opt.eos_token = eos >= 0 ? tok.piece(eos) : "";
    if (lm->chat_template().empty())
      throw Error("model has no chat template (" + dir + "): --chat needs one");
    const std::string rendered = ChatTemplate(lm->chat_template()).render(msgs, opt);
    // As transformers' apply_chat_template(tokenize=True): the template writes the BOS text
    // itself; encode_prompt keeps exactly that one (and adds one if a template writes none).
    if (media.empty()) prompt = lm->encode_prompt(rendered, a.no_bos);
    else text = rendered;
  } else if (media.empty()) {
    prompt = lm->encode_prompt(text, a.no_bos);
  } else if ((!encoder || count_markers(text, encoder->marker()) == 0) &&
             (!aenc || count_markers(text, aenc->marker()) == 0)) {
    // No media marker in the prompt: the media go before the text, in the order given.
    std::string marked;
    for (const auto& m : media) marked += m.kind == PromptMedium::Kind::Image ? encoder->marker() : aenc->marker();
    text = marked + text;
  }
  if (!media.empty()) {
    with_media = build_media_prompt(*lm, encoder, aenc, text, media, a.no_bos, a.pan_and_scan);
    prompt = with_media.ids;
  }
  std::vector<int> tokens_per_image, tokens_per_clip;
  for (size_t i = 0; i < media.size(); ++i)
    (media[i].kind == PromptMedium::Kind::Image ? tokens_per_image : tokens_per_clip)
        .push_back(with_media.tokens_per_medium[i]);
  const double encode_ms = with_media.image_encode_ms;

  GenerateOptions opt;
  if (!g.max_memory.empty()) {
    // The cache generate() will fill: prompt + new tokens (at most the context), one prefill pass.
    const int ctx = a.ctx > 0 ? a.ctx : lm->model().config().max_position_embeddings;
    const int need = std::min<int64_t>(ctx, static_cast<int64_t>(prompt.size()) + a.n_predict);
    KVCacheOptions kv;
    kv.type = kv_type;
    check_memory_budget(lm->model(), parse_bytes(g.max_memory), std::max(need, 1), kv,
                        static_cast<int>(prompt.size()));
  }
  if (g.warmup) {
    const auto t0 = std::chrono::steady_clock::now();
    const size_t touched = touch_weights(lm->model());
    std::fprintf(stderr, "edgegemma: warmup: %s of weights paged in (%.1f ms)\n", format_bytes(touched).c_str(),
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  opt.max_new_tokens = a.n_predict;
  opt.ignore_eos = a.ignore_eos;
  opt.context_size = a.ctx;
  opt.sampling = sampling;
  opt.kv.type = kv_type;
  opt.media = with_media.spans;

  StreamingDetokenizer detok(tok);
  std::string text_out;
  const auto& stops = lm->stop_ids();
  auto on_token = [&](int32_t id) {
    // A stop id that ends generation is not part of the text.
    if (!a.ignore_eos && std::find(stops.begin(), stops.end(), id) != stops.end()) return true;
    // Text that may still become a stop string is held back (stop_strings.h).
    std::string piece = stop_text.push(detok.push(id));
    text_out += piece;
    if (!a.json && !piece.empty()) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return !stop_text.stopped();
  };
  GenerationResult r = generate(lm->executor(), prompt, stops, opt, on_token);
  std::string tail = stop_text.push(detok.flush());
  if (stop_text.stopped()) r.finish_reason = "stop";  // the only way `run` cancels
  tail += stop_text.flush();
  text_out += tail;

  if (a.json) {
    nlohmann::json j = {{"prompt_ids", prompt},
                        {"generated_ids", r.ids},
                        {"text", text_out},
                        {"finish_reason", r.finish_reason},
                        {"context_full", r.context_full},
                        {"seed", seed},
                        {"stats", stats_json(*lm, r.stats)}};
    if (n_images > 0) {
      j["stats"]["images"] = n_images;
      j["stats"]["soft_tokens_per_image"] = tokens_per_image;
      j["stats"]["image_encode_ms"] = encode_ms;
    }
    if (n_clips > 0) {
      j["stats"]["audio_clips"] = n_clips;
      j["stats"]["soft_tokens_per_clip"] = tokens_per_clip;
      j["stats"]["audio_encode_ms"] = with_media.audio_encode_ms;
    }
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  std::fflush(stdout);
  if (std::ferror(stdout)) throw Error("cannot write the output (stdout)");
  if (r.context_full)
    std::fprintf(stderr, "edgegemma: note: stopped: the context of %d tokens is full (see --ctx)\n",
                 a.ctx > 0 ? a.ctx : lm->model().config().max_position_embeddings);
  if (a.stats) {
    const GenerationStats& s = r.stats;
    std::fprintf(stderr,
                 "load: %.1f ms | prompt tokens: %d | TTFT: %.1f ms | prefill: %.1f tok/s | "
                 "generated tokens: %d | decode: %.1f tok/s | peak RSS: %.1f MiB | threads: %d | "
                 "SIMD: %s | device: %s | seed: %llu\n",
                 lm->load_ms(), s.prompt_tokens, s.ttft_ms, s.prefill_tok_s, s.generated_tokens,
                 s.decode_tok_s, peak_rss_bytes() / 1048576.0, cpu::num_threads(),
                 cpu::simd_target_name(), lm->executor().description().c_str(),
                 static_cast<unsigned long long>(seed));
    if (n_images > 0) {
      std::string per;
      for (int n : tokens_per_image) per += (per.empty() ? "" : ", ") + std::to_string(n);
      std::fprintf(stderr, "images: %zu | soft tokens per image: %s | image encode: %.1f ms\n", n_images,
                   per.c_str(), encode_ms);
    }
    if (n_clips > 0) {
      std::string per;
      for (int n : tokens_per_clip) per += (per.empty() ? "" : ", ") + std::to_string(n);
      std::fprintf(stderr, "audio clips: %zu | soft tokens per clip: %s | audio encode: %.1f ms\n", n_clips,
                   per.c_str(), with_media.audio_encode_ms);
    }
  }
  return 0;
}

}  // namespace

Action register_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  app.add_option("-m,--model", a->model_dir, "model directory (default: bundled tiny-gemma3)");
  app.add_option("--mmproj", a->mmproj, "llama.cpp mmproj GGUF with the vision tower (Gemma 4: and the audio tower) for a text GGUF (edgegemma quantize --mmproj writes one; not found automatically)");
  app.add_option("-p,--prompt", a->prompt, "prompt text")->each([a](const std::string&) { a->prompt_given = true; });
  app.add_option("-f,--file", a->prompt_file, "read the prompt from a file");
  app.add_option("-n,--n-predict", a->n_predict, "max new tokens (default 256)")->check(kCount);
  add_gen_flags(app, a->gen);
  app.add_option("-c,--ctx", a->ctx, "context size in tokens (default 0 = the model's)")->check(kCount);
  app.add_option("-t,--threads", a->threads, "CPU threads, 1..1024 (default: all cores)")
      ->check(CLI::Range(0, 1024, "a thread count"));
  app.add_flag("--chat", a->chat, "wrap the prompt in the model's chat template (one user turn)");
  app.add_option("--system", a->system,
                 "system message for --chat (templates without a system turn get it folded into the user turn)");
  app.add_flag("--stats", a->stats, "print load time, TTFT, prefill/decode tok/s, peak RSS to stderr");
  app.add_flag("--json", a->json,
               "print one JSON object: prompt_ids, generated_ids, text, finish_reason, context_full, seed, stats");
  app.add_flag("--no-bos", a->no_bos, "do not add <bos> (a <bos> the text or the chat template writes itself stays)");
  app.add_flag("--ignore-eos", a->ignore_eos, "keep generating through <eos>/<end_of_turn>");
  CLI::Option* image_opt = app.add_option("--image", a->images,
                 "an image file (JPEG, PNG, WebP, GIF, BMP; repeatable): with --chat before the text of the "
                 "message, else at each image marker of the prompt (<start_of_image>; Gemma 4: <|image|>), or before the text")
      ->allow_extra_args(false);
  app.add_flag("--pan-and-scan", a->pan_and_scan,
               "Gemma 3: also show the model 2-4 crops of each wide or tall --image (more soft tokens; docs/vision.md)");
  CLI::Option* audio_opt = app.add_option("--audio", a->audios,
                 "an audio file (WAV, FLAC, OGG, MP3; any rate, resampled to 16 kHz mono; repeatable; Gemma 4 "
                 "E2B/E4B): with --chat before the text of the message (with --image: in command-line order), else at "
                 "each <|audio|> of the prompt, or before the text")
      ->allow_extra_args(false);
  return [a, &app, image_opt, audio_opt] {
    a->media_order.clear();  // --image / --audio in command-line order (one entry per value)
    for (const CLI::Option* o : app.parse_order())
      if (o == image_opt) a->media_order += 'i';
      else if (o == audio_opt) a->media_order += 'a';
    if (a->media_order.size() != a->images.size() + a->audios.size())
      throw Error("internal: --image/--audio order does not match their values");
    return run(*a);
  };
}

}  // namespace eg::cli
