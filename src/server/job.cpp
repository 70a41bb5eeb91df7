#include "server/job.h"

namespace eg::server {

Job::Job(GenRequest r, double timeout_s)
    : req(std::move(r)),
      created(Clock::now()),
      deadline(created + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s))) {}

void Job::push_text(const std::string& piece) {
  if (piece.empty()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending_ += piece;
  }
  cv_.notify_all();
}

void Job::finish(JobResult r) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    result_ = std::move(r);
    done_ = true;
  }
  cv_.notify_all();
}

Job::Poll Job::poll(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, timeout, [&] { return done_ || !pending_.empty(); });
  Poll p;
  p.text.swap(pending_);
  p.done = done_;
  return p;
}

void Job::wait() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return done_; });
}

}  // namespace eg::server
