// A persistent pool for data-parallel loops. Decode issues a few hundred small dispatches per
// token, so a dispatch must cost about a microsecond: workers spin briefly on a generation counter
// before sleeping, the calling thread does its share of the work, chunks are claimed from one
// atomic counter, and nothing is allocated or type-erased through std::function per dispatch.
//
// One dispatch owns the workers at a time. A second thread that dispatches while they are owned
// waits for them (correct, but a sign that two users share a pool meant for one: counted in
// contended_dispatches()); a task that dispatches on its own pool runs that range inline on its
// thread. Neither can deadlock or spin forever.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace frugal {

class ThreadPool {
 public:
  // fn(ctx, begin, end, thread) handles indices [begin, end); thread is in [0, size()), 0 being
  // the caller.
  using TaskFn = void (*)(void* ctx, int64_t begin, int64_t end, int thread);

  // n_threads counts the calling thread; 0 means one per CPU this process may run on.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Splits [0, n) into chunks of `chunk` indices (the last may be shorter), hands them out to the
  // threads as they become free, and returns once every chunk is done. A range of one chunk runs
  // on the caller alone.
  void dispatch(TaskFn fn, void* ctx, int64_t n, int64_t chunk);

  // fn(begin, end, thread) for each chunk; see dispatch().
  template <typename Fn>
  void parallel_for(int64_t n, int64_t chunk, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    dispatch(
        [](void* ctx, int64_t b, int64_t e, int t) { (*static_cast<F*>(ctx))(b, e, t); },
        const_cast<void*>(static_cast<const void*>(&fn)), n, chunk);
  }

  // Dispatches that had to wait for another thread's dispatch to release the workers.
  uint64_t contended_dispatches() const { return contended_.load(std::memory_order_relaxed); }
  // Dispatches issued from inside a task of this pool (run inline on the task's thread).
  uint64_t nested_dispatches() const { return nested_.load(std::memory_order_relaxed); }

  // Number of CPUs this process may run on.
  static int available_cpus();

 private:
  void worker_main(int thread);
  void run_chunks(uint32_t generation, int thread);

  int n_threads_ = 1;
  std::vector<std::thread> workers_;

  // Current job; written by the dispatcher before generation_ is bumped. Atomics (relaxed) because
  // a worker that wakes late may read them while the next job is being written; it then fails to
  // claim anything, see claim_.
  std::atomic<TaskFn> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<int64_t> n_{0};
  std::atomic<int64_t> chunk_{1};
  std::atomic<bool> stop_{false};
  // Held by the dispatch that owns the workers; see contended_dispatches().
  std::atomic<bool> busy_{false};
  std::atomic<uint64_t> contended_{0};
  std::atomic<uint64_t> nested_{0};

  // (generation << 32) | next index to hand out. Claims compare the generation, so a worker never
  // takes work from a job other than the one it read; the dispatcher waits for completed work
  // (done_), not for workers to show up, so a descheduled worker does not stall a dispatch.
  alignas(64) std::atomic<uint64_t> claim_{0};
  alignas(64) std::atomic<int64_t> done_{0};         // indices finished in the current job
  alignas(64) std::atomic<uint32_t> generation_{0};  // bumped once per job
  alignas(64) std::atomic<int> sleepers_{0};         // workers blocked in generation_.wait
};

}  // namespace frugal
