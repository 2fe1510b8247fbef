// fluxrt::Scheduler on the demo model: jobs with one batch key share an engine call and each gets
// the images it gets alone, other keys run apart, a job's own requests run as one call (or one
// after another when they cannot), the queue's bound, abandoning a queued job and a running one
// (which stops before the engine's next step), the others of a call going on without a cancelled
// job, previews, the counters, and the drain. Nothing here waits on a clock: a step_by_step job
// holds the engine between steps for as long as a test needs, so "running", "queued" and "at the
// next step" are states the test sets up, not moments it hopes to catch.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include "fluxrt/engine.h"
#include "fluxrt/scheduler.h"

namespace fluxrt {
namespace {

using std::chrono::milliseconds;

const std::string kDemo = (std::filesystem::path(FLUXRT_SOURCE_DIR) / "models" / "demo").string();

Engine& engine() {
  static Engine e(kDemo);
  return e;
}

GenerateRequest request(uint64_t seed, int size = 32, int steps = 2, int images = 1) {
  GenerateRequest r;
  r.prompts = {"a red circle on a blue background"};
  r.seed = seed;
  r.width = r.height = size;
  r.steps = steps;
  r.images_per_prompt = images;
  return r;
}

SchedulerOptions batching(int max_batch, milliseconds window) {
  SchedulerOptions o;
  o.max_batch = max_batch;
  o.batch_window = window;
  return o;
}

JobOptions step_by_step() {
  JobOptions o;
  o.step_by_step = true;
  return o;
}

// As the owner of a job waits: until the job has seen `steps` steps or is done. The guard only
// turns a hang into a failure; it is never what a test waits for.
Job::State wait_for_steps(const Job& job, size_t steps) {
  const auto guard = Job::Clock::now() + std::chrono::minutes(5);
  Job::State s = job.state();
  while (!s.done && job.progress().size() < steps) {
    s = job.wait(s.version, milliseconds(1000));
    if (Job::Clock::now() > guard) {
      ADD_FAILURE() << "the job saw " << job.progress().size() << " steps, not " << steps;
      break;
    }
  }
  return s;
}

// Runs a step_by_step job to its end, letting the engine go on after each step.
void resume_until_done(Job& job) {
  Job::State s = job.state();
  while (!s.done) {
    job.resume(job.progress().size());
    s = job.wait(s.version, milliseconds(1000));
  }
}

void expect_alone(const Job& job, size_t request_index, const GenerateRequest& alone) {
  ASSERT_FALSE(job.error()) << job.error()->what();
  ASSERT_GT(job.results().size(), request_index);
  const GenerateResult& got = job.results()[request_index];
  const GenerateResult expected = engine().generate(alone);
  ASSERT_EQ(got.images.size(), expected.images.size());
  for (size_t i = 0; i < got.images.size(); ++i) {
    EXPECT_EQ(got.images[i].image.rgb, expected.images[i].image.rgb) << "image " << i;
    EXPECT_EQ(metadata_text(got.images[i].metadata), metadata_text(expected.images[i].metadata));
  }
}

TEST(Scheduler, JobsWithOneKeyShareACallAndEachGetsItsImagesAlone) {
  // The window is only an upper bound: the call starts once the four images are queued.
  Scheduler scheduler(engine(), batching(4, std::chrono::minutes(5)));
  GenerateRequest b = request(2, 32, 2, 2);
  b.prompts = {"a green star"};
  const std::vector<GenerateRequest> requests = {request(1), b, request(3)};
  std::vector<std::shared_ptr<Job>> jobs;
  for (const GenerateRequest& r : requests) jobs.push_back(scheduler.submit(r));
  for (size_t i = 0; i < jobs.size(); ++i) {
    ASSERT_TRUE(jobs[i]);
    const Job::State s = jobs[i]->wait_done();
    EXPECT_EQ(s.batch_images, 4) << i;
    expect_alone(*jobs[i], 0, requests[i]);
  }
  const SchedulerStats stats = scheduler.stats();
  EXPECT_EQ(stats.batches, (std::map<int, uint64_t>{{4, 1}}));
  EXPECT_EQ(stats.images, 4u);
  EXPECT_EQ(stats.steps, 2u);  // one per step of the one call
  EXPECT_EQ(stats.latency_count, 3u);
  EXPECT_EQ(stats.latency_counts.back(), 3u);  // every job within the last bound (300 s)
  EXPECT_GT(stats.mean_call_seconds, 0);
  EXPECT_EQ(stats.queued + stats.running + int(stats.cancelled), 0);
}

TEST(Scheduler, JobsWithOtherKeysRunApart) {
  Scheduler scheduler(engine(), batching(4, milliseconds(0)));
  auto a = scheduler.submit(request(1, 32));
  auto b = scheduler.submit(request(1, 48));
  EXPECT_NE(a->batch_key(), b->batch_key());
  EXPECT_EQ(a->wait_done().batch_images, 1);
  EXPECT_EQ(b->wait_done().batch_images, 1);
  EXPECT_EQ(scheduler.stats().batches, (std::map<int, uint64_t>{{1, 2}}));
}

TEST(Scheduler, AJobsRequestsRunAsOneCallOrOneAfterAnother) {
  Scheduler scheduler(engine());  // max_batch 1: jobs never join, a job is never split
  const std::vector<GenerateRequest> same = {request(5), request(6)};
  auto together = scheduler.submit(same);
  EXPECT_FALSE(together->batch_key().empty());
  EXPECT_EQ(together->wait_done().batch_images, 2);
  expect_alone(*together, 0, same[0]);
  expect_alone(*together, 1, same[1]);

  const std::vector<GenerateRequest> apart = {request(5, 32), request(6, 48)};
  auto sequential = scheduler.submit(apart);
  EXPECT_TRUE(sequential->batch_key().empty());
  sequential->wait_done();
  expect_alone(*sequential, 0, apart[0]);
  expect_alone(*sequential, 1, apart[1]);
  EXPECT_EQ(sequential->progress().size(), 4u);  // two steps of each call, in order
  EXPECT_EQ(scheduler.stats().batches, (std::map<int, uint64_t>{{1, 2}, {2, 1}}));
}

TEST(Scheduler, BoundedQueueAndAbandonedQueuedJob) {
  SchedulerOptions o;
  o.max_queue = 1;
  Scheduler scheduler(engine(), o);
  auto held = scheduler.submit(request(1, 32, 3), step_by_step());
  wait_for_steps(*held, 1);  // running, and held after its first step
  auto queued = scheduler.submit(request(2));
  ASSERT_TRUE(queued);
  EXPECT_FALSE(scheduler.submit(request(3))) << "a full queue refuses";
  SchedulerStats stats = scheduler.stats();
  EXPECT_EQ(stats.queued, 1);
  EXPECT_EQ(stats.running, 1);
  EXPECT_EQ(held->state().step, 1);

  scheduler.abandon(queued);  // leaves the queue at once
  const Job::State dropped = queued->state();
  EXPECT_TRUE(dropped.done);
  EXPECT_FALSE(dropped.started);
  ASSERT_TRUE(queued->error());
  EXPECT_EQ(queued->error()->code(), ErrorCode::Cancelled);
  stats = scheduler.stats();
  EXPECT_EQ(stats.queued, 0);
  EXPECT_EQ(stats.cancelled, 1u);
  scheduler.abandon(queued);  // counted once
  EXPECT_EQ(scheduler.stats().cancelled, 1u);

  resume_until_done(*held);
  expect_alone(*held, 0, request(1, 32, 3));
  std::vector<int> steps;
  for (const Progress& p : held->progress()) steps.push_back(p.step);
  EXPECT_EQ(steps, (std::vector<int>{1, 2, 3}));
}

TEST(Scheduler, AnAbandonedRunningJobStopsBeforeTheNextStep) {
  Scheduler scheduler(engine());
  auto job = scheduler.submit(request(1, 32, 50), step_by_step());
  wait_for_steps(*job, 1);
  scheduler.abandon(job);
  const Job::State s = job->wait_done();
  EXPECT_EQ(s.step, 1);
  EXPECT_EQ(job->progress().size(), 1u);
  ASSERT_TRUE(job->error());
  EXPECT_EQ(job->error()->code(), ErrorCode::Cancelled);
  EXPECT_TRUE(job->results().empty());
  const SchedulerStats stats = scheduler.stats();
  EXPECT_EQ(stats.steps, 1u);
  EXPECT_EQ(stats.cancelled, 1u);
  EXPECT_EQ(stats.images, 0u);
  // The engine is free again.
  auto next = scheduler.submit(request(2));
  next->wait_done();
  expect_alone(*next, 0, request(2));
}

TEST(Scheduler, ACancelledJobLeavesTheOthersOfItsCallRunning) {
  Scheduler scheduler(engine(), batching(2, std::chrono::minutes(5)));
  auto leaving = scheduler.submit(request(1, 32, 3), step_by_step());
  auto staying = scheduler.submit(request(2, 32, 3));
  wait_for_steps(*leaving, 1);
  scheduler.abandon(leaving);
  staying->wait_done();
  leaving->wait_done();
  EXPECT_EQ(staying->state().batch_images, 2);
  expect_alone(*staying, 0, request(2, 32, 3));
  ASSERT_TRUE(leaving->error());
  EXPECT_EQ(leaving->error()->code(), ErrorCode::Cancelled);
  EXPECT_EQ(scheduler.stats().images, 1u);
}

TEST(Scheduler, PreviewsOfTheFirstImageAtTheStepsAsked) {
  Scheduler scheduler(engine());
  scheduler.submit(request(1))->wait_done();  // a finished image to fit the preview colours
  JobOptions o;
  o.preview_steps = {1, 3};
  auto job = scheduler.submit(request(4, 32, 4, 2), o);
  job->wait_done();
  ASSERT_FALSE(job->error());
  for (int step : {1, 3}) {
    const std::optional<Image> preview = job->preview_at(step);
    ASSERT_TRUE(preview) << step;
    EXPECT_EQ(preview->width, 32);
    EXPECT_EQ(preview->height, 32);
  }
  EXPECT_FALSE(job->preview_at(2));
  EXPECT_FALSE(job->preview_at(4));
}

TEST(Scheduler, AFailedJobGetsItsErrorAndTheSchedulerGoesOn) {
  Scheduler scheduler(engine());
  GenerateRequest bad = request(1);
  bad.width = 33;  // not a multiple of the model's size factor
  auto job = scheduler.submit(bad);
  job->wait_done();
  ASSERT_TRUE(job->error());
  EXPECT_EQ(job->error()->code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(job->error()->field(), "size");
  auto next = scheduler.submit(request(2));
  next->wait_done();
  expect_alone(*next, 0, request(2));
  EXPECT_EQ(scheduler.stats().latency_count, 1u);  // only jobs with results
}

TEST(Scheduler, DrainFinishesWhatWasQueuedAndRefusesNew) {
  Scheduler scheduler(engine());
  auto held = scheduler.submit(request(1, 32, 2), step_by_step());
  auto queued = scheduler.submit(request(2));
  wait_for_steps(*held, 1);
  auto drained = std::async(std::launch::async, [&] { scheduler.drain(); });
  resume_until_done(*held);
  drained.get();
  EXPECT_TRUE(scheduler.draining());
  EXPECT_FALSE(held->error());
  ASSERT_TRUE(queued->state().done);
  expect_alone(*queued, 0, request(2));
  EXPECT_FALSE(scheduler.submit(request(3)));
  scheduler.drain();  // idempotent
}

TEST(Scheduler, RefusesBadOptionsAndEmptyJobs) {
  for (const SchedulerOptions& o :
       {SchedulerOptions{-1, 1, milliseconds(0)}, SchedulerOptions{1, 0, milliseconds(0)},
        SchedulerOptions{1, 1, milliseconds(-1)}}) {
    try {
      Scheduler s(engine(), o);
      ADD_FAILURE() << "accepted " << o.max_queue << ", " << o.max_batch << ", " << o.batch_window.count();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
  Scheduler scheduler(engine());
  EXPECT_THROW(scheduler.submit(std::vector<GenerateRequest>{}), Error);
  EXPECT_EQ(scheduler.stats().queued, 0);
}

}  // namespace
}  // namespace fluxrt
