#include "storage/tiered/task_pool.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

namespace strata::storage {

TaskPool::TaskPool(std::string name, uint32_t threads) {
  name.resize(std::min<size_t>(name.size(), 15));
  threads_.reserve(threads);
  for (uint32_t i = 0; i < threads; ++i) {
    threads_.emplace_back([this] { Work(); });
    pthread_setname_np(threads_.back().native_handle(), name.c_str());
  }
}

TaskPool::~TaskPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

void TaskPool::Batch::Run(Task task) {
  absl::MutexLock lock(&pool_.mu_);
  ++unfinished_;
  pool_.queue_.push_back({this, std::move(task)});
}

void TaskPool::Batch::Wait() {
  pool_.mu_.Lock();
  while (unfinished_ > 0) {
    auto mine = std::find_if(pool_.queue_.begin(), pool_.queue_.end(),
                             [this](const Queued& queued) { return queued.batch == this; });
    if (mine == pool_.queue_.end()) {
      // What is left runs on the pool's threads.
      pool_.mu_.Await(absl::Condition(
          +[](uint64_t* unfinished) { return *unfinished == 0; }, &unfinished_));
      break;
    }
    Queued queued = std::move(*mine);
    pool_.queue_.erase(mine);
    pool_.mu_.Unlock();
    pool_.RunOne(std::move(queued));
    pool_.mu_.Lock();
  }
  pool_.mu_.Unlock();
}

void TaskPool::Work() {
  while (true) {
    mu_.Lock();
    mu_.Await(absl::Condition(this, &TaskPool::HasWorkOrStopping));
    if (queue_.empty()) {  // stopping, and every batch has waited
      mu_.Unlock();
      return;
    }
    Queued queued = std::move(queue_.front());
    queue_.pop_front();
    mu_.Unlock();
    RunOne(std::move(queued));
  }
}

void TaskPool::RunOne(Queued queued) {
  std::move(queued.task)();
  queued.task = nullptr;  // what it holds goes before its batch may
  absl::MutexLock lock(&mu_);
  --queued.batch->unfinished_;
}

}  // namespace strata::storage
