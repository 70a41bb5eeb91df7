#include "server_test_util.h"

#include <chrono>
#include <map>
#include <mutex>
#include <sstream>

namespace egtest {

using nlohmann::json;

std::shared_ptr<const eg::LoadedModel> shared_model(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const eg::LoadedModel>> cache;
  std::lock_guard<std::mutex> lk(mu);
  auto& m = cache[path];
  if (!m) m = eg::LoadedModel::load(path);
  return m;
}

std::string base64(const std::string& in) {
  static const char* A = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int k = 3; k >= 0; --k) out += A[(v >> (6 * k)) & 63];
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint8_t(in[i]) << 16;
    out += A[(v >> 18) & 63];
    out += A[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += A[(v >> 18) & 63];
    out += A[(v >> 12) & 63];
    out += A[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

TestServer::TestServer(const std::string& model_path, eg::server::ServerOptions o)
    : TestServer(model_path.empty() ? nullptr : shared_model(model_path), std::move(o)) {}

TestServer::TestServer(std::shared_ptr<const eg::LoadedModel> model, eg::server::ServerOptions o) {
  o.host = "127.0.0.1";
  o.port = 0;
  if (o.model_id.empty()) o.model_id = "test-model";
  srv_ = std::make_unique<eg::server::Server>(std::move(model), o);
  port_ = srv_->bind();
  th_ = std::thread([this] { srv_->listen(); });
  for (int i = 0; i < 500; ++i) {  // until it answers
    if (auto r = client(2).Get("/health")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

TestServer::~TestServer() {
  srv_->stop();
  if (th_.joinable()) th_.join();
}

void TestServer::stop() {
  srv_->stop();
  if (th_.joinable()) th_.join();
}

httplib::Client TestServer::client(int timeout_s) const {
  httplib::Client c("127.0.0.1", port_);
  c.set_read_timeout(timeout_s, 0);
  c.set_write_timeout(timeout_s, 0);
  return c;
}

std::pair<int, std::string> TestServer::post_raw(const std::string& path, const std::string& body,
                                                 const httplib::Headers& h) const {
  auto c = client();
  auto r = c.Post(path, h, body, "application/json");
  if (!r) return {-1, ""};
  return {r->status, r->body};
}

std::pair<int, json> TestServer::post(const std::string& path, const json& body, const httplib::Headers& h) const {
  auto [st, b] = post_raw(path, body.dump(), h);
  json j = json::parse(b, nullptr, false);
  return {st, j.is_discarded() ? json(b) : j};
}

std::pair<int, json> TestServer::get(const std::string& path, const httplib::Headers& h) const {
  auto c = client();
  auto r = c.Get(path, h);
  if (!r) return {-1, json()};
  json j = json::parse(r->body, nullptr, false);
  return {r->status, j.is_discarded() ? json(r->body) : j};
}

std::vector<json> TestServer::stream(const std::string& path, const json& body, int stop_after) const {
  auto c = client();
  std::vector<json> events;
  std::string buf;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buf.append(data, n);
    size_t e;
    while ((e = buf.find("\n\n")) != std::string::npos) {
      const std::string ev = buf.substr(0, e);
      buf.erase(0, e + 2);
      if (ev.rfind("data: ", 0) != 0) continue;  // comments (keep-alive)
      const std::string d = ev.substr(6);
      events.push_back(d == "[DONE]" ? json("[DONE]") : json::parse(d));
      if (stop_after > 0 && static_cast<int>(events.size()) >= stop_after) return false;
    }
    return true;
  };
  c.send(req);
  return events;
}

double TestServer::metric(const std::string& name) const {
  auto c = client();
  auto r = c.Get("/metrics");
  if (!r) return -1;
  std::istringstream in(r->body);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  return -1;
}

json chat_body(const std::string& user, int max_tokens) {
  return json{{"messages", json::array({json{{"role", "user"}, {"content", user}}})},
              {"temperature", 0},
              {"max_tokens", max_tokens}};
}

std::string content_of(const json& resp) {
  const json& c = resp.at("choices").at(0).at("message").at("content");
  return c.is_null() ? std::string() : c.get<std::string>();
}

std::string joined_deltas(const std::vector<json>& events) {
  std::string s;
  for (const json& e : events) {
    if (!e.is_object() || !e.contains("choices") || e["choices"].empty()) continue;
    const json& d = e["choices"][0]["delta"];
    if (d.contains("content") && d["content"].is_string()) s += d["content"].get<std::string>();
  }
  return s;
}

}  // namespace egtest
