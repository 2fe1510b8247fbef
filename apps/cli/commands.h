#pragma once
// Subcommands of the `fluxrt` executable. Each registers its options on the CLI11 app and runs
// only when parsed; the work itself lives in the libraries, a command only prints.
#include <CLI/CLI.hpp>

#include <string>

namespace fluxrt::cli {

struct InfoOptions {
  std::string model;
  bool json = false;
};
CLI::App* add_info_command(CLI::App& app, InfoOptions& options);
int run_info(const InfoOptions& options);  // throws fluxrt::Error

struct BenchOptions {
  std::string component;  // transformer, text-encoder, vae
  std::string variant = "flux.2-klein-4b";
  std::string size = "512x512";
  int steps = 2;
  int batch = 1;
  int max_sequence_length = 512;
  std::string device = "cpu";
  std::string dtype = "bf16";
  bool skip_peak = false;
  std::string json_path;
};
CLI::App* add_bench_command(CLI::App& app, BenchOptions& options);
int run_bench(const BenchOptions& options);  // throws fluxrt::Error

}  // namespace fluxrt::cli
