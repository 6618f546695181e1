#include "frugal/core/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <cassert>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace frugal {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Long enough to cover the gap between the ops of one forward pass, short enough that an idle
// pool gives its cores back quickly.
constexpr auto kSpinTime = std::chrono::microseconds(200);
constexpr uint64_t kIndexMask = 0xFFFFFFFFull;
// Index value that closes a finished job: larger than any n, so no late claim can succeed.
constexpr uint64_t kClosed = 0xFFFFFFFFull;

// The pool whose task this thread is running (worker or dispatching caller), to tell a nested
// dispatch from a concurrent one.
thread_local const ThreadPool* tls_in_task_of = nullptr;

struct InTask {
  const ThreadPool* saved;
  explicit InTask(const ThreadPool* p) : saved(tls_in_task_of) { tls_in_task_of = p; }
  ~InTask() { tls_in_task_of = saved; }
};

}  // namespace

int ThreadPool::available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool::ThreadPool(int n_threads) {
  n_threads_ = n_threads > 0 ? n_threads : available_cpus();
  workers_.reserve(n_threads_ - 1);
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_main(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_chunks(uint32_t generation, int thread) {
  const TaskFn fn = fn_.load(std::memory_order_relaxed);
  void* const ctx = ctx_.load(std::memory_order_relaxed);
  const int64_t n = n_.load(std::memory_order_relaxed);
  const int64_t chunk = chunk_.load(std::memory_order_relaxed);
  uint64_t c = claim_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(c >> 32) != generation) return;
    const int64_t b = static_cast<int64_t>(c & kIndexMask);
    if (b >= n) return;
    if (!claim_.compare_exchange_weak(c, c + static_cast<uint64_t>(chunk), std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      continue;
    }
    const int64_t e = std::min(n, b + chunk);
    fn(ctx, b, e, thread);
    done_.fetch_add(e - b, std::memory_order_release);
    c = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_main(int thread) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = generation_.load(std::memory_order_acquire);
    if (g == seen) {
      auto start = std::chrono::steady_clock::now();
      for (int i = 1;; ++i) {
        cpu_relax();
        g = generation_.load(std::memory_order_acquire);
        if (g != seen) break;
        if ((i & 255) == 0 && std::chrono::steady_clock::now() - start > kSpinTime) {
          // The seq_cst pair (sleepers_ up here, generation_ bumped then sleepers_ read by the
          // dispatcher) guarantees either we see the new generation or it sees us and notifies.
          sleepers_.fetch_add(1, std::memory_order_seq_cst);
          generation_.wait(seen, std::memory_order_seq_cst);
          sleepers_.fetch_sub(1, std::memory_order_relaxed);
          start = std::chrono::steady_clock::now();
        }
      }
    }
    seen = g;
    if (stop_.load(std::memory_order_relaxed)) return;
    InTask in_task(this);
    run_chunks(g, thread);
  }
}

void ThreadPool::dispatch(TaskFn fn, void* ctx, int64_t n, int64_t chunk) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(1, chunk);
  const auto run_inline = [&](int thread) {
    for (int64_t b = 0; b < n; b += chunk) fn(ctx, b, std::min(n, b + chunk), thread);
  };
  if (tls_in_task_of == this) {
    // A task of this pool dispatching again: the workers are busy with the outer job (possibly
    // waiting on this very task), so the inner range runs here.
    nested_.fetch_add(1, std::memory_order_relaxed);
    return run_inline(0);
  }
  if (n_threads_ == 1 || n <= chunk) return run_inline(0);
  // Two dispatchers writing one job would reset each other's done_ count and both wait forever,
  // so a second thread waits here until the owner is done.
  if (busy_.exchange(true, std::memory_order_acquire)) {
    contended_.fetch_add(1, std::memory_order_relaxed);
    do {
      busy_.wait(true, std::memory_order_relaxed);
    } while (busy_.exchange(true, std::memory_order_acquire));
  }
  InTask in_task(this);
  assert(n + chunk < static_cast<int64_t>(kClosed) && "ThreadPool: range too large");
  const uint32_t g = generation_.load(std::memory_order_relaxed) + 1;
  fn_.store(fn, std::memory_order_relaxed);
  ctx_.store(ctx, std::memory_order_relaxed);
  n_.store(n, std::memory_order_relaxed);
  chunk_.store(chunk, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  claim_.store(static_cast<uint64_t>(g) << 32, std::memory_order_release);
  generation_.store(g, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();

  run_chunks(g, 0);

  // Only chunks already claimed by a worker remain; that worker may have been preempted on a
  // busy machine, so spin a little, then yield the core.
  for (int i = 0; done_.load(std::memory_order_acquire) != n; ++i) {
    if (i < 20000) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  claim_.store((static_cast<uint64_t>(g) << 32) | kClosed, std::memory_order_release);
  busy_.store(false, std::memory_order_release);
  busy_.notify_one();
}

}  // namespace frugal
