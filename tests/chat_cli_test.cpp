// `edgegemma chat` driven through a pipe (stdin not a terminal), and the `run` flags of the chat
// task (--stop, --preset precedence, --max-memory, --kv-type). Expected answers come from an
// independent path: `run --chat` renders the same one-turn conversation with the chat template
// and decodes it with generate(), not with Session.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using egtest::cli_path;
using egtest::run_cmd;

std::string model() { return egtest::source_dir() + "/models/tiny-gemma3"; }

std::vector<std::string> chat_args(std::vector<std::string> extra) {
  std::vector<std::string> a = {cli_path(), "chat", "-m", model(), "-t", "2"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// `run --chat`'s answer to one user message (greedy), without run's final newline.
std::string run_chat_answer(const std::string& user, int n) {
  auto r = run_cmd({cli_path(), "run", "-m", model(), "-t", "2", "--chat", "-p", user, "-n", std::to_string(n)});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  return r.out.substr(0, r.out.size() - 1);
}

int count_of(const std::string& hay, const std::string& needle) {
  int n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

TEST(ChatCli, TwoTurnsStatsHelpResetAndUnknownCommand) {
  const std::string a1 = run_chat_answer("Hello, who are you?", 40);
  const auto r = run_cmd(chat_args({"-n", "40"}),
                         "Hello, who are you?\n/stats\nTell me a story.\n/stats\n/help\n/foo\n/reset\n"
                         "Hello, who are you?\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Turn 1 equals the independent one-turn answer; after /reset the same question gives it again.
  ASSERT_EQ(r.out.rfind(a1 + "\nprompt tokens: ", 0), 0u) << r.out;
  const std::string reset_line = "(conversation cleared) [0/";
  const size_t rs = r.out.find(reset_line);
  ASSERT_NE(rs, std::string::npos);
  const size_t after_reset = r.out.find('\n', rs) + 1;
  EXPECT_EQ(r.out.substr(after_reset), a1 + "\n");
  // /stats after turn 2: the whole turn-1 context came from the KV cache.
  std::smatch m;
  const std::regex stats_re("prompt tokens: (\\d+) \\(reused from the KV cache: (\\d+), prefilled: (\\d+)\\)");
  std::vector<std::array<int, 3>> st;
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), stats_re); it != std::sregex_iterator(); ++it)
    st.push_back({std::stoi((*it)[1]), std::stoi((*it)[2]), std::stoi((*it)[3])});
  ASSERT_EQ(st.size(), 2u) << r.out;
  EXPECT_EQ(st[0][1], 0);
  EXPECT_EQ(st[0][2], st[0][0]);
  EXPECT_GT(st[1][0], st[0][0]);
  EXPECT_GE(st[1][1], st[0][0]);  // turn 1's prompt (and answer) reused
  EXPECT_EQ(st[1][1] + st[1][2], st[1][0]);
  // /help, unknown command, context indicator after each answer.
  EXPECT_NE(r.out.find("/save FILE"), std::string::npos);
  EXPECT_NE(r.err.find("error: unknown command '/foo' (see /help)"), std::string::npos) << r.err;
  EXPECT_EQ(count_of(r.err, "/4096 tokens]"), 3) << r.err;
}

TEST(ChatCli, SaveAndLoadContinueIdentically) {
  const std::string dir = egtest::make_temp_dir();
  const std::string f = dir + "/s.egs";
  const std::vector<std::string> flags = {"-n", "30", "--temp", "0.9", "--seed", "11"};
  const auto a = run_cmd(chat_args(flags), "Hello there.\n/save " + f + "\nTell me more.\n");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const size_t sa = a.out.find("(saved 2 messages");
  ASSERT_NE(sa, std::string::npos) << a.out;
  const std::string cont_a = a.out.substr(a.out.find('\n', sa) + 1);
  // A fresh process with another seed: /load restores conversation, KV and RNG.
  std::vector<std::string> flags_b = {"-n", "30", "--temp", "0.9", "--seed", "12"};
  const auto b = run_cmd(chat_args(flags_b), "/load " + f + "\nTell me more.\n");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const size_t sb = b.out.find("(loaded 2 messages");
  ASSERT_NE(sb, std::string::npos) << b.out;
  const std::string cont_b = b.out.substr(b.out.find('\n', sb) + 1);
  EXPECT_GT(cont_a.size(), 1u);
  EXPECT_EQ(cont_b, cont_a);
  // Without /load the same question (fresh conversation, other seed) answers differently.
  const auto c = run_cmd(chat_args(flags_b), "Tell me more.\n");
  EXPECT_NE(c.out, cont_a);
  // Errors keep the REPL alive.
  const auto d = run_cmd(chat_args({"-n", "5"}),
                         "/load " + dir + "/missing.egs\n/preset wild\n/preset code\n/save\nHi\n");
  EXPECT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.err.find("missing.egs"), std::string::npos) << d.err;
  EXPECT_NE(d.err.find("unknown preset 'wild'"), std::string::npos) << d.err;
  EXPECT_NE(d.err.find("/save needs a file name"), std::string::npos) << d.err;
  EXPECT_NE(d.out.find("(preset code: temperature 0.2, top-p 0.6)"), std::string::npos) << d.out;
  EXPECT_EQ(count_of(d.err, "/4096 tokens]"), 1) << d.err;
}

TEST(ChatCli, SystemCommandAndMultiLineMessage) {
  // "a\" + "b" is one message "a\nb": the same answer as run --chat -p "a\nb".
  const std::string want = run_chat_answer("Line one\nline two", 20);
  const auto r = run_cmd(chat_args({"-n", "20"}), "/system\nLine one\\\nline two\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "(no system message)\n" + want + "\n");
  const auto s = run_cmd(chat_args({"-n", "5", "--system", "Be brief."}), "/system\n/system -\n/system\n");
  EXPECT_EQ(s.out, "system: Be brief.\n(system message removed)\n(no system message)\n");
}

// Ctrl-C during an answer: the answer stops, the process keeps running and answers the next turn.
TEST(ChatCli, SigintStopsTheAnswerAndKeepsTheSession) {
  int in_p[2], out_p[2];
  ASSERT_EQ(pipe(in_p), 0);
  ASSERT_EQ(pipe(out_p), 0);
  const std::string err_file = egtest::make_temp_dir() + "/err.txt";
  const auto args = chat_args({"-n", "200", "--ignore-eos", "-c", "4096"});
  signal(SIGPIPE, SIG_IGN);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(in_p[0], 0);
    dup2(out_p[1], 1);
    const int fd = open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(in_p[1]);
    close(out_p[0]);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(in_p[0]);
  close(out_p[1]);
  const std::string first = "Tell me a story.\n";
  ASSERT_EQ(write(in_p[1], first.data(), first.size()), static_cast<ssize_t>(first.size()));
  std::string out;
  char buf[4096];
  const auto t0 = std::chrono::steady_clock::now();
  auto read_some = [&](int timeout_ms) {
    pollfd p{out_p[0], POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    const ssize_t k = read(out_p[0], buf, sizeof buf);
    if (k <= 0) return false;
    out.append(buf, static_cast<size_t>(k));
    return true;
  };
  // Wait for 20 bytes of the answer, then interrupt.
  while (out.size() < 20 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) read_some(1000);
  ASSERT_GE(out.size(), 20u) << "no answer streamed";
  ASSERT_EQ(kill(pid, SIGINT), 0);
  const std::string rest = "/stats\nHello again.\n/stats\n";
  ASSERT_EQ(write(in_p[1], rest.data(), rest.size()), static_cast<ssize_t>(rest.size()));
  close(in_p[1]);
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(300)) {
    pollfd p{out_p[0], POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) continue;
    const ssize_t k = read(out_p[0], buf, sizeof buf);
    if (k <= 0) break;
    out.append(buf, static_cast<size_t>(k));
  }
  close(out_p[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const std::string err = egtest::read_file(err_file);
  EXPECT_NE(err.find("(stopped)"), std::string::npos) << err;
  // First answer stopped early (fewer than 200 tokens); the second answer ran to -n (ignore-eos).
  std::smatch m;
  const std::regex gen_re("generated tokens: (\\d+)");
  std::vector<int> gen;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), gen_re); it != std::sregex_iterator(); ++it)
    gen.push_back(std::stoi((*it)[1]));
  ASSERT_EQ(gen.size(), 2u) << out;
  EXPECT_LT(gen[0], 200);
  EXPECT_EQ(gen[1], 200);
  EXPECT_EQ(count_of(err, "/4096 tokens]"), 2) << err;
}

// On a terminal (a pseudo-terminal here): libedit reads the line, Ctrl-C at the prompt clears the
// line being typed, the message is prefilled while it is typed (the first turn already finds
// tokens in the KV cache, which a pipe never does), Ctrl-C stops the answer, Ctrl-D exits.
TEST(ChatCli, TerminalCtrlCClearsTheLineStopsTheAnswerAndCtrlDExits) {
  const auto args = chat_args({"-n", "2000", "--ignore-eos"});
  int fd = -1;
  const pid_t pid = forkpty(&fd, nullptr, nullptr, nullptr);
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  std::string out;
  auto drain_until = [&](const std::string& what, int seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    char buf[4096];
    while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(seconds)) {
      if (!what.empty() && out.find(what) != std::string::npos) return true;
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const ssize_t k = read(fd, buf, sizeof buf);
      if (k <= 0) break;
      out.append(buf, static_cast<size_t>(k));
    }
    return what.empty() || out.find(what) != std::string::npos;
  };
  auto type = [&](const std::string& s) {
    for (char c : s) {
      ASSERT_EQ(write(fd, &c, 1), 1);
      drain_until("", 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  ASSERT_TRUE(drain_until("/4096 tokens] > ", 60)) << out;
  type("Hello there");
  type("\x03");  // Ctrl-C at the prompt: the line is cleared, nothing is sent
  type("Who are you?");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  type("\r");
  ASSERT_TRUE(drain_until("\n", 30));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  type("\x03");  // Ctrl-C during the answer (the terminal sends SIGINT)
  ASSERT_TRUE(drain_until("(stopped)", 60)) << out;
  type("/stats\r");
  ASSERT_TRUE(drain_until("dropped messages", 30)) << out;
  type("\x04");  // Ctrl-D: exit
  drain_until("", 5);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  close(fd);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("prompt tokens: (\\d+) \\(reused from the KV cache: (\\d+)"))) << out;
  EXPECT_GT(std::stoi(m[2]), 0) << "no prefill while typing";
  EXPECT_EQ(out.find("Hello thereWho"), std::string::npos) << "the line was not cleared";
  // The message sent was "Who are you?" alone: as many prompt tokens as through a pipe.
  const auto piped = run_cmd(chat_args({"-n", "1"}), "Who are you?\n/stats\n");
  std::smatch pm;
  ASSERT_TRUE(std::regex_search(piped.out, pm, std::regex("prompt tokens: (\\d+) \\(reused from the KV cache: 0,")))
      << piped.out;
  EXPECT_EQ(m[1], pm[1]);
  std::smatch g;
  ASSERT_TRUE(std::regex_search(out, g, std::regex("generated tokens: (\\d+)")));
  EXPECT_LT(std::stoi(g[1]), 2000);
}

TEST(RunFlags, StopStringIsNeverShown) {
  const auto base = run_cmd({cli_path(), "run", "-m", model(), "-t", "2", "-p", "In the beginning God created", "-n", "40"});
  ASSERT_EQ(base.exit_code, 0) << base.err;
  const std::string text = base.out.substr(0, base.out.size() - 1);
  ASSERT_GT(text.size(), 30u);
  // Stop strings taken from the middle of the text (several tokens long) and one never produced.
  for (const std::string stop : {text.substr(10, 7), text.substr(20, 3), std::string("\xE2\x82\xAC\xE2\x82\xAC"), text.substr(0, 1)}) {
    const auto r = run_cmd({cli_path(), "run", "-m", model(), "-t", "2", "-p", "In the beginning God created", "-n",
                            "40", "--stop", stop, "--stop", "zzzzzz", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    const size_t cut = text.find(stop);
    const std::string want = cut == std::string::npos ? text : text.substr(0, cut);
    EXPECT_EQ(j["text"].get<std::string>(), want) << stop;
    EXPECT_EQ(j["finish_reason"], cut == std::string::npos ? "stop" : "stop") << stop;  // eos or stop string
    const auto s = run_cmd({cli_path(), "run", "-m", model(), "-t", "2", "-p", "In the beginning God created", "-n",
                            "40", "--stop", stop});
    EXPECT_EQ(s.out, want + "\n") << stop;  // the streamed text, too
  }
}

TEST(RunFlags, PresetPrecedenceAndMemoryFlags) {
  const std::vector<std::string> base = {cli_path(), "run", "-m", model(), "-t", "2", "-p", "Once upon a time", "-n", "20"};
  auto with = [&](std::vector<std::string> extra) {
    auto a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return run_cmd(a);
  };
  const auto greedy = with({});
  ASSERT_EQ(greedy.exit_code, 0) << greedy.err;
  // An explicit --temp 0 beats the preset's temperature: greedy again, whatever the seed.
  EXPECT_EQ(with({"--preset", "creative", "--temp", "0", "--seed", "3"}).out, greedy.out);
  // The preset alone samples (seeded: reproducible).
  const auto c1 = with({"--preset", "creative", "--seed", "3"});
  EXPECT_EQ(c1.out, with({"--preset", "creative", "--seed", "3"}).out);
  EXPECT_EQ(c1.out, with({"--temp", "0.9", "--top-p", "0.95", "--seed", "3"}).out);
  EXPECT_NE(with({"--preset", "creative", "--seed", "3", "--repeat-penalty", "3"}).out, c1.out);
  auto bad = with({"--preset", "wild"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("unknown preset 'wild'"), std::string::npos) << bad.err;
  bad = with({"--repeat-penalty", "0"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("repeat penalty"), std::string::npos) << bad.err;
  bad = with({"--max-memory", "12X"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("not a byte count: '12X'"), std::string::npos) << bad.err;
  bad = with({"--max-memory", "1K"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("memory budget"), std::string::npos) << bad.err;
  EXPECT_EQ(with({"--max-memory", "2G", "--warmup"}).out, greedy.out);
  bad = with({"--kv-type", "f8"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_EQ(with({"--kv-type", "f32"}).exit_code, 0);
}

}  // namespace
