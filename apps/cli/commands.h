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

}  // namespace fluxrt::cli
