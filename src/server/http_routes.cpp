// The HTTP layer of `edgegemma serve`: routes, authentication, limits, errors, SSE (server.h).
#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

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
#include "server/server.h"

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

struct Server::Impl {
  std::shared_ptr<const LoadedModel> lm;
  ServerOptions opt;
  Metrics metrics;
  std::unique_ptr<PromptEncoder> encoder_;  // null without a chat model
  std::unique_ptr<Scheduler> scheduler;       // null without a chat model
  mutable MediaCache media_cache;
  HttpServer http;
  std::mutex stop_mu;
  std::atomic<int> open_responses{0};  // generation responses still being written

  Impl(std::shared_ptr<const LoadedModel> m, ServerOptions o)
      : lm(std::move(m)), opt(std::move(o)), media_cache(opt.media_cache_bytes) {
    if (!lm && !opt.embedder) throw Error("server: no model");
    if (lm) {
      encoder_ = std::make_unique<PromptEncoder>(lm->tokenizer(), opt.chat_template.empty() ? lm->chat_template() : opt.chat_template,
                                                 std::nullopt);
      scheduler = std::make_unique<Scheduler>(lm, opt.scheduler, metrics);
    }
    const int threads = opt.http_threads > 0 ? opt.http_threads : std::max(512, opt.scheduler.slots + opt.scheduler.queue + 16);
    http.new_task_queue = [threads] { return new ConnectionPool(static_cast<size_t>(threads), std::chrono::seconds(30)); };
    http.set_payload_max_length(opt.max_body_bytes);
    http.set_read_timeout(30, 0);
    http.set_write_timeout(30, 0);
    routes();
  }

  // The chat model's routes without one: a clear 400 naming the fix.
  void need_chat_model(const char* route) const {
    if (!lm)
      throw ApiError(400, std::string(route) + " needs a chat model, and this server has only the embedding model '" +
                              opt.embedding_model_id + "' (serve -m CHAT_MODEL --embedding-model EMBEDDING_MODEL serves both)",
                     "model", "model_not_supported");
  }

  RequestContext request_context(const char* route) const {
    need_chat_model(route);
    return RequestContext{*lm, *encoder_, opt.model_id, opt.scheduler.context_tokens, encoder_->template_uses_tools(),
                          &media_cache};
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
               res.set_content(metrics.render() + media_cache_metrics(media_cache.stats()), "text/plain; version=0.0.4");
             }));
    http.Get("/v1/models", wrap("models", true, [this](const httplib::Request&, httplib::Response& res) {
               json data = json::array();
               if (lm) data.push_back(model_json());
               if (opt.embedder) data.push_back(embedding_model_json());
               send_json(res, 200, json{{"object", "list"}, {"data", data}});
             }));
    http.Get(R"(/v1/models/(.+))", wrap("models", true, [this](const httplib::Request& req, httplib::Response& res) {
               if (lm && req.matches[1] == opt.model_id) return send_json(res, 200, model_json());
               if (opt.embedder && req.matches[1] == opt.embedding_model_id) return send_json(res, 200, embedding_model_json());
               throw ApiError(404, "model not found: " + std::string(req.matches[1]), "model", "model_not_found");
             }));
    http.Post("/tokenize", wrap("tokenize", true, [this](const httplib::Request& req, httplib::Response& res) {
                need_chat_model("/tokenize");
                const auto b = parse_body(req.body);
                auto it = b.find("content");
                if (it == b.end() || !it->is_string()) throw ApiError(400, "'content' must be a string", "content");
                auto flag = [&](const char* k) {
                  auto f = b.find(k);
                  if (f == b.end() || f->is_null()) return false;
                  if (!f->is_boolean()) throw ApiError(400, std::string("'") + k + "' must be a boolean", k);
                  return f->get<bool>();
                };
                const bool add_special = flag("add_special");
                const bool parse_special = flag("parse_special");
                const bool with_pieces = flag("with_pieces");
                const auto ids = lm->tokenizer().encode(it->get<std::string>(), add_special, parse_special);
                json out{{"tokens", ids}};
                if (with_pieces) {
                  json pieces = json::array();
                  for (int32_t id : ids) pieces.push_back(lm->tokenizer().piece(id));
                  out["pieces"] = pieces;
                }
                send_json(res, 200, out);
              }));
    http.Post("/detokenize", wrap("detokenize", true, [this](const httplib::Request& req, httplib::Response& res) {
                need_chat_model("/detokenize");
                const auto b = parse_body(req.body);
                auto it = b.find("tokens");
                if (it == b.end() || !it->is_array()) throw ApiError(400, "'tokens' must be an array of ids", "tokens");
                std::vector<int32_t> ids;
                for (const auto& t : *it) {
                  if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= lm->tokenizer().vocab_size())
                    throw ApiError(400, "'tokens' must hold ids in [0, vocab size)", "tokens");
                  ids.push_back(t.get<int32_t>());
                }
                send_json(res, 200, json{{"content", lm->tokenizer().decode(ids)}});
              }));
    http.Post("/v1/chat/completions", wrap("chat_completions", true, [this](const httplib::Request& req, httplib::Response& res) {
                auto body = parse_body(req.body);
                const RequestContext ctx = request_context("/v1/chat/completions");  // 400 without a chat model
                std::string user = faq_allowed(body) ? last_user_text(body) : "";
                nlohmann::json passages = apply_rag(body, opt.kb, lm->tokenizer(), opt.scheduler.context_tokens);
                GenRequest rq = parse_chat_request(body, ctx);
                rq.kb_passages = std::move(passages);
                rq.user_text = std::move(user);
                if (!rq.kb_passages.is_null()) metrics.count_kb_request();
                generate(std::move(rq), res);
              }));
    // Extension: prefill while typing (docs/server.md). The body is a chat completion's; the
    // answer comes at once, the prefill runs when the scheduler is otherwise idle.
    http.Post("/v1/prefill", wrap("prefill", true, [this](const httplib::Request& req, httplib::Response& res) {
                const json body = parse_body(req.body);
                const DraftPlan plan = plan_draft(body, request_context("/v1/prefill"), kDraftHoldbackTokens);
                std::string client = req.remote_addr;
                if (const auto it = body.find("user"); it != body.end() && it->is_string())
                  client += " " + it->get<std::string>();
                const int n = static_cast<int>(plan.tokens.size());
                const bool queued = n > 0 && scheduler->submit_draft(client, plan.tokens, plan.media);
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
                generate(parse_completion_request(parse_body(req.body), request_context("/v1/completions")), res);
              }));
    // Errors raised by httplib itself (404, 413, ...) get an OpenAI error body too.
    http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (res.body.empty()) send_json(res, res.status, error_json(res.status, status_message(res.status)));
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
      send_json(res, 500, error_json(500, "internal error"));
    });
  }

  json model_json() const {
    return json{{"id", opt.model_id},
                {"object", "model"},
                {"created", 0},
                {"owned_by", "edgegemma"},
                {"context_length", opt.scheduler.context_tokens}};
  }

  json embedding_model_json() const {
    return json{{"id", opt.embedding_model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "edgegemma"},
                {"type", "embedding"}, {"dimensions", opt.embedder->full_dim()},
                {"supported_dimensions", opt.embedder->supported_dims()}, {"tasks", opt.embedder->task_names()},
                {"max_input_tokens", opt.embedder->max_tokens()}};
  }

  void generate(GenRequest rq, httplib::Response& res) {
    build_constraints(rq, lm->tokenizer());
    const double timeout = rq.timeout_s > 0 ? std::min(rq.timeout_s, opt.timeout_s) : opt.timeout_s;
    auto job = std::make_shared<Job>(std::move(rq), timeout);
    if (opt.kb.first_token_timeout_s > 0)
      job->first_token_deadline = job->created + std::chrono::duration_cast<Clock::duration>(
                                                     std::chrono::duration<double>(opt.kb.first_token_timeout_s));
    if (scheduler->stopping()) throw ApiError(503, "the server is shutting down");
    if (!scheduler->submit(job))
      throw ApiError(429, "the server is busy: every slot is in use and the queue is full; retry later", "",
                     "queue_full");
    const std::string id = new_completion_id(job->req.kind == GenRequest::Kind::Chat);
    res.status = 200;
    const int64_t created = unix_now();
    ++open_responses;
    auto release = [this, job](bool success) {
      if (!success) job->cancel = true;  // the client went away
      --open_responses;
    };
    if (job->req.stream) {
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [this, job, id, created, started = false, sent = false, last = Clock::now()](size_t, httplib::DataSink& sink) mutable {
            return stream_events(*job, id, created, started, sent, last, sink);
          },
          release);
    } else {
      res.set_chunked_content_provider(
          "application/json",
          [this, job, id, created, last = Clock::now()](size_t, httplib::DataSink& sink) mutable {
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
  if (impl_->scheduler) impl_->scheduler->stop();
  // httplib aborts responses still being written once it stops: let the handlers send their last
  // chunk / body first (bounded wait: a client that does not read cannot hold the shutdown).
  for (int i = 0; i < 500 && impl_->open_responses.load() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  impl_->http.stop();
}

}  // namespace eg::server
