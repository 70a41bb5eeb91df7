#include "test_util.h"

#include <fcntl.h>
#include <poll.h>
#include <csignal>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace egtest {

std::string shared_dir() {
  if (const char* e = std::getenv("EDGEGEMMA_SHARED_DIR")) return e;
  return EG_SHARED_DIR;
}
std::string source_dir() { return EG_SOURCE_DIR; }
std::string cli_path() { return EG_CLI_PATH; }

namespace {
std::vector<std::string>& temp_dirs() {
  static std::vector<std::string> dirs;
  return dirs;
}
void remove_temp_dirs() {
  for (const auto& d : temp_dirs()) {
    std::error_code ec;
    fs::remove_all(d, ec);
  }
}
}  // namespace

std::string make_temp_dir() {
  static std::once_flag once;
  std::call_once(once, [] {
    temp_dirs();  // construct the list before registering: atexit handlers run before its destructor
    std::atexit(remove_temp_dirs);
  });
  std::string tmpl = (fs::temp_directory_path() / "edgegemma-test-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  temp_dirs().push_back(tmpl);
  return tmpl;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  f << data;
  if (!f) throw std::runtime_error("cannot write " + path);
}

CmdResult run_cmd(const std::vector<std::string>& args, const std::string& stdin_text) {
  std::signal(SIGPIPE, SIG_IGN);  // the child may exit before reading all of stdin
  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (pipe(in_pipe) || pipe(out_pipe) || pipe(err_pipe)) throw std::runtime_error("pipe failed");
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    close(in_pipe[0]); close(in_pipe[1]);
    close(out_pipe[0]); close(out_pipe[1]);
    close(err_pipe[0]); close(err_pipe[1]);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  // Write stdin, read stdout/stderr concurrently via poll to avoid pipe deadlocks.
  size_t written = 0;
  int in_fd = in_pipe[1];
  if (stdin_text.empty()) { close(in_fd); in_fd = -1; }
  CmdResult r;
  bool out_open = true, err_open = true;
  char buf[65536];
  while (out_open || err_open || in_fd >= 0) {
    pollfd fds[3];
    int n = 0;
    int oi = -1, ei = -1, ii = -1;
    if (out_open) { fds[n] = {out_pipe[0], POLLIN, 0}; oi = n++; }
    if (err_open) { fds[n] = {err_pipe[0], POLLIN, 0}; ei = n++; }
    if (in_fd >= 0) { fds[n] = {in_fd, POLLOUT, 0}; ii = n++; }
    if (poll(fds, n, -1) < 0) break;
    if (oi >= 0 && fds[oi].revents) {
      ssize_t k = read(out_pipe[0], buf, sizeof buf);
      if (k <= 0) out_open = false; else r.out.append(buf, k);
    }
    if (ei >= 0 && fds[ei].revents) {
      ssize_t k = read(err_pipe[0], buf, sizeof buf);
      if (k <= 0) err_open = false; else r.err.append(buf, k);
    }
    if (ii >= 0 && fds[ii].revents) {
      ssize_t k = write(in_fd, stdin_text.data() + written, stdin_text.size() - written);
      if (k <= 0) { close(in_fd); in_fd = -1; }
      else if ((written += k) == stdin_text.size()) { close(in_fd); in_fd = -1; }
    }
  }
  close(out_pipe[0]);
  close(err_pipe[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace egtest
