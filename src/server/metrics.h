// Server metrics in the Prometheus text exposition format (GET /metrics): request counters by
// endpoint and status, token counters, TTFT and per-token latency histograms (seconds), and
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
  void set_gauges(const Gauges& g);
  Gauges gauges() const;
  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, generated_tokens_ = 0, cancelled_ = 0;
  Histogram ttft_, token_latency_;
  Gauges gauges_;
};

}  // namespace eg::server
