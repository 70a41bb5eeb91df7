// The CPU thread pool of the forward pass (in place of OpenMP): persistent workers, one dispatch
// = parallel_for over n tasks, a bounded spin then a futex sleep while waiting.
//
// Partition: static and contiguous. With n tasks on k threads, thread i owns tasks
// [i·n/k, (i+1)·n/k) and runs them in increasing order; a thread that finished its own share takes
// the not yet started tasks of the others (so a thread that another process keeps off its core
// delays nothing it has not started). What a task computes is defined by its index alone, never
// by the thread that runs it, so results do not depend on the thread count (or on who ran what)
// as long as every task writes its own outputs: the ops' contract (each output element is one
// fixed-order reduction, computed by exactly one task).
//
// Waiting: a worker that finished spins for about kSpinMicros (pause instructions) watching for
// the next dispatch, then sleeps on a futex; the dispatching thread runs its share, then waits for
// the rest the same way. When a spinning thread notices it was descheduled (another process wants
// the core), all waiters skip the spin and sleep at once for the next 50 ms. So while another
// process owns a core, the pool behaves like a sleeping (passive) pool, and on a quiet machine
// like a spinning one (OpenMP's active wait spins for whole time slices, and a tiny model's decode
// fell from ~900 to 3 tok/s: docs/performance.md, "Thread pool").
//
// Thread safety: any thread may dispatch. One dispatch at a time uses the workers; a dispatch
// from another thread while they are busy, and a nested dispatch from inside a task, runs all its
// tasks inline on the calling thread (same results: the partition does not change values).
//
// Exceptions: a task may throw. Every other task still runs; when all are done the dispatch
// rethrows the exception of the lowest-numbered task that threw.
#pragma once
#include <cstdint>
#include <type_traits>
#include <utility>

namespace eg::cpu {

/// Busy-wait budget before sleeping, for workers between dispatches and for the dispatcher.
constexpr int kSpinMicros = 30;

/// Thread count for dispatches of the calling thread: n > 0 sets it, n <= 0 returns to the
/// process default. (Like omp_set_num_threads: a per-thread setting.)
void set_num_threads(int n);
/// Process-wide default for threads that did not call set_num_threads: n > 0 sets it, n <= 0
/// resets it to the initial value (EDGEGEMMA_THREADS or OMP_NUM_THREADS if set, else all cores).
void set_default_num_threads(int n);
/// Threads a dispatch from the calling thread uses at most (>= 1).
int num_threads();
/// Logical CPUs of the machine (>= 1).
int hardware_threads();

/// Task body: fn(ctx, task, thread); thread in [0, threads used), unique among the threads of
/// one dispatch (for per-thread scratch), 0 for the caller and for inline runs.
using TaskFn = void (*)(void* ctx, int64_t task, int thread);

/// Runs fn for every task in [0, n_tasks) exactly once on up to n_threads threads (the caller is
/// thread 0); returns when all are done. n_threads <= 0: num_threads(). See the file comment.
void run_tasks(int64_t n_tasks, int n_threads, TaskFn fn, void* ctx);

/// parallel_for(n, f): f(int64_t task, int thread) for every task, on num_threads() threads.
template <class F>
void parallel_for(int64_t n_tasks, F&& f, int n_threads = 0) {
  using Fn = std::remove_reference_t<F>;
  run_tasks(n_tasks, n_threads,
            [](void* ctx, int64_t task, int thread) { (*static_cast<Fn*>(ctx))(task, thread); },
            const_cast<void*>(static_cast<const void*>(&f)));
}

/// True while the calling thread runs a task of a dispatch (nested dispatches run inline).
bool in_parallel_task();

}  // namespace eg::cpu
