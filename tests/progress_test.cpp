// The progress reporter (core/progress.h): plain lines when not a terminal (format, one per 10% or
// per 15 s, never thousands), the redrawn bar on a terminal (throttled, cut to the width, ended
// with a newline), ETA arithmetic under an injected clock, messages, --quiet, thread safety.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/progress.h"

namespace {

// A memory stream the reporter writes to, and a clock the test moves.
struct Harness {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = nullptr;
  double t = 0;
  Harness() { f = open_memstream(&buf, &len); }
  ~Harness() {
    if (f) std::fclose(f);
    std::free(buf);
  }
  eg::ProgressOptions options(bool tty) {
    eg::ProgressOptions o;
    o.out = f;
    o.tty = tty;
    o.width = 100;
    o.clock = [this] { return t; };
    return o;
  }
  std::string text() {
    std::fflush(f);
    return std::string(buf, len);
  }
};

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> v;
  size_t a = 0;
  for (size_t b; (b = s.find('\n', a)) != std::string::npos; a = b + 1) v.push_back(s.substr(a, b - a));
  if (a < s.size()) v.push_back(s.substr(a));
  return v;
}

size_t count(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + needle.size())) ++n;
  return n;
}

TEST(Progress, FormatDurationAndAmount) {
  EXPECT_EQ(eg::format_duration(0), "0:00");
  EXPECT_EQ(eg::format_duration(59.99), "0:59");
  EXPECT_EQ(eg::format_duration(61), "1:01");
  EXPECT_EQ(eg::format_duration(3723), "1:02:03");
  EXPECT_EQ(eg::format_duration(-4), "0:00");
  EXPECT_EQ(eg::format_duration(0.0 / 0.0), "0:00");
  EXPECT_EQ(eg::format_amount(512, eg::ProgressUnit::Bytes), "512 B");
  EXPECT_EQ(eg::format_amount(1200, eg::ProgressUnit::Bytes), "1.20 kB");
  EXPECT_EQ(eg::format_amount(3.4e6, eg::ProgressUnit::Bytes), "3.40 MB");
  EXPECT_EQ(eg::format_amount(2.66e9, eg::ProgressUnit::Bytes), "2.66 GB");
  EXPECT_EQ(eg::format_amount(1234, eg::ProgressUnit::Tokens), "1234");
}

// 100 updates of 10 tokens, 1/8 s apart (12.5 s < the 15 s interval): one line at each 10% and the
// final one; the numbers by hand: at 10% elapsed 1.25 s, 80 tokens/s, ETA 900 / 80 = 11.25 s.
TEST(Progress, PlainLinesOnePerTenPercent) {
  Harness h;
  {
    eg::ProgressReporter r(h.options(false));
    r.begin("task", 1000, eg::ProgressUnit::Tokens);
    for (int k = 1; k <= 100; ++k) {
      h.t = k * 0.125;
      r.update(10 * k);
    }
    r.end();
  }
  const std::vector<std::string> v = lines(h.text());
  ASSERT_EQ(v.size(), 10u) << h.text();
  EXPECT_EQ(v[0], "task: 10% 100/1000 tokens, 80.0 tokens/s, elapsed 0:01, ETA 0:11");
  EXPECT_EQ(v[4], "task: 50% 500/1000 tokens, 80.0 tokens/s, elapsed 0:06, ETA 0:06");
  EXPECT_EQ(v[8], "task: 90% 900/1000 tokens, 80.0 tokens/s, elapsed 0:11, ETA 0:01");
  EXPECT_EQ(v[9], "task: 100% 1000/1000 tokens, 80.0 tokens/s, elapsed 0:12");
  EXPECT_EQ(h.text().find('\r'), std::string::npos);
  EXPECT_EQ(h.text().find('\x1b'), std::string::npos);
}

// A million tiny updates: still one line per 10% (never thousands of lines).
TEST(Progress, PlainLinesNeverThousands) {
  Harness h;
  eg::ProgressReporter r(h.options(false));
  r.begin("many", 1000000, eg::ProgressUnit::Items);
  for (int k = 1; k <= 1000000; ++k) {
    h.t = k * 1e-5;  // 10 s in all
    r.update(k);
  }
  r.end();
  const std::vector<std::string> v = lines(h.text());
  EXPECT_EQ(v.size(), 10u);
  EXPECT_EQ(v.back().rfind("many: 100% 1000000/1000000 items", 0), 0u) << v.back();
}

// Slow progress (0.1% per 8 s): a line once 15 s have passed since the last one, none without
// progress in between.
TEST(Progress, PlainLinesAfterFifteenSecondsOfSlowProgress) {
  Harness h;
  eg::ProgressReporter r(h.options(false));
  r.begin("slow", 1000, eg::ProgressUnit::Layers);
  for (int k = 1; k <= 50; ++k) {
    h.t = 8.0 * k;
    r.update(k, "layer " + std::to_string(k));
  }
  std::vector<std::string> v = lines(h.text());
  ASSERT_EQ(v.size(), 25u) << h.text();  // at t = 16, 32, ..., 400
  // At t = 16: 2 layers in 16 s, 0.125/s (printed to 2 decimals, the tie to even); 998 left: 7984 s.
  EXPECT_EQ(v[0], "slow: 0% 2/1000 layers, 0.12 layers/s, elapsed 0:16, ETA 2:13:04, layer 2");
  h.t = 1000;
  r.update(50);  // no new progress: no line
  EXPECT_EQ(lines(h.text()).size(), 25u);
  r.update(49);  // smaller than reported: ignored
  h.t = 1100;
  r.update(51);
  v = lines(h.text());
  ASSERT_EQ(v.size(), 26u);
  EXPECT_EQ(v.back().rfind("slow: 5% 51/1000 layers", 0), 0u) << v.back();
}

TEST(Progress, EtaArithmeticAndUnknownTotal) {
  Harness h;
  eg::ProgressReporter r(h.options(false));
  h.t = 100;
  r.begin("w", 3000000000, eg::ProgressUnit::Bytes);
  h.t = 105;
  EXPECT_EQ(r.status_line(false), "w: 0% 0.00/3.00 GB, 0.00 B/s, elapsed 0:05, ETA ?");
  r.update(1000000000);
  h.t = 120;  // 1 GB in 20 s: 50 MB/s, 2 GB left: 40 s
  EXPECT_EQ(r.status_line(false), "w: 33% 1.00/3.00 GB, 50.0 MB/s, elapsed 0:20, ETA 0:40");
  h.t = 101;
  r.begin("n", 7200, eg::ProgressUnit::Tensors);  // closes "w"
  h.t = 102;
  r.update(1, "first");
  EXPECT_EQ(r.status_line(false), "n: 0% 1/7200 tensors, 1.00 tensors/s, elapsed 0:01, ETA 1:59:59, first");
  r.begin("u", 0, eg::ProgressUnit::Tokens);  // total unknown: no percentage, no ETA
  h.t = 112;
  r.update(250);
  EXPECT_EQ(r.status_line(false), "u: 250 tokens, 25.0 tokens/s, elapsed 0:10");
  r.end();
  EXPECT_EQ(lines(h.text()).back(), "u: 250 tokens, 25.0 tokens/s, elapsed 0:10");
}

// Terminal: one line redrawn in place ("\r" ... ESC[K), at most every 0.1 s, the bar growing, cut
// to the width, ended with a newline; a message goes above the bar.
TEST(Progress, TerminalBarRedrawsThrottled) {
  Harness h;
  eg::ProgressReporter r(h.options(true));
  r.begin("quantize", 1280, eg::ProgressUnit::Tensors);
  for (int k = 1; k <= 1280; ++k) {  // 10 s in steps of 1/128 s
    h.t = k / 128.0;
    r.update(k, "tensor " + std::to_string(k));
  }
  const std::string before_end = h.text();
  EXPECT_EQ(before_end.find('\n'), std::string::npos);  // one line
  // A redraw needs 13 steps (0.1016 s): 1280 / 13 = 98 redraws, plus the first at begin.
  EXPECT_EQ(count(before_end, "\r"), 99u);
  r.end();
  const std::string all = h.text();
  ASSERT_GE(all.size(), 4u);
  EXPECT_EQ(all.substr(all.size() - 4), "\x1b[K\n");
  // Every drawn state: "\r" + at most width - 1 characters + ESC[K.
  size_t p = 0;
  int last_fill = -1;
  std::string last;
  while ((p = all.find('\r', p)) != std::string::npos) {
    const size_t e = all.find("\x1b[K", p);
    ASSERT_NE(e, std::string::npos);
    last = all.substr(p + 1, e - p - 1);
    EXPECT_LE(last.size(), 99u) << last;
    const size_t open = last.find('['), close = last.find(']');
    ASSERT_TRUE(open != std::string::npos && close != std::string::npos) << last;
    EXPECT_EQ(close - open - 1, 30u) << last;  // the bar keeps its width
    const int fill = static_cast<int>(count(last.substr(open, close - open), "="));
    EXPECT_GE(fill, last_fill);
    last_fill = fill;
    p = e;
  }
  const std::string full = "quantize [" + std::string(30, '=') + "] 100% 1280/1280 tensors  128 tensors/s  done in 0:10  tensor 1280";
  EXPECT_EQ(last, full.substr(0, 99));  // 104 characters, cut to the width - 1
}

TEST(Progress, TerminalFirstDrawAndEta) {
  Harness h;
  eg::ProgressReporter r(h.options(true));
  r.begin("synth", 4000000000, eg::ProgressUnit::Bytes);
  EXPECT_EQ(h.text(), "\rsynth [>" + std::string(29, ' ') + "]   0% 0.00/4.00 GB  ETA ?\x1b[K");
  h.t = 10;
  r.update(1000000000);  // 100 MB/s, 3 GB left: 30 s
  EXPECT_NE(h.text().find("\rsynth [=======>" + std::string(22, ' ') + "]  25% 1.00/4.00 GB  100 MB/s  ETA 0:30\x1b[K"),
            std::string::npos)
      << h.text();
}

TEST(Progress, TerminalNarrowAndMessages) {
  Harness h;
  eg::ProgressOptions o = h.options(true);
  o.width = 40;
  eg::ProgressReporter r(o);
  r.begin("perplexity", 1000, eg::ProgressUnit::Tokens);
  h.t = 1;
  r.update(500, "span 5/10, ppl 12.3456, a long detail that does not fit");
  r.message("warning: something");
  const std::string s = h.text();
  // No room for a bar; every drawn line cut to 39 columns.
  EXPECT_EQ(s.find("perplexity ["), std::string::npos) << s;
  EXPECT_NE(s.find("\r\x1b[Kwarning: something\n\r"), std::string::npos) << s;  // cleared, printed, redrawn
  size_t p = 0;
  while ((p = s.find('\r', p)) != std::string::npos) {
    const size_t e = s.find("\x1b[K", p);
    ASSERT_NE(e, std::string::npos);
    EXPECT_LE(e - p - 1, 39u);
    p = e;
  }
}

TEST(Progress, ErrorLeavesTheBarOnItsOwnLine) {
  Harness tty, plain;
  {
    eg::ProgressReporter r(tty.options(true));
    r.begin("quantize", 10, eg::ProgressUnit::Tensors);
    r.update(3);
  }  // e.g. an exception unwinds: the error line must start on a new line
  EXPECT_EQ(tty.text().back(), '\n');
  EXPECT_EQ(tty.text().find("done in"), std::string::npos);
  {
    eg::ProgressReporter r(plain.options(false));
    r.begin("quantize", 10, eg::ProgressUnit::Tensors);
    r.update(3);
  }
  EXPECT_EQ(plain.text(), "quantize: 30% 3/10 tensors, elapsed 0:00, ETA ?\n");  // no 100% claimed
}

TEST(Progress, QuietPrintsOnlyMessages) {
  for (bool tty : {false, true}) {
    Harness h;
    eg::ProgressOptions o = h.options(tty);
    o.enabled = false;
    {
      eg::ProgressReporter r(o);
      r.begin("quantize", 10, eg::ProgressUnit::Tensors);
      for (int i = 1; i <= 10; ++i) r.update(i);
      r.message("fallback: x");
      r.end();
    }
    EXPECT_EQ(h.text(), "fallback: x\n") << tty;
  }
  // A null sink: the library's ProgressTask does nothing.
  eg::ProgressTask t(nullptr, "x", 5, eg::ProgressUnit::Items);
  t.update(3);
  t.finish();
}

TEST(Progress, UpdatesFromManyThreads) {
  Harness h;
  eg::ProgressReporter r(h.options(false));
  constexpr int kN = 200000;
  r.begin("par", kN, eg::ProgressUnit::Items);
  {
    // Four threads report interleaved counts (as a parallel loop's workers would).
    std::vector<std::thread> ts;
    for (int w = 0; w < 4; ++w)
      ts.emplace_back([&r, w] {
        for (int i = w; i < kN; i += 4) r.update(i + 1);
      });
    for (auto& t : ts) t.join();
  }
  r.end();
  const std::vector<std::string> v = lines(h.text());
  ASSERT_GE(v.size(), 1u);
  EXPECT_LE(v.size(), 10u);
  for (const std::string& l : v) EXPECT_EQ(l.rfind("par: ", 0), 0u) << l;
  EXPECT_EQ(v.back().rfind("par: 100% 200000/200000 items", 0), 0u);
}

}  // namespace
