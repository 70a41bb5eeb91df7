// Progress reporting on a stream (see progress.h).
#include "core/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace eg {

namespace {

const char* unit_name(ProgressUnit u) {
  switch (u) {
    case ProgressUnit::Bytes: return "B";
    case ProgressUnit::Tokens: return "tokens";
    case ProgressUnit::Tensors: return "tensors";
    case ProgressUnit::Layers: return "layers";
    case ProgressUnit::Items: return "items";
  }
  return "";
}

// Bytes: the decimal prefix for a magnitude (scale and suffix).
std::pair<double, const char*> byte_scale(double v) {
  if (v >= 1e9) return {1e9, "GB"};
  if (v >= 1e6) return {1e6, "MB"};
  if (v >= 1e3) return {1e3, "kB"};
  return {1, "B"};
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// A rate of units per second, 3 significant digits at most ("150", "85.2", "4.50").
std::string rate_number(double r) { return r >= 100 ? fmt("%.0f", r) : r >= 10 ? fmt("%.1f", r) : fmt("%.2f", r); }

// "1.07/2.66 GB" (both in the total's prefix), "120/300 tensors", or "120 tensors" (unknown total).
std::string amounts(int64_t done, int64_t total, ProgressUnit u) {
  if (u == ProgressUnit::Bytes) {
    const auto [s, suffix] = byte_scale(static_cast<double>(std::max(done, total)));
    const char* f = s == 1 ? "%.0f" : "%.2f";
    std::string r = fmt(f, done / s);
    if (total > 0) (r += '/') += fmt(f, total / s);
    (r += ' ') += suffix;
    return r;
  }
  std::string r = std::to_string(done);
  if (total > 0) (r += '/') += std::to_string(total);
  (r += ' ') += unit_name(u);
  return r;
}

std::string rate_text(double rate, ProgressUnit u) {
  const auto [sc, suffix] = u == ProgressUnit::Bytes ? byte_scale(rate) : std::pair<double, const char*>{1, unit_name(u)};
  std::string r = rate_number(rate / sc);
  ((r += ' ') += suffix) += "/s";
  return r;
}

// Cuts a line to n bytes without splitting a UTF-8 sequence.
std::string cut(std::string s, size_t n) {
  if (s.size() <= n) return s;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
  return s;
}

}  // namespace

std::string format_duration(double seconds) {
  const int64_t s = seconds > 0 && std::isfinite(seconds) ? static_cast<int64_t>(seconds) : 0;
  char b[48];
  if (s >= 3600) std::snprintf(b, sizeof b, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                               static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else std::snprintf(b, sizeof b, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return b;
}

std::string format_amount(double v, ProgressUnit unit) {
  if (unit != ProgressUnit::Bytes) return fmt("%.0f", v);
  const auto [s, suffix] = byte_scale(v);
  std::string r = s == 1 ? fmt("%.0f", v) : fmt("%.2f", v / s);
  (r += ' ') += suffix;
  return r;
}

ProgressReporter::ProgressReporter(ProgressOptions opt) : opt_(std::move(opt)) {
  if (!opt_.out) opt_.enabled = false;
  if (opt_.width < 20) opt_.width = 20;
}

ProgressOptions ProgressReporter::stderr_options(bool quiet) {
  ProgressOptions o;
  o.out = stderr;
  o.enabled = !quiet;
  const char* term = std::getenv("TERM");
  o.tty = isatty(STDERR_FILENO) && !(term && std::strcmp(term, "dumb") == 0);
  if (o.tty) {
    winsize ws{};
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) o.width = ws.ws_col;
  }
  return o;
}

ProgressReporter::~ProgressReporter() {
  std::lock_guard<std::mutex> lock(mu_);
  close_locked();
}

double ProgressReporter::now() const {
  if (opt_.clock) return opt_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string ProgressReporter::status_line(bool final) const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_locked(final, now());
}

std::string ProgressReporter::status_locked(bool final, double t) const {
  const double elapsed = t - t0_;
  const double rate = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0;
  std::string s = name_;
  s += ':';
  if (total_ > 0) ((s += ' ') += std::to_string(std::min<int64_t>(100, done_ * 100 / total_))) += '%';
  (s += ' ') += amounts(done_, total_, unit_);
  if (elapsed > 0) (s += ", ") += rate_text(rate, unit_);
  (s += ", elapsed ") += format_duration(elapsed);
  if (!final && total_ > 0) (s += ", ETA ") += rate > 0 ? format_duration((total_ - done_) / rate) : std::string("?");
  if (!detail_.empty()) (s += ", ") += detail_;
  return s;
}

std::string ProgressReporter::bar_line_locked(double t) const {
  const double elapsed = t - t0_;
  const double rate = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0;
  const bool complete = !active_;
  std::string tail;
  if (total_ > 0) {
    char pct[8];
    std::snprintf(pct, sizeof pct, "%3d%%", static_cast<int>(std::min<int64_t>(100, done_ * 100 / total_)));
    tail += pct;
  }
  (tail += ' ') += amounts(done_, total_, unit_);
  if (elapsed > 0) (tail += "  ") += rate_text(rate, unit_);
  if (complete) (tail += "  done in ") += format_duration(elapsed);
  else if (total_ > 0) (tail += "  ETA ") += rate > 0 ? format_duration((total_ - done_) / rate) : std::string("?");
  if (!detail_.empty()) (tail += "  ") += detail_;
  const int room = opt_.width - 1;
  std::string line = name_;
  // The bar: up to 30 cells, keeping kTail columns for the numbers (a width that does not change
  // while the numbers do); none if fewer than 10 cells fit. A longer tail is cut at the end.
  constexpr int kTail = 50;
  const int bar = total_ > 0 ? std::min(30, room - static_cast<int>(name_.size()) - 4 - kTail) : 0;
  if (bar >= 10) {
    const int full = static_cast<int>(static_cast<double>(std::min(done_, total_)) / total_ * bar);
    line += " [";
    line.append(static_cast<size_t>(full), '=');
    if (full < bar) {
      line += '>';
      line.append(static_cast<size_t>(bar - full - 1), ' ');
    }
    line += ']';
  }
  (line += ' ') += tail;
  return cut(line, static_cast<size_t>(room));
}

void ProgressReporter::draw_locked(double t) {
  std::string line = "\r";
  (line += bar_line_locked(t)) += "\x1b[K";
  std::fwrite(line.data(), 1, line.size(), opt_.out);
  std::fflush(opt_.out);
  drawn_ = true;
  last_draw_ = t;
}

void ProgressReporter::print_line_locked(double t, bool final) {
  std::string line = status_locked(final, t);
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), opt_.out);
  std::fflush(opt_.out);
  last_line_ = t;
  last_line_done_ = done_;
  if (total_ > 0 && opt_.line_percent > 0) last_bucket_ = done_ * 100 / total_ / opt_.line_percent;
}

void ProgressReporter::close_locked() {
  if (active_ && opt_.tty && drawn_) {
    std::fputc('\n', opt_.out);
    std::fflush(opt_.out);
  }
  active_ = false;
  drawn_ = false;
}

void ProgressReporter::do_begin(std::string_view name, int64_t total, ProgressUnit unit) {
  if (!opt_.enabled) return;
  std::lock_guard<std::mutex> lock(mu_);
  close_locked();
  active_ = true;
  name_ = name;
  detail_.clear();
  total_ = std::max<int64_t>(0, total);
  done_ = 0;
  unit_ = unit;
  t0_ = now();
  last_line_ = t0_;
  last_line_done_ = 0;
  last_bucket_ = 0;
  if (opt_.tty) draw_locked(t0_);
}

void ProgressReporter::do_update(int64_t done, std::string_view detail) {
  if (!opt_.enabled) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!active_ || done < done_) return;
  done_ = done;
  if (!detail.empty()) detail_ = detail;
  const double t = now();
  if (opt_.tty) {
    if (t - last_draw_ >= opt_.redraw_interval) draw_locked(t);
    return;
  }
  if (total_ > 0 && done_ >= total_) return;  // the final line comes from end()
  const bool next_step = total_ > 0 && opt_.line_percent > 0 && done_ * 100 / total_ / opt_.line_percent > last_bucket_;
  const bool overdue = t - last_line_ >= opt_.line_interval && done_ > last_line_done_;
  if (next_step || overdue) print_line_locked(t, false);
}

void ProgressReporter::do_end() {
  if (!opt_.enabled) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!active_) return;
  done_ = std::max(done_, total_);
  const double t = now();
  active_ = false;
  if (opt_.tty) {
    draw_locked(t);
    std::fputc('\n', opt_.out);
    std::fflush(opt_.out);
    drawn_ = false;
  } else {
    print_line_locked(t, true);
  }
}

void ProgressReporter::message(std::string_view line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!opt_.out) return;
  const bool bar = opt_.enabled && opt_.tty && active_ && drawn_;
  std::string s = bar ? "\r\x1b[K" : "";
  s.append(line);
  s += "\n";
  std::fwrite(s.data(), 1, s.size(), opt_.out);
  std::fflush(opt_.out);
  if (bar) draw_locked(now());
}

}  // namespace eg
