#pragma once
// Synthetic pipelines: random weights with a variant's real shapes and no weight files, for
// `fluxrt bench pipeline --synthetic`. Each kind offers its own (PipelineKind::bench_variants and
// synthetic), so the bench reaches every family through the registry.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/quant.h"

namespace fluxrt::pipelines {

class Pipeline;
struct PipelineOptions;

struct SyntheticRequest {
  std::string variant;               // one of the kind's bench_variants
  std::optional<QuantType> weights;  // the linears' synthetic type, kept quantized; nullopt: dense
  std::string weights_name;          // as the user gave it, for messages
  // Where the tokenizers it still needs are looked for: the source tree and the install's
  // share/fluxrt (either may be empty).
  std::filesystem::path source_dir, share_dir;
};

struct SyntheticPipeline {
  std::string variant;  // as the timing report names it
  // Made per request whatever PipelineOptions::low_memory says (FLUX.1: 12B parameters beside
  // T5-XXL), so making it loads nothing: the bench makes it first, and shows the memory at each
  // step.
  bool always_low_memory = false;
  std::function<std::unique_ptr<Pipeline>(const PipelineOptions& options)> make;
  // A line on its shapes for the bench's header; unset when there is nothing to add.
  std::function<std::string(const Pipeline& pipeline)> shapes_note;
  // GEMM + attention FLOPs of one transformer forward at batch 1 (flux-reference.md section 6).
  std::function<double(const Pipeline& pipeline, int64_t image_tokens, int64_t text_tokens)>
      flops_per_forward;
  // The same with `reference_tokens` of reference images, as the pipeline runs them (extra tokens
  // of every forward, or klein-9B-KV's cached keys); unset for families without references.
  std::function<double(const Pipeline& pipeline, int64_t image_tokens, int64_t text_tokens,
                       int64_t reference_tokens)>
      flops_with_references;
};

}  // namespace fluxrt::pipelines
