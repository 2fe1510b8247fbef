// The `fluxrt generate` progress display (apps/cli/progress.h): the bar and line texts, and what
// each style writes to the stream.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "progress.h"

namespace cli = fluxrt::cli;

TEST(Progress, Texts) {
  EXPECT_EQ(cli::progress_line_text(2, 4, 0.531), "step 2/4 0.53 s");
  EXPECT_EQ(cli::progress_bar_text(0, 4, 0, 8), "denoising [........] 0/4 -- it/s ETA --");
  EXPECT_EQ(cli::progress_bar_text(1, 4, 0.5, 8), "denoising [##......] 1/4 2.00 it/s ETA 1.5 s");
  EXPECT_EQ(cli::progress_bar_text(2, 4, 4.0, 8), "denoising [####....] 2/4 2.00 s/it ETA 4.0 s");
  EXPECT_EQ(cli::progress_bar_text(4, 4, 2.0, 8), "denoising [########] 4/4 2.00 it/s 2.0 s");
  EXPECT_EQ(cli::detect_progress_style(stderr, true), cli::ProgressStyle::Silent);
}

TEST(Progress, LinesAndBarOutput) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    cli::ProgressReporter lines(cli::ProgressStyle::Lines, f);
    lines.message("loading");
    lines.step(1, 2, 0.25);
    lines.step(2, 2, 0.5);
  }
  {
    cli::ProgressReporter bar(cli::ProgressStyle::Bar, f);
    bar.step(1, 2, 1.0);
    bar.step(2, 2, 1.0);  // the last step ends the line
  }
  {
    cli::ProgressReporter silent(cli::ProgressStyle::Silent, f);
    silent.message("hidden");
    silent.step(1, 1, 1.0);
  }
  std::rewind(f);
  std::string text;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  std::fclose(f);
  EXPECT_EQ(text,
            "loading\nstep 1/2 0.25 s\nstep 2/2 0.50 s\n"
            "\rdenoising [############............] 1/2 1.00 it/s ETA 1.0 s\x1b[K"
            "\rdenoising [########################] 2/2 1.00 it/s 2.0 s\x1b[K\n");
}
