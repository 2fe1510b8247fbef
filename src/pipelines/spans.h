#pragma once
// Names of the timing spans every pipeline (FLUX.2-klein, FLUX.1) records in its options'
// Profiler. One list, so that the pipelines, the timing report the CLI, the server and the
// benchmarks print (runtime/timing_report.h), and the tests agree on what a span is called.

namespace fluxrt::pipelines {

inline constexpr const char* kSpanLoadTransformer = "load.transformer";
inline constexpr const char* kSpanLoadTextEncoder = "load.text_encoder";
inline constexpr const char* kSpanLoadVae = "load.vae";
inline constexpr const char* kSpanLoadTotal = "load.total";  // wall time of the parallel load
inline constexpr const char* kSpanTextEncoding = "text_encoding";
// FLUX.1's two encoders inside kSpanTextEncoding (CLIP-L pooled, T5-XXL); klein records neither.
inline constexpr const char* kSpanTextEncodingClip = "text_encoding.clip";
inline constexpr const char* kSpanTextEncodingT5 = "text_encoding.t5";
inline constexpr const char* kSpanReferenceEncode = "reference_encode";
// klein-9B-KV: the pass over the reference tokens that fills their keys and values, once per request.
inline constexpr const char* kSpanReferenceKv = "reference_kv";
// The kernels' one-time work for the request's shapes, before the first step (a forward under
// ops::ScopedKernelPlanning: primitives, weight reorders, scratch); not part of any step.
inline constexpr const char* kSpanKernelPlanning = "denoise.kernel_planning";
inline constexpr const char* kSpanDenoiseStep = "denoise.step";  // one per step (all CFG forwards)
inline constexpr const char* kSpanDenoiseTotal = "denoise.total";
inline constexpr const char* kSpanVaeDecode = "vae_decode";

}  // namespace fluxrt::pipelines
