// Model discovery and variant detection: the checked-in tiny models (tools/reference/
// make_tiny_models.py), config-only folders and header-only files at the real sizes, and a
// Hugging Face cache laid out like huggingface_hub writes it (blobs + relative symlinks).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/model_discovery.h"
#include "io/model_info.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using fluxrt::Error;
using fluxrt::ErrorCode;
using namespace fluxrt::io;

namespace {

const fs::path kModels = fs::path(FLUXRT_TEST_DATA_DIR) / "models";
const fs::path kKleinFolder = kModels / "flux2-klein-tiny";
const fs::path kKleinBfl = kModels / "flux2-klein-tiny-bfl.safetensors";

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            (std::string("fluxrt_discovery_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// A valid safetensors file whose tensors are all bf16 zeros, written sparse (header + truncate),
// so real-size shapes (a 3072 x 4096 txt_in) cost no disk space or time.
void write_header_only(const fs::path& path, const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors) {
  nlohmann::ordered_json header;
  uint64_t offset = 0;
  for (const auto& [name, shape] : tensors) {
    uint64_t n = 2;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    header[name] = {{"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  while (text.size() % 8) text += ' ';
  fs::create_directories(path.parent_path());
  {
    std::ofstream out(path, std::ios::binary);
    const uint64_t len = text.size();
    char bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);
    out.write(bytes, 8);
    out << text;
  }
  fs::resize_file(path, 8 + text.size() + offset);
}

using TensorList = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// The tensors variant detection looks at, for a BFL-layout file of the given size.
TensorList bfl_skeleton(const std::string& prefix, bool flux2, int64_t hidden, int64_t in, int64_t ctx,
                        int64_t n_double, int64_t n_single, bool guidance) {
  TensorList t;
  t.push_back({prefix + "img_in.weight", {hidden, in}});
  t.push_back({prefix + "txt_in.weight", {hidden, ctx}});
  t.push_back({prefix + "time_in.in_layer.weight", {hidden, 256}});
  if (flux2) {
    t.push_back({prefix + "single_stream_modulation.lin.weight", {3, hidden}});  // shape irrelevant here
  } else {
    t.push_back({prefix + "vector_in.in_layer.weight", {hidden, 768}});
  }
  if (guidance) t.push_back({prefix + "guidance_in.in_layer.weight", {hidden, 256}});
  for (int64_t i = 0; i < n_double; ++i)
    t.push_back({prefix + "double_blocks." + std::to_string(i) + ".img_attn.norm.query_norm.scale", {128}});
  for (int64_t i = 0; i < n_single; ++i)
    t.push_back({prefix + "single_blocks." + std::to_string(i) + ".norm.query_norm.scale", {128}});
  return t;
}

std::string message_of(const std::function<void()>& fn, ErrorCode* code = nullptr) {
  try {
    fn();
  } catch (const Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "(no error)";
}

void expect_one_line(const std::string& message) { EXPECT_EQ(message.find('\n'), std::string::npos) << message; }

}  // namespace

// ------------------------------------------------------------------------------------------------
// The checked-in tiny models

TEST(ModelDiscovery, TinyKleinPipelineFolder) {
  const ResolvedModel m = resolve_model(kKleinFolder.string(), "/nonexistent-hub");
  EXPECT_EQ(m.source, ModelSource::PipelineFolder);
  EXPECT_EQ(m.pipeline_class, "Flux2KleinPipeline");
  ASSERT_TRUE(m.is_distilled.has_value());
  EXPECT_TRUE(*m.is_distilled);
  ASSERT_EQ(m.components.size(), 5u);
  struct Expect {
    const char* name;
    const char* library;
    const char* class_name;
    const char* weights;  // file name, or "" for none
  };
  const Expect expected[] = {
      {"scheduler", "diffusers", "FlowMatchEulerDiscreteScheduler", ""},
      {"text_encoder", "transformers", "Qwen3ForCausalLM", "model.safetensors"},
      {"tokenizer", "transformers", "Qwen2Tokenizer", ""},
      {"transformer", "diffusers", "Flux2Transformer2DModel", "diffusion_pytorch_model.safetensors"},
      {"vae", "diffusers", "AutoencoderKLFlux2", "diffusion_pytorch_model.safetensors"},
  };
  for (const Expect& e : expected) {
    const ModelComponent* c = m.find(e.name);
    ASSERT_NE(c, nullptr) << e.name;
    EXPECT_EQ(c->library, e.library);
    EXPECT_EQ(c->class_name, e.class_name);
    EXPECT_TRUE(c->present);
    EXPECT_EQ(fs::path(c->folder), kKleinFolder / e.name);
    if (*e.weights)
      EXPECT_EQ(fs::path(c->weights).filename(), e.weights) << e.name;
    else
      EXPECT_TRUE(c->weights.empty()) << e.name;
  }
  EXPECT_EQ(m.transformer(), m.find("transformer"));
}

TEST(ModelDiscovery, TinyKleinVariantFromConfig) {
  const VariantInfo v = detect_variant(resolve_model(kKleinFolder.string(), "/nonexistent-hub"));
  EXPECT_EQ(v.family, ModelFamily::Flux2);
  EXPECT_EQ(v.variant, ModelVariant::Custom);
  EXPECT_EQ(v.layout, WeightLayout::Diffusers);
  EXPECT_EQ(v.shape.hidden_size, 128);
  EXPECT_EQ(v.shape.head_dim, 128);
  EXPECT_EQ(v.shape.num_heads, 1);
  EXPECT_EQ(v.shape.double_blocks, 1);
  EXPECT_EQ(v.shape.single_blocks, 1);
  EXPECT_EQ(v.shape.in_channels, 128);
  EXPECT_EQ(v.shape.context_dim, 24);
  EXPECT_FALSE(v.shape.guidance_embed);
  ASSERT_TRUE(v.distilled.has_value());
  EXPECT_TRUE(*v.distilled);
  EXPECT_EQ(v.distilled_from, "model_index.json");
  EXPECT_EQ(v.description, "flux.2-klein (custom: hidden 128, 1+1 blocks, distilled)");
}

TEST(ModelDiscovery, TinyKleinBflFileMatchesFolder) {
  const ResolvedModel m = resolve_model(kKleinBfl.string(), "/nonexistent-hub");
  EXPECT_EQ(m.source, ModelSource::SingleFile);
  ASSERT_EQ(m.components.size(), 1u);
  EXPECT_EQ(m.components[0].name, "transformer");
  EXPECT_EQ(m.components[0].weights, kKleinBfl.string());
  const VariantInfo v = detect_variant(m);
  const VariantInfo folder = detect_variant(resolve_model(kKleinFolder.string(), "/nonexistent-hub"));
  EXPECT_EQ(v.layout, WeightLayout::Bfl);
  EXPECT_EQ(v.family, ModelFamily::Flux2);
  EXPECT_EQ(v.variant, ModelVariant::Custom);
  EXPECT_EQ(v.shape.hidden_size, folder.shape.hidden_size);
  EXPECT_EQ(v.shape.head_dim, folder.shape.head_dim);
  EXPECT_EQ(v.shape.num_heads, folder.shape.num_heads);
  EXPECT_EQ(v.shape.double_blocks, folder.shape.double_blocks);
  EXPECT_EQ(v.shape.single_blocks, folder.shape.single_blocks);
  EXPECT_EQ(v.shape.in_channels, folder.shape.in_channels);
  EXPECT_EQ(v.shape.context_dim, folder.shape.context_dim);
  EXPECT_EQ(v.shape.guidance_embed, folder.shape.guidance_embed);
  // A single file carries no is_distilled; only the (klein-named) file name hints at it.
  EXPECT_EQ(v.distilled_from, "file name");
  EXPECT_NE(v.description.find("flux.2-klein (custom: hidden 128, 1+1 blocks"), std::string::npos) << v.description;
}

TEST(ModelDiscovery, TensorDetectionAgreesWithConfigOnEveryTinyTransformer) {
  for (const char* rel : {"flux2-klein-tiny/transformer", "flux1-dev-tiny-transformer", "flux1-schnell-tiny-transformer"}) {
    SCOPED_TRACE(rel);
    const ResolvedModel m = resolve_model((kModels / rel).string(), "/nonexistent-hub");
    const VariantInfo from_config = detect_variant(m);
    const VariantInfo from_tensors = detect_variant_from_tensors(Checkpoint::open(m.transformer()->weights));
    EXPECT_EQ(from_tensors.family, from_config.family);
    EXPECT_EQ(from_tensors.layout, WeightLayout::Diffusers);
    EXPECT_EQ(from_tensors.shape.hidden_size, from_config.shape.hidden_size);
    EXPECT_EQ(from_tensors.shape.head_dim, from_config.shape.head_dim);
    EXPECT_EQ(from_tensors.shape.double_blocks, from_config.shape.double_blocks);
    EXPECT_EQ(from_tensors.shape.single_blocks, from_config.shape.single_blocks);
    EXPECT_EQ(from_tensors.shape.in_channels, from_config.shape.in_channels);
    EXPECT_EQ(from_tensors.shape.context_dim, from_config.shape.context_dim);
    EXPECT_EQ(from_tensors.shape.guidance_embed, from_config.shape.guidance_embed);
  }
}

TEST(ModelDiscovery, TinyFlux1TransformerFolders) {
  for (bool dev : {true, false}) {
    const fs::path folder = kModels / (dev ? "flux1-dev-tiny-transformer" : "flux1-schnell-tiny-transformer");
    const ResolvedModel m = resolve_model(folder.string(), "/nonexistent-hub");
    EXPECT_EQ(m.source, ModelSource::ComponentFolder);
    ASSERT_EQ(m.components.size(), 1u);
    EXPECT_EQ(m.components[0].name, "transformer");
    EXPECT_EQ(m.components[0].class_name, "FluxTransformer2DModel");
    const VariantInfo v = detect_variant(m);
    EXPECT_EQ(v.family, ModelFamily::Flux1);
    EXPECT_EQ(v.variant, ModelVariant::Custom);
    EXPECT_EQ(v.layout, WeightLayout::Diffusers);
    EXPECT_EQ(v.shape.hidden_size, 32);
    EXPECT_EQ(v.shape.head_dim, 16);
    EXPECT_EQ(v.shape.in_channels, 64);
    EXPECT_EQ(v.shape.guidance_embed, dev);
    EXPECT_FALSE(v.distilled.has_value());
    EXPECT_EQ(v.description, dev ? "flux.1 (custom: hidden 32, 1+1 blocks, guidance)"
                                 : "flux.1 (custom: hidden 32, 1+1 blocks, no guidance)");
  }
}

TEST(ModelDiscovery, TinyFlux1SchnellBflFile) {
  const VariantInfo v =
      detect_variant(resolve_model((kModels / "flux1-schnell-tiny-bfl.safetensors").string(), "/nonexistent-hub"));
  EXPECT_EQ(v.family, ModelFamily::Flux1);
  EXPECT_EQ(v.layout, WeightLayout::Bfl);
  EXPECT_EQ(v.shape.hidden_size, 32);
  EXPECT_EQ(v.shape.head_dim, 16);
  EXPECT_EQ(v.shape.num_heads, 2);
  EXPECT_EQ(v.shape.double_blocks, 1);
  EXPECT_EQ(v.shape.single_blocks, 1);
  EXPECT_EQ(v.shape.context_dim, 32);
  EXPECT_FALSE(v.shape.guidance_embed);
  EXPECT_FALSE(v.distilled.has_value());
}

TEST(ModelDiscovery, WeightFilePicking) {
  TempDir tmp;
  // fp16/bf16 "variant" copies next to the main file are left out.
  const fs::path folder = tmp.path() / "transformer";
  fs::create_directories(folder);
  const fs::path src = kModels / "flux1-dev-tiny-transformer";
  fs::copy_file(src / "config.json", folder / "config.json");
  fs::copy_file(src / "diffusion_pytorch_model.safetensors", folder / "diffusion_pytorch_model.safetensors");
  fs::copy_file(src / "diffusion_pytorch_model.safetensors", folder / "diffusion_pytorch_model.fp16.safetensors");
  ResolvedModel m = resolve_model(folder.string(), "/nonexistent-hub");
  EXPECT_EQ(fs::path(m.transformer()->weights).filename(), "diffusion_pytorch_model.safetensors");
  EXPECT_EQ(inspect_model(folder.string(), "/nonexistent-hub").components[0].files, 1u);

  // Only a variant file: that one.
  fs::remove(folder / "diffusion_pytorch_model.safetensors");
  m = resolve_model(folder.string(), "/nonexistent-hub");
  EXPECT_EQ(fs::path(m.transformer()->weights).filename(), "diffusion_pytorch_model.fp16.safetensors");

  // Shards: the index.
  const fs::path sharded = fs::path(FLUXRT_TEST_DATA_DIR) / "safetensors" / "good" / "sharded";
  if (fs::is_directory(sharded)) {
    m = resolve_model(sharded.string(), "/nonexistent-hub");
    EXPECT_EQ(m.source, ModelSource::ComponentFolder);
    EXPECT_EQ(fs::path(m.components[0].weights).filename(), "model.safetensors.index.json");
    const ModelReport r = inspect_model(sharded.string(), "/nonexistent-hub");
    EXPECT_EQ(r.components[0].files, 2u);
    EXPECT_EQ(r.variant.family, ModelFamily::Unknown);  // not a transformer: listed, not classified
  }
}

// ------------------------------------------------------------------------------------------------
// Real sizes: config-only folders and sparse header-only files

namespace {

std::string klein_config(int64_t heads, int64_t layers, int64_t single, int64_t ctx) {
  return nlohmann::json{{"_class_name", "Flux2Transformer2DModel"}, {"attention_head_dim", 128},
                        {"num_attention_heads", heads}, {"num_layers", layers}, {"num_single_layers", single},
                        {"joint_attention_dim", ctx}, {"in_channels", 128}, {"guidance_embeds", false}}
      .dump();
}

std::string flux1_config(bool guidance) {
  return nlohmann::json{{"_class_name", "FluxTransformer2DModel"}, {"attention_head_dim", 128},
                        {"num_attention_heads", 24}, {"num_layers", 19}, {"num_single_layers", 38},
                        {"joint_attention_dim", 4096}, {"in_channels", 64}, {"pooled_projection_dim", 768},
                        {"guidance_embeds", guidance}}
      .dump();
}

// A pipeline folder with only model_index.json and transformer/config.json (no weights).
fs::path config_only_pipeline(const fs::path& root, const std::string& name, const std::string& pipeline,
                              const std::string& is_distilled, const std::string& transformer_config) {
  const fs::path folder = root / name;
  std::string index = "{\"_class_name\": \"" + pipeline + "\", ";
  if (!is_distilled.empty()) index += "\"is_distilled\": " + is_distilled + ", ";
  const std::string cls = nlohmann::json::parse(transformer_config)["_class_name"].get<std::string>();
  index += "\"transformer\": [\"diffusers\", \"" + cls + "\"], \"image_encoder\": [null, null]}";
  write_text(folder / "model_index.json", index);
  write_text(folder / "transformer" / "config.json", transformer_config);
  return folder;
}

}  // namespace

TEST(ModelDiscovery, RealVariantsFromConfigs) {
  TempDir tmp;
  struct Case {
    const char* name;
    std::string is_distilled;
    std::string config;
    ModelVariant variant;
    const char* description;
  };
  const Case cases[] = {
      {"dev", "", flux1_config(true), ModelVariant::Flux1Dev, "FLUX.1-dev"},
      {"schnell", "", flux1_config(false), ModelVariant::Flux1Schnell, "FLUX.1-schnell"},
      {"k4", "true", klein_config(24, 5, 20, 7680), ModelVariant::Flux2Klein4B, "FLUX.2-klein-4B (distilled)"},
      {"k4base", "false", klein_config(24, 5, 20, 7680), ModelVariant::Flux2Klein4B, "FLUX.2-klein-base-4B"},
      {"k9", "true", klein_config(32, 8, 24, 12288), ModelVariant::Flux2Klein9B, "FLUX.2-klein-9B (distilled)"},
      {"k9unknown", "", klein_config(32, 8, 24, 12288), ModelVariant::Flux2Klein9B,
       "FLUX.2-klein-9B (distilled or base: unknown)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string pipeline = std::string(c.name).rfind("k", 0) == 0 ? "Flux2KleinPipeline" : "FluxPipeline";
    const fs::path folder = config_only_pipeline(tmp.path(), c.name, pipeline, c.is_distilled, c.config);
    const ResolvedModel m = resolve_model(folder.string(), "/nonexistent-hub");
    ASSERT_EQ(m.components.size(), 1u);  // [null, null] entries are not components
    const VariantInfo v = detect_variant(m);
    EXPECT_EQ(v.variant, c.variant);
    EXPECT_EQ(v.description, c.description);
    EXPECT_EQ(v.layout, WeightLayout::Unknown);  // no weights to read the layout from
  }
}

TEST(ModelDiscovery, RealSizeSingleFiles) {
  TempDir tmp;
  const fs::path dev = tmp.path() / "flux1-dev.safetensors";
  write_header_only(dev, bfl_skeleton("", false, 3072, 64, 4096, 19, 38, true));
  VariantInfo v = detect_variant(resolve_model(dev.string(), "/nonexistent-hub"));
  EXPECT_EQ(v.variant, ModelVariant::Flux1Dev);
  EXPECT_EQ(v.layout, WeightLayout::Bfl);
  EXPECT_EQ(v.shape.num_heads, 24);
  EXPECT_EQ(v.description, "FLUX.1-dev");

  const fs::path schnell = tmp.path() / "renamed.safetensors";
  write_header_only(schnell, bfl_skeleton("", false, 3072, 64, 4096, 19, 38, false));
  EXPECT_EQ(detect_variant(resolve_model(schnell.string(), "/nonexistent-hub")).variant, ModelVariant::Flux1Schnell);

  // ComfyUI repackaging: every key prefixed.
  const fs::path k9 = tmp.path() / "flux-2-klein-base-9b.safetensors";
  write_header_only(k9, bfl_skeleton("model.diffusion_model.", true, 4096, 128, 12288, 8, 24, false));
  v = detect_variant(resolve_model(k9.string(), "/nonexistent-hub"));
  EXPECT_EQ(v.variant, ModelVariant::Flux2Klein9B);
  EXPECT_EQ(v.key_prefix, "model.diffusion_model.");
  EXPECT_EQ(v.shape.num_heads, 32);
  EXPECT_EQ(v.description, "FLUX.2-klein-base-9B");  // from the official file name

  const fs::path k4 = tmp.path() / "my-model.safetensors";
  write_header_only(k4, bfl_skeleton("", true, 3072, 128, 7680, 5, 20, false));
  v = detect_variant(resolve_model(k4.string(), "/nonexistent-hub"));
  EXPECT_EQ(v.variant, ModelVariant::Flux2Klein4B);
  EXPECT_EQ(v.description, "FLUX.2-klein-4B (distilled or base: unknown)");

  const fs::path vae = tmp.path() / "ae.safetensors";
  write_header_only(vae, {{"encoder.conv_in.weight", {128, 3, 3, 3}}});
  v = detect_variant(resolve_model(vae.string(), "/nonexistent-hub"));
  EXPECT_EQ(v.family, ModelFamily::Unknown);
  EXPECT_EQ(v.description, "not a FLUX transformer checkpoint");
}

// ------------------------------------------------------------------------------------------------
// Errors

TEST(ModelDiscovery, NotFoundAndNotAModel) {
  TempDir tmp;
  ErrorCode code{};
  std::string msg = message_of([&] { resolve_model((tmp.path() / "missing" / "x").string(), "/nonexistent-hub"); }, &code);
  EXPECT_EQ(code, ErrorCode::NotFound);
  EXPECT_NE(msg.find("no such file or folder"), std::string::npos) << msg;
  expect_one_line(msg);

  const fs::path empty = tmp.path() / "empty";
  fs::create_directories(empty);
  write_text(empty / "notes.txt", "hello");
  msg = message_of([&] { resolve_model(empty.string(), "/nonexistent-hub"); }, &code);
  EXPECT_EQ(code, ErrorCode::Format);
  EXPECT_NE(msg.find("not a model folder"), std::string::npos) << msg;
  EXPECT_NE(msg.find(empty.string()), std::string::npos) << msg;
  expect_one_line(msg);

  msg = message_of([&] { resolve_model((empty / "notes.txt").string(), "/nonexistent-hub"); }, &code);
  EXPECT_EQ(code, ErrorCode::InvalidArgument);
  expect_one_line(msg);

  const fs::path bad_index = tmp.path() / "bad";
  write_text(bad_index / "model_index.json", "{\"_class_name\": \n oops");
  msg = message_of([&] { resolve_model(bad_index.string(), "/nonexistent-hub"); }, &code);
  EXPECT_EQ(code, ErrorCode::Format);
  EXPECT_NE(msg.find("model_index.json"), std::string::npos) << msg;
  expect_one_line(msg);

  msg = message_of([&] { resolve_model("", "/nonexistent-hub"); }, &code);
  EXPECT_EQ(code, ErrorCode::InvalidArgument);
}

TEST(ModelDiscovery, CorruptWeightsFailInspection) {
  TempDir tmp;
  const fs::path file = tmp.path() / "corrupt.safetensors";
  write_text(file, std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{not json", 17));
  ErrorCode code{};
  const std::string msg = message_of([&] { inspect_model(file.string(), "/nonexistent-hub"); }, &code);
  EXPECT_EQ(code, ErrorCode::Format) << msg;
  EXPECT_NE(msg.find("corrupt.safetensors"), std::string::npos) << msg;
  expect_one_line(msg);
}

// ------------------------------------------------------------------------------------------------
// Hugging Face cache

namespace {

// Copies `source` into a hub cache as huggingface_hub lays it out: each file's bytes under
// blobs/<name>, snapshots/<rev>/<path> a relative symlink to it, refs/main naming the revision.
fs::path make_hub_repo(const fs::path& hub, const std::string& repo_folder, const fs::path& source,
                       const std::string& revision, bool write_ref_main) {
  const fs::path repo = hub / repo_folder;
  const fs::path snapshot = repo / "snapshots" / revision;
  fs::create_directories(repo / "blobs");
  fs::create_directories(snapshot);
  int counter = 0;
  for (const auto& entry : fs::recursive_directory_iterator(source)) {
    if (!entry.is_regular_file()) continue;
    const fs::path rel = fs::relative(entry.path(), source);
    const std::string blob = revision + "-blob" + std::to_string(counter++);
    fs::copy_file(entry.path(), repo / "blobs" / blob);
    fs::create_directories((snapshot / rel).parent_path());
    fs::path up;
    for (size_t i = 0; i < static_cast<size_t>(std::distance(rel.begin(), rel.end())) + 1; ++i) up /= "..";
    fs::create_symlink(up / "blobs" / blob, snapshot / rel);
  }
  if (write_ref_main) write_text(repo / "refs" / "main", revision + "\n");
  return snapshot;
}

}  // namespace

TEST(ModelDiscovery, HubCacheRefsMainAndRevisions) {
  TempDir tmp;
  const fs::path hub = tmp.path() / "hub";
  const std::string rev = "0123456789abcdef0123456789abcdef01234567";
  const fs::path snapshot =
      make_hub_repo(hub, "models--black-forest-labs--FLUX.2-klein-4B", kKleinFolder, rev, /*write_ref_main=*/true);
  ASSERT_TRUE(fs::is_symlink(snapshot / "transformer" / "diffusion_pytorch_model.safetensors"));

  const std::vector<std::string> specs = {"black-forest-labs/FLUX.2-klein-4B", "black-forest-labs/FLUX.2-klein-4B@main",
                                         "black-forest-labs/FLUX.2-klein-4B@" + rev};
  for (const std::string& spec : specs) {
    SCOPED_TRACE(spec);
    const ResolvedModel m = resolve_model(spec, hub.string());
    EXPECT_EQ(fs::path(m.path), snapshot);
    EXPECT_EQ(m.repo_id, "black-forest-labs/FLUX.2-klein-4B");
    EXPECT_EQ(m.revision, rev);
    EXPECT_EQ(m.spec, spec);
    EXPECT_EQ(m.source, ModelSource::PipelineFolder);
    ASSERT_NE(m.transformer(), nullptr);
    EXPECT_FALSE(m.transformer()->weights.empty());
  }
  // The tiny model is in the cache under the real repo's name; it is still detected by its size.
  const ModelReport report = inspect_model("black-forest-labs/FLUX.2-klein-4B", hub.string());
  EXPECT_EQ(report.variant.variant, ModelVariant::Custom);
  EXPECT_EQ(report.variant.description, "flux.2-klein (custom: hidden 128, 1+1 blocks, distilled)");

  ErrorCode code{};
  std::string msg = message_of([&] { resolve_model("black-forest-labs/FLUX.2-klein-4B@v9", hub.string()); }, &code);
  EXPECT_EQ(code, ErrorCode::NotFound);
  EXPECT_NE(msg.find("no such revision"), std::string::npos) << msg;
  EXPECT_NE(msg.find(rev), std::string::npos) << msg;  // lists the snapshots it has
  expect_one_line(msg);
}

TEST(ModelDiscovery, HubCacheWithoutRefsMain) {
  TempDir tmp;
  const fs::path hub = tmp.path() / "hub";
  const fs::path only = make_hub_repo(hub, "models--org--single", kModels / "flux1-dev-tiny-transformer", "aaaa", false);
  ResolvedModel m = resolve_model("org/single", hub.string());
  EXPECT_EQ(fs::path(m.path), only);
  EXPECT_EQ(m.source, ModelSource::ComponentFolder);
  EXPECT_EQ(detect_variant(m).family, ModelFamily::Flux1);

  // Several snapshots and no refs/main: the newest one.
  make_hub_repo(hub, "models--org--multi", kModels / "flux1-dev-tiny-transformer", "old", false);
  const fs::path newer = make_hub_repo(hub, "models--org--multi", kModels / "flux1-schnell-tiny-transformer", "new", false);
  fs::last_write_time(hub / "models--org--multi" / "snapshots" / "old",
                      fs::last_write_time(newer) - std::chrono::hours(1));
  m = resolve_model("org/multi", hub.string());
  EXPECT_EQ(fs::path(m.path), newer);
  EXPECT_FALSE(detect_variant(m).shape.guidance_embed);

  // refs/main naming a snapshot that is not there (a partial download) also falls back.
  write_text(hub / "models--org--single" / "refs" / "main", "ffff\n");
  EXPECT_EQ(fs::path(resolve_model("org/single", hub.string()).path), only);
}

TEST(ModelDiscovery, HubCacheMissing) {
  TempDir tmp;
  ErrorCode code{};
  const std::string msg = message_of([&] { resolve_model("black-forest-labs/FLUX.2-klein-9B", tmp.path().string()); }, &code);
  EXPECT_EQ(code, ErrorCode::NotFound);
  EXPECT_NE(msg.find("Hugging Face cache"), std::string::npos) << msg;
  EXPECT_NE(msg.find((tmp.path() / "models--black-forest-labs--FLUX.2-klein-9B").string()), std::string::npos) << msg;
  expect_one_line(msg);

  // A repo folder with no snapshot at all.
  fs::create_directories(tmp.path() / "models--org--empty" / "snapshots");
  const std::string empty = message_of([&] { resolve_model("org/empty", tmp.path().string()); }, &code);
  EXPECT_EQ(code, ErrorCode::NotFound);
  EXPECT_NE(empty.find("no snapshot"), std::string::npos) << empty;

  // Not a repo id either: a plain missing path.
  const std::string path_msg = message_of([&] { resolve_model("a/b/c", tmp.path().string()); }, &code);
  EXPECT_NE(path_msg.find("no such file or folder"), std::string::npos) << path_msg;
}

TEST(ModelDiscovery, HubCacheDirFromEnvironment) {
  struct SavedEnv {
    std::string name;
    std::optional<std::string> value;
  };
  std::vector<SavedEnv> saved;
  for (const char* name : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HOME"}) {
    const char* v = std::getenv(name);
    saved.push_back({name, v ? std::optional<std::string>(v) : std::nullopt});
    ::unsetenv(name);
  }
  ::setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(hf_hub_cache_dir(), "/home/someone/.cache/huggingface/hub");
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(hf_hub_cache_dir(), "/xdg/huggingface/hub");
  ::setenv("HF_HOME", "/data/hf", 1);
  EXPECT_EQ(hf_hub_cache_dir(), "/data/hf/hub");
  ::setenv("HUGGINGFACE_HUB_CACHE", "/legacy/hub", 1);
  EXPECT_EQ(hf_hub_cache_dir(), "/legacy/hub");
  ::setenv("HF_HUB_CACHE", "/fast/hub", 1);
  EXPECT_EQ(hf_hub_cache_dir(), "/fast/hub");
  for (const SavedEnv& s : saved) {
    if (s.value)
      ::setenv(s.name.c_str(), s.value->c_str(), 1);
    else
      ::unsetenv(s.name.c_str());
  }
}

// ------------------------------------------------------------------------------------------------
// inspect_model

TEST(ModelInfo, TinyKleinFolderStatistics) {
  const ModelReport r = inspect_model(kKleinFolder.string(), "/nonexistent-hub");
  ASSERT_EQ(r.components.size(), 5u);
  uint64_t total_bytes = 0;
  for (const ComponentReport& c : r.components) {
    SCOPED_TRACE(c.name);
    total_bytes += c.bytes;
    if (c.name == "transformer") {
      EXPECT_EQ(c.tensors, 29u);  // diffusers layout of 1 double + 1 single FLUX.2 block
      EXPECT_EQ(c.dtypes.size(), 1u);
      EXPECT_EQ(c.dtypes.at("bf16"), 29u);
      EXPECT_EQ(c.bytes, 2 * c.parameters);
      EXPECT_EQ(c.files, 1u);
    } else if (c.name == "text_encoder") {
      EXPECT_EQ(c.tensors, 398u);  // embedding + final norm + 36 layers x 11 (lm_head is tied)
      EXPECT_EQ(c.dtypes.at("bf16"), 398u);
      EXPECT_GE(c.parameters, 151936u * 8u);
    } else if (c.name == "vae") {
      // f32 weights plus BatchNorm's int64 num_batches_tracked scalar, which diffusers saves.
      EXPECT_EQ(c.dtypes.at("i64"), 1u);
      EXPECT_EQ(c.dtypes.at("f32"), c.tensors - 1);
      EXPECT_EQ(c.bytes, 4 * (c.parameters - 1) + 8);
    } else {
      EXPECT_EQ(c.tensors, 0u);
      EXPECT_TRUE(c.weights.empty());
    }
  }
  EXPECT_GT(total_bytes, 0u);

  const nlohmann::json j = nlohmann::json::parse(model_report_json(r));
  EXPECT_EQ(j["source"], "diffusers-folder");
  EXPECT_EQ(j["pipeline_class"], "Flux2KleinPipeline");
  EXPECT_EQ(j["variant"]["family"], "flux.2");
  EXPECT_EQ(j["variant"]["variant"], "custom");
  EXPECT_EQ(j["variant"]["layout"], "diffusers");
  EXPECT_EQ(j["variant"]["distilled"], true);
  EXPECT_EQ(j["variant"]["hidden_size"], 128);
  ASSERT_EQ(j["components"].size(), 5u);
}

TEST(ModelInfo, BflFileStatistics) {
  const ModelReport r = inspect_model(kKleinBfl.string(), "/nonexistent-hub");
  ASSERT_EQ(r.components.size(), 1u);
  EXPECT_EQ(r.components[0].tensors, 25u);  // qkv fused in the BFL layout: 29 - 2 x 2
  const ModelReport folder = inspect_model(kKleinFolder.string(), "/nonexistent-hub");
  EXPECT_EQ(r.components[0].parameters, folder.components[3].parameters);  // same weights, other names
}
