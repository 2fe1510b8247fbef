#include "scheduler.h"

#include <algorithm>

#include "metrics.h"

namespace fluxrt::server {

Job::State Job::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_;
}

Job::State Job::wait(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return state_.version != seen; });
  return state_;
}

void Job::update(const std::function<void(State&)>& change) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    change(state_);
    ++state_.version;
  }
  changed_.notify_all();
}

std::optional<Image> Job::preview_at(int step) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [at, image] : previews_)
    if (at == step) return image;
  return std::nullopt;
}

Scheduler::Scheduler(Engine& engine, SchedulerOptions options, Metrics& metrics)
    : engine_(engine), options_(options), metrics_(metrics) {
  worker_ = std::thread([this] { work(); });
}

Scheduler::~Scheduler() { drain(); }

bool Scheduler::submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (draining_ || int(queue_.size()) >= options_.max_queue) return false;
    queue_.push_back(job);
    metrics_.set_queue_depth(int(queue_.size()));
  }
  wake_.notify_all();
  return true;
}

void Scheduler::abandon(const std::shared_ptr<Job>& job) {
  job->cancel();
  bool dropped = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = std::find(queue_.begin(), queue_.end(), job);
    if (it != queue_.end()) {
      queue_.erase(it);
      dropped = true;
      metrics_.set_queue_depth(int(queue_.size()));
    }
  }
  if (dropped) {
    job->error_.emplace(ErrorCode::Cancelled, "cancelled while queued");
    job->update([](Job::State& s) {
      s.done = true;
      s.done_at = Job::Clock::now();
    });
  }
}

int Scheduler::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return int(queue_.size());
}

int Scheduler::running() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return running_;
}

double Scheduler::mean_job_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return mean_job_s_;
}

void Scheduler::drain() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    draining_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void Scheduler::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return draining_ || !queue_.empty(); });
    if (queue_.empty()) return;  // draining and nothing left
    std::vector<std::shared_ptr<Job>> batch = next_batch(lock);
    if (batch.empty()) continue;
    running_ += int(batch.size());
    metrics_.set_queue_depth(int(queue_.size()));
    metrics_.set_running(running_);
    lock.unlock();
    const auto start = Job::Clock::now();
    run(batch);
    const double seconds = std::chrono::duration<double>(Job::Clock::now() - start).count();
    lock.lock();
    running_ -= int(batch.size());
    metrics_.set_running(running_);
    // An exponential mean: recent jobs count most, as the queue's wait depends on them.
    mean_job_s_ = mean_job_s_ == 0 ? seconds : 0.8 * mean_job_s_ + 0.2 * seconds;
  }
}

// The front job, and with batching the queued jobs that share its non-empty key, up to
// max_batch images, waiting up to batch_window after the front job arrived for them to come.
std::vector<std::shared_ptr<Job>> Scheduler::next_batch(std::unique_lock<std::mutex>& lock) {
  std::vector<std::shared_ptr<Job>> batch{queue_.front()};
  queue_.pop_front();
  const std::string key = batch.front()->batch_key;
  auto images = [](const Job& j) { return int(j.request.prompts.size()) * j.request.images_per_prompt; };
  int total = images(*batch.front());
  if (key.empty() || options_.max_batch <= 1) return batch;
  const auto deadline = batch.front()->enqueued + options_.batch_window;
  for (;;) {
    for (auto it = queue_.begin(); it != queue_.end() && total < options_.max_batch;) {
      if ((*it)->batch_key == key && total + images(**it) <= options_.max_batch) {
        total += images(**it);
        batch.push_back(*it);
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    if (total >= options_.max_batch || draining_ || Job::Clock::now() >= deadline) break;
    wake_.wait_until(lock, deadline);
  }
  return batch;
}

void Scheduler::run(const std::vector<std::shared_ptr<Job>>& batch) {
  int images = 0;
  for (const auto& job : batch) images += int(job->request.prompts.size()) * job->request.images_per_prompt;
  for (const auto& job : batch)
    job->update([&](Job::State& s) {
      s.started = true;
      s.started_at = Job::Clock::now();
      s.batch_size = images;
    });
  metrics_.observe_batch(images);

  Callbacks callbacks;
  // The batch stops only when every one of its clients has gone; a single cancelled job's images
  // are computed with the others' and dropped.
  CancelToken batch_cancel;
  callbacks.cancel = batch_cancel;
  auto all_cancelled = [&] {
    return std::all_of(batch.begin(), batch.end(), [](const auto& j) { return j->cancelled(); });
  };
  for (const auto& job : batch)  // the engine previews every image at the union of the steps
    for (const int step : job->preview_steps)
      if (std::find(callbacks.preview_steps.begin(), callbacks.preview_steps.end(), step) ==
          callbacks.preview_steps.end())
        callbacks.preview_steps.push_back(step);
  callbacks.on_progress = [&](const Progress& p) {
    metrics_.observe_step(p.step_seconds);
    // Previews come in result order: each job's images in turn. Stored before the step is
    // published, so a stream that sees the step finds its preview.
    size_t first_image = 0;
    for (const auto& job : batch) {
      const bool wanted =
          std::find(job->preview_steps.begin(), job->preview_steps.end(), p.step) != job->preview_steps.end();
      if (wanted && first_image < p.previews.size()) {
        std::lock_guard<std::mutex> lock(job->mutex_);
        job->previews_.emplace_back(p.step, p.previews[first_image]);
      }
      first_image += job->request.prompts.size() * size_t(job->request.images_per_prompt);
    }
    for (const auto& job : batch)
      job->update([&](Job::State& s) {
        s.step = p.step;
        s.total = p.total;
      });
    if (all_cancelled()) batch_cancel.cancel();
  };
  if (all_cancelled()) batch_cancel.cancel();

  std::vector<std::optional<GenerateResult>> results(batch.size());
  std::optional<Error> failure;
  try {
    if (batch.size() == 1) {
      results[0] = engine_.generate(batch[0]->request, callbacks);
    } else {
      std::vector<GenerateRequest> requests;
      for (const auto& job : batch) requests.push_back(job->request);
      std::vector<GenerateResult> out = engine_.generate_batch(requests, callbacks);
      for (size_t i = 0; i < out.size() && i < results.size(); ++i) results[i] = std::move(out[i]);
    }
  } catch (const Error& e) {
    failure = e;
  } catch (const std::exception& e) {
    failure.emplace(ErrorCode::Internal, e.what());
  }
  // One request the checks let through can fail a whole batch (generate_batch's rule): then each
  // runs alone, so only its own client gets the error.
  if (failure && batch.size() > 1 && failure->code() != ErrorCode::Cancelled) {
    for (const auto& job : batch) run({job});
    return;
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    Job& job = *batch[i];
    if (failure)
      job.error_ = failure;
    else if (job.cancelled())
      job.error_.emplace(ErrorCode::Cancelled, "cancelled: the client went away");
    else if (results[i])
      job.result_ = std::move(results[i]);
    else
      job.error_.emplace(ErrorCode::Internal, "the batch returned no result for this request");
    job.update([](Job::State& s) {
      s.done = true;
      s.done_at = Job::Clock::now();
    });
  }
}

}  // namespace fluxrt::server
