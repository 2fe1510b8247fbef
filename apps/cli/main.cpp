// fluxrt command line: generate, bench, info, serve. Errors become one line and a non-zero exit.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "core/error.h"
#include "core/threads.h"
#include "fluxrt/version.h"

int main(int argc, char** argv) {
  CLI::App app{"fluxrt: FLUX image generation on CPUs and NVIDIA GPUs"};
  app.set_version_flag("--version", std::string("fluxrt ") + FLUXRT_VERSION_STRING);
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads, "worker threads (0 = all cores)");
  CLI11_PARSE(app, argc, argv);
  try {
    fluxrt::set_num_threads(threads);
  } catch (const fluxrt::Error& e) {
    std::fprintf(stderr, "fluxrt: %s\n", e.what());
    return 1;
  }
  return 0;
}
