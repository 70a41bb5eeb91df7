#include "server/rollback_rules.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace eg::server {

namespace {

const char* kMetrics[] = {"ttft_p50", "ttft_p95", "ttft_p99", "token_p50", "token_p95", "token_p99", "error_rate"};

[[noreturn]] void bad(const std::string& rule, const std::string& why) {
  throw Error("--rollback-if: bad rule '" + rule + "': " + why +
              " (rules: METRIC>VALUE[s|ms|%], comma-separated; metrics: ttft_p50 ttft_p95 ttft_p99 token_p50 "
              "token_p95 token_p99 error_rate)");
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::min(v.size(), std::max<size_t>(rank, 1)) - 1];
}

}  // namespace

std::vector<RollbackRule> parse_rollback_rules(const std::string& text) {
  std::vector<RollbackRule> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    std::string raw = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? text.size() + 1 : comma + 1;
    std::string r;
    for (char c : raw)
      if (c != ' ' && c != '\t') r += c;
    if (r.empty()) {
      if (text.find_first_not_of(" \t,") == std::string::npos) throw Error("--rollback-if: no rules given");
      bad(raw, "empty rule");
    }
    const size_t op_at = r.find_first_of("<>");
    if (op_at == std::string::npos || op_at == 0) bad(raw, "expected METRIC OP VALUE");
    RollbackRule rule;
    rule.text = r;
    rule.metric = r.substr(0, op_at);
    if (std::find(std::begin(kMetrics), std::end(kMetrics), rule.metric) == std::end(kMetrics))
      bad(raw, "unknown metric '" + rule.metric + "'");
    size_t num_at = op_at + 1;
    if (num_at < r.size() && r[num_at] == '=') ++num_at;
    rule.op = r.substr(op_at, num_at - op_at);
    const std::string num = r.substr(num_at);
    const char* b = num.c_str();
    char* e = nullptr;
    const double v = std::strtod(b, &e);
    if (e == b || !std::isfinite(v) || v < 0) bad(raw, "expected a number >= 0 after '" + rule.op + "'");
    const std::string unit = e;
    const bool time = rule.metric != "error_rate";
    if (time) {
      if (unit == "s" || unit.empty()) rule.value = v;
      else if (unit == "ms") rule.value = v / 1000.0;
      else bad(raw, "a time takes the unit s or ms");
    } else {
      if (unit == "%") rule.value = v / 100.0;
      else if (unit.empty()) rule.value = v;
      else bad(raw, "error_rate takes a fraction or a percentage (5%)");
      if (rule.value > 1) bad(raw, "error_rate is at most 1 (100%)");
    }
    out.push_back(rule);
  }
  return out;
}

void MetricsWindow::add(const RequestSample& s) {
  std::lock_guard<std::mutex> lk(mu_);
  samples_.push_back(s);
  while (samples_.size() > capacity_) samples_.pop_front();
}

size_t MetricsWindow::size() const {
  std::lock_guard<std::mutex> lk(mu_);
  return samples_.size();
}

double MetricsWindow::value(const std::string& metric) const {
  std::lock_guard<std::mutex> lk(mu_);
  if (samples_.empty()) return 0;
  if (metric == "error_rate") {
    size_t failed = 0;
    for (const auto& s : samples_) failed += s.failed ? 1 : 0;
    return static_cast<double>(failed) / static_cast<double>(samples_.size());
  }
  const bool ttft = metric.rfind("ttft_", 0) == 0;
  std::vector<double> v;
  for (const auto& s : samples_)
    if (!s.failed && (ttft || s.token_s > 0)) v.push_back(ttft ? s.ttft_s : s.token_s);
  const double p = std::atof(metric.c_str() + metric.find('_') + 2);
  return percentile(std::move(v), p);
}

std::string MetricsWindow::triggered(const std::vector<RollbackRule>& rules, size_t min_requests) const {
  if (size() < std::max<size_t>(min_requests, 1)) return "";
  for (const auto& r : rules) {
    const double x = value(r.metric);
    const bool hit = r.op == ">" ? x > r.value : r.op == ">=" ? x >= r.value : r.op == "<" ? x < r.value : x <= r.value;
    if (hit) return r.text + " (measured " + std::to_string(x) + ")";
  }
  return "";
}

}  // namespace eg::server
