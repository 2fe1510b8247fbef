#pragma once
// fluxrt::Scheduler: one Engine shared by many callers (a server's HTTP threads, Python threads on
// one pipeline). Each submission becomes a Job in a bounded queue; one worker thread runs the jobs
// through the engine in arrival order, and runs queued jobs whose requests may share a transformer
// call (equal Engine::batch_key) as one generate_batch, each still with its own seed's noise, so
// concurrent requests batch and each gets the images it gets alone. A job can be abandoned
// (dropped from the queue, or stopped at the engine's next step), watched step by step, and asked
// for previews; stats() is a snapshot of the counters a server exports.
//
//   fluxrt::Engine engine("models/demo");
//   fluxrt::SchedulerOptions options;
//   options.max_batch = 4;                                  // images per engine call
//   options.batch_window = std::chrono::milliseconds(20);   // how long a job waits for company
//   fluxrt::Scheduler scheduler(engine, options);
//   std::shared_ptr<fluxrt::Job> job = scheduler.submit(request);  // null: the queue is full
//   job->wait_done();
//   if (job->error()) throw *job->error();
//   const fluxrt::GenerateResult& result = job->results()[0];
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fluxrt/engine.h"
#include "fluxrt/error.h"
#include "fluxrt/image.h"

namespace fluxrt {

struct SchedulerOptions {
  // Jobs waiting to run (not the running ones): submit refuses a job beyond this. 0: no limit.
  int max_queue = 32;
  // Images per engine call. Queued jobs whose batch key is the front job's join its call while
  // the images stay within this; a job is never split, so a larger one runs on its own. 1: every
  // job runs on its own.
  int max_batch = 1;
  // How long the front job waits, from its arrival, for others to join it; the call starts at
  // once when max_batch images are there. 0: only jobs already queued join.
  std::chrono::milliseconds batch_window{0};
};

struct JobOptions {
  // 1-based steps after which the job wants a preview of its first image (Job::preview_at). The
  // engine has one once it has finished an image to fit its colours from (Progress::previews).
  std::vector<int> preview_steps;
  // After each step the engine waits until the job's owner calls Job::resume (or the job is
  // cancelled), so the owner's own per-step code (a Python step callback) runs between two steps,
  // on the owner's thread. The other jobs of the same engine call wait too.
  bool step_by_step = false;
};

// One submission: its requests, its state, and once done its results or its error. Made by
// Scheduler::submit; every method is safe from any thread.
class Job {
 public:
  using Clock = std::chrono::steady_clock;

  // A snapshot of the job's state.
  struct State {
    bool started = false, done = false;
    int step = 0, total = 0;  // the latest step (1-based) of the running request, of its total
    uint64_t version = 0;     // bumps at every change
    int batch_images = 0;     // images of the engine call the job ran in, its own and the others'
    Clock::time_point started_at{}, done_at{};  // set with started / done
  };

  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const std::vector<GenerateRequest>& requests() const;
  // Equal for jobs that may share an engine call; "" for a job that runs on its own.
  const std::string& batch_key() const;
  Clock::time_point enqueued() const;

  State state() const;
  // Waits until the state's version differs from `seen` or `timeout` passes; returns the state.
  State wait(uint64_t seen, std::chrono::milliseconds timeout) const;
  // Waits until the job is done; returns the state.
  State wait_done() const;

  // The Progress of each step the job has seen, from the `first`-th (0-based) on, in order; the
  // previews are left out (preview_at has the job's own).
  std::vector<Progress> progress(size_t first = 0) const;
  // The preview stored for `step` (stored before the state shows that step), if any.
  std::optional<Image> preview_at(int step) const;
  // JobOptions::step_by_step: the owner has handled the first `handled` entries of progress();
  // the engine goes on with its next step once the latest one is handled.
  void resume(size_t handled);

  // Once done: one result per request, in order; or the error (Cancelled for an abandoned job).
  const std::vector<GenerateResult>& results() const;
  const std::optional<Error>& error() const;

  // Asks the job to stop (Scheduler::abandon also takes it out of the queue and counts it).
  void cancel();
  bool cancelled() const;

 private:
  friend class Scheduler;
  struct Impl;
  explicit Job(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A snapshot of a scheduler's counters (Scheduler::stats), e.g. for a server's /metrics.
struct SchedulerStats {
  int queued = 0;                   // jobs waiting
  int running = 0;                  // jobs in the engine call now
  uint64_t cancelled = 0;           // jobs abandoned (Scheduler::abandon)
  uint64_t images = 0;              // images of the jobs that finished with results
  uint64_t steps = 0;               // denoising steps run (one per step of an engine call)
  double step_seconds = 0;          // their time
  double last_step_seconds = 0;     // the latest step's
  std::map<int, uint64_t> batches;  // engine calls by the images they ran together
  // Jobs that finished with results by their latency, queued to done: latency_counts[i] of them
  // took at most latency_bounds[i] seconds (cumulative, as Prometheus' histograms count).
  std::vector<double> latency_bounds{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
  std::vector<uint64_t> latency_counts = std::vector<uint64_t>(latency_bounds.size(), 0);
  uint64_t latency_count = 0;
  double latency_sum = 0;
  // An engine call's mean seconds over the recent ones (the latest weigh most): about what a
  // queued job waits per call ahead of it. 0 before any call.
  double mean_call_seconds = 0;
};

class Scheduler {
 public:
  // Runs jobs on `engine`, which must outlive the scheduler. InvalidArgument for a negative
  // max_queue or batch_window, or max_batch < 1.
  explicit Scheduler(Engine& engine, SchedulerOptions options = {});
  ~Scheduler();  // drain()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a job of one request. Null when refused: the queue is full, or the scheduler drains.
  // The engine's Error when it cannot plan the request (Engine::batch_key), before queueing.
  std::shared_ptr<Job> submit(GenerateRequest request, JobOptions options = {});
  // Queues a job of several requests that run together: as one engine call when they share a
  // batch key (a diffusers call with one generator per image), else one call each, in order.
  std::shared_ptr<Job> submit(std::vector<GenerateRequest> requests, JobOptions options = {});

  // Cancels the job and counts it as cancelled (once). A queued job leaves the queue at once
  // (done, error Cancelled); a running one stops at the engine's next cancel check (before the
  // next step) once every job of its engine call is cancelled, else its images are dropped.
  void abandon(const std::shared_ptr<Job>& job);

  SchedulerStats stats() const;
  const SchedulerOptions& options() const;

  // Refuses new jobs, finishes the queued and running ones, stops the worker. Idempotent.
  void drain();
  bool draining() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fluxrt
