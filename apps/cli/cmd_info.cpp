// `fluxrt info <model>`: where a model resolved to, which variant it is, what its components hold.
// A client of the public fluxrt::inspect_model (include/fluxrt/model_info.h); this file only prints.
#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <string>

#include "commands.h"
#include "fluxrt/lora.h"
#include "fluxrt/model_info.h"

namespace fluxrt::cli {
namespace {

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", value, units[unit]);
}

std::string dtype_list(const ComponentInfo& c) {
  std::string out;
  for (const auto& [name, count] : c.dtypes) out += fmt::format("{}{} x{}", out.empty() ? "" : ", ", name, count);
  return out;
}

void print_text(const ModelInfo& m) {
  fmt::print("model:   {}\n", m.spec);
  fmt::print("path:    {}\n", m.path);
  if (!m.repo_id.empty()) fmt::print("hub:     {} @ {}\n", m.repo_id, m.revision);
  fmt::print("source:  {}{}\n", m.source,
             m.pipeline_class.empty() ? "" : fmt::format(" ({})", m.pipeline_class));
  fmt::print("variant: {}\n", m.description);
  if (!m.pipelines.empty()) {
    std::string runs;
    for (const std::string& p : m.pipelines) runs += (runs.empty() ? "" : ", ") + p;
    fmt::print("runs:    {}\n", runs);
  }
  if (m.shape) {
    const TransformerShape& s = *m.shape;
    fmt::print("layout:  {}{}\n", m.layout,
               m.key_prefix.empty() ? "" : fmt::format(" (keys prefixed \"{}\")", m.key_prefix));
    fmt::print("shape:   hidden {} ({} head{} x {}), {} double + {} single blocks, in {}, context {}, guidance {}\n",
               s.hidden_size, s.num_heads, s.num_heads == 1 ? "" : "s", s.head_dim, s.double_blocks, s.single_blocks, s.in_channels,
               s.context_dim, s.guidance_embed ? "yes" : "no");
    if (m.distilled.has_value())
      fmt::print("kind:    {} (from {})\n", *m.distilled ? "distilled" : "base", m.distilled_from);
  }
  fmt::print("\n{:<14} {:<32} {:>8} {:>14} {:>12}  {}\n", "component", "class", "tensors", "parameters", "bytes",
             "dtypes");
  size_t tensors = 0;
  uint64_t parameters = 0, bytes = 0;
  for (const ComponentInfo& c : m.components) {
    const std::string cls = c.class_name.empty() ? "-" : c.class_name;
    if (!c.present) {
      fmt::print("{:<14} {:<32} {:>8}\n", c.name, cls, "(missing)");
    } else if (c.weights.empty()) {
      fmt::print("{:<14} {:<32} {:>8}\n", c.name, cls, "-");
    } else {
      fmt::print("{:<14} {:<32} {:>8} {:>14} {:>12}  {}\n", c.name, cls, c.tensors, c.parameters,
                 human_bytes(c.bytes), dtype_list(c));
      tensors += c.tensors;
      parameters += c.parameters;
      bytes += c.bytes;
    }
  }
  if (m.components.size() > 1)
    fmt::print("{:<14} {:<32} {:>8} {:>14} {:>12}\n", "total", "", tensors, parameters, human_bytes(bytes));
}

}  // namespace

CLI::App* add_info_command(CLI::App& app, InfoOptions& options) {
  CLI::App* cmd = app.add_subcommand("info", "show what a model folder, file or hub repo id contains");
  cmd->add_option("model", options.model,
                  "diffusers folder, .safetensors file, or Hugging Face repo id (org/name[@rev]) in the local cache")
      ->required();
  cmd->add_flag("--json", options.json, "print a JSON document instead of text");
  return cmd;
}

// A JSON string literal (quotes, backslashes and control characters escaped).
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

void print_lora(const LoraInfo& l, bool json) {
  std::string ranks, alphas, kinds, kinds_json;
  for (const auto& [k, n] : l.kinds) {
    kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", k, n);
    kinds_json += fmt::format("{}{}: {}", kinds_json.empty() ? "" : ", ", quoted(k), n);
  }
  for (int r : l.ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  for (float a : l.alphas) alphas += (alphas.empty() ? "" : ", ") + fmt::format("{}", a);
  if (json) {
    std::string list, module_kinds;
    for (const std::string& m : l.modules) list += (list.empty() ? "" : ", ") + quoted(m);
    for (const std::string& k : l.module_kinds)
      module_kinds += (module_kinds.empty() ? "" : ", ") + quoted(k);
    fmt::print(
        "{{\"lora\": {{\"path\": {}, \"format\": {}, \"family\": {}, \"kinds\": {{{}}}, \"ranks\": [{}], "
        "\"alphas\": [{}], \"sha256\": {}, \"modules\": [{}], \"module_kinds\": [{}]}}}}\n",
        quoted(l.path), quoted(l.format), quoted(l.family), kinds_json, ranks, alphas, quoted(l.sha256), list,
        module_kinds);
    return;
  }
  fmt::print("LoRA:    {}\n", l.path);
  fmt::print("format:  {}\n", l.format);
  fmt::print("family:  {}\n", l.family);
  fmt::print("kind:    {} (modules)\n", kinds);
  fmt::print("rank:    {}\n", ranks);
  fmt::print("alpha:   {}\n", alphas.empty() ? std::string("none (factor 1)") : alphas);
  fmt::print("sha256:  {} (metadata records {})\n", l.sha256, l.sha256.substr(0, 12));
  // Grouped over the block (or CLIP layer) index: "double_blocks.N.img_attn.qkv  (19 blocks)".
  std::map<std::string, int> groups;
  for (const std::string& m : l.modules) {
    std::string g = m;
    for (const std::string blocks : {"blocks.", "layers."}) {
      const size_t at = g.find(blocks);
      if (at == std::string::npos) continue;
      const size_t digits = at + blocks.size();
      size_t end = digits;
      while (end < g.size() && g[end] >= '0' && g[end] <= '9') ++end;
      if (end > digits) g.replace(digits, end - digits, "N");
    }
    ++groups[g];
  }
  fmt::print("modules: {} ({} layer kinds)\n", l.modules.size(), groups.size());
  for (const auto& [g, n] : groups) {
    const char* unit = g.find("layers.N.") != std::string::npos ? "layers" : "blocks";
    fmt::print("  {}{}\n", g, g.find(".N.") != std::string::npos ? fmt::format("  ({} {})", n, unit) : "");
  }
}

int run_info(const InfoOptions& options) {
  if (is_lora_file(options.model)) {
    print_lora(inspect_lora(options.model), options.json);
    std::fflush(stdout);
    return 0;
  }
  const ModelInfo info = inspect_model(options.model);
  if (options.json)
    fmt::print("{}\n", model_info_json(info));
  else
    print_text(info);
  std::fflush(stdout);
  return 0;
}

}  // namespace fluxrt::cli
