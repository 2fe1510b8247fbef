// Model resolution (runtime/model_resolution.h): a model as given -> the pipeline folder and
// files a PipelineKind loads.
#include "runtime/model_resolution.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>

#include "core/error.h"
#include "pipelines/variant.h"

namespace fluxrt::runtime {
namespace fs = std::filesystem;

namespace {

bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

fs::path first_existing(const std::vector<fs::path>& candidates, const std::string& what) {
  std::string looked;
  for (const fs::path& c : candidates) {
    if (c.empty()) continue;
    if (path_exists(c)) return c;
    looked += (looked.empty() ? "" : ", ") + c.string();
  }
  fail(ErrorCode::NotFound, "{} not found (looked in {})", what,
       looked.empty() ? std::string("nothing") : looked);
}

}  // namespace

fs::path source_tree_dir() {
#ifdef FLUXRT_SOURCE_DIR
  return fs::path(FLUXRT_SOURCE_DIR);
#else
  return {};
#endif
}

fs::path install_share_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec || exe.empty()) return {};
  return exe.parent_path().parent_path() / "share" / "fluxrt";
}

fs::path find_bundled_demo_model() {
  const fs::path src = source_tree_dir(), share = install_share_dir();
  std::vector<fs::path> candidates;
  if (!src.empty()) candidates.push_back(src / "models" / "demo" / "model_index.json");
  if (!share.empty()) candidates.push_back(share / "models" / "demo" / "model_index.json");
  try {
    return first_existing(candidates, "no --model given and the bundled demo model").parent_path();
  } catch (const Error& e) {
    fail(ErrorCode::NotFound, "{}; pass --model <folder or hub repo id>", e.what());
  }
}

int vae_scale_factor_of(const io::ResolvedModel& model) {
  const io::ModelComponent* vae = model.find("vae");
  const fs::path folder = vae && !vae->folder.empty() ? fs::path(vae->folder) : fs::path(model.path) / "vae";
  const fs::path config = folder / "config.json";
  if (model.source != io::ModelSource::PipelineFolder || !path_exists(config)) return 8;
  std::ifstream in(config, std::ios::binary);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  FLUXRT_CHECK(!j.is_discarded() && j.is_object(), ErrorCode::Format, "{}: not a JSON object",
               config.string());
  if (!j.contains("block_out_channels")) return 8;  // the class default: 4 levels
  const nlohmann::json& levels = j["block_out_channels"];
  FLUXRT_CHECK(levels.is_array() && !levels.empty() && levels.size() <= 7, ErrorCode::Format,
               "{}: block_out_channels must be a list of 1 to 7 levels", config.string());
  return 1 << (static_cast<int>(levels.size()) - 1);
}

io::ResolvedModel find_components_folder(const io::ResolvedModel& file,
                                         const std::optional<std::string>& components) {
  const pipelines::VariantInfo info = pipelines::detect_variant(file);
  const pipelines::PipelineKind* kind = pipelines::pipeline_kind_for_transformer(info);
  FLUXRT_CHECK(
      kind != nullptr, ErrorCode::Unsupported,
      "model {} is {}: fluxrt generate takes FLUX.2 klein and FLUX.1 transformer files", file.path,
      info.description.empty() ? std::string("not a FLUX transformer checkpoint") : info.description);
  io::ResolvedModel folder;
  if (components) {
    folder = io::resolve_model(*components);
    FLUXRT_CHECK(folder.source == io::ModelSource::PipelineFolder, ErrorCode::InvalidArgument,
                 "--components {}: not a diffusers pipeline folder (no model_index.json)", *components);
  } else {
    fs::path dir = fs::path(file.path).parent_path();
    for (int up = 0; up < 2 && !dir.empty(); ++up, dir = dir.parent_path()) {
      if (path_exists(dir / "model_index.json")) {
        folder = io::resolve_model(dir.string());
        break;
      }
    }
    FLUXRT_CHECK(
        !folder.path.empty(), ErrorCode::NotFound,
        "model {} is a single {} transformer file: pass --components <a diffusers {} folder or hub repo id> "
        "for its text encoder, tokenizer, VAE and scheduler (no model_index.json next to the file)",
        file.path, kind->name, kind->pipeline_class);
  }
  // A folder of a kind running this family's transformers takes the file too (FLUX.1 Kontext's).
  const pipelines::PipelineKind* folder_kind = pipelines::find_pipeline_kind(folder.pipeline_class);
  FLUXRT_CHECK(
      kind->accepts_class(folder.pipeline_class) || (folder_kind && folder_kind->takes_transformer(info)),
      ErrorCode::Unsupported,
      "model {} is a {} transformer but the components in {} are a {}: they must be a {} folder", file.path,
      info.description, folder.path,
      folder.pipeline_class.empty() ? std::string("pipeline without a _class_name") : folder.pipeline_class,
      kind->pipeline_class);
  return folder;
}

ResolvedPipeline resolve_pipeline(const std::string& spec, const std::optional<std::string>& components,
                                  const std::optional<std::string>& text_encoder) {
  ResolvedPipeline r;
  if (text_encoder) {
    std::error_code ec;
    FLUXRT_CHECK(fs::is_regular_file(*text_encoder, ec), ErrorCode::NotFound,
                 "--text-encoder {}: not found (a .gguf or .safetensors text encoder file)", *text_encoder);
    r.text_encoder_file = *text_encoder;
  }
  r.given = io::resolve_model(spec);
  if (r.given.source == io::ModelSource::SingleFile) {
    r.transformer_file = r.given.path;
    r.model = find_components_folder(r.given, components);
    r.kind =
        &pipelines::check_pipeline_folder(r.model, /*transformer_from_file=*/true, text_encoder.has_value());
  } else {
    FLUXRT_CHECK(!components, ErrorCode::InvalidArgument,
                 "--components goes with --model FILE (a single transformer checkpoint); {} is a folder",
                 spec);
    r.model = r.given;
    r.kind =
        &pipelines::check_pipeline_folder(r.model, /*transformer_from_file=*/false, text_encoder.has_value());
  }
  return r;
}

std::string variant_label(const ResolvedPipeline& pipeline) {
  try {
    // A transformer file runs with its components folder, whose model_index.json it is named by.
    const pipelines::VariantInfo v = pipeline.transformer_file.empty()
                                         ? pipelines::detect_variant(pipeline.model)
                                         : pipelines::detect_variant(pipeline.given, &pipeline.model);
    return !v.description.empty() ? v.description : !v.variant.empty() ? v.variant : std::string("unknown");
  } catch (const Error&) {
    return pipeline.model.pipeline_class;  // detection is informational; the load validates for real
  }
}

}  // namespace fluxrt::runtime
