// The forward pass's thread pool (thread_pool.h): one process-wide pool of persistent workers
// that grows to the largest thread count asked for; a dispatch wakes only the workers it uses.
//
// Hand-off per worker: the dispatcher writes the job, then bumps the worker's own `seq` word; the
// worker, which spins on that word for kSpinMicros and then sleeps on it (futex), runs its share
// and decrements `pending_`; the dispatcher runs share 0 and waits for `pending_` == 0 the same
// way. A futex wake is issued only for a waiter that announced it sleeps (`sleeping` flags, with
// sequentially consistent stores and loads on both sides so a wake is never missed).
#include "backend/cpu/thread_pool.h"

#include <atomic>
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

// Spins up to kSpinMicros until pred() holds; false if it still does not.
template <class Pred>
bool spin_until(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
  for (int i = 0;; ++i) {
    if (pred()) return true;
    cpu_relax();
    if ((i & 31) == 31 && std::chrono::steady_clock::now() > deadline) return pred();
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

// Runs thread `thread`'s contiguous share of the job; returns what a task threw (the rest of
// the share is skipped then).
std::exception_ptr run_share(const Job& job, int thread) {
  const int64_t begin = job.n_tasks * thread / job.n_threads;
  const int64_t end = job.n_tasks * (thread + 1) / job.n_threads;
  t_in_task = true;
  std::exception_ptr err;
  try {
    for (int64_t i = begin; i < end; ++i) job.fn(job.ctx, i, thread);
  } catch (...) {
    err = std::current_exception();
  }
  t_in_task = false;
  return err;
}

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

  // Caller holds mu. Runs the job on threads 0 (the caller) .. n_threads - 1.
  void dispatch(const Job& job) {
    while (static_cast<int>(workers_.size()) < job.n_threads - 1) {
      auto w = std::make_unique<Worker>();
      Worker* wp = w.get();
      const int thread = static_cast<int>(workers_.size()) + 1;
      w->thread = std::thread([this, wp, thread] { worker_main(*wp, thread); });
      workers_.push_back(std::move(w));
    }
    job_ = job;
    pending_.store(static_cast<uint32_t>(job.n_threads - 1), std::memory_order_relaxed);
    for (int i = 0; i < job.n_threads - 1; ++i) {
      Worker& w = *workers_[i];
      w.error = nullptr;
      w.seq.fetch_add(1);  // seq_cst: publishes job_, then the sleeping flag is read
      if (w.sleeping.load()) futex_wake(w.seq);
    }
    std::exception_ptr err = run_share(job, 0);
    wait_workers();
    if (err) std::rethrow_exception(err);
    for (int i = 0; i < job.n_threads - 1; ++i)
      if (workers_[i]->error) std::rethrow_exception(workers_[i]->error);
  }

 private:
  struct alignas(64) Worker {
    std::atomic<uint32_t> seq{0};       // bumped by the dispatcher: a job (or stop) is ready
    std::atomic<uint32_t> sleeping{0};  // 1 while the worker sleeps (or is about to) on seq
    std::exception_ptr error;
    std::thread thread;
  };

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
      w.error = run_share(job_, thread);
      if (pending_.fetch_sub(1) == 1 && caller_sleeping_.load()) futex_wake(pending_);
    }
  }

  void wait_workers() {
    if (spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; })) return;
    caller_sleeping_.store(1);
    for (uint32_t v; (v = pending_.load()) != 0;) futex_wait(pending_, v);
    caller_sleeping_.store(0, std::memory_order_relaxed);
  }

  std::vector<std::unique_ptr<Worker>> workers_;
  Job job_;
  alignas(64) std::atomic<uint32_t> pending_{0};
  std::atomic<uint32_t> caller_sleeping_{0};
  std::atomic<bool> stop_{false};
};

Pool& pool() {
  static Pool p;
  return p;
}

void run_inline(int64_t n_tasks, TaskFn fn, void* ctx) {
  for (int64_t i = 0; i < n_tasks; ++i) fn(ctx, i, 0);
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
  p.dispatch(Job{fn, ctx, n_tasks, k});
}

}  // namespace eg::cpu
