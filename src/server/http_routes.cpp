// The HTTP layer of `edgegemma serve`: routes, authentication, limits, errors, SSE (server.h).
#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <thread>
#include <utility>

#include "core/error.h"

#include "engine/session_prompt.h"
#include "server/api_error.h"
#include "server/connection_pool.h"
#include "server/constraints.h"
#include "server/draft_prefill.h"
#include "server/embeddings.h"
#include "server/media_cache.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/rag.h"
#include "server/rollback_rules.h"
#include "server/server.h"
#include "store/store.h"

namespace eg::server {

extern const std::string_view kWebPageHtml;

using nlohmann::json;

namespace {

// While a generation response waits for its job, it checks every kWatch (and at every token) that
// its client is still connected, and writes a keep-alive byte when nothing was written for kKeepAlive.
constexpr auto kWatch = std::chrono::milliseconds(5);
constexpr auto kKeepAlive = std::chrono::milliseconds(250);

// The listen backlog (the kernel caps it at net.core.somaxconn). The packaged cpp-httplib listens
// with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled into the library): a burst of more
// simultaneous connects overflowed the accept queue, and those clients were reset or waited for a
// SYN retransmission (1 s, 3 s, ...).
constexpr int kListenBacklog = 4096;
// POST /v1/prefill: trailing draft tokens not prefilled (as SessionOptions::holdback_tokens).
constexpr int kDraftHoldbackTokens = 3;

// httplib::Server, plus a way to deepen its listen backlog: listen(2) on a socket that is already
// listening only updates the backlog (Linux), so Server::bind() calls it right after httplib binds.
class HttpServer : public httplib::Server {
 public:
  bool set_listen_backlog(int n) { return svr_sock_ != INVALID_SOCKET && ::listen(svr_sock_, n) == 0; }
};

using Clock = std::chrono::steady_clock;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void send_json(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status(), e.to_json()); }

// Constant-time comparison of the presented and the configured key.
bool same_key(const std::string& a, const std::string& b) {
  unsigned char d = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return d == 0;
}

const char* status_message(int status) {
  switch (status) {
    case 400: return "bad request";
    case 401: return "invalid or missing API key";
    case 404: return "not found";
    case 405: return "method not allowed";
    case 413: return "request body too large";
    case 414: return "request URI too long";
    case 429: return "too many requests";
    default: return status >= 500 ? "internal server error" : "request failed";
  }
}

}  // namespace

// One loaded model version with its own scheduler. A request takes a reference (Impl::backend())
// and keeps it until its response is written, so a hot swap (Server::swap_model) can route new
// requests to the next Backend while the old one finishes its requests, and is freed after.
struct Backend {
  std::shared_ptr<const LoadedModel> lm;
  std::string version;  // the store version it serves ("" when not from the store)
  PromptEncoder encoder;
  std::unique_ptr<Scheduler> scheduler;
  MetricsWindow window;  // finished requests of this version (--rollback-if)
  // Encoded images / clips of this version's towers (a swap starts with an empty cache).
  mutable MediaCache media_cache;
  Backend(std::shared_ptr<const LoadedModel> m, std::string v, const ServerOptions& opt, Metrics& metrics)
      : lm(std::move(m)),
        version(std::move(v)),
        encoder(lm->tokenizer(), opt.chat_template.empty() ? lm->chat_template() : opt.chat_template, std::nullopt),
        media_cache(opt.media_cache_bytes) {
    scheduler = std::make_unique<Scheduler>(lm, opt.scheduler, metrics);
  }
};

struct Server::Impl {
  ServerOptions opt;
  Metrics metrics;
  std::mutex be_mu;
  std::shared_ptr<Backend> be;  // the version new requests go to; null without a chat model
  std::mutex swap_mu;           // one swap at a time
  std::mutex follow_once_mu;
  HttpServer http;
  std::mutex stop_mu;
  std::atomic<int> open_responses{0};  // generation responses still being written
  std::vector<RollbackRule> rules;     // --rollback-if
  std::atomic<bool> stopping{false};
  std::mutex follow_mu;
  std::condition_variable follow_cv;
  std::thread follower;                // polls the store's pointers (opt.store_name)

  Impl(std::shared_ptr<const LoadedModel> m, ServerOptions o) : opt(std::move(o)) {
    if (!m && !opt.embedder) throw Error("server: no model");
    if (m) be = std::make_shared<Backend>(std::move(m), opt.store_version, opt, metrics);
    if (!opt.rollback_if.empty()) {
      if (opt.store_name.empty()) throw Error("--rollback-if needs a model from the store (-m NAME)");
      rules = parse_rollback_rules(opt.rollback_if);
    }
    const int threads = opt.http_threads > 0 ? opt.http_threads : std::max(512, opt.scheduler.slots + opt.scheduler.queue + 16);
    http.new_task_queue = [threads] { return new ConnectionPool(static_cast<size_t>(threads), std::chrono::seconds(30)); };
    http.set_payload_max_length(opt.max_body_bytes);
    http.set_read_timeout(30, 0);
    http.set_write_timeout(30, 0);
    routes();
    if (!opt.store_name.empty()) follower = std::thread([this] { follow_store(); });
  }

  std::shared_ptr<Backend> backend() {
    std::lock_guard<std::mutex> lk(be_mu);
    return be;
  }

  // The chat model's backend; without one (embeddings only) a clear 400 naming the fix.
  std::shared_ptr<Backend> chat_backend(const char* route) {
    auto b = backend();
    if (!b)
      throw ApiError(400, std::string(route) + " needs a chat model, and this server has only the embedding model '" +
                              opt.embedding_model_id + "' (serve -m CHAT_MODEL --embedding-model EMBEDDING_MODEL serves both)",
                     "model", "model_not_supported");
    return b;
  }

  RequestContext request_context(const Backend& b) const {
    return RequestContext{*b.lm, b.encoder, opt.model_id, opt.scheduler.context_tokens, b.encoder.template_uses_tools(),
                          &b.media_cache, opt.pan_and_scan};
  }

  // Loads `m` beside the running version, routes new requests to it, waits until every request
  // holding the old version has finished (at most the request timeout + 5 s), then frees it.
  void swap_model(std::shared_ptr<const LoadedModel> m, const std::string& version) {
    std::lock_guard<std::mutex> swap_lk(swap_mu);
    if (m->model().config().max_position_embeddings < opt.scheduler.context_tokens)
      throw Error("the new model's context (" + std::to_string(m->model().config().max_position_embeddings) +
                  ") is smaller than the server's " + std::to_string(opt.scheduler.context_tokens));
    auto next = std::make_shared<Backend>(std::move(m), version, opt, metrics);
    std::shared_ptr<Backend> old;
    {
      std::lock_guard<std::mutex> lk(be_mu);
      old = std::exchange(be, next);
    }
    if (!old) return;
    std::fprintf(stderr, "edgegemma serve: now serving %s%s%s; draining the old version\n", opt.model_id.c_str(),
                 version.empty() ? "" : ":", version.c_str());
    const auto give_up = Clock::now() + std::chrono::duration<double>(opt.timeout_s + 5);
    while (old.use_count() > 1 && Clock::now() < give_up) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    old->scheduler->stop();
    old.reset();
  }

  // Loads the store's current version of opt.store_name when it is not the one served.
  // Returns the version served afterwards. Throws eg::Error (then the served version stays).
  std::string follow_once(bool* swapped) {
    std::lock_guard<std::mutex> lk(follow_once_mu);  // the follower and POST .../rollback
    const store::Store st(opt.store_root, false);
    const store::Manifest man = st.resolve(opt.store_name);
    if (man.version == backend()->version) return man.version;
    auto lm = LoadedModel::load(st.model_path(man), opt.device);
    if (!opt.mmproj.empty()) lm->attach_mmproj(opt.mmproj);
    swap_model(std::move(lm), man.version);
    if (swapped) *swapped = true;
    return man.version;
  }

  // The follower thread: every opt.store_poll_s, load the store's current version when it
  // changed (`edgegemma models use/rollback` by another process), and apply --rollback-if.
  void follow_store() {
    std::string failed;  // the version whose load failed (not retried until the pointer changes)
    bool armed = true;   // automatic rollback fires at most once until a version is chosen again
    while (!stopping) {
      {
        std::unique_lock<std::mutex> lk(follow_mu);
        follow_cv.wait_for(lk, std::chrono::duration<double>(opt.store_poll_s), [this] { return stopping.load(); });
      }
      if (stopping) break;
      std::string current;
      try {
        current = store::Store(opt.store_root, false).pointers(opt.store_name).current;
        if (!current.empty() && current != failed) {
          bool swapped = false;
          follow_once(&swapped);
          if (swapped) armed = true;
        }
      } catch (const std::exception& e) {
        failed = current;
        std::fprintf(stderr, "edgegemma serve: cannot load %s:%s, still serving %s: %s\n", opt.store_name.c_str(),
                     current.c_str(), backend()->version.c_str(), e.what());
      }
      if (rules.empty() || !armed) continue;
      const std::string why = backend()->window.triggered(rules, opt.rollback_min_requests);
      if (why.empty()) continue;
      armed = false;
      try {
        const store::Pointers p = store::Store(opt.store_root).rollback(opt.store_name);
        std::fprintf(stderr, "edgegemma serve: --rollback-if %s: rolling back %s to %s\n", why.c_str(),
                     opt.store_name.c_str(), p.current.c_str());
        metrics.count_auto_rollback();
        follow_once(nullptr);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "edgegemma serve: --rollback-if %s: cannot roll back: %s\n", why.c_str(), e.what());
      }
    }
  }

  bool admin_authorized(const httplib::Request& req) const {
    const std::string h = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    return !opt.admin_key.empty() && h.size() > prefix.size() && h.compare(0, prefix.size(), prefix) == 0 &&
           same_key(h.substr(prefix.size()), opt.admin_key);
  }

  bool authorized(const httplib::Request& req) const {
    if (opt.api_key.empty()) return true;
    const std::string h = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    return h.size() > prefix.size() && h.compare(0, prefix.size(), prefix) == 0 &&
           same_key(h.substr(prefix.size()), opt.api_key);
  }

  // Wraps a handler: auth, ApiError -> JSON error, anything else -> 500 JSON, metrics.
  template <class F>
  httplib::Server::Handler wrap(const std::string& endpoint, bool needs_auth, F f) {
    return [this, endpoint, needs_auth, f](const httplib::Request& req, httplib::Response& res) {
      try {
        if (needs_auth && !authorized(req))
          throw ApiError(401, "invalid or missing API key (send Authorization: Bearer KEY)", "", "invalid_api_key");
        f(req, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const std::bad_alloc&) {
        send_json(res, 503, error_json(503, "out of memory"));
      } catch (const std::exception& e) {
        send_json(res, 500, error_json(500, std::string("internal error: ") + e.what()));
      }
      metrics.count_request(endpoint, res.status);
    };
  }

  void routes() {
    http.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(kWebPageHtml), "text/html; charset=utf-8");
    });
    http.Get("/health", wrap("health", false, [](const httplib::Request&, httplib::Response& res) {
               send_json(res, 200, json{{"status", "ok"}});
             }));
    http.Get("/metrics", wrap("metrics", true, [this](const httplib::Request&, httplib::Response& res) {
               const auto b = backend();
               res.set_content(metrics.render() + (b ? media_cache_metrics(b->media_cache.stats()) : std::string()),
                               "text/plain; version=0.0.4");
             }));
    http.Get("/v1/models", wrap("models", true, [this](const httplib::Request&, httplib::Response& res) {
               json data = json::array();
               if (backend()) data.push_back(model_json());
               if (opt.embedder) data.push_back(embedding_model_json());
               send_json(res, 200, json{{"object", "list"}, {"data", data}});
             }));
    // Extension (docs/model-store.md): roll the served store model back to its previous version.
    // Needs the admin key (--admin-key); answers once the other version serves new requests.
    http.Post(R"(/v1/models/([^/]+)/rollback)", wrap("models_rollback", false, [this](const httplib::Request& req, httplib::Response& res) {
                if (opt.admin_key.empty()) throw ApiError(403, "admin routes are disabled (start serve with --admin-key)", "", "admin_disabled");
                if (!admin_authorized(req)) throw ApiError(401, "invalid or missing admin key (send Authorization: Bearer ADMIN_KEY)", "", "invalid_api_key");
                const std::string name = req.matches[1];
                if (opt.store_name.empty() || (name != opt.store_name && name != opt.model_id))
                  throw ApiError(404, "model not found in the store: " + name, "model", "model_not_found");
                store::Pointers p;
                std::string serving;
                try {
                  p = store::Store(opt.store_root).rollback(opt.store_name);
                  serving = follow_once(nullptr);
                } catch (const Error& e) {
                  throw ApiError(409, std::string("rollback failed: ") + e.what(), "", "rollback_failed");
                }
                send_json(res, 200, json{{"object", "model.rollback"}, {"id", opt.model_id}, {"current", p.current},
                                         {"previous", p.previous.empty() ? json(nullptr) : json(p.previous)},
                                         {"serving", serving}});
              }));
    http.Get(R"(/v1/models/(.+))", wrap("models", true, [this](const httplib::Request& req, httplib::Response& res) {
               if (backend() && req.matches[1] == opt.model_id) return send_json(res, 200, model_json());
               if (opt.embedder && req.matches[1] == opt.embedding_model_id) return send_json(res, 200, embedding_model_json());
               throw ApiError(404, "model not found: " + std::string(req.matches[1]), "model", "model_not_found");
             }));
    http.Post("/tokenize", wrap("tokenize", true, [this](const httplib::Request& req, httplib::Response& res) {
                const auto body = parse_body(req.body);
                chat_backend("/tokenize");
                auto it = body.find("content");
                if (it == body.end() || !it->is_string()) throw ApiError(400, "'content' must be a string", "content");
                auto flag = [&](const char* k) {
                  auto f = body.find(k);
                  if (f == body.end() || f->is_null()) return false;
                  if (!f->is_boolean()) throw ApiError(400, std::string("'") + k + "' must be a boolean", k);
                  return f->get<bool>();
                };
                const bool add_special = flag("add_special");
                const bool parse_special = flag("parse_special");
                const bool with_pieces = flag("with_pieces");
                const auto b = backend();
                const auto ids = b->lm->tokenizer().encode(it->get<std::string>(), add_special, parse_special);
                json out{{"tokens", ids}};
                if (with_pieces) {
                  json pieces = json::array();
                  for (int32_t id : ids) pieces.push_back(b->lm->tokenizer().piece(id));
                  out["pieces"] = pieces;
                }
                send_json(res, 200, out);
              }));
    http.Post("/detokenize", wrap("detokenize", true, [this](const httplib::Request& req, httplib::Response& res) {
                const auto body = parse_body(req.body);
                const auto be = chat_backend("/detokenize");
                const auto& lm = be->lm;
                auto it = body.find("tokens");
                if (it == body.end() || !it->is_array()) throw ApiError(400, "'tokens' must be an array of ids", "tokens");
                std::vector<int32_t> ids;
                for (const auto& t : *it) {
                  if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= lm->tokenizer().vocab_size())
                    throw ApiError(400, "'tokens' must hold ids in [0, vocab size)", "tokens");
                  ids.push_back(t.get<int32_t>());
                }
                send_json(res, 200, json{{"content", lm->tokenizer().decode(ids)}});
              }));
    http.Post("/v1/chat/completions", wrap("chat_completions", true, [this](const httplib::Request& req, httplib::Response& res) {
                auto b = chat_backend("/v1/chat/completions");
                auto body = parse_body(req.body);
                std::string user = faq_allowed(body) ? last_user_text(body) : "";
                nlohmann::json passages = apply_rag(body, opt.kb, b->lm->tokenizer(), opt.scheduler.context_tokens);
                GenRequest rq = parse_chat_request(body, request_context(*b));
                rq.kb_passages = std::move(passages);
                rq.user_text = std::move(user);
                if (!rq.kb_passages.is_null()) metrics.count_kb_request();
                generate(b, std::move(rq), res);
              }));
    // Extension: prefill while typing (docs/server.md). The body is a chat completion's; the
    // answer comes at once, the prefill runs when the scheduler is otherwise idle.
    http.Post("/v1/prefill", wrap("prefill", true, [this](const httplib::Request& req, httplib::Response& res) {
                const json body = parse_body(req.body);
                const auto b = chat_backend("/v1/prefill");
                const DraftPlan plan = plan_draft(body, request_context(*b), kDraftHoldbackTokens);
                std::string client = req.remote_addr;
                if (const auto it = body.find("user"); it != body.end() && it->is_string())
                  client += " " + it->get<std::string>();
                const int n = static_cast<int>(plan.tokens.size());
                const bool queued = n > 0 && b->scheduler->submit_draft(client, plan.tokens, plan.media);
                send_json(res, 200, json{{"object", "prefill"}, {"model", opt.model_id}, {"queued", queued},
                                         {"prompt_tokens", plan.prompt_tokens}, {"prefill_tokens", queued ? n : 0},
                                         {"media", plan.images}});
              }));
    http.Post("/v1/embeddings", wrap("embeddings", true, [this](const httplib::Request& req, httplib::Response& res) {
                if (!opt.embedder)
                  throw ApiError(400, "this server has no embedding model (serve -m CHAT_MODEL --embedding-model EMBEDDING_MODEL)",
                                 "model", "model_not_supported");
                const EmbeddingRequest r = parse_embedding_request(parse_body(req.body), *opt.embedder);
                std::vector<embed::Embedding> out;
                try {
                  out = opt.embedder->embed(r.inputs, r.options);
                } catch (const ApiError&) {
                  throw;
                } catch (const Error& e) {  // over-long input, invalid UTF-8: the client's to fix
                  throw ApiError(400, e.what(), "input");
                }
                send_json(res, 200, embedding_response(out, r.base64, opt.embedding_model_id));
              }));
    http.Post("/v1/completions", wrap("completions", true, [this](const httplib::Request& req, httplib::Response& res) {
                auto b = chat_backend("/v1/completions");
                generate(b, parse_completion_request(parse_body(req.body), request_context(*b)), res);
              }));
    // Errors raised by httplib itself (404, 413, ...) get an OpenAI error body too.
    http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (res.body.empty()) send_json(res, res.status, error_json(res.status, status_message(res.status)));
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
      send_json(res, 500, error_json(500, "internal error"));
    });
  }

  json model_json() {
    json j{{"id", opt.model_id},
           {"object", "model"},
           {"created", 0},
           {"owned_by", "edgegemma"},
           {"context_length", opt.scheduler.context_tokens}};
    if (opt.store_name.empty()) return j;
    // Extension: the store's versions of the model, and which one this server serves.
    j["version"] = backend()->version;
    try {
      const store::Store st(opt.store_root, false);
      const store::Pointers p = st.pointers(opt.store_name);
      j["current"] = p.current.empty() ? json(nullptr) : json(p.current);
      j["previous"] = p.previous.empty() ? json(nullptr) : json(p.previous);
      json vs = json::array();
      for (const auto& v : st.versions(opt.store_name))
        vs.push_back(json{{"version", v.manifest.version}, {"id", "sha256:" + v.manifest.id()},
                          {"created", v.manifest.created}, {"bytes", v.manifest.total_bytes()},
                          {"quantization", v.manifest.quantization}});
      j["versions"] = vs;
    } catch (const Error& e) {
      j["store_error"] = e.what();
    }
    return j;
  }

  json embedding_model_json() const {
    return json{{"id", opt.embedding_model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "edgegemma"},
                {"type", "embedding"}, {"dimensions", opt.embedder->full_dim()},
                {"supported_dimensions", opt.embedder->supported_dims()}, {"tasks", opt.embedder->task_names()},
                {"max_input_tokens", opt.embedder->max_tokens()}};
  }

  void generate(std::shared_ptr<Backend> be, GenRequest rq, httplib::Response& res) {
    build_constraints(rq, be->lm->tokenizer());
    const double timeout = rq.timeout_s > 0 ? std::min(rq.timeout_s, opt.timeout_s) : opt.timeout_s;
    auto job = std::make_shared<Job>(std::move(rq), timeout);
    if (opt.kb.first_token_timeout_s > 0)
      job->first_token_deadline = job->created + std::chrono::duration_cast<Clock::duration>(
                                                     std::chrono::duration<double>(opt.kb.first_token_timeout_s));
    if (be->scheduler->stopping()) throw ApiError(503, "the server is shutting down");
    if (!be->scheduler->submit(job))
      throw ApiError(429, "the server is busy: every slot is in use and the queue is full; retry later", "",
                     "queue_full");
    const std::string id = new_completion_id(job->req.kind == GenRequest::Kind::Chat);
    res.status = 200;
    const int64_t created = unix_now();
    ++open_responses;
    // The response holds its Backend until it is written (the content providers and this
    // callback own copies), so a hot swap drains it before freeing the old version.
    auto release = [this, job, be](bool success) {
      if (!success) job->cancel = true;  // the client went away
      else if (!rules.empty()) {
        const JobResult& r = job->result();
        RequestSample s;
        s.ttft_s = r.ttft_ms / 1000.0;
        s.token_s = r.completion_tokens > 1 ? r.decode_ms / 1000.0 / (r.completion_tokens - 1) : 0;
        s.failed = r.error_status != 0;
        be->window.add(s);
      }
      --open_responses;
    };
    if (job->req.stream) {
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [this, job, be, id, created, started = false, sent = false, last = Clock::now()](size_t, httplib::DataSink& sink) mutable {
            return stream_events(*job, id, created, started, sent, last, sink);
          },
          release);
    } else {
      res.set_chunked_content_provider(
          "application/json",
          [this, job, be, id, created, last = Clock::now()](size_t, httplib::DataSink& sink) mutable {
            Job::Poll p;
            if (!next_output(*job, sink, p)) return false;
            if (!p.done) {
              // Keep-alive: a space (JSON allows leading whitespace) when nothing was written for
              // kKeepAlive, so that clients and proxies do not time out an idle connection.
              const auto now = Clock::now();
              if (now - last < kKeepAlive) return true;
              last = now;
              return sink.write(" ", 1);
            }
            const JobResult r = with_fallback(*job);
            const json body = r.error_status ? error_json(r.error_status, r.error_message)
                                             : completion_json(job->req, id, created, r);
            const std::string s = body.dump(-1, ' ', false, json::error_handler_t::replace);
            if (!sink.write(s.data(), s.size())) return false;
            sink.done();
            return true;
          },
          release);
    }
  }

  // Waits (at most kWatch) for the job's next text or its end, then checks that the client is
  // still there: DataSink::is_writable polls the socket, and a peer that closed (EOF on a
  // MSG_PEEK) or reset the connection is gone. A gone client cancels the job at once: the
  // scheduler drops it from the queue or stops it before its next prefill chunk / decode step.
  // This runs on the response's HTTP thread, at every token and every kWatch in between, so a
  // disconnect is seen within a decode step or a few ms, streaming or not, queued or running.
  static bool next_output(Job& job, httplib::DataSink& sink, Job::Poll& p) {
    p = job.poll(kWatch);
    if (sink.is_writable()) return true;
    job.cancel = true;
    return false;
  }

  // The job's result, answered from the FAQ when it failed and the FAQ has a match (rag.h).
  JobResult with_fallback(const Job& job) {
    JobResult r = job.result();
    if (r.error_status == 0 || !opt.kb.faq || job.req.user_text.empty()) return r;
    if (faq_fallback(opt.kb, job.req.user_text, r))
      metrics.count_faq_answer();
    else
      metrics.count_faq_miss();
    return r;
  }

  bool stream_events(Job& job, const std::string& id, int64_t created, bool& started, bool& sent,
                     Clock::time_point& last, httplib::DataSink& sink) {
    const GenRequest& rq = job.req;
    const bool chat = rq.kind == GenRequest::Kind::Chat;
    auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
    if (!started) {
      started = true;
      if (chat && !write(sse(chunk_json(rq, id, created, json{{"role", "assistant"}, {"content", ""}}, nullptr))))
        return false;
    }
    Job::Poll p;
    if (!next_output(job, sink, p)) return false;
    const auto now = Clock::now();
    if (!p.text.empty()) {
      const json delta = chat ? json{{"content", p.text}} : json(p.text);
      if (!write(sse(chunk_json(rq, id, created, delta, nullptr)))) return false;
      last = now;
      sent = true;
    }
    if (!p.done) {
      if (now - last < kKeepAlive) return true;
      last = now;
      return write(": keep-alive\n\n");  // an SSE comment
    }
    // The FAQ answers only a job that failed before any of its text reached the client.
    const JobResult r = sent ? job.result() : with_fallback(job);
    if (!r.faq.is_null()) {
      const json delta = chat ? json{{"content", r.text}} : json(r.text);
      if (!write(sse(chunk_json(rq, id, created, delta, nullptr)))) return false;
    }
    if (r.error_status) {
      if (!write(sse(error_json(r.error_status, r.error_message)))) return false;
    } else {
      json delta = json::object();
      if (chat && r.tool_calls.is_array()) {
        json calls = r.tool_calls;
        for (size_t i = 0; i < calls.size(); ++i) calls[i]["index"] = i;
        delta["tool_calls"] = calls;
      }
      json last = chunk_json(rq, id, created, chat ? delta : json(""), r.finish.c_str());
      last["timings"] = timings_json(r);
      if (!rq.kb_passages.is_null()) last["kb_passages"] = rq.kb_passages;
      if (!r.faq.is_null()) last["faq"] = r.faq;
      if (!write(sse(last))) return false;
      if (rq.include_usage) {
        json u = chunk_json(rq, id, created, json::object(), nullptr);
        u["choices"] = json::array();
        u["usage"] = usage_json(r);
        if (!write(sse(u))) return false;
      }
    }
    if (!write("data: [DONE]\n\n")) return false;
    sink.done();
    return true;
  }
};

Server::Server(std::shared_ptr<const LoadedModel> model, ServerOptions opt)
    : impl_(std::make_unique<Impl>(std::move(model), std::move(opt))) {}

Server::~Server() { stop(); }

void Server::swap_model(std::shared_ptr<const LoadedModel> model, const std::string& version) {
  impl_->swap_model(std::move(model), version);
}

std::string Server::serving_version() {
  const auto b = impl_->backend();
  return b ? b->version : std::string();
}

int Server::bind() {
  auto& o = impl_->opt;
  if (o.port == 0) {
    port_ = impl_->http.bind_to_any_port(o.host);
    if (port_ <= 0) throw Error("cannot bind " + o.host + " (any port)");
  } else {
    if (!impl_->http.bind_to_port(o.host, o.port)) throw Error("cannot bind " + o.host + ":" + std::to_string(o.port) + " (in use?)");
    port_ = o.port;
  }
  if (!impl_->http.set_listen_backlog(kListenBacklog)) throw Error("cannot listen on " + o.host + ":" + std::to_string(port_));
  return port_;
}

void Server::listen() { impl_->http.listen_after_bind(); }

void Server::stop() {
  // Any thread, any number of times (a signal watcher and the main thread may both call it).
  // The scheduler first: every running request ends (finish_reason "length") and its handler
  // writes the final chunk / body and [DONE]; then the listener and idle connections close.
  std::lock_guard<std::mutex> lk(impl_->stop_mu);
  {
    std::lock_guard<std::mutex> fl(impl_->follow_mu);
    impl_->stopping = true;
  }
  impl_->follow_cv.notify_all();
  if (impl_->follower.joinable()) impl_->follower.join();
  if (auto b = impl_->backend()) b->scheduler->stop();
  // httplib aborts responses still being written once it stops: let the handlers send their last
  // chunk / body first (bounded wait: a client that does not read cannot hold the shutdown).
  for (int i = 0; i < 500 && impl_->open_responses.load() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  impl_->http.stop();
}

}  // namespace eg::server
