#include "progress.h"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

namespace fluxrt::cli {

ProgressStyle detect_progress_style(std::FILE* stream, bool quiet) {
  if (quiet) return ProgressStyle::Silent;
  return ::isatty(::fileno(stream)) ? ProgressStyle::Bar : ProgressStyle::Lines;
}

std::string progress_bar_text(int step, int total, double elapsed_s, int bar_width) {
  total = std::max(total, 1);
  step = std::clamp(step, 0, total);
  const int filled = static_cast<int>(static_cast<long long>(bar_width) * step / total);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(bar_width - filled), '.');
  std::string rate = "-- it/s", eta = "ETA --";
  if (step > 0 && elapsed_s > 0) {
    const double per_step = elapsed_s / step;
    // Slow steps read better as s/it than as 0.05 it/s.
    rate = per_step > 1.0 ? fmt::format("{:.2f} s/it", per_step) : fmt::format("{:.2f} it/s", 1.0 / per_step);
    eta = step == total ? fmt::format("{:.1f} s", elapsed_s) : fmt::format("ETA {:.1f} s", per_step * (total - step));
  }
  return fmt::format("denoising [{}] {}/{} {} {}", bar, step, total, rate, eta);
}

std::string progress_line_text(int step, int total, double step_s) {
  return fmt::format("step {}/{} {:.2f} s", step, total, step_s);
}

void ProgressReporter::message(const std::string& text) {
  if (style_ == ProgressStyle::Silent) return;
  finish();
  std::fprintf(stream_, "%s\n", text.c_str());
  std::fflush(stream_);
}

void ProgressReporter::step(int step, int total, double step_s) {
  if (step <= last_step_) elapsed_s_ = 0;  // a new loop (warm-up, then the timed run)
  last_step_ = step;
  elapsed_s_ += step_s;
  if (style_ == ProgressStyle::Silent) return;
  if (style_ == ProgressStyle::Lines) {
    std::fprintf(stream_, "%s\n", progress_line_text(step, total, step_s).c_str());
  } else {
    // \x1b[K clears what a longer previous line left behind.
    std::fprintf(stream_, "\r%s\x1b[K", progress_bar_text(step, total, elapsed_s_).c_str());
    bar_open_ = true;
    if (step >= total) finish();
  }
  std::fflush(stream_);
}

void ProgressReporter::finish() {
  if (!bar_open_) return;
  std::fprintf(stream_, "\n");
  std::fflush(stream_);
  bar_open_ = false;
}

}  // namespace fluxrt::cli
