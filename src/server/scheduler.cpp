// Scheduler: slots, admission with KV reuse, chunked prefill, batched decode (scheduler.h).
#include "server/scheduler.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>

#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "engine/stop_strings.h"
#include "grammar/grammar.h"
#include "kv/prefix_cache.h"
#include "model/model.h"
#include "server/media_runs.h"
#include "server/tool_call_ids.h"
#include "tokenizer/tokenizer.h"

namespace eg::server {

namespace {
using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

struct Scheduler::Slot {
  enum class Phase { Idle, Prefill, Decode };
  int index = 0;
  std::unique_ptr<KVCache> kv_owner;  // made by the executor: lives on its device
  KVCache& kv;
  std::unique_ptr<StepWorkspace> ws;  // this slot's activation buffers
  std::vector<int32_t> cached;  // tokens whose K/V the cache holds
  // The media runs of the prompt `cached` belongs to (media_runs.h: reused only for the same
  // encoded medium at the same position); a slot holding media is never stored in the prefix
  // cache (its blocks are keyed by token ids alone).
  std::vector<MediaRun> media;
  Phase phase = Phase::Idle;
  uint64_t last_used = 0;
  // Positions [draft_lo, draft_hi) of `cached` were prefilled by drafts (draft_lo == SIZE_MAX:
  // none): a request reusing them counts a draft cache hit.
  size_t draft_lo = SIZE_MAX, draft_hi = 0;

  // The running job.
  std::shared_ptr<Job> job;
  size_t prefill_pos = 0;  // next prompt index to prefill
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<grammar::Matcher> matcher;
  std::unique_ptr<StopStringMatcher> stops;
  std::unique_ptr<StreamingDetokenizer> detok;      // the visible text
  std::unique_ptr<StreamingDetokenizer> raw_detok;  // tool mode: everything, special tokens included
  std::vector<int32_t> generated;
  std::string text, raw_text;
  bool in_tool_call = false;
  int32_t next = -1;  // sampled, not yet in the cache
  int cached_prompt = 0;
  Clock::time_point t_prefill, t_first, t_last;

  Slot(const StepExecutor& e, const KVCacheOptions& o)
      : kv_owner(e.new_kv_cache(o)), kv(*kv_owner), ws(e.new_workspace()) {}
};

Scheduler::Scheduler(std::shared_ptr<const LoadedModel> model, SchedulerOptions opt, Metrics& metrics)
    : lm_(std::move(model)), opt_(std::move(opt)), metrics_(metrics) {
  if (opt_.slots < 1) throw Error("--parallel must be at least 1");
  if (opt_.queue < 0) throw Error("--queue must be >= 0");
  if (opt_.max_drafts < 1 || opt_.draft_chunk < 1) throw Error("scheduler: max_drafts and draft_chunk must be >= 1");
  opt_.kv.max_tokens = opt_.context_tokens;
  const ModelConfig& cfg = lm_->model().config();
  for (int i = 0; i < opt_.slots; ++i) {
    slots_.push_back(std::make_unique<Slot>(lm_->executor(), opt_.kv));
    slots_.back()->index = i;
  }
  tool_start_ = tool_call_start_id(lm_->tokenizer());
  // Generation ends at the model's stop ids, and (Gemma 4) at "<|tool_response>": after a tool
  // call the model waits for the tool's answer.
  end_ids_ = lm_->stop_ids();
  if (const int32_t tr = lm_->tokenizer().token_id("<|tool_response>"); tr >= 0) end_ids_.push_back(tr);
  vocab_ = grammar::TokenVocab::build(lm_->tokenizer(), end_ids_);
  // The prefix cache holds host copies of KV pages; a device cache copies its pages to and from
  // the device as they are stored and loaded (kv/kv_cache.h DeviceState).
  if (opt_.prefix_cache_bytes > 0)
    prefix_ = std::make_unique<PrefixCache>(cfg, opt_.kv, opt_.prefix_cache_bytes);
  publish_gauges();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { stop(); }

bool Scheduler::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) return false;
    // Jobs in the system (queued + running) are bounded by slots + queue.
    if (outstanding_ >= opt_.slots + opt_.queue) return false;
    ++outstanding_;
    queue_.push_back(std::move(job));
  }
  cv_.notify_all();
  return true;
}

bool Scheduler::submit_draft(const std::string& client, std::vector<int32_t> tokens, std::vector<MediaRun> media) {
  if (tokens.empty()) return false;
  int dropped = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) return false;
    for (auto it = drafts_.begin(); it != drafts_.end();) {
      if ((*it)->client == client) {
        it = drafts_.erase(it);
        ++dropped;
      } else {
        ++it;
      }
    }
    while (drafts_.size() >= static_cast<size_t>(opt_.max_drafts)) {
      drafts_.pop_front();
      ++dropped;
    }
    drafts_.push_back(std::make_shared<Draft>(Draft{client, std::move(tokens), std::move(media)}));
  }
  metrics_.count_draft_request();
  for (int i = 0; i < dropped; ++i) metrics_.count_draft_dropped();
  cv_.notify_all();
  return true;
}

void Scheduler::stop() {
  std::lock_guard<std::mutex> join_lk(join_mu_);  // one joiner at a time
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Scheduler::loop() {
  if (opt_.threads > 0) cpu::set_num_threads(opt_.threads);
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      auto busy = [&] {
        return std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return s->phase != Slot::Phase::Idle; });
      };
      cv_.wait(lk, [&] { return stop_ || !queue_.empty() || busy() || !drafts_.empty(); });
      if (stop_) break;
    }
    try {
      admit();
      reap();
      bool worked = prefill_step();
      worked = decode_step() || worked;
      if (!worked) draft_step();  // low priority: only when no request has work
    } catch (const std::exception& e) {
      // A failure inside the engine (out of memory, an invariant): fail the running jobs, keep serving.
      std::fprintf(stderr, "edgegemma serve: error: %s\n", e.what());
      for (auto& s : slots_)
        if (s->job) {
          JobResult r;
          r.error_status = 500;
          r.error_message = std::string("generation failed: ") + e.what();
          s->job->finish(r);
          release_job();
          s->job.reset();
          s->phase = Slot::Phase::Idle;
          s->kv.clear();
          s->cached.clear();
          s->media.clear();
        }
      // A draft that failed is not retried.
      std::lock_guard<std::mutex> lk(mu_);
      if (!drafts_.empty()) drafts_.pop_front();
    }
    publish_gauges();
  }
  // Shutdown: every job ends.
  std::deque<std::shared_ptr<Job>> q;
  {
    std::lock_guard<std::mutex> lk(mu_);
    q.swap(queue_);
  }
  for (auto& j : q) {
    JobResult r;
    r.error_status = 503;
    r.error_message = "the server is shutting down";
    j->finish(r);
    release_job();
  }
  for (auto& s : slots_)
    if (s->job) finish(*s, "length");  // cut short by the shutdown: the client gets what there is
}

void Scheduler::admit() {
  for (;;) {
    std::shared_ptr<Job> job;
    Slot* best = nullptr;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (queue_.empty()) return;
      job = queue_.front();
      if (job->cancel.load()) {  // gone before it started
        queue_.pop_front();
        JobResult r;
        r.finish = "cancelled";
        r.prompt_tokens = static_cast<int>(job->req.prompt.size());
        metrics_.count_cancelled();
        job->finish(r);
        --outstanding_;  // mu_ is held
        continue;
      }
      size_t best_lcp = 0;
      for (auto& s : slots_) {
        if (s->phase != Slot::Phase::Idle) continue;
        const auto& p = job->req.prompt;
        size_t l = 0;
        while (l < s->cached.size() && l < p.size() && s->cached[l] == p[l]) ++l;
        if (!best || l > best_lcp || (l == best_lcp && s->last_used < best->last_used)) {
          best = s.get();
          best_lcp = l;
        }
      }
      if (!best) return;  // every slot busy: the job waits
      queue_.pop_front();
    }
    start_job(*best, std::move(job));
  }
}

void Scheduler::start_job(Slot& s, std::shared_ptr<Job> job) {
  const GenRequest& rq = job->req;
  const auto& p = rq.prompt;
  s.job = std::move(job);
  s.last_used = ++tick_;
  // Keep the longest common prefix the slot holds (at least one prompt token is prefilled, for
  // its logits).
  size_t l = 0;
  while (l < s.cached.size() && l < p.size() && s.cached[l] == p[l]) ++l;
  l = std::min(l, p.size() - 1);
  const size_t req_media = rq.media.empty() ? SIZE_MAX : static_cast<size_t>(rq.media[0].begin);
  l = media_reusable_prefix(l, s.media, rq.media);
  int kept = s.kv.truncate(static_cast<int>(l));
  // Draft prefill hit: the kept slot KV includes positions a draft computed.
  if (s.draft_lo < s.draft_hi && s.draft_lo < static_cast<size_t>(kept)) {
    metrics_.count_draft_hit(static_cast<int>(std::min(s.draft_hi, static_cast<size_t>(kept)) - s.draft_lo));
  }
  s.draft_lo = SIZE_MAX, s.draft_hi = 0;  // counted once
  if (prefix_) {
    const std::vector<int32_t> text_part(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(std::min(req_media, p.size())));
    if (prefix_->usable_prefix_length(text_part, s.kv.options()) > kept)
      kept = prefix_->load_longest_prefix(text_part, s.kv);
  }
  s.media = rq.media;
  s.cached.assign(p.begin(), p.begin() + kept);
  s.prefill_pos = static_cast<size_t>(kept);
  s.cached_prompt = kept;
  s.phase = Slot::Phase::Prefill;
  s.t_prefill = Clock::now();

  s.sampler = std::make_unique<Sampler>(rq.sampling);
  const int n = rq.sampling.repeat_last_n;
  for (size_t i = p.size() > static_cast<size_t>(n) ? p.size() - n : 0; i < p.size(); ++i) s.sampler->accept(p[i]);
  s.matcher = rq.grammar ? std::make_unique<grammar::Matcher>(rq.grammar, vocab_) : nullptr;
  s.stops = std::make_unique<StopStringMatcher>(rq.stop);
  s.detok = std::make_unique<StreamingDetokenizer>(lm_->tokenizer());
  s.raw_detok = rq.parse_tools ? std::make_unique<StreamingDetokenizer>(lm_->tokenizer()) : nullptr;
  s.generated.clear();
  s.text.clear();
  s.raw_text.clear();
  s.in_tool_call = false;
  s.next = -1;
}

void Scheduler::reap() {
  const auto now = Clock::now();
  // Queued jobs whose client went away or whose deadline passed before they got a slot.
  std::vector<std::shared_ptr<Job>> dropped;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if ((*it)->cancel.load() || now > (*it)->deadline || now > (*it)->first_token_deadline) {
        dropped.push_back(*it);
        it = queue_.erase(it);
        --outstanding_;
      } else {
        ++it;
      }
    }
  }
  for (auto& j : dropped) {
    JobResult r;
    r.prompt_tokens = static_cast<int>(j->req.prompt.size());
    if (j->cancel.load()) {
      r.finish = "cancelled";
      metrics_.count_cancelled();
    } else if (now > j->first_token_deadline && now <= j->deadline) {
      r.error_status = 504;
      r.error_message = kFirstTokenTimeout;
      metrics_.count_first_token_timeout();
    } else {
      r.error_status = 503;
      r.error_message = "timed out waiting for a free slot";
    }
    j->finish(r);
  }
  for (auto& s : slots_) {
    if (!s->job) continue;
    if (s->job->cancel.load()) {
      metrics_.count_cancelled();
      finish(*s, "cancelled");
    } else if (s->generated.empty() && now > s->job->first_token_deadline) {
      std::fprintf(stderr, "edgegemma serve: a request had no first token within --first-token-timeout; stopping it\n");
      metrics_.count_first_token_timeout();
      fail_slot(*s, 504, kFirstTokenTimeout);
    } else if (now > s->job->deadline) {
      std::fprintf(stderr, "edgegemma serve: a request reached its timeout; stopping it\n");
      finish(*s, "length");
    }
  }
}

int32_t Scheduler::pick(Slot& s, float* logits) {
  const int V = lm_->model().config().vocab_size;
  for (const auto& [id, bias] : s.job->req.logit_bias) logits[id] += bias;
  if (s.matcher) {
    if (s.job->req.sampling.temperature <= 0.0f) {
      // Greedy (no random draw): the unmasked argmax is the masked argmax whenever the grammar
      // allows it, so the full mask is computed only when it does not.
      const int32_t id = s.sampler->sample(logits, V);
      if (s.matcher->allows(id)) return id;
    }
    s.matcher->mask(logits, V);
  }
  return s.sampler->sample(logits, V);
}

void Scheduler::on_token(Slot& s, int32_t id) {
  const GenRequest& rq = s.job->req;
  const auto now = Clock::now();
  if (s.generated.empty()) {
    s.t_first = now;
    metrics_.observe_ttft(ms_between(s.job->created, now) / 1000.0);
  } else {
    metrics_.observe_token_latency(ms_between(s.t_last, now) / 1000.0);
  }
  s.t_last = now;
  s.generated.push_back(id);
  s.sampler->accept(id);
  // Tool call (tool_choice auto): the start token hands decoding to the tool-call grammar.
  if (!s.matcher && rq.tool_grammar && id == tool_start_) {
    s.matcher = std::make_unique<grammar::Matcher>(rq.tool_grammar, vocab_);
  }
  if (s.matcher) {
    s.matcher->accept(id);
    if (s.matcher->ended()) {  // the constrained value is complete (also with ignore_eos)
      finish(s, "stop");
      return;
    }
  }
  if (!rq.ignore_eos && std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end()) {
    finish(s, "stop");
    return;
  }
  if (s.raw_detok) {
    s.raw_text += s.raw_detok->push(id);
    if (id == tool_start_) s.in_tool_call = true;
  }
  if (!s.in_tool_call) {
    const std::string piece = s.stops->push(s.detok->push(id));
    if (!piece.empty()) {
      s.text += piece;
      s.job->push_text(piece);
    }
    if (s.stops->stopped()) {
      finish(s, "stop");
      return;
    }
  }
  if (static_cast<int>(s.generated.size()) >= rq.max_tokens ||
      s.cached.size() + 1 >= static_cast<size_t>(opt_.context_tokens)) {
    finish(s, "length");
    return;
  }
  s.next = id;
  s.phase = Slot::Phase::Decode;
}

void Scheduler::finish(Slot& s, const char* reason) {
  JobResult r;
  r.finish = reason;
  const bool cancelled = r.finish == "cancelled";
  if (!s.in_tool_call && !s.stops->stopped() && !cancelled) {  // what the detokenizer / stop matcher hold
    std::string tail = s.stops->push(s.detok->flush());
    if (!s.stops->stopped()) tail += s.stops->flush();
    if (!tail.empty()) {
      s.text += tail;
      s.job->push_text(tail);
    }
  }
  r.text = s.text;
  if (s.raw_detok && !cancelled) {
    s.raw_text += s.raw_detok->flush();
    grammar::ParsedToolOutput parsed = grammar::parse_gemma4_tool_calls(s.raw_text);
    if (!parsed.calls.empty()) {
      r.tool_calls = nlohmann::json::array();
      for (const auto& c : parsed.calls) {
        nlohmann::json tc;
        tc["id"] = new_tool_call_id();
        tc["type"] = "function";
        tc["function"]["name"] = c.name;
        tc["function"]["arguments"] = c.arguments.dump();
        r.tool_calls.push_back(std::move(tc));
      }
      r.finish = "tool_calls";
    }
  }
  const auto now = Clock::now();
  r.prompt_tokens = static_cast<int>(s.job->req.prompt.size());
  r.cached_tokens = s.cached_prompt;
  r.completion_tokens = static_cast<int>(s.generated.size());
  r.queue_ms = ms_between(s.job->created, s.t_prefill);
  if (!s.generated.empty()) {
    r.prompt_ms = ms_between(s.t_prefill, s.t_first);
    r.ttft_ms = ms_between(s.job->created, s.t_first);
    r.decode_ms = ms_between(s.t_first, now);
  }
  metrics_.add_tokens(r.prompt_tokens, r.cached_tokens, r.completion_tokens);
  std::shared_ptr<Job> job = std::move(s.job);
  s.matcher.reset();
  s.phase = Slot::Phase::Idle;
  s.last_used = ++tick_;
  if (prefix_ && s.kv.n_past() > 0 && s.media.empty()) prefix_->insert(s.cached, s.kv);
  publish_gauges();  // before the client hears back, so it sees its slot free
  release_job();
  job->finish(std::move(r));
}

void Scheduler::fail_slot(Slot& s, int status, const std::string& message) {
  JobResult r;
  r.error_status = status;
  r.error_message = message;
  r.prompt_tokens = static_cast<int>(s.job->req.prompt.size());
  std::shared_ptr<Job> job = std::move(s.job);
  s.matcher.reset();
  s.phase = Slot::Phase::Idle;
  s.last_used = ++tick_;
  s.kv.clear();
  s.cached.clear();
  s.media.clear();
  publish_gauges();
  release_job();
  job->finish(std::move(r));
}

bool Scheduler::prefill_step() {
  // The slot admitted first (lowest last_used) among those prefilling.
  Slot* s = nullptr;
  bool decoding = false;
  for (auto& x : slots_) {
    if (x->phase == Slot::Phase::Decode) decoding = true;
    if (x->phase == Slot::Phase::Prefill && (!s || x->last_used < s->last_used)) s = x.get();
  }
  if (!s) return false;
  const auto& p = s->job->req.prompt;
  const int chunk = decoding ? std::min(64, opt_.prefill_chunk) : opt_.prefill_chunk;
  const int pos = static_cast<int>(s->prefill_pos);
  int end = static_cast<int>(std::min(p.size(), s->prefill_pos + static_cast<size_t>(chunk)));
  // Images: a bidirectional block (Gemma 3) is prefilled in one call; the chunk's soft-token rows.
  const auto& media = s->job->req.media;
  end = media_chunk_end(media, pos, end);
  const std::vector<EmbedSpan> spans = media_spans(media, pos, end, lm_->model().config().hidden_size);
  const size_t n = static_cast<size_t>(end - pos);
  const bool last = s->prefill_pos + n == p.size();
  std::vector<float>& logits = logits_;
  if (spans.empty())
    lm_->executor().prefill(p.data() + s->prefill_pos, static_cast<int>(n), s->kv, *s->ws,
                            last ? LogitsMode::Last : LogitsMode::None, logits);
  else
    lm_->executor().prefill_media(p.data() + s->prefill_pos, static_cast<int>(n), spans, s->kv, *s->ws,
                                  last ? LogitsMode::Last : LogitsMode::None, logits);
  s->cached.insert(s->cached.end(), p.begin() + s->prefill_pos, p.begin() + s->prefill_pos + n);
  s->prefill_pos += n;
  // Store the new full blocks after every chunk: sliding-window layers recycle their early pages
  // as a long prompt goes on, and a stored block is usable only with its in-window pages.
  if (prefix_ && s->media.empty()) prefix_->insert(s->cached, s->kv);
  if (last) on_token(*s, pick(*s, logits.data()));
  return true;
}

bool Scheduler::draft_step() {
  std::shared_ptr<Draft> d;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!queue_.empty() || drafts_.empty()) return false;
    d = drafts_.front();
  }
  for (auto& x : slots_)
    if (x->phase != Slot::Phase::Idle) return false;
  auto done = [&] {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = std::find(drafts_.begin(), drafts_.end(), d);
    if (it != drafts_.end()) drafts_.erase(it);
  };
  const auto& p = d->tokens;
  // The idle slot sharing the longest prefix (through an image only when it is the same one), then the LRU one,
  // among those where the draft drops no more cached tokens than it prefills (a late draft must
  // not wipe the KV of the conversation its request has just extended).
  Slot* s = nullptr;
  size_t best = 0;
  for (auto& x : slots_) {
    size_t l = 0;
    while (l < x->cached.size() && l < p.size() && x->cached[l] == p[l]) ++l;
    l = media_reusable_prefix(l, x->media, d->media);
    if (l >= p.size()) {  // already in a slot (its request may have run): keep that slot's KV
      done();
      metrics_.count_draft_prefilled();
      return false;
    }
    // With the prefix cache the slot's full blocks are stored there (finish()): dropping is cheap.
    if (!prefix_ && x->cached.size() - l > p.size() - l) continue;
    if (!s || l > best || (l == best && x->last_used < s->last_used)) s = x.get(), best = l;
  }
  if (!s) {
    done();
    metrics_.count_draft_dropped();
    return false;
  }
  int kept = s->kv.truncate(static_cast<int>(best));
  s->media = d->media;  // the runs up to `kept` are the same media (media_reusable_prefix)
  s->draft_hi = std::min(s->draft_hi, static_cast<size_t>(kept));
  if (prefix_ && prefix_->usable_prefix_length(p, s->kv.options()) > kept) {
    kept = prefix_->load_longest_prefix(p, s->kv);
    s->draft_hi = 0;  // the cache was rebuilt from stored pages
  }
  if (s->draft_hi <= s->draft_lo) s->draft_lo = SIZE_MAX, s->draft_hi = 0;
  s->cached.assign(p.begin(), p.begin() + kept);
  s->last_used = ++tick_;
  // A bidirectional image is prefilled in one step (a request that arrives waits for it).
  const int end = media_chunk_end(d->media, kept, std::min(kept + opt_.draft_chunk, static_cast<int>(p.size())));
  const int n = end - kept;
  const std::vector<EmbedSpan> spans = media_spans(d->media, kept, end, lm_->model().config().hidden_size);
  if (spans.empty())
    lm_->executor().prefill(p.data() + kept, n, s->kv, *s->ws, LogitsMode::None, logits_);
  else
    lm_->executor().prefill_media(p.data() + kept, n, spans, s->kv, *s->ws, LogitsMode::None, logits_);
  s->cached.insert(s->cached.end(), p.begin() + kept, p.begin() + kept + n);
  if (s->draft_lo != SIZE_MAX && s->draft_hi == static_cast<size_t>(kept)) {
    s->draft_hi += static_cast<size_t>(n);
  } else {
    s->draft_lo = static_cast<size_t>(kept), s->draft_hi = static_cast<size_t>(kept + n);
  }
  if (prefix_ && s->media.empty()) prefix_->insert(s->cached, s->kv);
  metrics_.add_draft_tokens(n);
  if (static_cast<size_t>(kept + n) >= p.size()) {
    done();
    metrics_.count_draft_prefilled();
  }
  return true;
}

bool Scheduler::decode_step() {
  std::vector<Slot*> active;
  for (auto& x : slots_)
    if (x->phase == Slot::Phase::Decode) active.push_back(x.get());
  if (active.empty()) return false;
  const int V = lm_->model().config().vocab_size;
  std::vector<float>& logits = logits_;  // reused: [B, V] is MiBs at a 262k vocabulary
  if (opt_.batched_decode && active.size() > 1) {
    std::vector<int32_t> tokens;
    std::vector<KVCache*> kvs;
    for (Slot* s : active) {
      tokens.push_back(s->next);
      kvs.push_back(&s->kv);
    }
    lm_->executor().decode(tokens.data(), static_cast<int>(active.size()), kvs.data(), *active[0]->ws, logits);
  } else {
    logits.resize(active.size() * static_cast<size_t>(V));
    for (size_t b = 0; b < active.size(); ++b) {
      lm_->executor().prefill(&active[b]->next, 1, active[b]->kv, *active[b]->ws, LogitsMode::Last, row_logits_);
      std::copy(row_logits_.begin(), row_logits_.end(), logits.begin() + static_cast<std::ptrdiff_t>(b * V));
    }
  }
  for (size_t b = 0; b < active.size(); ++b) {
    Slot& s = *active[b];
    s.cached.push_back(s.next);
    on_token(s, pick(s, logits.data() + b * static_cast<size_t>(V)));
  }
  return true;
}

void Scheduler::release_job() {
  std::lock_guard<std::mutex> lk(mu_);
  --outstanding_;
}

void Scheduler::publish_gauges() {
  Gauges g;
  g.slots_total = static_cast<int>(slots_.size());
  for (auto& s : slots_) {
    if (s->phase != Slot::Phase::Idle) ++g.slots_busy;
    g.kv_pages_in_use += s->kv.pages_in_use();
    g.kv_bytes_in_use += static_cast<int64_t>(s->kv.bytes_in_use());
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    g.queue_length = static_cast<int>(queue_.size());
  }
  if (prefix_) {
    g.prefix_cache_bytes = static_cast<int64_t>(prefix_->bytes());
    g.prefix_cache_blocks = prefix_->blocks();
  }
  metrics_.set_gauges(g);
}

}  // namespace eg::server
