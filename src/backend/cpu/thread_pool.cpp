// The forward pass's thread pool (thread_pool.h): one process-wide pool of persistent workers
// that grows to the largest thread count asked for; a dispatch wakes only the workers it uses.
//
// A dispatch: the caller writes the job (function, task count, one contiguous share of tasks per
// thread with a claim cursor), opens it (`state_`), bumps each participating worker's own `seq`
// word and runs its own share. A worker spins on its `seq` for kSpinMicros, then sleeps on it
// (futex); woken, it enters the open job, claims tasks of its share, then unclaimed tasks of the
// other shares, and leaves. The caller, having finished its share, also takes unclaimed tasks of
// the others, so a worker that another process keeps off its core holds nothing up unless it is
// inside a task. The caller then waits (spin, then futex) until every task is done, closes the
// job and waits until no worker is inside it. A futex wake is issued only to a waiter that
// announced it sleeps (seq_cst flag stores and loads on both sides, so no wake is missed).
#include "backend/cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace eg::cpu {
namespace {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Sleeps while *a == expected (may return spuriously); wakes one sleeper on a.
#if defined(__linux__)
void futex_wait(std::atomic<uint32_t>& a, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&a), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}
void futex_wake(std::atomic<uint32_t>& a) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&a), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}
#else
void futex_wait(std::atomic<uint32_t>& a, uint32_t expected) { a.wait(expected); }
void futex_wake(std::atomic<uint32_t>& a) { a.notify_one(); }
#endif

// Contention: a spinning thread that sees a gap of kPreemptedMicros between two of its clock
// reads was descheduled, i.e. something else wants this core. Spinning then only takes CPU time
// from the thread we wait for (and sleepers get the scheduler's wake-up preference), so every
// waiter of the pool sleeps at once, without spinning, for kContendedMillis; then spinning is
// tried again. On a quiet machine no gap is ever seen and waiters always spin first.
constexpr int64_t kPreemptedMicros = 200;
constexpr int64_t kContendedMillis = 50;
std::atomic<int64_t> g_contended_until_ns{0};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Spins up to kSpinMicros until pred() holds (not at all while contended); false if it still
// does not hold.
template <class Pred>
bool spin_until(Pred pred) {
  if (pred()) return true;
  int64_t last = now_ns();
  if (last < g_contended_until_ns.load(std::memory_order_relaxed)) return false;
  const int64_t deadline = last + int64_t{kSpinMicros} * 1000;
  for (int i = 1;; ++i) {
    if (pred()) return true;
    cpu_relax();
    if ((i & 31) == 0) {
      const int64_t t = now_ns();
      if (t - last > kPreemptedMicros * 1000) {
        g_contended_until_ns.store(t + kContendedMillis * 1000000, std::memory_order_relaxed);
        return pred();
      }
      if (t > deadline) return pred();
      last = t;
    }
  }
}

thread_local bool t_in_task = false;
thread_local int t_threads = 0;  // 0: the process default

int initial_threads() {
  for (const char* var : {"EDGEGEMMA_THREADS", "OMP_NUM_THREADS"}) {
    if (const char* v = std::getenv(var)) {
      const int n = std::atoi(v);  // OMP_NUM_THREADS may be a list ("4,2"): its first value
      if (n > 0) return n;
    }
  }
  return hardware_threads();
}

std::atomic<int>& default_threads() {
  static std::atomic<int> n{initial_threads()};
  return n;
}

struct Job {
  TaskFn fn = nullptr;
  void* ctx = nullptr;
  int64_t n_tasks = 0;
  int n_threads = 1;
};

class Pool {
 public:
  ~Pool() {
    std::lock_guard<std::mutex> lk(mu);
    stop_.store(true);
    for (auto& w : workers_) {
      w->seq.fetch_add(1);
      futex_wake(w->seq);
    }
    for (auto& w : workers_) w->thread.join();
  }

  std::mutex mu;  // held for a whole dispatch

  // Caller holds mu. Runs the job on threads 0 (the caller) .. n_threads - 1; n_tasks <= 2^30.
  void dispatch(const Job& job) {
    const int k = job.n_threads;
    grow(k);
    job_ = job;
    done_.store(0, std::memory_order_relaxed);
    err_task_ = INT64_MAX;
    err_ = nullptr;
    for (int i = 0; i < k; ++i) {
      shares_[i].next.store(job.n_tasks * i / k, std::memory_order_relaxed);
      shares_[i].end = job.n_tasks * (i + 1) / k;
    }
    state_.store(kOpen);  // seq_cst: publishes the job to the workers that enter it
    for (int i = 0; i < k - 1; ++i) {
      Worker& w = *workers_[i];
      w.seq.fetch_add(1);  // seq_cst, then the sleeping flag is read: a sleeper is never missed
      if (w.sleeping.load()) futex_wake(w.seq);
    }
    work(0);
    wait_until(done_, [&](uint32_t v) { return v == static_cast<uint32_t>(job.n_tasks); });
    state_.fetch_and(~kOpen);  // no worker enters any more
    wait_until(state_, [](uint32_t v) { return (v & kActive) == 0; });
    if (err_) std::rethrow_exception(err_);
  }

 private:
  static constexpr uint32_t kOpen = 1u << 31, kActive = kOpen - 1;  // state_: open bit | workers inside

  struct alignas(64) Worker {
    std::atomic<uint32_t> seq{0};       // bumped by the dispatcher: a job (or stop) is ready
    std::atomic<uint32_t> sleeping{0};  // 1 while the worker sleeps (or is about to) on seq
    std::thread thread;
  };
  // Thread i's contiguous tasks [i·n/k, end); `next` is the next unclaimed one.
  struct alignas(64) Share {
    std::atomic<int64_t> next{0};
    int64_t end = 0;
  };

  void grow(int k) {
    if (k > n_shares_) {  // no job is open, so no worker reads the shares
      shares_ = std::make_unique<Share[]>(static_cast<size_t>(k));
      n_shares_ = k;
    }
    while (static_cast<int>(workers_.size()) < k - 1) {
      auto w = std::make_unique<Worker>();
      Worker* wp = w.get();
      const int thread = static_cast<int>(workers_.size()) + 1;
      w->thread = std::thread([this, wp, thread] { worker_main(*wp, thread); });
      workers_.push_back(std::move(w));
    }
  }

  // Runs unclaimed tasks: the own share first, then the other shares' leftovers. Who runs a task
  // never changes what it computes. A task's exception is kept (the lowest task index wins).
  void work(int thread) {
    const int k = job_.n_threads;
    const uint32_t n = static_cast<uint32_t>(job_.n_tasks);
    t_in_task = true;
    for (int s = 0; s < k; ++s) {
      Share& sh = shares_[(thread + s) % k];
      for (int64_t i; (i = sh.next.fetch_add(1, std::memory_order_relaxed)) < sh.end;) {
        try {
          job_.fn(job_.ctx, i, thread);
        } catch (...) {
          std::lock_guard<std::mutex> lk(err_mu_);
          if (i < err_task_) {
            err_task_ = i;
            err_ = std::current_exception();
          }
        }
        if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == n && caller_sleeping_.load()) futex_wake(done_);
      }
    }
    t_in_task = false;
  }

  void worker_main(Worker& w, int thread) {
    uint32_t seen = 0;
    for (;;) {
      if (!spin_until([&] { return w.seq.load(std::memory_order_acquire) != seen; })) {
        w.sleeping.store(1);
        while (w.seq.load() == seen) futex_wait(w.seq, seen);
        w.sleeping.store(0, std::memory_order_relaxed);
      }
      seen = w.seq.load(std::memory_order_acquire);
      if (stop_.load()) return;
      // Enter the open job; a late worker may find it closed (its tasks were taken): nothing to do.
      uint32_t st = state_.load();
      bool entered = false;
      while ((st & kOpen) && !(entered = state_.compare_exchange_weak(st, st + 1))) {
      }
      if (!entered) continue;
      if (thread < job_.n_threads) work(thread);
      if (((state_.fetch_sub(1) - 1) & kActive) == 0 && caller_sleeping_.load()) futex_wake(state_);
    }
  }

  // The dispatcher's wait: spin, then sleep on the word until pred(value) holds.
  template <class Pred>
  void wait_until(std::atomic<uint32_t>& a, Pred pred) {
    if (spin_until([&] { return pred(a.load(std::memory_order_acquire)); })) return;
    caller_sleeping_.store(1);
    for (uint32_t v; !pred(v = a.load());) futex_wait(a, v);
    caller_sleeping_.store(0, std::memory_order_relaxed);
  }

  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<Share[]> shares_;
  int n_shares_ = 0;
  Job job_;
  alignas(64) std::atomic<uint32_t> done_{0};   // tasks finished
  alignas(64) std::atomic<uint32_t> state_{0};  // kOpen | workers inside the job
  std::atomic<uint32_t> caller_sleeping_{0};
  std::atomic<bool> stop_{false};
  std::mutex err_mu_;
  int64_t err_task_ = INT64_MAX;
  std::exception_ptr err_;
};

Pool& pool() {
  static Pool p;
  return p;
}

// All tasks in order on the calling thread, with the pool's exception rule (all run; the first
// one's exception, i.e. the lowest task index, is rethrown at the end).
void run_inline(int64_t n_tasks, TaskFn fn, void* ctx) {
  std::exception_ptr err;
  for (int64_t i = 0; i < n_tasks; ++i) {
    try {
      fn(ctx, i, 0);
    } catch (...) {
      if (!err) err = std::current_exception();
    }
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace

int hardware_threads() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
#endif
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

void set_num_threads(int n) { t_threads = n > 0 ? n : 0; }

void set_default_num_threads(int n) { default_threads().store(n > 0 ? n : initial_threads()); }

int num_threads() { return t_threads > 0 ? t_threads : default_threads().load(std::memory_order_relaxed); }

bool in_parallel_task() { return t_in_task; }

void run_tasks(int64_t n_tasks, int n_threads, TaskFn fn, void* ctx) {
  if (n_tasks <= 0) return;
  int k = n_threads > 0 ? n_threads : num_threads();
  if (static_cast<int64_t>(k) > n_tasks) k = static_cast<int>(n_tasks);
  if (k <= 1 || t_in_task) return run_inline(n_tasks, fn, ctx);  // nested: inline
  Pool& p = pool();
  std::unique_lock<std::mutex> lk(p.mu, std::try_to_lock);
  if (!lk.owns_lock()) return run_inline(n_tasks, fn, ctx);  // another thread's dispatch runs
  constexpr int64_t kMaxTasks = int64_t{1} << 30;             // the done counter is 32-bit
  if (n_tasks <= kMaxTasks) return p.dispatch(Job{fn, ctx, n_tasks, k});
  struct Offset {
    TaskFn fn;
    void* ctx;
    int64_t base;
  } off{fn, ctx, 0};
  const TaskFn shifted = [](void* c, int64_t t, int th) {
    auto* o = static_cast<Offset*>(c);
    o->fn(o->ctx, o->base + t, th);
  };
  for (; off.base < n_tasks; off.base += kMaxTasks)
    p.dispatch(Job{shifted, &off, std::min(kMaxTasks, n_tasks - off.base), k});
}

}  // namespace eg::cpu
