// The scheduler: N slots (each a KV cache + the tokens it holds) served by one compute thread.
//
// Each loop iteration:
//   1. admits queued jobs into idle slots: the idle slot whose cached tokens share the longest
//      prefix with the prompt (then the least recently used); that prefix's KV is kept
//      (KVCache::truncate); when the slot offers nothing, the cross-request prefix cache
//      (kv/prefix_cache.h) may load page-aligned blocks of a common prefix instead;
//   2. stops jobs whose client went away (Job::cancel) or whose deadline passed;
//   3. prefills one chunk of one slot (256 tokens, or 64 while other slots are decoding, so
//      running streams keep flowing), sampling the first token when its prompt is done;
//   4. runs ONE batched decode step for every decoding slot (Model::forward_batch: the weights
//      are read once for all of them) and samples each slot's next token.
// Results do not depend on the batching: forward_batch rows are bit-identical to single-sequence
// decode, and prefill is chunk-invariant, so a request gets the same tokens alone or under load,
// with the prefix cache on or off (tests/server_*_test.cpp).
//
// Draft prefill (POST /v1/prefill, docs/server.md): submit_draft() queues the stable tokens of a
// conversation whose last user message is still being typed. Only when the scheduler has nothing
// else to do (no queued job, every slot idle) does it prefill a draft, one chunk of draft_chunk
// tokens per loop iteration, into the idle slot sharing the longest prefix with it (then the
// least recently used) among the slots where it would drop no more cached tokens than it
// prefills (without a prefix cache; with one, a slot's blocks are stored there anyway), storing full blocks in the prefix cache: a request that arrives waits at most one
// draft chunk, and then finds the draft's prefix in that slot. A newer draft of the same client
// replaces the pending one; at most max_drafts are pending (the oldest is dropped). A draft
// already covered by a slot (e.g. the request it was a draft of has run) does nothing; one that
// no slot may take is dropped.
//
// Constrained decoding (grammar/): a job with a grammar masks the logits each step (greedy jobs
// first try the unmasked argmax and mask only when the grammar rejects it, which picks the same
// token). Tool calls (tool_choice auto): when the model emits the tool-call start token the
// tool-call grammar takes over until the call is complete.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/loaded_model.h"
#include "kv/kv_cache.h"
#include "server/job.h"
#include "server/metrics.h"

namespace eg::grammar {
class TokenVocab;
}

namespace eg {
class PrefixCache;
}

namespace eg::server {

/// The error message of a job stopped by --first-token-timeout (status 504).
inline constexpr const char* kFirstTokenTimeout = "no first token within the first-token timeout (--first-token-timeout)";

struct SchedulerOptions {
  int slots = 4;              // concurrent generations (>= 1)
  int queue = 64;             // jobs waiting beyond the slots before submit() refuses (>= 0)
  int context_tokens = 4096;  // per slot
  KVCacheOptions kv;          // max_tokens is set to context_tokens
  size_t prefix_cache_bytes = 0;  // 0: no cross-request prefix cache
  int threads = 0;            // CPU threads of the compute thread (0: default)
  int prefill_chunk = 256;
  bool batched_decode = true;  // false: one forward per slot (for tests/benchmarks)
  int max_drafts = 16;         // pending draft prefills, all clients (>= 1)
  int draft_chunk = 32;        // tokens per draft prefill step (a request waits at most one)
};

class Scheduler {
 public:
  Scheduler(std::shared_ptr<const LoadedModel> model, SchedulerOptions opt, Metrics& metrics);
  ~Scheduler();  // stop()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  /// Queues a job; false when the queue is full (the caller answers 429).
  bool submit(std::shared_ptr<Job> job);
  /// Queues a draft prefill of `tokens` (with the soft tokens of `media`, runs inside `tokens`) for
  /// `client`, replacing that client's pending draft. False when stopping or `tokens` is empty.
  bool submit_draft(const std::string& client, std::vector<int32_t> tokens, std::vector<MediaRun> media = {});
  /// True once stop() was called.
  bool stopping() {
    std::lock_guard<std::mutex> lk(mu_);
    return stop_;
  }
  /// Ends every job (queued: 503; running: finish_reason "length", the text so far) and joins the
  /// compute thread. Any thread, any number of times.
  void stop();
  const SchedulerOptions& options() const { return opt_; }
  std::shared_ptr<const grammar::TokenVocab> vocab() const { return vocab_; }

 private:
  struct Slot;
  struct Draft {
    std::string client;
    std::vector<int32_t> tokens;
    std::vector<MediaRun> media;
  };
  void loop();
  bool draft_step();
  void admit();
  void reap();
  bool prefill_step();
  bool decode_step();
  void start_job(Slot& s, std::shared_ptr<Job> job);
  int32_t pick(Slot& s, float* logits);
  void on_token(Slot& s, int32_t id);
  void finish(Slot& s, const char* reason);
  /// Ends the slot's job with an error (status, message); the slot's KV is dropped.
  void fail_slot(Slot& s, int status, const std::string& message);
  void publish_gauges();
  void release_job();  // a job ended: one less outstanding

  std::shared_ptr<const LoadedModel> lm_;
  SchedulerOptions opt_;
  Metrics& metrics_;
  std::shared_ptr<const grammar::TokenVocab> vocab_;
  std::unique_ptr<PrefixCache> prefix_;
  std::vector<std::unique_ptr<Slot>> slots_;
  uint64_t tick_ = 0;
  int32_t tool_start_ = -1;      // "<|tool_call>" or -1
  std::vector<int32_t> end_ids_;
  std::vector<float> logits_, row_logits_;  // compute-thread buffers reused every step  // ids that end generation (stop ids + "<|tool_response>")

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::deque<std::shared_ptr<Draft>> drafts_;  // pending draft prefills, oldest first
  bool stop_ = false;
  int outstanding_ = 0;  // queued + running jobs
  std::thread thread_;
  std::mutex join_mu_;
};

}  // namespace eg::server
