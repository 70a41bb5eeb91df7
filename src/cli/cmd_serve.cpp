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
#include "core/error.h"
#include "engine/loaded_model.h"
#include "server/server.h"
#include "store/store.h"

namespace eg::cli {

namespace {

struct ServeArgs {
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
  int max_body_kb = 0;  // 0: 1024, or 32768 for a model with a vision tower (images as data: URLs)
  int threads = 0;
  std::string kv_type = "f16";
  std::string device = "auto";
  std::string store;
  std::string admin_key;
  std::string rollback_if;
  int rollback_min_requests = 20;
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot read " + path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

int serve(const ServeArgs& a) {
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
  if (!a.rollback_if.empty() && o.store_name.empty())
    throw Error("--rollback-if needs -m NAME of a model in the store");
  o.device = parse_device(a.device);
  std::shared_ptr<const LoadedModel> lm = LoadedModel::load(path, o.device);
  for (const auto& n : lm->notes()) std::fprintf(stderr, "edgegemma: note: %s\n", n.c_str());

  o.host = a.host;
  o.port = a.port;
  o.api_key = a.api_key;
  if (!a.chat_template.empty()) o.chat_template = read_file(a.chat_template);
  std::filesystem::path p(path);
  while (!p.empty() && !p.has_filename()) p = p.parent_path();
  if (!a.alias.empty()) o.model_id = a.alias;
  else if (o.model_id.empty()) o.model_id = p.extension() == ".gguf" ? p.stem().string() : p.filename().string();
  o.admin_key = a.admin_key;
  o.rollback_if = a.rollback_if;
  o.rollback_min_requests = a.rollback_min_requests;
  const bool vision = lm->model().config().multimodal_wrapper && !lm->source_dir().empty();
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
  if (o.chat_template.empty() && lm->chat_template().empty())
    std::fprintf(stderr, "edgegemma serve: note: the model has no chat template; /v1/chat/completions will fail "
                         "(use --chat-template or /v1/completions)\n");

  server::Server srv(lm, o);
  const int port = srv.bind();
  std::thread watcher([&srv, sigs] {
    int sig = 0;
    sigwait(&sigs, &sig);
    std::fprintf(stderr, "edgegemma serve: signal %d, stopping\n", sig);
    srv.stop();
  });
  std::fprintf(stderr, "edgegemma serve: model %s | %d slots x %d tokens of context | %s | web chat at http://%s:%d/\n",
               o.model_id.c_str(), o.scheduler.slots, o.scheduler.context_tokens,
               lm->executor().description().c_str(), a.host.c_str(), port);
  lm.reset();  // the server holds the model; a hot swap (model store) then frees it
  std::printf("edgegemma serve: listening on http://%s:%d\n", a.host.c_str(), port);
  std::fflush(stdout);
  srv.listen();
  srv.stop();
  pthread_kill(watcher.native_handle(), SIGTERM);  // wakes sigwait if no signal came
  watcher.join();
  return 0;
}

}  // namespace

Action register_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  app.add_option("-m,--model", a->model,
                 "model directory or .gguf file, or a store reference: NAME (serves its current version and follows "
                 "it), NAME:VERSION, sha256:PREFIX (default: bundled tiny-gemma3)");
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
  app.add_option("--max-body-kb", a->max_body_kb, "largest request body in KiB (default 1024; 32768 for a model with a vision tower)")->check(CLI::Range(1, 1 << 20));
  app.add_option("-t,--threads", a->threads, "CPU threads (default: all cores)")->check(CLI::Range(0, 1024));
  app.add_option("--kv-type", a->kv_type, "KV cache type f16|bf16|f32|int8 (default f16)");
  app.add_option("--device", a->device, "where steps run: auto (default), cpu or cuda");
  return [a] { return serve(*a); };
}

}  // namespace eg::cli
