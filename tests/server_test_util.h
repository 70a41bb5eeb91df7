// An in-process `edgegemma serve` for tests: a Server on 127.0.0.1 (free port) + an HTTP client.
#pragma once
#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "engine/loaded_model.h"
#include "server/server.h"
#include "test_util.h"

namespace egtest {

/// Models are loaded once per process (by path).
std::shared_ptr<const eg::LoadedModel> shared_model(const std::string& path);

/// RFC 4648 base64 of `in` (the tests' own encoder, independent of the server's decoder).
std::string base64(const std::string& in);

class TestServer {
 public:
  /// model_path "": no chat model (an embeddings-only server: o.embedder must be set).
  TestServer(const std::string& model_path, eg::server::ServerOptions o);
  /// A model already loaded (e.g. with an mmproj attached).
  TestServer(std::shared_ptr<const eg::LoadedModel> model, eg::server::ServerOptions o);
  ~TestServer();
  /// Stops the server (as SIGTERM does in `serve`); the destructor then only joins.
  void stop();
  int port() const { return port_; }
  httplib::Client client(int timeout_s = 120) const;
  /// POST JSON; returns (status, parsed body or the raw body as a string).
  std::pair<int, nlohmann::json> post(const std::string& path, const nlohmann::json& body,
                                      const httplib::Headers& h = {}) const;
  std::pair<int, std::string> post_raw(const std::string& path, const std::string& body,
                                       const httplib::Headers& h = {}) const;
  std::pair<int, nlohmann::json> get(const std::string& path, const httplib::Headers& h = {}) const;
  /// Streams a request; returns the parsed SSE data events (the [DONE] marker as the string
  /// "[DONE]"). stop_after > 0: closes the connection after that many events.
  std::vector<nlohmann::json> stream(const std::string& path, const nlohmann::json& body, int stop_after = 0) const;
  /// Value of a metric line "name value" from /metrics (-1 when absent).
  double metric(const std::string& name) const;

 private:
  std::unique_ptr<eg::server::Server> srv_;
  std::thread th_;
  int port_ = 0;
};

/// Chat request body with one user message, greedy.
nlohmann::json chat_body(const std::string& user, int max_tokens);
/// Content of a non-streamed chat response.
std::string content_of(const nlohmann::json& resp);
/// Joined content deltas of streamed chat events.
std::string joined_deltas(const std::vector<nlohmann::json>& events);

}  // namespace egtest
