// The engine-wide lock: recursive, like std::recursive_mutex, and able to be
// let go of entirely while a thread waits for other threads (the ranks of a
// device group meeting before a launch), which need it to get there.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

namespace torch_tpu::engine {

class EngineMutex {
 public:
  void lock() {
    if (owner_.load(std::memory_order_relaxed) == std::this_thread::get_id()) {
      ++depth_;
      return;
    }
    mutex_.lock();
    owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    depth_ = 1;
  }
  bool try_lock() {
    if (owner_.load(std::memory_order_relaxed) == std::this_thread::get_id()) {
      ++depth_;
      return true;
    }
    if (!mutex_.try_lock()) return false;
    owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    depth_ = 1;
    return true;
  }
  void unlock() {
    if (--depth_ > 0) return;
    owner_.store(std::thread::id(), std::memory_order_relaxed);
    mutex_.unlock();
  }

  // Runs `wait` with the lock let go of, however deep this thread holds it,
  // and takes it again as deep afterwards.
  void unlocked_while(const std::function<void()>& wait) {
    int depth = 0;
    if (owner_.load(std::memory_order_relaxed) == std::this_thread::get_id()) {
      depth = depth_;
      depth_ = 0;
      owner_.store(std::thread::id(), std::memory_order_relaxed);
      mutex_.unlock();
    }
    struct Relock {
      EngineMutex& m;
      int depth;
      ~Relock() {
        if (depth == 0) return;
        m.mutex_.lock();
        m.owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
        m.depth_ = depth;
      }
    } relock{*this, depth};
    wait();
  }

 private:
  std::mutex mutex_;
  std::atomic<std::thread::id> owner_{};
  int depth_ = 0;  // guarded by mutex_
};

}  // namespace torch_tpu::engine
