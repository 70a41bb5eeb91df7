#include "server/metrics.h"

#include <cstdio>
#include <sstream>

namespace eg::server {

namespace {
std::string num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}
}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

std::string Histogram::render(const std::string& name, const std::string& help) const {
  std::ostringstream o;
  o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " histogram\n";
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    o << name << "_bucket{le=\"" << num(bounds_[i]) << "\"} " << cum << '\n';
  }
  cum += counts_.back();
  o << name << "_bucket{le=\"+Inf\"} " << cum << '\n';
  o << name << "_sum " << num(sum_) << '\n' << name << "_count " << count_ << '\n';
  return o.str();
}

Metrics::Metrics()
    : ttft_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      token_latency_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}) {}

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::add_tokens(int prompt, int cached, int generated) {
  std::lock_guard<std::mutex> lk(mu_);
  prompt_tokens_ += static_cast<uint64_t>(prompt);
  cached_tokens_ += static_cast<uint64_t>(cached);
  generated_tokens_ += static_cast<uint64_t>(generated);
}

void Metrics::observe_ttft(double s) {
  std::lock_guard<std::mutex> lk(mu_);
  ttft_.observe(s);
}

void Metrics::observe_token_latency(double s) {
  std::lock_guard<std::mutex> lk(mu_);
  token_latency_.observe(s);
}

void Metrics::count_cancelled() {
  std::lock_guard<std::mutex> lk(mu_);
  ++cancelled_;
}

void Metrics::count_kb_request() {
  std::lock_guard<std::mutex> lk(mu_);
  ++kb_requests_;
}

void Metrics::count_first_token_timeout() {
  std::lock_guard<std::mutex> lk(mu_);
  ++first_token_timeouts_;
}

void Metrics::count_faq_answer() {
  std::lock_guard<std::mutex> lk(mu_);
  ++faq_answers_;
}

void Metrics::count_faq_miss() {
  std::lock_guard<std::mutex> lk(mu_);
  ++faq_misses_;
}

void Metrics::count_auto_rollback() {
  std::lock_guard<std::mutex> lk(mu_);
  ++auto_rollbacks_;
}

void Metrics::count_draft_request() {
  std::lock_guard<std::mutex> lk(mu_);
  ++draft_requests_;
}

void Metrics::count_draft_dropped() {
  std::lock_guard<std::mutex> lk(mu_);
  ++draft_dropped_;
}

void Metrics::count_draft_prefilled() {
  std::lock_guard<std::mutex> lk(mu_);
  ++draft_prefilled_;
}

void Metrics::add_draft_tokens(int n) {
  std::lock_guard<std::mutex> lk(mu_);
  draft_tokens_ += static_cast<uint64_t>(n);
}

void Metrics::count_draft_hit(int saved_tokens) {
  std::lock_guard<std::mutex> lk(mu_);
  ++draft_hits_;
  draft_saved_ += static_cast<uint64_t>(saved_tokens);
}

void Metrics::set_gauges(const Gauges& g) {
  std::lock_guard<std::mutex> lk(mu_);
  gauges_ = g;
}

Gauges Metrics::gauges() const {
  std::lock_guard<std::mutex> lk(mu_);
  return gauges_;
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::ostringstream o;
  o << "# HELP edgegemma_requests_total HTTP requests by endpoint and status code.\n"
       "# TYPE edgegemma_requests_total counter\n";
  for (const auto& [k, v] : requests_)
    o << "edgegemma_requests_total{endpoint=\"" << k.first << "\",status=\"" << k.second << "\"} " << v << '\n';
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " counter\n" << name << ' ' << v << '\n';
  };
  auto gauge = [&](const char* name, const char* help, int64_t v) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " gauge\n" << name << ' ' << v << '\n';
  };
  counter("edgegemma_prompt_tokens_total", "Prompt tokens of finished requests.", prompt_tokens_);
  counter("edgegemma_prompt_tokens_cached_total", "Prompt tokens whose KV cache was reused (slot or prefix cache).",
          cached_tokens_);
  counter("edgegemma_generated_tokens_total", "Generated tokens.", generated_tokens_);
  counter("edgegemma_requests_cancelled_total", "Requests stopped because the client went away or timed out.",
          cancelled_);
  counter("edgegemma_kb_requests_total", "Chat requests answered with knowledge-base passages in the prompt (--kb).",
          kb_requests_);
  counter("edgegemma_first_token_timeouts_total", "Requests stopped with no first token by --first-token-timeout.",
          first_token_timeouts_);
  counter("edgegemma_faq_answers_total", "Failed requests answered from the FAQ instead (--faq).", faq_answers_);
  counter("edgegemma_faq_misses_total", "Failed requests for which the FAQ had no answer (the error stood).",
          faq_misses_);
  counter("edgegemma_auto_rollbacks_total", "Automatic rollbacks of the served store model (serve --rollback-if).",
          auto_rollbacks_);
  counter("edgegemma_draft_requests_total", "Draft prefills accepted (POST /v1/prefill).", draft_requests_);
  counter("edgegemma_draft_dropped_total",
          "Drafts dropped before completing (superseded by a newer draft of the same client, or too many pending).",
          draft_dropped_);
  counter("edgegemma_draft_prefills_total", "Drafts whose prefill completed.", draft_prefilled_);
  counter("edgegemma_draft_prefill_tokens_total", "Tokens prefilled for drafts.", draft_tokens_);
  counter("edgegemma_draft_cache_hits_total", "Requests that reused KV computed by a draft.", draft_hits_);
  counter("edgegemma_draft_tokens_saved_total", "Prompt tokens requests reused from drafts (not prefilled again).",
          draft_saved_);
  o << ttft_.render("edgegemma_ttft_seconds", "Time to first token (request received -> first token sampled).");
  o << token_latency_.render("edgegemma_token_latency_seconds", "Time between consecutive generated tokens.");
  gauge("edgegemma_slots_total", "Generation slots (--parallel).", gauges_.slots_total);
  gauge("edgegemma_slots_busy", "Slots running a request.", gauges_.slots_busy);
  gauge("edgegemma_queue_length", "Requests waiting for a slot.", gauges_.queue_length);
  gauge("edgegemma_kv_pages_in_use", "KV cache pages holding live tokens, all slots.", gauges_.kv_pages_in_use);
  gauge("edgegemma_kv_bytes_in_use", "Bytes of those KV pages.", gauges_.kv_bytes_in_use);
  gauge("edgegemma_prefix_cache_bytes", "Bytes held by the cross-request prefix cache.", gauges_.prefix_cache_bytes);
  gauge("edgegemma_prefix_cache_blocks", "Page-aligned blocks held by the prefix cache.", gauges_.prefix_cache_blocks);
  return o.str();
}

}  // namespace eg::server
