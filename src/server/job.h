// A Job: one generation request travelling between an HTTP handler thread (the consumer) and the
// scheduler thread (the producer). Thread-safe.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "server/request.h"

namespace eg::server {

/// The outcome of a job. Times in milliseconds from the job's creation.
struct JobResult {
  std::string text;           // the answer's text (without stop strings / tool-call text)
  nlohmann::json tool_calls;  // OpenAI tool_calls array, or null
  std::string finish = "stop";  // "stop", "length", "tool_calls", "cancelled"
  int prompt_tokens = 0;
  int cached_tokens = 0;      // prompt tokens whose KV was reused (slot or prefix cache)
  int completion_tokens = 0;
  double queue_ms = 0;        // waiting for a slot
  double prompt_ms = 0;       // prefill
  double ttft_ms = 0;         // job creation -> first token sampled
  double decode_ms = 0;       // first token -> last token
  int error_status = 0;       // != 0: the job failed (error_message)
  std::string error_message;
  /// Extension (--faq): set when the answer came from the FAQ because generation failed
  /// ({"question", "similarity", "method", "error"}); then finish is "faq".
  nlohmann::json faq;
};

class Job {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Job(GenRequest r, double timeout_s);

  const GenRequest req;
  const Clock::time_point created;
  const Clock::time_point deadline;
  /// --first-token-timeout: a job with no token sampled by then fails (504); max() when none.
  Clock::time_point first_token_deadline = Clock::time_point::max();
  /// Set by the consumer (client went away) or the server (shutdown); the scheduler stops the
  /// job within one step.
  std::atomic<bool> cancel{false};

  // ---- producer (scheduler thread) ----
  void push_text(const std::string& piece);
  void finish(JobResult r);

  // ---- consumer ----
  struct Poll {
    std::string text;  // text produced since the last poll
    bool done = false;
  };
  /// Waits up to `timeout` for new text or the end.
  Poll poll(std::chrono::milliseconds timeout);
  /// Blocks until the job is done.
  void wait();
  /// Valid once done.
  const JobResult& result() const { return result_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::string pending_;
  bool done_ = false;
  JobResult result_;
};

}  // namespace eg::server
