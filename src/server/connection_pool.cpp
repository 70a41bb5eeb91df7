#include "server/connection_pool.h"

namespace eg::server {

ConnectionPool::ConnectionPool(size_t max_threads, std::chrono::milliseconds idle_exit)
    : max_threads_(max_threads < 1 ? 1 : max_threads), idle_exit_(idle_exit) {}

ConnectionPool::~ConnectionPool() { shutdown(); }

void ConnectionPool::enqueue(std::function<void()> fn) {
  std::lock_guard<std::mutex> lk(mu_);
  join_finished();
  jobs_.push_back(std::move(fn));
  if (idle_ >= jobs_.size()) {
    cv_.notify_one();
  } else if (threads_.size() < max_threads_) {
    threads_.emplace_back();
    auto it = std::prev(threads_.end());
    *it = std::thread([this, it] { work(it); });
  }  // else: every thread is busy; the job waits for one
}

void ConnectionPool::work(std::list<std::thread>::iterator self) {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    ++idle_;
    const bool got = cv_.wait_for(lk, idle_exit_, [&] { return !jobs_.empty() || shutdown_; });
    --idle_;
    if (jobs_.empty()) {
      if (shutdown_ || !got) break;
      continue;
    }
    std::function<void()> fn = std::move(jobs_.front());
    jobs_.pop_front();
    lk.unlock();
    fn();
    lk.lock();
  }
  finished_.push_back(self);  // joined by the next enqueue() or shutdown()
  exited_.notify_all();
}

void ConnectionPool::join_finished() {
  for (auto it : finished_) {
    it->join();  // it has left work(); this only waits for the thread to end
    threads_.erase(it);
  }
  finished_.clear();
}

void ConnectionPool::shutdown() {
  std::unique_lock<std::mutex> lk(mu_);
  shutdown_ = true;
  cv_.notify_all();
  while (!threads_.empty()) {
    exited_.wait(lk, [&] { return !finished_.empty(); });
    auto done = std::move(finished_);
    finished_.clear();
    lk.unlock();  // a finishing thread may still need mu_ to leave work()
    for (auto it : done) it->join();
    lk.lock();
    for (auto it : done) threads_.erase(it);
  }
}

size_t ConnectionPool::threads() const {
  std::lock_guard<std::mutex> lk(mu_);
  return threads_.size();
}

}  // namespace eg::server
