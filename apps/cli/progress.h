#pragma once
// Denoising progress for `fluxrt generate` on stderr. On a terminal: one line redrawn in place
// ("denoising [#####.....] 3/8 1.52 it/s ETA 3.3 s"); otherwise (a pipe, a log file, CI) one plain
// line per step ("step 3/8 0.66 s"), so logs stay readable; silent under --quiet.
#include <cstdio>
#include <string>

namespace fluxrt::cli {

enum class ProgressStyle { Bar, Lines, Silent };

// Bar when `stream` is a terminal, Lines otherwise, Silent when quiet.
ProgressStyle detect_progress_style(std::FILE* stream, bool quiet);

// The text of one update, without the leading '\r' or the trailing newline. `elapsed_s` is the
// wall time of steps 1..step, `step_s` the last step's.
std::string progress_bar_text(int step, int total, double elapsed_s, int bar_width = 24);
std::string progress_line_text(int step, int total, double step_s);

class ProgressReporter {
 public:
  ProgressReporter(ProgressStyle style, std::FILE* stream) : style_(style), stream_(stream) {}
  ~ProgressReporter() { finish(); }
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  // A stage message ("loading models/demo ...") on its own line (after ending a drawn bar).
  void message(const std::string& text);
  // Steps of one denoising loop; a step number lower than the last one starts a new loop.
  void step(int step, int total, double step_s);
  // Ends a bar in progress with a newline (idempotent).
  void finish();

 private:
  ProgressStyle style_;
  std::FILE* stream_;
  bool bar_open_ = false;
  int last_step_ = 0;
  double elapsed_s_ = 0;
};

}  // namespace fluxrt::cli
