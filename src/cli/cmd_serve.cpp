// `edgegemma serve`: the OpenAI-compatible HTTP server (src/server/server.h).
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "cli/gen_flags.h"
#include "cli/kb_open.h"
#include "core/error.h"
#include "embed/open.h"
#include "engine/loaded_model.h"
#include "server/server.h"
#include "store/store.h"

namespace eg::cli {

namespace {

struct ServeArgs {
  std::string mmproj;  // --mmproj FILE
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  int parallel = 4;
  int queue = 64;
  std::string api_key;
  int ctx = 0;
  std::string chat_template;
  std::string alias;
  double timeout = 600;
  int prefix_cache_mb = 256;
  int media_cache_mb = 64;
  bool pan_and_scan = false;
  int max_body_kb = 0;  // 0: 1024, or 32768 for a model with a vision tower (images as data: URLs)
  int threads = 0;
  std::string kv_type = "f16";
  std::string device = "auto";
  std::string embedding_model;
  std::string kb, faq, kb_model, first_token_timeout;
  int kb_passages = 4;
  int kb_budget = 1024;
  double faq_threshold = 0.75, faq_lexical_threshold = 0.6;
  std::string store;
  std::string admin_key;
  std::string rollback_if;
  int rollback_min_requests = 20;
};

// The id a model path is served under: the folder name, or the .gguf file's stem.
std::string id_of(const std::string& path) {
  std::filesystem::path p(path);
  while (!p.empty() && !p.has_filename()) p = p.parent_path();
  return p.extension() == ".gguf" ? p.stem().string() : p.filename().string();
}


// "3s", "250ms", "2m" or plain seconds ("1.5") -> seconds; 0 and negative are errors.
double parse_duration(const std::string& s, const char* flag) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    throw Error(std::string(flag) + ": '" + s + "' is not a duration (e.g. 3s, 500ms)");
  }
  const std::string unit = s.substr(used);
  double mul = 1;
  if (unit == "ms") mul = 1e-3;
  else if (unit == "m" || unit == "min") mul = 60;
  else if (unit != "" && unit != "s") throw Error(std::string(flag) + ": unknown unit '" + unit + "' (ms, s, m)");
  if (!(v > 0)) throw Error(std::string(flag) + ": must be > 0");
  return v * mul;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot read " + path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// Binds, reports, serves until SIGINT/SIGTERM (blocked in every thread by serve()).
int run_server(server::Server& srv, const ServeArgs& a, const std::string& what) {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  const int port = srv.bind();
  std::thread watcher([&srv, sigs] {
    int sig = 0;
    sigwait(&sigs, &sig);
    std::fprintf(stderr, "edgegemma serve: signal %d, stopping\n", sig);
    srv.stop();
  });
  std::fprintf(stderr, "edgegemma serve: %s%d/\n", what.c_str(), port);
  std::printf("edgegemma serve: listening on http://%s:%d\n", a.host.c_str(), port);
  std::fflush(stdout);
  srv.listen();
  srv.stop();
  pthread_kill(watcher.native_handle(), SIGTERM);  // wakes sigwait if no signal came
  watcher.join();
  return 0;
}

int serve_embeddings_only(const ServeArgs& a, server::ServerOptions& o) {
  o.host = a.host;
  o.port = a.port;
  o.api_key = a.api_key;
  o.model_id = o.embedding_model_id;
  o.max_body_bytes = static_cast<size_t>(a.max_body_kb > 0 ? a.max_body_kb : 1024) * 1024;
  o.timeout_s = a.timeout;
  server::Server srv(nullptr, o);
  const std::string what = "embedding model " + o.embedding_model_id + " (" + std::to_string(o.embedder->full_dim()) +
                           " dims; POST /v1/embeddings only, chat routes answer 400) | http://" + a.host + ":";
  return run_server(srv, a, what);
}

int serve(const ServeArgs& a) {
  const double first_token_timeout =
      a.first_token_timeout.empty() ? 0 : parse_duration(a.first_token_timeout, "--first-token-timeout");
  apply_threads(a.threads);
  // SIGINT/SIGTERM are handled by a watcher thread (sigwait), so block them in every thread.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // -m NAME of the model store (a path on disk wins): serve its current version and follow the
  // pointer; NAME:VERSION / sha256:PREFIX serve that version only.
  std::string path;
  server::ServerOptions o;
  std::error_code ec;
  if (!a.model.empty() && !std::filesystem::exists(a.model, ec) && store::is_reference(a.model)) {
    const store::Store st(a.store.empty() ? store::Store::default_root() : a.store, false);
    const store::Manifest man = st.resolve(a.model);
    path = st.model_path(man);
    if (a.model.find(':') == std::string::npos) {
      o.store_root = st.root();
      o.store_name = man.name;
      o.store_version = man.version;
    }
    if (a.alias.empty()) o.model_id = a.model.find(':') == std::string::npos ? man.name : man.name + ":" + man.version;
  } else {
    path = model_path(a.model);
  }
  // -m EMBEDDING_MODEL alone: embeddings only; --embedding-model adds one beside a chat model.
  const bool embed_only = embed::is_embedding_model(path);
  if (embed_only && !a.embedding_model.empty())
    throw Error(path + " is an embedding model: give a chat model with -m and the embedding model with --embedding-model");
  const std::string emb_path = embed_only ? path : (a.embedding_model.empty() ? "" : model_path(a.embedding_model));
  if (!emb_path.empty()) {
    embed::OpenOptions eo;
    eo.threads = a.threads;
    o.embedder = embed::open_embedder(emb_path, eo);
    o.embedding_model_id = embed_only && !a.alias.empty() ? a.alias : id_of(emb_path);
  }
  if (embed_only) return serve_embeddings_only(a, o);
  if (!a.rollback_if.empty() && o.store_name.empty())
    throw Error("--rollback-if needs -m NAME of a model in the store");
  o.device = device_for_media(parse_device(a.device), !a.mmproj.empty());
  auto loaded = LoadedModel::load(path, o.device);
  if (!a.mmproj.empty()) loaded->attach_mmproj(a.mmproj);
  o.mmproj = a.mmproj;  // and to every version the store swaps in
  std::shared_ptr<const LoadedModel> lm = std::move(loaded);
  for (const auto& n : lm->notes()) std::fprintf(stderr, "edgegemma: note: %s\n", n.c_str());

  o.host = a.host;
  o.port = a.port;
  o.api_key = a.api_key;
  if (!a.chat_template.empty()) o.chat_template = read_file(a.chat_template);
  if (!a.alias.empty()) o.model_id = a.alias;
  else if (o.model_id.empty()) o.model_id = id_of(path);
  o.admin_key = a.admin_key;
  o.rollback_if = a.rollback_if;
  o.rollback_min_requests = a.rollback_min_requests;
  const bool vision = (lm->model().config().multimodal_wrapper && !lm->source_dir().empty()) || !lm->mmproj_path().empty();
  o.max_body_bytes = static_cast<size_t>(a.max_body_kb > 0 ? a.max_body_kb : (vision ? 32768 : 1024)) * 1024;
  o.timeout_s = a.timeout;
  const int max_pos = lm->model().config().max_position_embeddings;
  o.scheduler.context_tokens = a.ctx > 0 ? a.ctx : std::min(4096, max_pos);
  if (o.scheduler.context_tokens > max_pos)
    throw Error("--ctx " + std::to_string(a.ctx) + " exceeds the model's maximum of " + std::to_string(max_pos));
  o.scheduler.slots = a.parallel;
  o.scheduler.queue = a.queue;
  o.scheduler.threads = a.threads;
  o.scheduler.kv.type = parse_kv_type(a.kv_type);
  o.scheduler.prefix_cache_bytes = static_cast<size_t>(a.prefix_cache_mb) << 20;
  o.media_cache_bytes = static_cast<size_t>(a.media_cache_mb) << 20;
  o.pan_and_scan = a.pan_and_scan;
  if (o.chat_template.empty() && lm->chat_template().empty())
    std::fprintf(stderr, "edgegemma serve: note: the model has no chat template; /v1/chat/completions will fail "
                         "(use --chat-template or /v1/completions)\n");

  // Knowledge base (docs/knowledge-base.md): the bases (and their embedding models) live as long as the server.
  o.kb.first_token_timeout_s = first_token_timeout;
  OpenedKb kb_base, faq_base;
  if (!a.kb.empty()) {
    kb_base = open_kb(a.kb, a.kb_model, false);
    o.kb.kb = std::shared_ptr<kb::KnowledgeBase>(std::move(kb_base.kb));
    o.kb.passages = a.kb_passages;
    o.kb.budget_tokens = a.kb_budget;
    const kb::KbInfo i = o.kb.kb->info();
    std::fprintf(stderr, "edgegemma serve: knowledge base %s: %lld files, %lld chunks, %s\n", a.kb.c_str(),
                 static_cast<long long>(i.files), static_cast<long long>(i.chunks),
                 i.model_path.empty() ? "BM25 only" : ("vectors by " + i.model_path).c_str());
  }
  if (!a.faq.empty()) {
    if (o.kb.kb && std::filesystem::equivalent(a.faq, a.kb)) {
      o.kb.faq = o.kb.kb;
    } else {
      faq_base = open_kb(a.faq, a.kb_model, false);
      o.kb.faq = std::shared_ptr<kb::KnowledgeBase>(std::move(faq_base.kb));
    }
    o.kb.faq_options.vector_threshold = a.faq_threshold;
    o.kb.faq_options.lexical_threshold = a.faq_lexical_threshold;
    std::fprintf(stderr, "edgegemma serve: FAQ fallback from %s: %lld pairs\n", a.faq.c_str(),
                 static_cast<long long>(o.kb.faq->info().faq));
  }

  server::Server srv(lm, o);
  char what[512];
  std::snprintf(what, sizeof what, "model %s | %d slots x %d tokens of context | %s%s%s | web chat at http://%s:",
                o.model_id.c_str(), o.scheduler.slots, o.scheduler.context_tokens, lm->executor().description().c_str(),
                o.embedder ? " | embeddings: " : "", o.embedder ? o.embedding_model_id.c_str() : "", a.host.c_str());
  lm.reset();  // the server holds the model; a hot swap (model store) then frees it
  return run_server(srv, a, what);
}

}  // namespace

Action register_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  app.add_option("-m,--model", a->model,
                 "model directory or .gguf file, or a store reference: NAME (serves its current version and follows "
                 "it), NAME:VERSION, sha256:PREFIX (default: bundled tiny-gemma3)");
  app.add_option("--mmproj", a->mmproj, "llama.cpp mmproj GGUF with the vision tower (Gemma 4: and the audio tower) for a text GGUF (edgegemma quantize --mmproj writes one; not found automatically)");
  app.add_option("--store", a->store, "model store folder (default: $EDGEGEMMA_STORE or ~/.local/share/edgegemma/models)");
  app.add_option("--admin-key", a->admin_key, "enable admin routes (POST /v1/models/NAME/rollback) with Authorization: Bearer KEY");
  app.add_option("--rollback-if", a->rollback_if,
                 "roll the store model back automatically when a rule holds, e.g. \"ttft_p95>2s,error_rate>5%\" "
                 "(docs/model-store.md)");
  app.add_option("--rollback-min-requests", a->rollback_min_requests,
                 "requests the served version must have finished before --rollback-if is evaluated (default 20)")
      ->check(CLI::Range(1, 100));
  app.add_option("--host", a->host, "address to bind (default 127.0.0.1: this machine only)");
  app.add_option("--port", a->port, "TCP port (default 8080; 0 picks a free one)")->check(CLI::Range(0, 65535));
  app.add_option("-P,--parallel", a->parallel, "concurrent requests (slots), default 4")->check(CLI::Range(1, 256));
  app.add_option("--queue", a->queue, "requests waiting for a slot before 429, default 64")->check(kCount);
  app.add_option("--api-key", a->api_key, "require Authorization: Bearer KEY");
  app.add_option("-c,--ctx", a->ctx, "context tokens per slot (default: min(4096, the model's))")->check(kCount);
  app.add_option("--chat-template", a->chat_template, "Jinja chat template file (default: the model's)");
  app.add_option("--alias", a->alias, "model id reported by /v1/models (default: the model's folder/file name)");
  app.add_option("--timeout", a->timeout, "seconds a request may take, queueing included (default 600)")
      ->check(CLI::Range(0.001, 1e7));
  app.add_option("--prefix-cache-mb", a->prefix_cache_mb, "MiB of KV kept for prefixes shared across requests (0: off; default 256)")
      ->check(kCount);
  app.add_option("--media-cache-mb", a->media_cache_mb,
                 "MiB of encoded images and audio clips kept between requests and drafts (0: off; default 64)")
      ->check(kCount);
  app.add_flag("--pan-and-scan", a->pan_and_scan,
               "Gemma 3: also show the model 2-4 crops of each wide or tall image (more soft tokens; docs/vision.md)");
  app.add_option("--max-body-kb", a->max_body_kb, "largest request body in KiB (default 1024; 32768 for a model with a vision tower)")->check(CLI::Range(1, 1 << 20));
  app.add_option("-t,--threads", a->threads, "CPU threads (default: all cores)")->check(CLI::Range(0, 1024));
  app.add_option("--kv-type", a->kv_type, "KV cache type f16|bf16|f32|int8 (default f16)");
  app.add_option("--device", a->device, "where steps run: auto (default), cpu or cuda");
  app.add_option("--embedding-model", a->embedding_model,
                 "also serve POST /v1/embeddings with this embedding model (sentence-transformers folder or "
                 "gemma-embedding .gguf); -m EMBEDDING_MODEL alone serves embeddings only");
  app.add_option("--kb", a->kb, "knowledge base (edgegemma kb add): chat answers get its top passages with sources");
  app.add_option("--kb-model", a->kb_model, "embedding model for --kb / --faq (default: the one recorded in the base)");
  app.add_option("--kb-passages", a->kb_passages, "passages retrieved per chat request (default 4)")->check(CLI::Range(1, 64));
  app.add_option("--kb-budget", a->kb_budget, "tokens of the RAG message at most (default 1024; at most half the context)")
      ->check(CLI::Range(64, 1 << 20));
  app.add_option("--faq", a->faq, "knowledge base with FAQ pairs (edgegemma kb faq-add): answers failed requests");
  app.add_option("--faq-threshold", a->faq_threshold, "cosine similarity a FAQ question must reach (default 0.75)")
      ->check(CLI::Range(-1.0, 1.0));
  app.add_option("--faq-lexical-threshold", a->faq_lexical_threshold,
                 "word overlap (Dice) a FAQ question must reach without vectors (default 0.6)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--first-token-timeout", a->first_token_timeout,
                 "a request with no first token by then fails (504), or gets the FAQ answer (e.g. 3s, 500ms)");
  return [a] { return serve(*a); };
}

}  // namespace eg::cli
