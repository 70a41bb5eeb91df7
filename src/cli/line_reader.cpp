#include "cli/line_reader.h"

#include <errno.h>
#include <histedit.h>
#include <signal.h>
#include <unistd.h>

#include <clocale>
#include <cstring>
#include <cwchar>

#include "core/error.h"

namespace eg::cli {

namespace {

std::atomic<bool> g_sigint{false};

extern "C" void on_sigint(int) { g_sigint.store(true); }

// Joins '\'-continued lines: returns true when `line` asks for another line.
bool continues(std::string& line) {
  if (!line.empty() && line.back() == '\\') {
    line.pop_back();
    return true;
  }
  return false;
}

// ---- plain mode: read(2) from stdin, retrying on EINTR (Ctrl-C at the prompt is ignored) ----

class PlainReader : public LineReader {
 public:
  bool interactive() const override { return false; }
  bool read(const std::string&, std::string& out) override {
    out.clear();
    std::string line;
    for (;;) {
      if (!read_line(line)) return !out.empty();
      const bool more = continues(line);
      out += line;
      if (!more) return true;
      out += '\n';
    }
  }

 private:
  // One line without its '\n' (a trailing '\r' is dropped); false at EOF with nothing read.
  bool read_line(std::string& line) {
    line.clear();
    for (;;) {
      if (pos_ == len_) {
        const ssize_t n = ::read(STDIN_FILENO, buf_, sizeof buf_);
        if (n < 0 && errno == EINTR) {
          g_sigint.store(false);
          continue;
        }
        if (n < 0) throw Error(std::string("cannot read stdin: ") + std::strerror(errno));
        if (n == 0) return !line.empty();
        pos_ = 0;
        len_ = static_cast<size_t>(n);
      }
      const char c = buf_[pos_++];
      if (c == '\n') {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return true;
      }
      line += c;
    }
  }
  char buf_[4096];
  size_t pos_ = 0, len_ = 0;
};

// ---- terminal mode: libedit ----

class EditReader : public LineReader {
 public:
  EditReader() {
    std::setlocale(LC_CTYPE, "");  // libedit decodes UTF-8 input with the locale
    el_ = el_init("edgegemma", stdin, stdout, stderr);
    if (el_ == nullptr) throw Error("cannot initialise libedit on this terminal");
    hist_ = history_init();
    HistEvent ev;
    history(hist_, &ev, H_SETSIZE, 1000);
    history(hist_, &ev, H_SETUNIQUE, 1);
    el_set(el_, EL_EDITOR, "emacs");
    el_set(el_, EL_HIST, history, hist_);
    el_set(el_, EL_CLIENTDATA, this);
    el_set(el_, EL_PROMPT, &EditReader::prompt_fn);
    el_set(el_, EL_GETCFN, &EditReader::getc_fn);
    el_source(el_, nullptr);  // ~/.editrc, as other libedit programs
  }
  ~EditReader() override {
    el_end(el_);
    history_end(hist_);
  }
  bool interactive() const override { return true; }

  bool read(const std::string& prompt, std::string& out) override {
    out.clear();
    prefix_.clear();
    prompt_ = prompt;
    last_typed_.clear();
    for (;;) {
      int count = 0;
      const char* s = el_gets(el_, &count);
      if (s == nullptr || count <= 0) {  // Ctrl-D on an empty line, or EOF
        if (!out.empty()) return true;
        std::fputc('\n', stdout);
        return false;
      }
      std::string line(s, static_cast<size_t>(count));
      if (!line.empty() && line.back() == '\n') line.pop_back();
      const bool more = continues(line);
      out += line;
      if (!more) return true;
      out += '\n';
      prefix_ = out;
      prompt_ = "... ";
    }
  }

  void add_history(const std::string& line) override {
    if (line.empty()) return;
    HistEvent ev;
    history(hist_, &ev, H_ENTER, line.c_str());
  }

 private:
  static EditReader* self(EditLine* e) {
    void* p = nullptr;
    el_get(e, EL_CLIENTDATA, &p);
    return static_cast<EditReader*>(p);
  }
  static const char* prompt_fn(EditLine* e) { return self(e)->prompt_.c_str(); }

  // Reads one character. Before blocking, reports the text typed so far (prefill-while-typing).
  // Ctrl-C (SIGINT, or a raw 0x03 byte) becomes Ctrl-U: emacs mode's "kill line".
  static int getc_fn(EditLine* e, wchar_t* wc) {
    EditReader* r = self(e);
    if (r->on_typing_) {
      const LineInfo* li = el_line(e);
      std::string typed = r->prefix_ + std::string(li->buffer, li->lastchar);
      if (typed != r->last_typed_) {
        r->last_typed_ = typed;
        r->on_typing_(typed);
      }
    }
    std::mbstate_t st{};
    for (;;) {
      char c;
      const ssize_t n = ::read(STDIN_FILENO, &c, 1);
      if (n < 0 && errno == EINTR) {
        if (g_sigint.exchange(false)) {
          *wc = 0x15;  // ^U
          return 1;
        }
        continue;
      }
      if (n < 0) return -1;
      if (n == 0) return 0;
      if (c == 0x03) {
        *wc = 0x15;
        return 1;
      }
      const size_t k = std::mbrtowc(wc, &c, 1, &st);
      if (k == static_cast<size_t>(-2)) continue;  // incomplete multi-byte character
      if (k == static_cast<size_t>(-1)) {          // invalid byte: pass it through
        st = {};
        *wc = static_cast<unsigned char>(c);
      }
      return 1;
    }
  }

  EditLine* el_ = nullptr;
  History* hist_ = nullptr;
  std::string prompt_;
  std::string prefix_;      // earlier lines of a '\'-continued message
  std::string last_typed_;  // last text reported to on_typing_
};

}  // namespace

std::atomic<bool>& sigint_flag() { return g_sigint; }

void install_sigint_handler() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocked read returns EINTR
  sigaction(SIGINT, &sa, nullptr);
}

std::unique_ptr<LineReader> LineReader::create(bool force_plain) {
  if (!force_plain && isatty(STDIN_FILENO) && isatty(STDOUT_FILENO)) return std::make_unique<EditReader>();
  return std::make_unique<PlainReader>();
}

}  // namespace eg::cli
