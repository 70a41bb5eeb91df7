// `edgegemma serve`: an OpenAI-compatible HTTP server on cpp-httplib.
//
// Routes: POST /v1/chat/completions, POST /v1/completions (both with SSE streaming), POST
// /v1/embeddings (with an embedding model: server/embeddings.h), GET
// /v1/models, GET /v1/models/{id}, GET /health, GET /metrics (Prometheus), POST /tokenize,
// POST /detokenize, GET / (the web chat page); with the model store, POST /v1/models/{id}/rollback
// (admin key) and hot swaps of the served version (swap_model). Request handling: http_routes.cpp; generation:
// scheduler.h; request/response JSON: openai_request.h / openai_response.h.
//
// Safety: binds 127.0.0.1 unless told otherwise; with an API key every route except / and
// /health needs "Authorization: Bearer KEY" (401 otherwise); request bodies over
// max_body_bytes are 413; every bad request is a 4xx with an OpenAI error object, never a 5xx.
// A client that disconnects (streaming or not, queued or running) cancels its generation within a
// decode step or a few ms: the response's HTTP thread checks the socket at every token and every
// 5 ms (http_routes.cpp next_output). Connections: listen backlog 4096, a thread per connection
// (connection_pool.h); beyond slots + queue a request gets 429, never a reset.
#pragma once
#include <atomic>
#include <memory>
#include <string>

#include "embed/embedder.h"
#include "server/rag.h"
#include "server/scheduler.h"

namespace httplib {
class Server;
}

namespace eg::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (port() tells which)
  std::string api_key;  // "" = no authentication
  std::string model_id;  // the id /v1/models reports and responses echo
  std::string chat_template;  // "" = the model's
  size_t max_body_bytes = 1 << 20;
  double timeout_s = 600;  // per request, queueing included
  // Connections served at once, a thread each (started on demand, idle ones exit after 30 s;
  // connection_pool.h); more wait for a thread. 0: max(512, slots + queue + 16).
  int http_threads = 0;
  // Bytes of encoded images / audio clips kept between requests (server/media_cache.h); 0: off.
  size_t media_cache_bytes = size_t{64} << 20;
  // Gemma 3 pan-and-scan for every request image (--pan-and-scan; docs/vision.md).
  bool pan_and_scan = false;
  SchedulerOptions scheduler;
  // The embedding model behind POST /v1/embeddings (null: that route answers 400), and its id.
  std::shared_ptr<embed::Embedder> embedder;
  std::string embedding_model_id;
  /// RAG (--kb), the FAQ fallback (--faq) and --first-token-timeout (server/rag.h).
  KbServeOptions kb;
  // The model store (docs/model-store.md). With store_name the server follows that model's
  // `current` pointer in the store at store_root: every store_poll_s it loads a new current
  // version (on `device`) beside the served one and hot-swaps (swap_model). store_version: the
  // version the constructor's model is.
  std::string store_root, store_name, store_version;
  // An mmproj file (`serve --mmproj`) attached to every version loaded from the store, as to the
  // first one (a version that does not match it fails to load, and the served version stays).
  std::string mmproj;
  double store_poll_s = 0.5;
  DeviceRequest device;
  // "" = admin routes off; else POST /v1/models/NAME/rollback needs "Authorization: Bearer KEY"
  // with this key (the API key does not open admin routes).
  std::string admin_key;
  // --rollback-if rules (rollback_rules.h); "" = none. Evaluated over the served version's last
  // 100 finished requests once it has rollback_min_requests of them; fires once per version.
  std::string rollback_if;
  int rollback_min_requests = 20;
};

class Server {
 public:
  /// Builds the scheduler and the routes (does not listen yet). Throws eg::Error for bad options.
  /// `model` may be null when opt.embedder is set: an embeddings-only server, whose chat,
  /// completion, prefill and tokenizer routes answer 400 (no chat model).
  Server(std::shared_ptr<const LoadedModel> model, ServerOptions opt);
  ~Server();
  /// Binds host:port; throws eg::Error when it cannot. Returns the bound port.
  int bind();
  /// Serves until stop() (blocking). bind() first.
  void listen();
  /// Stops listening and cancels the running jobs (any thread, also from a signal-watching thread).
  void stop();
  int port() const { return port_; }
  /// Hot swap: builds a scheduler for `model` beside the running one and routes every new
  /// request to it at once; requests already holding the old version (queued, running, or still
  /// being written) finish on it; then the old version is stopped and freed (waiting at most
  /// timeout_s + 5 s). No request fails because of a swap. Blocks until the old version is freed.
  /// Throws eg::Error (the served version stays) when the model's context is too small.
  void swap_model(std::shared_ptr<const LoadedModel> model, const std::string& version);
  /// The store version being served to new requests ("" when not from the store).
  std::string serving_version();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace eg::server
