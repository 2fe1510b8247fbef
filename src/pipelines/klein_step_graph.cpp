#include "pipelines/klein_step_graph.h"

#include "core/error.h"
#include "core/log.h"

namespace fluxrt::pipelines {

KleinStepGraph::KleinStepGraph(const models::Flux2Transformer& transformer, Device device, const Tensor& x_ids,
                               const Tensor& ctx_ids, Tensor ctx, Tensor negative_ctx)
    : transformer_(transformer),
      device_(device),
      rope_(transformer.rope_tables(x_ids, ctx_ids)),
      ctx_(std::move(ctx)),
      negative_ctx_(std::move(negative_ctx)),
      eager_only_(!ops::DeviceGraph::available(device)) {}

KleinStepGraph::Velocities KleinStepGraph::eager(const Tensor& input, const Tensor& proj) const {
  Velocities v;
  v.cond = transformer_.forward_on_device(input, ctx_, proj, rope_);
  if (negative_ctx_.defined()) v.uncond = transformer_.forward_on_device(input, negative_ctx_, proj, rope_);
  return v;
}

KleinStepGraph::Velocities KleinStepGraph::run(const Tensor& input, const Tensor& timesteps) {
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
  FLUXRT_CHECK(input.shape() == input_.shape() && input.dtype() == input_.dtype() && proj.shape() == proj_.shape(),
               ErrorCode::InvalidArgument, "[graph] step input {} changed from {} within a request", input.str(),
               input_.str());
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

}  // namespace fluxrt::pipelines
