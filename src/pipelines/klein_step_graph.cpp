#include "pipelines/klein_step_graph.h"

#include <iterator>
#include <utility>

#include "core/error.h"
#include "core/log.h"

namespace fluxrt::pipelines {

KleinStepGraph::KleinStepGraph(const models::Flux2Transformer& transformer, Device device, StepGraphKey key)
    : transformer_(transformer),
      device_(device),
      key_(std::move(key)),
      eager_only_(!ops::DeviceGraph::available(device)) {}

namespace {

// `dst` = `src`: into dst's buffer when it has one (the recorded work reads that buffer), else a
// fresh copy on `device` (the first request).
void copy_into(Tensor& dst, const Tensor& src, Device device) {
  if (!src.defined()) {
    dst = Tensor();
    return;
  }
  if (!dst.defined()) dst = Tensor::empty(src.shape(), src.dtype(), device);
  dst.copy_from(src);
}

}  // namespace

void KleinStepGraph::begin_request(const Tensor& x_ids, const Tensor& ctx_ids, const Tensor& ctx,
                                   const Tensor& negative_ctx) {
  FLUXRT_CHECK(x_ids.shape() == key_.x_ids && ctx_ids.shape() == key_.ctx_ids && ctx.shape() == key_.ctx &&
                   negative_ctx.defined() == key_.cfg && (!key_.cfg || negative_ctx.shape() == key_.ctx),
               ErrorCode::Internal, "[graph] request shapes do not match the step graph's");
  const models::Flux2Transformer::Rope rope = transformer_.rope_tables(x_ids, ctx_ids);
  copy_into(rope_.cos, rope.cos, device_);
  copy_into(rope_.sin, rope.sin, device_);
  copy_into(ctx_, ctx, device_);
  copy_into(negative_ctx_, negative_ctx, device_);
}

KleinStepGraph::Velocities KleinStepGraph::eager(const Tensor& input, const Tensor& proj) const {
  Velocities v;
  v.cond = transformer_.forward_on_device(input, ctx_, proj, rope_);
  if (negative_ctx_.defined()) v.uncond = transformer_.forward_on_device(input, negative_ctx_, proj, rope_);
  return v;
}

KleinStepGraph::Velocities KleinStepGraph::run(const Tensor& input, const Tensor& timesteps) {
  FLUXRT_CHECK(ctx_.defined(), ErrorCode::Internal, "[graph] run before begin_request");
  FLUXRT_CHECK(input.shape() == key_.input, ErrorCode::InvalidArgument, "[graph] step input {} is not the graph's {}",
               input.str(), key_.input.str());
  const Tensor proj = transformer_.timestep_projection(timesteps);  // host-built, uploaded
  if (eager_only_) return eager(input, proj);
  if (!input_.defined()) {  // the first call
    Velocities v = eager(input, proj);
    // Output buffers of this call's shapes, for the recorded work to write its results into.
    cond_ = Tensor::empty(v.cond.shape(), v.cond.dtype(), device_);
    if (v.uncond.defined()) uncond_ = Tensor::empty(v.uncond.shape(), v.uncond.dtype(), device_);
    input_ = Tensor::empty(input.shape(), input.dtype(), device_);
    proj_ = Tensor::empty(proj.shape(), proj.dtype(), device_);
    return v;
  }
  FLUXRT_CHECK(input.dtype() == input_.dtype() && proj.shape() == proj_.shape(), ErrorCode::InvalidArgument,
               "[graph] step input {} changed from {}", input.str(), input_.str());
  if (!graph_) {
    try {
      // The temporaries of both forwards are allocated and freed inside the recording; only the
      // fixed buffers, weights, embeddings and RoPE tables are read from outside it.
      graph_ = ops::DeviceGraph::record(device_, [this] {
        cond_.copy_from(transformer_.forward_on_device(input_, ctx_, proj_, rope_));
        if (negative_ctx_.defined()) uncond_.copy_from(transformer_.forward_on_device(input_, negative_ctx_, proj_, rope_));
      });
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Device) throw;
      FLUXRT_LOG_WARN("CUDA graph for the denoising step not used: {}; running the steps directly", e.what());
      eager_only_ = true;
      input_ = proj_ = cond_ = uncond_ = Tensor();
      return eager(input, proj);
    }
  }
  input_.copy_from(input);
  proj_.copy_from(proj);
  graph_->replay();
  return Velocities{cond_, uncond_, true};
}

std::unique_ptr<KleinStepGraph> StepGraphCache::acquire(const StepGraphKey& key) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
      if ((*it)->key() == key) {
        std::unique_ptr<KleinStepGraph> g = std::move(*it);
        graphs_.erase(it);
        return g;
      }
    }
  }
  return std::make_unique<KleinStepGraph>(transformer_, device_, key);
}

void StepGraphCache::release(std::unique_ptr<KleinStepGraph> graph) {
  // Graphs (and their device memory) leave the list under the lock and are destroyed after it.
  std::list<std::unique_ptr<KleinStepGraph>> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // A concurrent request of the same shape made its own graph: keep the newer one.
    for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
      if ((*it)->key() == graph->key()) {
        dropped.splice(dropped.end(), graphs_, it);
        break;
      }
    }
    graphs_.push_front(std::move(graph));
    while (graphs_.size() > kCapacity) dropped.splice(dropped.end(), graphs_, std::prev(graphs_.end()));
  }
}

size_t StepGraphCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return graphs_.size();
}

}  // namespace fluxrt::pipelines
