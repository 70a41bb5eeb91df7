// Raw-socket HTTP/1.1 for the server tests: what ordinary clients hide (connection resets, a
// burst of simultaneous connects, hanging up in the middle of a response).
#pragma once
#include <string>
#include <vector>

namespace egtest {

/// "POST PATH HTTP/1.1" with a JSON body and "Connection: close".
std::string http_post_request(const std::string& path, const std::string& json_body);

/// The outcome of one exchange.
struct RawResponse {
  std::string error;  // "" when a whole response came; else "reset", "eof" (closed before a whole
                      // response), "timeout", "refused", or "connect: ..." / "send: ..." / "recv: ..."
  int status = 0;
  std::string body;  // de-chunked
  double connect_ms = -1;  // connect() -> connected (a SYN the server dropped is resent after 1 s)
};

/// Opens `n` connections to 127.0.0.1:port at once (non-blocking connects issued back to back, so
/// the SYNs arrive as one burst), sends `request` on each as soon as it is connected and reads each
/// response to its end (the server closes: Connection: close). One thread, one poll() loop.
std::vector<RawResponse> http_burst(int port, const std::string& request, int n, int timeout_ms);

/// A connection that has sent a request and can hang up at any time.
class RawConnection {
 public:
  RawConnection(int port, const std::string& request);
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;
  /// Reads what arrives within `timeout_ms` (appends to received()); false on EOF or an error.
  bool read_for(int timeout_ms);
  const std::string& received() const { return received_; }
  /// Closes the socket (FIN), as a client that goes away does.
  void close();

 private:
  int fd_ = -1;
  std::string received_;
};

}  // namespace egtest
