// fluxrt::Scheduler (include/fluxrt/scheduler.h): the queue, the worker thread that forms engine
// calls from it, and each job's state. Locks: the scheduler's mutex guards the queue, the running
// call and the counters; each job's mutex guards its state. The worker never holds the
// scheduler's mutex while the engine runs, and no lock is held while a job's owner is waited for.
#include "fluxrt/scheduler.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>
#include <utility>

namespace fluxrt {
namespace {

int images_of(const std::vector<GenerateRequest>& requests) {
  int images = 0;
  for (const GenerateRequest& r : requests) images += int(r.prompts.size()) * r.images_per_prompt;
  return images;
}

}  // namespace

struct Job::Impl {
  Impl(std::vector<GenerateRequest> requests, std::string batch_key, JobOptions options)
      : requests(std::move(requests)),
        batch_key(std::move(batch_key)),
        options(std::move(options)),
        images(images_of(this->requests)) {}

  // Applies `change` to the state, bumps its version and wakes the waiters.
  void update(const std::function<void(State&)>& change) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      change(state);
      ++state.version;
    }
    changed.notify_all();
  }

  void finish(std::optional<Error> failure, std::vector<GenerateResult> out) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      error = std::move(failure);
      results = std::move(out);
    }
    update([](State& s) {
      s.done = true;
      s.done_at = Clock::now();
    });
  }

  // step_by_step: blocks the engine's thread until the owner has handled every step so far, or
  // the job is cancelled.
  void wait_for_owner() {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return resumed >= progress.size() || cancel.cancelled(); });
  }

  const std::vector<GenerateRequest> requests;
  const std::string batch_key;
  const JobOptions options;
  const int images;  // of all its requests
  const Clock::time_point enqueued = Clock::now();
  bool counted_cancelled = false;  // guarded by the scheduler's mutex

  mutable std::mutex mutex;
  mutable std::condition_variable changed;
  State state;
  std::vector<Progress> progress;               // every step seen, without previews
  size_t resumed = 0;                           // progress entries the owner has handled
  std::vector<std::pair<int, Image>> previews;  // (step, preview of the first image)
  std::vector<GenerateResult> results;
  std::optional<Error> error;
  CancelToken cancel;
};

Job::Job(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Job::~Job() = default;

const std::vector<GenerateRequest>& Job::requests() const { return impl_->requests; }
const std::string& Job::batch_key() const { return impl_->batch_key; }
Job::Clock::time_point Job::enqueued() const { return impl_->enqueued; }

Job::State Job::state() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->state;
}

Job::State Job::wait(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(impl_->mutex);
  impl_->changed.wait_for(lock, timeout, [&] { return impl_->state.version != seen; });
  return impl_->state;
}

Job::State Job::wait_done() const {
  std::unique_lock<std::mutex> lock(impl_->mutex);
  impl_->changed.wait(lock, [&] { return impl_->state.done; });
  return impl_->state;
}

std::vector<Progress> Job::progress(size_t first) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (first >= impl_->progress.size()) return {};
  return std::vector<Progress>(impl_->progress.begin() + std::ptrdiff_t(first), impl_->progress.end());
}

std::optional<Image> Job::preview_at(int step) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  for (const auto& [at, image] : impl_->previews)
    if (at == step) return image;
  return std::nullopt;
}

void Job::resume(size_t handled) {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->resumed = std::max(impl_->resumed, handled);
  }
  impl_->changed.notify_all();
}

const std::vector<GenerateResult>& Job::results() const { return impl_->results; }
const std::optional<Error>& Job::error() const { return impl_->error; }

void Job::cancel() {
  impl_->cancel.cancel();
  // Taking the mutex orders the flag before the wake-up: a waiter between its check of the flag
  // and its wait would otherwise miss both.
  { std::lock_guard<std::mutex> lock(impl_->mutex); }
  impl_->changed.notify_all();
}

bool Job::cancelled() const { return impl_->cancel.cancelled(); }

class Scheduler::Impl {
 public:
  Impl(Engine& engine, SchedulerOptions options) : engine_(engine), options_(options) {
    if (options_.max_queue < 0 || options_.max_batch < 1 || options_.batch_window.count() < 0)
      throw Error(ErrorCode::InvalidArgument,
                  "scheduler: max_queue must be >= 0, max_batch >= 1 and batch_window >= 0 (got " +
                      std::to_string(options_.max_queue) + ", " + std::to_string(options_.max_batch) + ", " +
                      std::to_string(options_.batch_window.count()) + " ms)");
    worker_ = std::thread([this] { work(); });
  }

  std::shared_ptr<Job> submit(std::vector<GenerateRequest> requests, JobOptions options);
  void abandon(const std::shared_ptr<Job>& job);
  SchedulerStats stats() const;
  void drain();
  bool draining() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return draining_;
  }
  const SchedulerOptions& options() const { return options_; }

 private:
  using Jobs = std::vector<std::shared_ptr<Job>>;
  // One engine call's part of a job: its requests, and where its first image is among the
  // call's images (-1: not in this call, e.g. the later calls of a job run one request at a time).
  struct Part {
    Job::Impl* job;
    std::vector<GenerateRequest> requests;
    long first_image;
  };

  void work();
  Jobs next_batch(std::unique_lock<std::mutex>& lock);
  void run(const Jobs& batch);
  std::vector<GenerateResult> call(const std::vector<Part>& parts, const CancelToken& cancel);
  void on_progress(const std::vector<Part>& parts, const Progress& p, CancelToken& cancel);
  static bool all_cancelled(const Jobs& jobs) {
    return std::all_of(jobs.begin(), jobs.end(), [](const auto& j) { return j->cancelled(); });
  }

  Engine& engine_;
  const SchedulerOptions options_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  // The jobs taken from the queue for the call being formed or run, and that call's cancel: when
  // all of them are abandoned, the call stops at the engine's next check.
  Jobs taken_;
  CancelToken call_cancel_;
  int running_ = 0;
  bool draining_ = false;
  SchedulerStats stats_;
  std::thread worker_;
};

std::shared_ptr<Job> Scheduler::Impl::submit(std::vector<GenerateRequest> requests, JobOptions options) {
  if (requests.empty())
    throw Error(ErrorCode::InvalidArgument, "scheduler: a job needs at least one request");
  // The key is needed only to join others or to run several requests as one call; computing it
  // plans each request, so a request the engine cannot plan is refused here, before queueing.
  std::string key;
  if (options_.max_batch > 1 || requests.size() > 1) {
    key = engine_.batch_key(requests.front());
    for (size_t i = 1; i < requests.size() && !key.empty(); ++i)
      if (engine_.batch_key(requests[i]) != key) key.clear();
  }
  std::shared_ptr<Job> job(
      new Job(std::make_unique<Job::Impl>(std::move(requests), std::move(key), std::move(options))));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (draining_ || (options_.max_queue > 0 && int(queue_.size()) >= options_.max_queue)) return nullptr;
    queue_.push_back(job);
  }
  wake_.notify_all();
  return job;
}

void Scheduler::Impl::abandon(const std::shared_ptr<Job>& job) {
  job->cancel();
  bool dropped = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!job->impl_->counted_cancelled) {
      job->impl_->counted_cancelled = true;
      ++stats_.cancelled;
    }
    auto it = std::find(queue_.begin(), queue_.end(), job);
    if (it != queue_.end()) {
      queue_.erase(it);
      dropped = true;
    } else if (std::find(taken_.begin(), taken_.end(), job) != taken_.end() && all_cancelled(taken_)) {
      call_cancel_.cancel();  // the engine stops at its next check, before another step
    }
  }
  if (dropped) job->impl_->finish(Error(ErrorCode::Cancelled, "cancelled while queued"), {});
}

SchedulerStats Scheduler::Impl::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  SchedulerStats s = stats_;
  s.queued = int(queue_.size());
  s.running = running_;
  return s;
}

void Scheduler::Impl::drain() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    draining_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void Scheduler::Impl::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return draining_ || !queue_.empty(); });
    if (queue_.empty()) return;  // draining and nothing left
    const Jobs batch = next_batch(lock);
    running_ = int(batch.size());
    lock.unlock();
    const auto start = Job::Clock::now();
    run(batch);
    const double seconds = std::chrono::duration<double>(Job::Clock::now() - start).count();
    lock.lock();
    running_ = 0;
    taken_.clear();
    // An exponential mean: recent calls count most, as the queue's wait depends on them.
    double& mean = stats_.mean_call_seconds;
    mean = mean == 0 ? seconds : 0.8 * mean + 0.2 * seconds;
  }
}

// The front job, and when it may share its call, the queued jobs with its key while the images
// stay within max_batch, waiting up to batch_window after the front job arrived for them to come.
Scheduler::Impl::Jobs Scheduler::Impl::next_batch(std::unique_lock<std::mutex>& lock) {
  taken_ = {queue_.front()};
  queue_.pop_front();
  const Job::Impl& front = *taken_.front()->impl_;
  int images = front.images;
  call_cancel_ = CancelToken();
  if (front.batch_key.empty() || options_.max_batch <= 1) return taken_;
  const auto deadline = front.enqueued + options_.batch_window;
  for (;;) {
    for (auto it = queue_.begin(); it != queue_.end() && images < options_.max_batch;) {
      const Job::Impl& j = *(*it)->impl_;
      if (j.batch_key == front.batch_key && images + j.images <= options_.max_batch) {
        images += j.images;
        taken_.push_back(*it);
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    if (images >= options_.max_batch || draining_ || Job::Clock::now() >= deadline) break;
    wake_.wait_until(lock, deadline);
  }
  return taken_;
}

void Scheduler::Impl::run(const Jobs& batch) {
  CancelToken cancel;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    taken_ = batch;
    call_cancel_ = cancel;
  }
  for (const auto& job : batch)
    job->impl_->update([&](Job::State& s) {
      s.started = true;
      s.started_at = Job::Clock::now();
    });
  if (all_cancelled(batch)) cancel.cancel();

  std::vector<std::vector<GenerateResult>> results(batch.size());
  std::optional<Error> failure;
  try {
    if (batch.size() == 1 && batch.front()->impl_->batch_key.empty()) {
      // A job on its own whose requests cannot share a call: one call each, in order; its first
      // image (the one previews show) is in the first call.
      Job::Impl& job = *batch.front()->impl_;
      for (size_t i = 0; i < job.requests.size(); ++i) {
        std::vector<GenerateResult> out = call({{&job, {job.requests[i]}, i == 0 ? 0 : -1}}, cancel);
        results[0].push_back(std::move(out.front()));
      }
    } else {
      std::vector<Part> parts;
      long first_image = 0;
      for (const auto& job : batch) {
        parts.push_back({job->impl_.get(), job->impl_->requests, first_image});
        first_image += job->impl_->images;
      }
      std::vector<GenerateResult> out = call(parts, cancel);
      size_t next = 0;
      for (size_t i = 0; i < batch.size(); ++i)
        for (size_t r = 0; r < batch[i]->impl_->requests.size() && next < out.size(); ++r)
          results[i].push_back(std::move(out[next++]));
    }
  } catch (const Error& e) {
    failure = e;
  } catch (const std::exception& e) {
    failure.emplace(ErrorCode::Internal, e.what());
  }
  // One request the checks let through can fail a whole call (generate_batch's rule): then each
  // job runs on its own, so only its owner gets the error.
  if (failure && batch.size() > 1 && failure->code() != ErrorCode::Cancelled) {
    for (const auto& job : batch) run({job});
    return;
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    Job::Impl& job = *batch[i]->impl_;
    if (failure) {
      job.finish(failure, {});
    } else if (job.cancel.cancelled()) {
      job.finish(Error(ErrorCode::Cancelled, "cancelled while running"), {});
    } else if (results[i].size() != job.requests.size()) {
      job.finish(Error(ErrorCode::Internal, "the engine call returned no result for this job"), {});
    } else {
      int made = 0;
      for (const GenerateResult& r : results[i]) made += int(r.images.size());
      const double latency = std::chrono::duration<double>(Job::Clock::now() - job.enqueued).count();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stats_.images += uint64_t(made);
        for (size_t b = 0; b < stats_.latency_bounds.size(); ++b)
          if (latency <= stats_.latency_bounds[b]) ++stats_.latency_counts[b];
        ++stats_.latency_count;
        stats_.latency_sum += latency;
      }
      job.finish(std::nullopt, std::move(results[i]));
    }
  }
}

// One engine call for the parts' requests: generate for one, generate_batch for several.
std::vector<GenerateResult> Scheduler::Impl::call(const std::vector<Part>& parts, const CancelToken& cancel) {
  const int images = std::accumulate(parts.begin(), parts.end(), 0,
                                     [](int n, const Part& part) { return n + images_of(part.requests); });
  for (const Part& part : parts) part.job->update([&](Job::State& s) { s.batch_images = images; });
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.batches[images];
  }
  Callbacks callbacks;
  callbacks.cancel = cancel;
  CancelToken stop = cancel;
  for (const Part& part : parts)  // the engine previews every image at the union of the steps
    for (const int step : part.job->options.preview_steps)
      if (std::find(callbacks.preview_steps.begin(), callbacks.preview_steps.end(), step) ==
          callbacks.preview_steps.end())
        callbacks.preview_steps.push_back(step);
  callbacks.on_progress = [&](const Progress& p) { on_progress(parts, p, stop); };
  std::vector<GenerateRequest> requests;
  for (const Part& part : parts) requests.insert(requests.end(), part.requests.begin(), part.requests.end());
  if (requests.size() == 1) return {engine_.generate(requests.front(), callbacks)};
  return engine_.generate_batch(requests, callbacks);
}

// After each step of a call, on the worker thread: the counters, each job's progress and
// previews, then (step_by_step) the wait for the owners, then the cancel when nobody is left.
void Scheduler::Impl::on_progress(const std::vector<Part>& parts, const Progress& p, CancelToken& cancel) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.steps;
    stats_.step_seconds += p.step_seconds;
    stats_.last_step_seconds = p.step_seconds;
  }
  Progress plain = p;
  plain.previews.clear();
  for (const Part& part : parts) {
    Job::Impl& job = *part.job;
    const std::vector<int>& wanted = job.options.preview_steps;
    // Stored before the step is published, so a waiter that sees the step finds its preview.
    if (part.first_image >= 0 && size_t(part.first_image) < p.previews.size() &&
        std::find(wanted.begin(), wanted.end(), p.step) != wanted.end()) {
      std::lock_guard<std::mutex> lock(job.mutex);
      job.previews.emplace_back(p.step, p.previews[size_t(part.first_image)]);
    }
    job.update([&](Job::State& s) {
      job.progress.push_back(plain);
      s.step = p.step;
      s.total = p.total;
    });
  }
  for (const Part& part : parts)
    if (part.job->options.step_by_step) part.job->wait_for_owner();
  if (std::all_of(parts.begin(), parts.end(), [](const Part& part) { return part.job->cancel.cancelled(); }))
    cancel.cancel();
}

Scheduler::Scheduler(Engine& engine, SchedulerOptions options)
    : impl_(std::make_unique<Impl>(engine, options)) {}
Scheduler::~Scheduler() { drain(); }

std::shared_ptr<Job> Scheduler::submit(GenerateRequest request, JobOptions options) {
  std::vector<GenerateRequest> requests;
  requests.push_back(std::move(request));
  return impl_->submit(std::move(requests), std::move(options));
}

std::shared_ptr<Job> Scheduler::submit(std::vector<GenerateRequest> requests, JobOptions options) {
  return impl_->submit(std::move(requests), std::move(options));
}

void Scheduler::abandon(const std::shared_ptr<Job>& job) {
  if (job) impl_->abandon(job);
}

SchedulerStats Scheduler::stats() const { return impl_->stats(); }
const SchedulerOptions& Scheduler::options() const { return impl_->options(); }
void Scheduler::drain() { impl_->drain(); }
bool Scheduler::draining() const { return impl_->draining(); }

}  // namespace fluxrt
