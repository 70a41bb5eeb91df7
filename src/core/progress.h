// Progress of long operations (quantize, AWQ calibration, synth, perplexity).
//
// Library code reports through a ProgressSink* (nullptr: silent) and never writes to the terminal;
// the CLI creates a ProgressReporter that draws what it is told on stderr:
//   * on a terminal: one line redrawn in place ("\r" ... ESC[K), at most ~10 times a second:
//       quantize [=========>          ]  45% 1.20/2.66 GB  150 MB/s  ETA 0:10  tensor 120/300
//     and ended with a newline when the task ends;
//   * otherwise (a pipe, a log file): one plain line each time another 10% is done, or after
//     15 s without a line, and a final line at 100%:
//       quantize: 40% 1.07/2.66 GB, 150 MB/s, elapsed 0:07, ETA 0:11, tensor 120/300
//   * disabled (--quiet): nothing.
// Rate = done / elapsed since the task began; ETA = (total - done) / rate ("?" before any progress).
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace eg {

/// What a task counts; decides how amounts and rates are printed ("1.20/2.66 GB", "120/300 tensors").
enum class ProgressUnit { Bytes, Tokens, Tensors, Layers, Items };

/// The receiving end of progress reports. Calls may come from any thread.
class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  /// A new task of `total` units (0 = unknown), e.g. ("quantize", 2.6e9, Bytes). A task still open
  /// is closed first.
  void begin(std::string_view name, int64_t total, ProgressUnit unit) { do_begin(name, total, unit); }
  /// `done` units of the current task are complete (a smaller value than one already reported is
  /// ignored); `detail` (e.g. "tensor 12/300", "ppl 14.2") is shown after the numbers.
  void update(int64_t done, std::string_view detail = {}) { do_update(done, detail); }
  /// The current task is complete.
  void end() { do_end(); }

 protected:
  virtual void do_begin(std::string_view name, int64_t total, ProgressUnit unit) = 0;
  virtual void do_update(int64_t done, std::string_view detail) = 0;
  virtual void do_end() = 0;
};

/// A task on an optional sink: every call is a no-op when the sink is nullptr.
class ProgressTask {
 public:
  ProgressTask(ProgressSink* sink, std::string_view name, int64_t total, ProgressUnit unit) : sink_(sink) {
    if (sink_) sink_->begin(name, total, unit);
  }
  void update(int64_t done, std::string_view detail = {}) {
    if (sink_) sink_->update(done, detail);
  }
  /// Ends the task (once). Not called by the destructor: a task left by an exception is not complete.
  void finish() {
    if (sink_) sink_->end();
    sink_ = nullptr;
  }

 private:
  ProgressSink* sink_;
};

struct ProgressOptions {
  std::FILE* out = stderr;
  bool enabled = true;            // false: begin/update/end print nothing (messages still do)
  bool tty = false;               // redraw one line in place (a terminal) or print plain lines
  int width = 80;                 // tty: terminal columns; the line is cut to width - 1
  double redraw_interval = 0.1;   // tty: seconds between redraws, at least
  int line_percent = 10;          // not a tty: a line each time another line_percent % is done
  double line_interval = 15;      // not a tty: a line after this many seconds without one
  std::function<double()> clock;  // seconds, monotonic (tests inject one); default steady_clock
};

/// Draws progress on a stream (see the header comment). Thread-safe.
class ProgressReporter : public ProgressSink {
 public:
  explicit ProgressReporter(ProgressOptions opt);
  /// A reporter on stderr: tty mode and width from the terminal when stderr is one (and TERM is
  /// not "dumb"), disabled when `quiet`.
  static ProgressOptions stderr_options(bool quiet);
  /// A task still open (an error unwinds past it) leaves its last bar on its own line.
  ~ProgressReporter() override;

  /// Prints one line (a warning, a note) without breaking the bar: on a tty the bar is cleared,
  /// the line printed and the bar drawn again below it. Printed even when disabled.
  void message(std::string_view line);

  /// The status text of the current state without the bar, as a plain line shows it (for tests).
  std::string status_line(bool final) const;

 protected:
  void do_begin(std::string_view name, int64_t total, ProgressUnit unit) override;
  void do_update(int64_t done, std::string_view detail) override;
  void do_end() override;

 private:
  double now() const;
  std::string status_locked(bool final, double t) const;
  std::string bar_line_locked(double t) const;
  void draw_locked(double t);
  void print_line_locked(double t, bool final);
  void close_locked();

  ProgressOptions opt_;
  mutable std::mutex mu_;
  bool active_ = false, drawn_ = false;
  std::string name_, detail_;
  int64_t total_ = 0, done_ = 0;
  ProgressUnit unit_ = ProgressUnit::Items;
  double t0_ = 0, last_draw_ = 0, last_line_ = 0;
  int64_t last_line_done_ = 0;
  int64_t last_bucket_ = 0;  // not a tty: done * 100 / total / line_percent at the last line
};

/// "0:07", "12:05", "1:02:03" (seconds rounded down; negative → 0).
std::string format_duration(double seconds);
/// Amount of a unit: bytes as "512 B" / "1.20 kB" / "3.40 MB" / "2.66 GB" (powers of 1000),
/// counts as plain integers.
std::string format_amount(double v, ProgressUnit unit);

}  // namespace eg
