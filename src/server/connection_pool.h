// The task queue of `edgegemma serve`'s cpp-httplib server: every accepted connection runs on a
// thread of its own, started when no idle thread is waiting, up to `max_threads` (beyond that,
// connections wait in order). Idle threads exit after `idle_exit`.
//
// Why not httplib::ThreadPool (a fixed number of threads): httplib serves a connection on one
// thread for its whole life, and an idle keep-alive connection holds its thread for up to the
// keep-alive timeout (5 s). With a fixed pool of slots + queue + 4 threads, a burst of keep-alive
// clients (fetch, the openai clients) made new connections wait seconds for a thread even for a
// 429 that takes microseconds; 64 clients against --parallel 1 --queue 4 took 21 s.
#pragma once
#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <thread>

namespace eg::server {

class ConnectionPool : public httplib::TaskQueue {
 public:
  ConnectionPool(size_t max_threads, std::chrono::milliseconds idle_exit);
  ~ConnectionPool() override;
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  void enqueue(std::function<void()> fn) override;
  /// Runs what is queued, then joins every thread (httplib calls it when it stops listening).
  void shutdown() override;

  size_t threads() const;

 private:
  void work(std::list<std::thread>::iterator self);
  void join_finished();  // mu_ held

  const size_t max_threads_;
  const std::chrono::milliseconds idle_exit_;
  mutable std::mutex mu_;
  std::condition_variable cv_;      // a job or the shutdown for idle threads
  std::condition_variable exited_;  // a thread left work()
  std::deque<std::function<void()>> jobs_;
  std::list<std::thread> threads_;
  std::vector<std::list<std::thread>::iterator> finished_;  // exited, not joined yet
  size_t idle_ = 0;
  bool shutdown_ = false;
};

}  // namespace eg::server
