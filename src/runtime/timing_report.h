#pragma once
// The timing report printed after `fluxrt generate` and `fluxrt bench pipeline` (docs/cli.md):
// load (cold: the first load of the process; warm: a second load with the files in the page
// cache), the warm-up request when there is one, then the timed request split into text encoding,
// reference encoding, denoising loop (ms per step, it/s), VAE decode and image write, the total and
// the peak RSS. Built from the pipeline's Profiler spans (pipelines::kSpan*, pipelines/spans.h), so
// the CLI, the benchmark and a future server report the same figures; the same data as JSON for
// --profile.
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>

#include "core/timer.h"
#include "fluxrt/timing.h"

namespace fluxrt::runtime {

// The report's types and its two formats are public (include/fluxrt/timing.h); these names keep
// the library's own code (the benchmarks, the engine) in the runtime namespace.
using fluxrt::LoadTimings;
using fluxrt::LoopThroughput;
using fluxrt::RunTimings;
using fluxrt::TimingReport;
using fluxrt::format_timing_report;
using fluxrt::timing_report_json;

// Reads the load.* spans (zeros for spans that are absent).
LoadTimings load_timings_from(const Profiler& profiler);
// Reads the spans of one generate call; the caller sets image_write_s and total_s.
RunTimings run_timings_from(const Profiler& profiler);

// Writes `contents` to a hidden temporary in the same folder and renames it over `path`, so a
// reader never sees a partial file. Error(Io) naming the path on failure (the temporary removed).
void write_file_atomically(const std::filesystem::path& path, const std::string& contents);

}  // namespace fluxrt::runtime
