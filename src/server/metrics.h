// Server metrics in the Prometheus text exposition format (GET /metrics): request counters by
// endpoint and status, token counters, draft-prefill counters, TTFT and per-token latency histograms (seconds), and
// gauges for slots, queue, KV pages and the prefix cache. Thread-safe.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace eg::server {

/// A cumulative histogram with fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  /// Prometheus lines for `name` (with _bucket, _sum, _count).
  std::string render(const std::string& name, const std::string& help) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (non-cumulative); last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct Gauges {
  int slots_total = 0, slots_busy = 0, queue_length = 0;
  int64_t kv_pages_in_use = 0;
  int64_t kv_bytes_in_use = 0;
  int64_t prefix_cache_bytes = 0, prefix_cache_blocks = 0;
};

class Metrics {
 public:
  Metrics();
  void count_request(const std::string& endpoint, int status);
  void add_tokens(int prompt, int cached, int generated);
  void observe_ttft(double seconds);
  void observe_token_latency(double seconds);
  void count_cancelled();
  // Knowledge base (--kb, --faq; docs/knowledge-base.md): chat requests answered with passages in
  // the prompt; requests stopped by --first-token-timeout; failed requests answered from the FAQ
  // instead, and failed requests the FAQ had no answer for.
  void count_kb_request();
  void count_first_token_timeout();
  void count_faq_answer();
  void count_faq_miss();
  void count_auto_rollback();  // serve --rollback-if fired
  // Draft prefill (POST /v1/prefill, scheduler.h): drafts accepted; drafts dropped (superseded by a
  // newer draft of the same client, or the oldest when too many are pending); drafts whose
  // prefill completed; tokens prefilled for drafts; requests that reused KV a draft computed, and
  // how many prompt tokens that was (tokens the request did not prefill).
  void count_draft_request();
  void count_draft_dropped();
  void count_draft_prefilled();
  void add_draft_tokens(int n);
  void count_draft_hit(int saved_tokens);
  void set_gauges(const Gauges& g);
  Gauges gauges() const;
  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, generated_tokens_ = 0, cancelled_ = 0, auto_rollbacks_ = 0;
  uint64_t kb_requests_ = 0, first_token_timeouts_ = 0, faq_answers_ = 0, faq_misses_ = 0;
  uint64_t draft_requests_ = 0, draft_dropped_ = 0, draft_prefilled_ = 0, draft_tokens_ = 0, draft_hits_ = 0,
           draft_saved_ = 0;
  Histogram ttft_, token_latency_;
  Gauges gauges_;
};

}  // namespace eg::server
