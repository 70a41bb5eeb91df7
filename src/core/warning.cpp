// Once-per-process warnings (core/warning.h).
#include "core/warning.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace eg {

namespace {

std::atomic<bool> g_warned[static_cast<int>(WarningKind::kCount)];
std::mutex g_mu;
WarningSink g_sink = nullptr;

}  // namespace

WarningSink set_warning_sink(WarningSink sink) {
  std::lock_guard<std::mutex> lock(g_mu);
  WarningSink old = g_sink;
  g_sink = sink;
  return old;
}

bool warning_first_time(WarningKind kind) {
  const int k = static_cast<int>(kind);
  if (k < 0 || k >= static_cast<int>(WarningKind::kCount)) return false;
  if (g_warned[k].load(std::memory_order_relaxed)) return false;
  return !g_warned[k].exchange(true);
}

void warn(const std::string& text) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_sink) {
    g_sink(text.c_str());
    return;
  }
  std::fprintf(stderr, "edgegemma: warning: %s\n", text.c_str());
  std::fflush(stderr);
}

void reset_warnings_for_testing() {
  for (auto& w : g_warned) w.store(false);
}

}  // namespace eg
