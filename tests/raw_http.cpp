#include "raw_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

namespace egtest {

namespace {

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Parses a whole HTTP/1.1 response (read to EOF); false when it is incomplete.
bool parse_response(const std::string& raw, RawResponse& out) {
  const size_t he = raw.find("\r\n\r\n");
  if (he == std::string::npos || raw.compare(0, 9, "HTTP/1.1 ") != 0) return false;
  out.status = std::atoi(raw.c_str() + 9);
  const std::string head = lower(raw.substr(0, he));
  std::string rest = raw.substr(he + 4);
  if (head.find("\r\ntransfer-encoding: chunked") != std::string::npos) {
    std::string body;
    size_t p = 0;
    for (;;) {
      const size_t le = rest.find("\r\n", p);
      if (le == std::string::npos) return false;
      const size_t n = std::stoul(rest.substr(p, le - p), nullptr, 16);
      if (n == 0) break;
      if (le + 2 + n + 2 > rest.size()) return false;
      body.append(rest, le + 2, n);
      p = le + 2 + n + 2;
    }
    out.body = body;
    return true;
  }
  const size_t cl = head.find("\r\ncontent-length: ");
  if (cl == std::string::npos) {
    out.body = rest;  // until EOF
    return true;
  }
  const size_t n = std::stoul(head.substr(cl + 18));
  if (rest.size() < n) return false;
  out.body = rest.substr(0, n);
  return true;
}

std::string errno_name(int e) {
  if (e == ECONNRESET || e == EPIPE) return "reset";
  if (e == ECONNREFUSED) return "refused";
  return std::strerror(e);
}

}  // namespace

std::string http_post_request(const std::string& path, const std::string& json_body) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\n" +
         "Content-Length: " + std::to_string(json_body.size()) + "\r\n\r\n" + json_body;
}

std::vector<RawResponse> http_burst(int port, const std::string& request, int n, int timeout_ms) {
  enum class St { Connecting, Reading, Done };
  struct Conn {
    int fd = -1;
    St st = St::Connecting;
    std::string raw;
  };
  std::vector<Conn> cs(static_cast<size_t>(n));
  std::vector<RawResponse> out(static_cast<size_t>(n));
  const sockaddr_in addr = loopback(port);
  const auto t0 = std::chrono::steady_clock::now();
  auto fail = [&](size_t i, const std::string& why) {
    out[i].error = why;
    if (cs[i].fd >= 0) ::close(cs[i].fd);
    cs[i].fd = -1;
    cs[i].st = St::Done;
  };
  for (size_t i = 0; i < cs.size(); ++i) {
    cs[i].fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (cs[i].fd < 0) throw std::runtime_error("socket() failed");
    if (::connect(cs[i].fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS)
      fail(i, "connect: " + errno_name(errno));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    std::vector<pollfd> pf;
    std::vector<size_t> idx;
    for (size_t i = 0; i < cs.size(); ++i) {
      if (cs[i].st == St::Done) continue;
      pf.push_back(pollfd{cs[i].fd, static_cast<short>(cs[i].st == St::Connecting ? POLLOUT : POLLIN), 0});
      idx.push_back(i);
    }
    if (pf.empty()) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      for (size_t i : idx) fail(i, "timeout");
      break;
    }
    if (::poll(pf.data(), pf.size(), static_cast<int>(left)) < 0 && errno != EINTR) throw std::runtime_error("poll() failed");
    for (size_t k = 0; k < pf.size(); ++k) {
      if (!pf[k].revents) continue;
      const size_t i = idx[k];
      Conn& c = cs[i];
      if (c.st == St::Connecting) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
          fail(i, err == ECONNRESET ? "reset" : "connect: " + errno_name(err));
          continue;
        }
        // The request is small: one send() takes it (the socket buffer is empty).
        const ssize_t w = ::send(c.fd, request.data(), request.size(), MSG_NOSIGNAL);
        if (w != static_cast<ssize_t>(request.size())) {
          fail(i, w < 0 ? (errno_name(errno) == "reset" ? "reset" : "send: " + errno_name(errno)) : "send: short");
          continue;
        }
        out[i].connect_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        c.st = St::Reading;
        continue;
      }
      char buf[4096];
      const ssize_t r = ::recv(c.fd, buf, sizeof buf, 0);
      if (r > 0) {
        c.raw.append(buf, static_cast<size_t>(r));
      } else if (r == 0) {
        if (!parse_response(c.raw, out[i])) {
          fail(i, "eof");
          continue;
        }
        ::close(c.fd);
        c.fd = -1;
        c.st = St::Done;
      } else if (errno != EAGAIN && errno != EINTR) {
        const std::string e = errno_name(errno);
        fail(i, e == "reset" ? e : "recv: " + e);
      }
    }
  }
  return out;
}

RawConnection::RawConnection(int port, const std::string& request) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  const sockaddr_in addr = loopback(port);
  if (fd_ < 0 || ::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
    throw std::runtime_error("cannot connect to 127.0.0.1:" + std::to_string(port));
  if (::send(fd_, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size()))
    throw std::runtime_error("cannot send the request");
}

RawConnection::~RawConnection() { close(); }

bool RawConnection::read_for(int timeout_ms) {
  if (fd_ < 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return true;
    pollfd p{fd_, POLLIN, 0};
    const int k = ::poll(&p, 1, static_cast<int>(left));
    if (k <= 0) continue;
    char buf[4096];
    const ssize_t r = ::recv(fd_, buf, sizeof buf, 0);
    if (r <= 0) return false;
    received_.append(buf, static_cast<size_t>(r));
  }
}

void RawConnection::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace egtest
