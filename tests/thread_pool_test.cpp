// The forward pass's thread pool (src/backend/cpu/thread_pool.h): every task runs exactly once,
// the static partition, results independent of the thread count, nested and concurrent
// dispatches, exceptions, per-thread thread counts, wake-up after sleeping.
#include "backend/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using eg::cpu::parallel_for;

TEST(ThreadPool, EveryTaskRunsExactlyOnce) {
  for (int k = 1; k <= 8; ++k) {
    for (int64_t n : {0, 1, 2, 3, 7, 8, 9, 64, 1000}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
      std::atomic<int> bad_thread{0};
      const int used = static_cast<int>(std::min<int64_t>(k, n));
      parallel_for(n, [&](int64_t task, int thread) {
        runs[task].fetch_add(1);
        if (thread < 0 || thread >= used) bad_thread.fetch_add(1);
      }, k);
      EXPECT_EQ(bad_thread.load(), 0) << "k=" << k << " n=" << n;
      for (int64_t t = 0; t < n; ++t) ASSERT_EQ(runs[t].load(), 1) << "k=" << k << " n=" << n << " task " << t;
    }
  }
}

TEST(ThreadPool, ASlowThreadsUnstartedTasksAreTakenByTheOther) {
  // 64 tasks on 2 threads: thread 1 owns 32..63. Whichever thread runs task 32 stalls (as if
  // another process held its core); the other one, done with its own tasks, takes 33..63.
  std::vector<int> thread_of(64, -1);
  parallel_for(64, [&](int64_t t, int thread) {
    if (t == 32) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    thread_of[t] = thread;
  }, 2);
  int taken = 0;
  for (int t = 33; t < 64; ++t) taken += thread_of[t] != thread_of[32];
  EXPECT_GE(taken, 16) << "the other thread did not take the stalled share's tasks";
}

TEST(ThreadPool, ThreadsReallyRunInParallel) {
  // Four tasks that each wait for all four to have started: only possible on four threads.
  std::atomic<int> started{0};
  std::vector<std::thread::id> ids(4);
  parallel_for(4, [&](int64_t task, int) {
    ids[task] = std::this_thread::get_id();
    started.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (started.load() < 4 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  }, 4);
  EXPECT_EQ(started.load(), 4);
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j) EXPECT_NE(ids[i], ids[j]);
  EXPECT_EQ(ids[0], std::this_thread::get_id());  // the caller is thread 0
}

TEST(ThreadPool, ResultsIdenticalForOneToEightThreads) {
  // Each task reduces its own slice in a fixed order (float sums: order-sensitive).
  const int64_t n = 257, len = 1000;
  std::vector<float> in(static_cast<size_t>(n * len));
  for (size_t i = 0; i < in.size(); ++i) in[i] = 1.0f / static_cast<float>(1 + (i * 7919) % 1013);
  std::vector<float> want(n);
  for (int64_t t = 0; t < n; ++t) {
    float s = 0;
    for (int64_t j = 0; j < len; ++j) s += in[t * len + j];
    want[t] = s;
  }
  for (int k = 1; k <= 8; ++k) {
    std::vector<float> out(n, -1.0f);
    parallel_for(n, [&](int64_t t, int) {
      float s = 0;
      for (int64_t j = 0; j < len; ++j) s += in[t * len + j];
      out[t] = s;
    }, k);
    EXPECT_EQ(std::memcmp(out.data(), want.data(), n * sizeof(float)), 0) << k << " threads";
  }
}

TEST(ThreadPool, NestedCallsRunInline) {
  const int64_t outer = 6, inner = 5;
  std::vector<std::atomic<int>> runs(outer * inner);
  std::atomic<int> bad_thread{0};
  EXPECT_FALSE(eg::cpu::in_parallel_task());
  parallel_for(outer, [&](int64_t o, int) {
    EXPECT_TRUE(eg::cpu::in_parallel_task());
    const std::thread::id me = std::this_thread::get_id();
    parallel_for(inner, [&](int64_t i, int thread) {
      if (thread != 0 || std::this_thread::get_id() != me) bad_thread.fetch_add(1);
      runs[o * inner + i].fetch_add(1);
    }, 4);
  }, 3);
  EXPECT_FALSE(eg::cpu::in_parallel_task());
  EXPECT_EQ(bad_thread.load(), 0);
  for (auto& r : runs) EXPECT_EQ(r.load(), 1);
}

TEST(ThreadPool, ExceptionsPropagateAndThePoolStaysUsable) {
  for (int k : {1, 2, 4}) {
    std::atomic<int> ran{0};
    try {
      parallel_for(40, [&](int64_t t, int) {
        if (t == 37) throw std::runtime_error("task 37 failed");
        ran.fetch_add(1);
      }, k);
      ADD_FAILURE() << "no exception with " << k << " threads";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "task 37 failed");
    }
    EXPECT_EQ(ran.load(), 39);  // every other task ran
    // Several throw: the exception of the lowest-numbered task.
    try {
      parallel_for(40, [&](int64_t t, int) {
        if (t == 35) throw std::runtime_error("late");
        if (t == 3) throw std::runtime_error("early");
      }, k);
      ADD_FAILURE();
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "early") << k;
    }
    std::atomic<int> after{0};
    parallel_for(100, [&](int64_t, int) { after.fetch_add(1); }, k);
    EXPECT_EQ(after.load(), 100);
  }
}

TEST(ThreadPool, ConcurrentDispatchFromTwoThreads) {
  // Two callers (as two C API sessions on two threads): one gets the workers, the other runs
  // inline while they are busy; every task of every dispatch runs exactly once either way.
  auto caller = [](int threads, int rounds, std::atomic<int>& errors) {
    eg::cpu::set_num_threads(threads);
    std::vector<int> hits(97);
    for (int r = 0; r < rounds; ++r) {
      std::fill(hits.begin(), hits.end(), 0);
      parallel_for(97, [&](int64_t t, int) { hits[t] += 1; });
      for (int h : hits)
        if (h != 1) errors.fetch_add(1);
    }
  };
  std::atomic<int> errors{0};
  std::thread a(caller, 4, 3000, std::ref(errors));
  std::thread b(caller, 2, 3000, std::ref(errors));
  caller(3, 1000, errors);
  a.join();
  b.join();
  eg::cpu::set_num_threads(0);
  EXPECT_EQ(errors.load(), 0);
}

TEST(ThreadPool, ThreadCountIsPerCallingThread) {
  const int before = eg::cpu::num_threads();
  EXPECT_GE(before, 1);
  eg::cpu::set_num_threads(3);
  EXPECT_EQ(eg::cpu::num_threads(), 3);
  int other = 0;
  std::thread([&] { other = eg::cpu::num_threads(); }).join();
  EXPECT_EQ(other, before);  // another thread keeps the process default
  eg::cpu::set_default_num_threads(5);
  std::thread([&] { other = eg::cpu::num_threads(); }).join();
  EXPECT_EQ(other, 5);
  EXPECT_EQ(eg::cpu::num_threads(), 3);
  eg::cpu::set_num_threads(0);
  EXPECT_EQ(eg::cpu::num_threads(), 5);
  eg::cpu::set_default_num_threads(0);  // back to the initial default
  EXPECT_EQ(eg::cpu::num_threads(), before);
}

TEST(ThreadPool, WakesWorkersAfterTheySlept) {
  for (int r = 0; r < 20; ++r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // far past the spin budget
    std::atomic<int> n{0};
    parallel_for(8, [&](int64_t, int) { n.fetch_add(1); }, 4);
    ASSERT_EQ(n.load(), 8);
  }
}

}  // namespace
