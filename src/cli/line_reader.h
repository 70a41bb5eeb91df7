// Line input for `edgegemma chat`: libedit on a terminal (line editing, history, Ctrl-C clears
// the line, per-keystroke callback for prefill-while-typing), plain reads otherwise (pipes,
// tests). Both join lines that end in '\' into one multi-line message.
//
// SIGINT: install_sigint_handler() makes Ctrl-C set sigint_flag() instead of killing the
// process (sigaction without SA_RESTART, so a blocked read() returns EINTR). At the prompt the
// reader consumes the flag: a terminal clears the line being edited; a pipe ignores it. During an
// answer the chat loop hands the flag to Session::generate as its cancel flag.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <string>

namespace eg::cli {

/// Set by the SIGINT handler; cleared by whoever acts on it.
std::atomic<bool>& sigint_flag();
/// Installs the SIGINT handler described above (idempotent).
void install_sigint_handler();

class LineReader {
 public:
  /// Called with the whole message typed so far (earlier '\'-continued lines + the current line)
  /// whenever it changed, before each keystroke is read. Terminal mode only.
  using TypingCallback = std::function<void(const std::string& text)>;

  /// Terminal mode when stdin and stdout are terminals (unless `force_plain`), else plain mode.
  static std::unique_ptr<LineReader> create(bool force_plain = false);
  virtual ~LineReader() = default;

  /// Reads one message: a line, or several when a line ends in '\' (the backslash is removed and
  /// a '\n' joins them). `prompt` is shown in terminal mode ("... " for continuation lines).
  /// Returns false at end of input (Ctrl-D on an empty line / EOF). Throws eg::Error on a read
  /// error.
  virtual bool read(const std::string& prompt, std::string& out) = 0;
  /// Adds an entry to the editing history (terminal mode; no-op otherwise).
  virtual void add_history(const std::string& line) {}
  virtual bool interactive() const = 0;

  void set_typing_callback(TypingCallback cb) { on_typing_ = std::move(cb); }

 protected:
  TypingCallback on_typing_;
};

}  // namespace eg::cli
