#pragma once
// One engine, one worker thread, a bounded queue. A request becomes a Job; the HTTP thread that
// submitted it waits on the job (and streams its progress), the worker runs jobs through
// Engine::generate in arrival order. A job whose client went away is cancelled: dropped from the
// queue, or stopped at its next denoising step. Batching (--max-batch, --batch-window-ms) takes
// the jobs that may share a transformer call from the queue's front and runs them as one.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fluxrt/engine.h"

namespace fluxrt::server {

class Metrics;

// A request's life: queued, running, then done with a result or an error.
class Job {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Job(GenerateRequest request) : request(std::move(request)) {}

  const GenerateRequest request;
  std::string batch_key;  // "" runs alone
  // Steps (1-based, of those that run) after which the job wants a preview of its first image
  // (stream: true with partial_images); set before submit.
  std::vector<int> preview_steps;
  const Clock::time_point enqueued = Clock::now();

  // Snapshot of the job's state, for the waiting HTTP thread.
  struct State {
    bool started = false, done = false;
    int step = 0, total = 0;
    uint64_t version = 0;                       // bumps at every change
    int batch_size = 0;                         // images in the batch it ran in
    Clock::time_point started_at{}, done_at{};  // set with started / done
  };
  State state() const;
  // Waits until the state's version passes `seen` or `timeout` passes; returns the state.
  State wait(uint64_t seen, std::chrono::milliseconds timeout) const;

  // After done: the result or the error (code and message).
  const std::optional<GenerateResult>& result() const { return result_; }
  const std::optional<Error>& error() const { return error_; }

  // The preview stored for `step` (set before the state reports that step), if any.
  std::optional<Image> preview_at(int step) const;

  // Asks the job to stop (a client that went away); safe from any thread, any time.
  void cancel() { cancel_.cancel(); }
  bool cancelled() const { return cancel_.cancelled(); }

 private:
  friend class Scheduler;
  void update(const std::function<void(State&)>& change);

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  State state_;
  std::vector<std::pair<int, Image>> previews_;  // (step, preview), at most preview_steps.size()
  std::optional<GenerateResult> result_;
  std::optional<Error> error_;
  CancelToken cancel_;
};

struct SchedulerOptions {
  int max_queue = 32;                         // jobs waiting (not running); submit refuses beyond
  int max_batch = 1;                          // images per engine call
  std::chrono::milliseconds batch_window{0};  // how long the first job waits for company
};

class Scheduler {
 public:
  // Runs on `engine`, which must outlive the scheduler.
  Scheduler(Engine& engine, SchedulerOptions options, Metrics& metrics);
  ~Scheduler();  // drain()

  // Queues the job; false when the queue is full (the caller answers 429) or draining.
  bool submit(const std::shared_ptr<Job>& job);
  // Cancels the job and, when still queued, drops it so it takes no slot.
  void abandon(const std::shared_ptr<Job>& job);

  int queued() const;
  int running() const;
  // Mean seconds per job over the recent ones (for Retry-After); 0 before any has run.
  double mean_job_seconds() const;

  // Refuses new jobs, finishes the queued and running ones, stops the worker. Idempotent.
  void drain();

 private:
  void work();
  std::vector<std::shared_ptr<Job>> next_batch(std::unique_lock<std::mutex>& lock);
  void run(const std::vector<std::shared_ptr<Job>>& batch);

  Engine& engine_;
  const SchedulerOptions options_;
  Metrics& metrics_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  int running_ = 0;
  bool draining_ = false;
  double mean_job_s_ = 0;
  std::thread worker_;
};

}  // namespace fluxrt::server
