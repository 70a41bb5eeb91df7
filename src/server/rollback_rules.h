// Automatic rollback thresholds of `serve --rollback-if` (docs/model-store.md, "Automatic
// rollback"). The rule language, kept small:
//
//   rules  := rule ("," rule)*            any one rule that holds triggers the rollback
//   rule   := metric op number [unit]     no spaces needed; spaces are ignored
//   metric := ttft_p50 | ttft_p95 | ttft_p99      time to first token (seconds)
//           | token_p50 | token_p95 | token_p99   mean per-token decode latency of a request (seconds)
//           | error_rate                          fraction of requests that failed (0..1)
//   op     := ">" | ">=" | "<" | "<="
//   unit   := "s" | "ms" (times) | "%" (error_rate)
// e.g. "ttft_p95>2s, error_rate>5%". Percentiles are nearest-rank over the window: the last
// `window` finished generation requests served by the current version, evaluated only once it
// holds at least `min_requests` of them.
#pragma once
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace eg::server {

struct RollbackRule {
  std::string metric;  // one of the metric names above
  std::string op;      // ">", ">=", "<", "<="
  double value = 0;    // seconds for times, a fraction for error_rate
  std::string text;    // the rule as written (for logs)
};

/// Parses the rule list. Throws eg::Error naming the bad rule and listing the metrics.
std::vector<RollbackRule> parse_rollback_rules(const std::string& text);

/// One finished request as the rules see it.
struct RequestSample {
  double ttft_s = 0;
  double token_s = 0;  // mean seconds per generated token after the first (0 when < 2 tokens)
  bool failed = false;
};

/// The last `capacity` samples of one model version. Thread-safe.
class MetricsWindow {
 public:
  explicit MetricsWindow(size_t capacity = 100) : capacity_(capacity) {}
  void add(const RequestSample& s);
  size_t size() const;
  /// The value of `metric` over the window (nearest-rank percentiles). 0 for an empty window.
  double value(const std::string& metric) const;
  /// The first rule that holds over the window ("" when none holds or fewer than min_requests).
  std::string triggered(const std::vector<RollbackRule>& rules, size_t min_requests) const;

 private:
  size_t capacity_;
  mutable std::mutex mu_;
  std::deque<RequestSample> samples_;
};

}  // namespace eg::server
