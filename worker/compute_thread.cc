#include "worker/compute_thread.h"

#include <utility>

namespace shardlm {

ComputeThread::ComputeThread(std::function<void()> init)
    : thread_([this, init = std::move(init)] { Loop(init); }) {}

ComputeThread::~ComputeThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ComputeThread::Run(const std::function<void()>& fn) {
  std::lock_guard<std::mutex> call(call_mu_);
  std::unique_lock<std::mutex> lock(mu_);
  task_ = &fn;
  done_ = false;
  cv_.notify_all();
  cv_.wait(lock, [this] { return done_; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void ComputeThread::Loop(const std::function<void()>& init) {
  if (init) init();
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || task_ != nullptr; });
    if (task_ == nullptr) return;  // stopping with nothing to run
    const std::function<void()>* fn = task_;
    task_ = nullptr;
    lock.unlock();
    std::exception_ptr error;
    try {
      (*fn)();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    error_ = error;
    done_ = true;
    cv_.notify_all();
  }
}

}  // namespace shardlm
