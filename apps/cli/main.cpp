// fluxrt command line: generate, bench, info, serve. Errors become one line and a non-zero exit.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>

#include "commands.h"
#include "fluxrt/error.h"
#include "core/log.h"
#include "core/threads.h"
#include "fluxrt/version.h"

namespace {

// DESIGN.md section 4: the CLI turns any error into exactly one line on stderr.
int report_error(const char* message) {
  std::string line = message;
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  std::fprintf(stderr, "fluxrt: error: %s\n", line.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fluxrt: FLUX image generation on CPUs and NVIDIA GPUs"};
  app.set_version_flag("--version", std::string("fluxrt ") + FLUXRT_VERSION_STRING);
  app.require_subcommand(1);
  int threads = 0;
  std::string log_level;
  app.add_option("--threads", threads, "worker threads (0 = all cores)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off (default info; FLUXRT_LOG_LEVEL)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));

  fluxrt::cli::InfoOptions info_options;
  CLI::App* info = fluxrt::cli::add_info_command(app, info_options);
  fluxrt::cli::BenchOptions bench_options;
  CLI::App* bench = fluxrt::cli::add_bench_command(app, bench_options);
  fluxrt::cli::GenerateOptions generate_options;
  CLI::App* generate = fluxrt::cli::add_generate_command(app, generate_options);
  fluxrt::cli::ServeOptions serve_options;
  CLI::App* serve = fluxrt::cli::add_serve_command(app, serve_options);
  fluxrt::cli::QuantizeOptions quantize_options;
  CLI::App* quantize = fluxrt::cli::add_quantize_command(app, quantize_options);
  fluxrt::cli::CalibrateCacheOptions calibrate_options;
  CLI::App* calibrate = fluxrt::cli::add_calibrate_cache_command(app, calibrate_options);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Usage errors follow the same one-line rule as every other error (exit code 2, as getopt tools do).
    report_error((std::string(e.what()) + " (see --help)").c_str());
    return 2;
  }
  try {
    if (!log_level.empty()) fluxrt::set_log_level(fluxrt::parse_log_level(log_level));
    fluxrt::set_num_threads(threads);
    if (info->parsed()) return fluxrt::cli::run_info(info_options);
    if (bench->parsed()) return fluxrt::cli::run_bench(bench_options);
    if (generate->parsed()) return fluxrt::cli::run_generate(generate_options);
    if (serve->parsed()) return fluxrt::cli::run_serve(serve_options);
    if (quantize->parsed()) return fluxrt::cli::run_quantize(quantize_options);
    if (calibrate->parsed()) return fluxrt::cli::run_calibrate_cache(calibrate_options);
  } catch (const fluxrt::Error& e) {
    // Ctrl-C: one line and the shell's exit code for SIGINT (128 + 2).
    if (e.code() == fluxrt::ErrorCode::Cancelled) {
      report_error(e.what());
      return 130;
    }
    return report_error(e.what());
  } catch (const std::exception& e) {
    return report_error(e.what());
  }
  return 0;
}
