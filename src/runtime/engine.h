#pragma once
// runtime::Engine: what the public fluxrt::Engine (include/fluxrt/engine.h) runs on. It owns the
// orchestration that used to sit in the CLI: resolving the model to a pipeline folder, the
// pipeline kind its class names (the registry of pipelines/pipeline.h), the pipeline options,
// the load with its timings, the request translated for the pipeline, and the result with
// per-image metadata and the timing report built from the pipeline's profiler spans.
//
// generate holds a mutex for the whole call: the pipelines keep per-request state (the profiler,
// step-graph caches, low-memory leases) that one call at a time may use.
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/timer.h"
#include "fluxrt/engine.h"
#include "pipelines/pipeline.h"
#include "runtime/model_resolution.h"

namespace fluxrt::runtime {

// What a public precision is inside: the components' dtype (Int8: bf16) and the transformer's
// linear format (Int8: W8A8).
DType dtype_of(fluxrt::Precision precision);
nn::LinearFormat transformer_linears_of(fluxrt::Precision precision);

class Engine {
 public:
  Engine(const std::string& model, const fluxrt::EngineOptions& options);
  // A model the settings resolver has resolved already (its given spec is `model`).
  Engine(const std::string& model, ResolvedPipeline resolved, const fluxrt::EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  fluxrt::GenerateResult generate(const fluxrt::GenerateRequest& request, const fluxrt::Callbacks& callbacks);
  std::vector<fluxrt::GenerateResult> generate_batch(const std::vector<fluxrt::GenerateRequest>& requests,
                                                     const fluxrt::Callbacks& callbacks);
  std::string batch_key(const fluxrt::GenerateRequest& request) const;
  fluxrt::RequestPlan plan(const fluxrt::GenerateRequest& request) const;
  fluxrt::ModelDefaults defaults() const;
  fluxrt::RequestLimits limits() const;
  const std::string& model() const { return model_; }
  const std::string& variant() const { return variant_; }
  fluxrt::ModelInfo info() const;
  std::optional<LoadTimings> load_timings() const { return load_; }
  const fluxrt::EngineOptions& options() const { return options_; }

 private:
  // One pipeline call for the requests (more than one: a batch whose keys agree), each getting
  // its own result.
  std::vector<fluxrt::GenerateResult> run(const std::vector<pipelines::PlannedRequest>& batch,
                                          const fluxrt::Callbacks& callbacks);
  std::string lora_hash(const std::string& path) const;
  fluxrt::ImageMetadata image_metadata(const pipelines::PlannedRequest& planned,
                                       const pipelines::GenerateResult& result, int index) const;

  std::string model_;
  std::string variant_;
  fluxrt::EngineOptions options_;
  Device device_;
  DType dtype_ = DType::BF16;
  ResolvedPipeline resolved_;
  // The pipeline records its spans here (PipelineOptions::profiler); cleared per call.
  Profiler profiler_;
  std::unique_ptr<pipelines::Pipeline> pipeline_;
  std::optional<LoadTimings> load_;
  std::mutex generate_mutex_;
  mutable std::mutex info_mutex_;
  mutable std::optional<fluxrt::ModelInfo> info_;
  // LoRA file path -> its SHA-256 (the metadata's hash), each file hashed once per Engine.
  mutable std::mutex hash_mutex_;
  mutable std::map<std::string, std::string> lora_hashes_;
};

}  // namespace fluxrt::runtime
