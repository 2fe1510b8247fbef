#include "request_flags.h"

#include "fluxrt/request_fields.h"

namespace fluxrt::cli {

void add_request_field_flags(CLI::App& command, std::vector<std::pair<std::string, std::string>>& fields) {
  const RequestLimits limits = request_limits();  // the bounds every model has; a model may narrow them
  for (const RequestField& f : request_fields()) {
    std::string names = f.flag;
    if (*f.short_flag) names += std::string(",") + f.short_flag;
    std::string help = f.help;
    const std::string bounds = request_field_bounds(f, limits);
    if (!bounds.empty()) help += " [" + bounds + "]";
    const std::string key = f.key;
    command.add_option_function<std::string>(
        names, [&fields, key](const std::string& text) { fields.emplace_back(key, text); }, help);
  }
}

}  // namespace fluxrt::cli
