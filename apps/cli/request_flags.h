#pragma once
// The request fields as flags (fluxrt/request_fields.h): one option per field of the table, for
// `fluxrt generate` and `fluxrt serve`, whose values the settings resolver checks and applies.
#include <CLI/CLI.hpp>
#include <string>
#include <utility>
#include <vector>

namespace fluxrt::cli {

// Adds `--steps`, `--size`, ... to `command`; each value given is appended to `fields` as
// (key, text), in command-line order (the resolver takes the last of a key).
void add_request_field_flags(CLI::App& command, std::vector<std::pair<std::string, std::string>>& fields);

}  // namespace fluxrt::cli
