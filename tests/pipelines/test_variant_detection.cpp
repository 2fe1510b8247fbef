// Variant detection (pipelines/variant.h): each family's kind recognises its own transformers, on
// the checked-in tiny models (tools/reference/make_tiny_models.py) and on config-only folders and
// header-only files at the released sizes.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "io/model_discovery.h"
#include "pipelines/pipeline.h"
#include "pipelines/variant.h"
#include "support/model_files.h"

namespace fluxrt::pipelines {
namespace {

namespace fs = std::filesystem;
using io::ModelSource;
using io::resolve_model;
using io::ResolvedModel;
using test::bfl_skeleton;
using test::TempDir;
using test::write_header_only;
using test::write_text;

const fs::path kModels = fs::path(FLUXRT_TEST_DATA_DIR) / "models";
const fs::path kKleinFolder = kModels / "flux2-klein-tiny";
const fs::path kKleinBfl = kModels / "flux2-klein-tiny-bfl.safetensors";
// GGUF files (tools/reference): the tiny models quantized, with ComfyUI's key prefix.
const fs::path kKleinQ4Prefixed = fs::path(FLUXRT_TEST_DATA_DIR) / "gguf" / "flux2-klein-tiny-q4_0.gguf";
const fs::path kFlux1Q4Prefixed = fs::path(FLUXRT_TEST_DATA_DIR) / "gguf" / "flux1-dev-tiny-q4_1.gguf";

// ------------------------------------------------------------------------------------------------
// The checked-in tiny models

TEST(VariantDetection, TinyKleinVariantFromConfig) {
  const VariantInfo v = detect_variant(resolve_model(kKleinFolder.string(), "/nonexistent-hub"));
  EXPECT_EQ(v.family, "flux.2");
  EXPECT_EQ(v.variant, "custom");
  EXPECT_EQ(v.layout, "diffusers");
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

TEST(VariantDetection, TinyKleinBflFileMatchesFolder) {
  const ResolvedModel m = resolve_model(kKleinBfl.string(), "/nonexistent-hub");
  EXPECT_EQ(m.source, ModelSource::SingleFile);
  ASSERT_EQ(m.components.size(), 1u);
  EXPECT_EQ(m.components[0].name, "transformer");
  EXPECT_EQ(m.components[0].weights, kKleinBfl.string());
  const VariantInfo v = detect_variant(m);
  const VariantInfo folder = detect_variant(resolve_model(kKleinFolder.string(), "/nonexistent-hub"));
  EXPECT_EQ(v.layout, "bfl");
  EXPECT_EQ(v.family, "flux.2");
  EXPECT_EQ(v.variant, "custom");
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
  EXPECT_NE(v.description.find("flux.2-klein (custom: hidden 128, 1+1 blocks"), std::string::npos)
      << v.description;
}

TEST(VariantDetection, TensorDetectionAgreesWithConfigOnEveryTinyTransformer) {
  for (const char* rel :
       {"flux2-klein-tiny/transformer", "flux1-dev-tiny-transformer", "flux1-schnell-tiny-transformer"}) {
    SCOPED_TRACE(rel);
    const ResolvedModel m = resolve_model((kModels / rel).string(), "/nonexistent-hub");
    const VariantInfo from_config = detect_variant(m);
    const VariantInfo from_tensors = detect_variant_from_shapes(io::tensor_shapes(m.transformer()->weights));
    EXPECT_EQ(from_tensors.family, from_config.family);
    EXPECT_EQ(from_tensors.layout, "diffusers");
    EXPECT_EQ(from_tensors.shape.hidden_size, from_config.shape.hidden_size);
    EXPECT_EQ(from_tensors.shape.head_dim, from_config.shape.head_dim);
    EXPECT_EQ(from_tensors.shape.double_blocks, from_config.shape.double_blocks);
    EXPECT_EQ(from_tensors.shape.single_blocks, from_config.shape.single_blocks);
    EXPECT_EQ(from_tensors.shape.in_channels, from_config.shape.in_channels);
    EXPECT_EQ(from_tensors.shape.context_dim, from_config.shape.context_dim);
    EXPECT_EQ(from_tensors.shape.guidance_embed, from_config.shape.guidance_embed);
  }
}

TEST(VariantDetection, TinyFlux1TransformerFolders) {
  for (bool dev : {true, false}) {
    const fs::path folder = kModels / (dev ? "flux1-dev-tiny-transformer" : "flux1-schnell-tiny-transformer");
    const ResolvedModel m = resolve_model(folder.string(), "/nonexistent-hub");
    EXPECT_EQ(m.source, ModelSource::ComponentFolder);
    ASSERT_EQ(m.components.size(), 1u);
    EXPECT_EQ(m.components[0].name, "transformer");
    EXPECT_EQ(m.components[0].class_name, "FluxTransformer2DModel");
    const VariantInfo v = detect_variant(m);
    EXPECT_EQ(v.family, "flux.1");
    EXPECT_EQ(v.variant, "custom");
    EXPECT_EQ(v.layout, "diffusers");
    EXPECT_EQ(v.shape.hidden_size, 32);
    EXPECT_EQ(v.shape.head_dim, 16);
    EXPECT_EQ(v.shape.in_channels, 64);
    EXPECT_EQ(v.shape.guidance_embed, dev);
    EXPECT_FALSE(v.distilled.has_value());
    EXPECT_EQ(v.description, dev ? "flux.1 (custom: hidden 32, 1+1 blocks, guidance)"
                                 : "flux.1 (custom: hidden 32, 1+1 blocks, no guidance)");
  }
}

TEST(VariantDetection, TinyFlux1SchnellBflFile) {
  const VariantInfo v = detect_variant(
      resolve_model((kModels / "flux1-schnell-tiny-bfl.safetensors").string(), "/nonexistent-hub"));
  EXPECT_EQ(v.family, "flux.1");
  EXPECT_EQ(v.layout, "bfl");
  EXPECT_EQ(v.shape.hidden_size, 32);
  EXPECT_EQ(v.shape.head_dim, 16);
  EXPECT_EQ(v.shape.num_heads, 2);
  EXPECT_EQ(v.shape.double_blocks, 1);
  EXPECT_EQ(v.shape.single_blocks, 1);
  EXPECT_EQ(v.shape.context_dim, 32);
  EXPECT_FALSE(v.shape.guidance_embed);
  EXPECT_FALSE(v.distilled.has_value());
}

TEST(VariantDetection, GgufFlux2FromTheHeader) {
  const VariantInfo v = detect_variant(resolve_model(kKleinQ4Prefixed.string()));
  EXPECT_EQ(v.family, "flux.2");
  EXPECT_EQ(v.layout, "bfl");
  EXPECT_EQ(v.key_prefix, "model.diffusion_model.");
  const VariantInfo safetensors = detect_variant(resolve_model(kKleinBfl.string()));
  EXPECT_EQ(v.shape.hidden_size, safetensors.shape.hidden_size);
  EXPECT_EQ(v.shape.double_blocks, safetensors.shape.double_blocks);
  EXPECT_EQ(v.shape.single_blocks, safetensors.shape.single_blocks);
}

TEST(VariantDetection, GgufFlux1FromTheHeader) {
  const VariantInfo v = detect_variant(resolve_model(kFlux1Q4Prefixed.string()));
  EXPECT_EQ(v.family, "flux.1");
  EXPECT_EQ(v.layout, "bfl");
  EXPECT_EQ(v.key_prefix, "model.diffusion_model.");
}

// ------------------------------------------------------------------------------------------------
// Real sizes: config-only folders and sparse header-only files

std::string klein_config(int64_t heads, int64_t layers, int64_t single, int64_t ctx) {
  return nlohmann::json{{"_class_name", "Flux2Transformer2DModel"},
                        {"attention_head_dim", 128},
                        {"num_attention_heads", heads},
                        {"num_layers", layers},
                        {"num_single_layers", single},
                        {"joint_attention_dim", ctx},
                        {"in_channels", 128},
                        {"guidance_embeds", false}}
      .dump();
}

std::string flux1_config(bool guidance) {
  return nlohmann::json{{"_class_name", "FluxTransformer2DModel"},
                        {"attention_head_dim", 128},
                        {"num_attention_heads", 24},
                        {"num_layers", 19},
                        {"num_single_layers", 38},
                        {"joint_attention_dim", 4096},
                        {"in_channels", 64},
                        {"pooled_projection_dim", 768},
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

TEST(VariantDetection, RealVariantsFromConfigs) {
  TempDir tmp;
  struct Case {
    const char* name;
    std::string is_distilled;
    std::string config;
    std::string variant;
    const char* description;
  };
  const Case cases[] = {
      {"dev", "", flux1_config(true), "flux.1-dev", "FLUX.1-dev"},
      {"schnell", "", flux1_config(false), "flux.1-schnell", "FLUX.1-schnell"},
      {"k4", "true", klein_config(24, 5, 20, 7680), "flux.2-klein-4b", "FLUX.2-klein-4B (distilled)"},
      {"k4base", "false", klein_config(24, 5, 20, 7680), "flux.2-klein-4b", "FLUX.2-klein-base-4B"},
      {"k9", "true", klein_config(32, 8, 24, 12288), "flux.2-klein-9b", "FLUX.2-klein-9B (distilled)"},
      {"k9unknown", "", klein_config(32, 8, 24, 12288), "flux.2-klein-9b",
       "FLUX.2-klein-9B (distilled or base: unknown)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string pipeline =
        std::string(c.name).rfind("k", 0) == 0 ? "Flux2KleinPipeline" : "FluxPipeline";
    const fs::path folder = config_only_pipeline(tmp.path(), c.name, pipeline, c.is_distilled, c.config);
    const ResolvedModel m = resolve_model(folder.string(), "/nonexistent-hub");
    ASSERT_EQ(m.components.size(), 1u);  // [null, null] entries are not components
    const VariantInfo v = detect_variant(m);
    EXPECT_EQ(v.variant, c.variant);
    EXPECT_EQ(v.description, c.description);
    EXPECT_EQ(v.layout, "");  // no weights to read the layout from
  }
}

TEST(VariantDetection, RealSizeSingleFiles) {
  TempDir tmp;
  const fs::path dev = tmp.path() / "flux1-dev.safetensors";
  write_header_only(dev, bfl_skeleton("", false, 3072, 64, 4096, 19, 38, true));
  VariantInfo v = detect_variant(resolve_model(dev.string(), "/nonexistent-hub"));
  EXPECT_EQ(v.variant, "flux.1-dev");
  EXPECT_EQ(v.layout, "bfl");
  EXPECT_EQ(v.shape.num_heads, 24);
  EXPECT_EQ(v.description, "FLUX.1-dev");

  const fs::path schnell = tmp.path() / "renamed.safetensors";
  write_header_only(schnell, bfl_skeleton("", false, 3072, 64, 4096, 19, 38, false));
  EXPECT_EQ(detect_variant(resolve_model(schnell.string(), "/nonexistent-hub")).variant, "flux.1-schnell");

  // ComfyUI repackaging: every key prefixed.
  const fs::path k9 = tmp.path() / "flux-2-klein-base-9b.safetensors";
  write_header_only(k9, bfl_skeleton("model.diffusion_model.", true, 4096, 128, 12288, 8, 24, false));
  v = detect_variant(resolve_model(k9.string(), "/nonexistent-hub"));
  EXPECT_EQ(v.variant, "flux.2-klein-9b");
  EXPECT_EQ(v.key_prefix, "model.diffusion_model.");
  EXPECT_EQ(v.shape.num_heads, 32);
  EXPECT_EQ(v.description, "FLUX.2-klein-base-9B");  // from the official file name

  const fs::path k4 = tmp.path() / "my-model.safetensors";
  write_header_only(k4, bfl_skeleton("", true, 3072, 128, 7680, 5, 20, false));
  v = detect_variant(resolve_model(k4.string(), "/nonexistent-hub"));
  EXPECT_EQ(v.variant, "flux.2-klein-4b");
  EXPECT_EQ(v.description, "FLUX.2-klein-4B (distilled or base: unknown)");

  const fs::path vae = tmp.path() / "ae.safetensors";
  write_header_only(vae, {{"encoder.conv_in.weight", {128, 3, 3, 3}}});
  v = detect_variant(resolve_model(vae.string(), "/nonexistent-hub"));
  EXPECT_EQ(v.family, "");
  EXPECT_EQ(v.description, "not a FLUX transformer checkpoint");
}

// ------------------------------------------------------------------------------------------------
// Each kind recognises its own transformers, and only those

std::map<std::string, Shape> shapes_of(const test::TensorList& tensors) {
  std::map<std::string, Shape> shapes;
  for (const auto& [name, dims] : tensors) shapes[name] = Shape(dims);
  return shapes;
}

TEST(VariantDetection, EachKindTakesItsOwnCheckpoints) {
  const VariantInfo flux1 =
      detect_variant_from_shapes(shapes_of(bfl_skeleton("", false, 3072, 64, 4096, 19, 38, true)));
  EXPECT_EQ(flux1.kind, &flux1_kind());
  EXPECT_TRUE(flux1.runs);
  EXPECT_EQ(pipeline_kind_for_transformer(flux1), &flux1_kind());
  EXPECT_TRUE(flux1_kind().takes_transformer(flux1));
  EXPECT_FALSE(flux2_klein_kind().takes_transformer(flux1));

  const VariantInfo klein =
      detect_variant_from_shapes(shapes_of(bfl_skeleton("", true, 4096, 128, 12288, 8, 24, false)));
  EXPECT_EQ(klein.kind, &flux2_klein_kind());
  EXPECT_EQ(klein.family, "flux.2");
  EXPECT_EQ(klein.variant, "flux.2-klein-9b");
  EXPECT_EQ(pipeline_kind_for_transformer(klein), &flux2_klein_kind());
  EXPECT_FALSE(flux1_kind().takes_transformer(klein));
}

// FLUX.2 dev is another pipeline (a Mistral text encoder): klein's detection knows its shapes so
// that it is refused by name, not run as a klein of odd sizes.
TEST(VariantDetection, Flux2DevIsRecognisedAndRefused) {
  const VariantInfo dev =
      detect_variant_from_shapes(shapes_of(bfl_skeleton("", true, 6144, 128, 15360, 8, 48, true)));
  EXPECT_EQ(dev.kind, &flux2_klein_kind());
  EXPECT_EQ(dev.family, "flux.2");
  EXPECT_EQ(dev.variant, "flux.2-dev");
  EXPECT_FALSE(dev.runs);
  EXPECT_EQ(dev.description, "FLUX.2-dev (not supported)");
  EXPECT_EQ(pipeline_kind_for_transformer(dev), nullptr);
  EXPECT_FALSE(flux2_klein_kind().takes_transformer(dev));
}

TEST(VariantDetection, NoKindTakesOtherCheckpoints) {
  const VariantInfo vae = detect_variant_from_shapes(shapes_of({{"encoder.conv_in.weight", {128, 3, 3, 3}}}));
  EXPECT_EQ(vae.kind, nullptr);
  EXPECT_FALSE(vae.runs);
  EXPECT_EQ(vae.family, "");
  EXPECT_EQ(pipeline_kind_for_transformer(vae), nullptr);
  EXPECT_EQ(vae.description, "not a FLUX transformer checkpoint");

  // A component folder of a class no kind knows, with no weights to read: named by its class.
  TempDir tmp;
  write_text(tmp.path() / "sd3" / "config.json", R"({"_class_name": "SD3Transformer2DModel"})");
  const VariantInfo sd3 = detect_variant(resolve_model((tmp.path() / "sd3").string(), "/nonexistent-hub"));
  EXPECT_EQ(sd3.kind, nullptr);
  EXPECT_EQ(sd3.description, "not a FLUX transformer (class SD3Transformer2DModel)");
}

// klein's distilled and base checkpoints share their shapes; only klein reads a file name for it.
TEST(VariantDetection, OnlyKleinReadsDistilledFromAFileName) {
  TempDir tmp;
  const fs::path base = tmp.path() / "flux-2-klein-base-4b.safetensors";
  write_header_only(base, bfl_skeleton("", true, 3072, 128, 7680, 5, 20, false));
  VariantInfo v = detect_variant(resolve_model(base.string(), "/nonexistent-hub"));
  ASSERT_TRUE(v.distilled.has_value());
  EXPECT_FALSE(*v.distilled);
  EXPECT_EQ(v.distilled_from, "file name");

  const fs::path dev = tmp.path() / "flux1-dev-klein.safetensors";  // a misleading name on FLUX.1
  write_header_only(dev, bfl_skeleton("", false, 3072, 64, 4096, 19, 38, true));
  v = detect_variant(resolve_model(dev.string(), "/nonexistent-hub"));
  EXPECT_EQ(v.variant, "flux.1-dev");
  EXPECT_FALSE(v.distilled.has_value());
  EXPECT_EQ(v.distilled_from, "");
}

// klein-9B-KV has klein-9B's tensors: its folder's class or its file name says it.
TEST(VariantDetection, KleinKvFromItsFolderOrItsFileName) {
  const VariantInfo folder =
      detect_variant(resolve_model((kModels / "flux2-klein-kv-tiny").string(), "/nonexistent-hub"));
  EXPECT_TRUE(folder.reference_kv);
  EXPECT_EQ(folder.reference_kv_from, "model_index.json");
  EXPECT_EQ(folder.pipelines, std::vector<std::string>{"Flux2KleinKVPipeline"});
  EXPECT_NE(folder.description.find("reference K/V caching"), std::string::npos) << folder.description;
  const VariantInfo plain = detect_variant(resolve_model(kKleinFolder.string(), "/nonexistent-hub"));
  EXPECT_FALSE(plain.reference_kv);
  EXPECT_EQ(plain.pipelines, (std::vector<std::string>{"Flux2KleinPipeline", "Flux2KleinInpaintPipeline"}));

  TempDir tmp;
  const fs::path kv = tmp.path() / "flux-2-klein-9b-kv-Q4_K_M.safetensors";
  write_header_only(kv, bfl_skeleton("", true, 4096, 128, 12288, 8, 24, false));
  VariantInfo v = detect_variant(resolve_model(kv.string(), "/nonexistent-hub"));
  EXPECT_TRUE(v.reference_kv);
  EXPECT_EQ(v.reference_kv_from, "file name");
  EXPECT_EQ(v.description, "FLUX.2-klein-9B-KV (reference K/V caching, from the file name)");
  // A "kv" inside another word is not the recipe's token.
  for (const char* name : {"flux-2-klein-9b-kvass.safetensors", "flux-2-klein-9b.safetensors"}) {
    const fs::path other = tmp.path() / name;
    write_header_only(other, bfl_skeleton("", true, 4096, 128, 12288, 8, 24, false));
    EXPECT_FALSE(detect_variant(resolve_model(other.string(), "/nonexistent-hub")).reference_kv) << name;
  }
  // A plain file with a KV folder's components runs as the folder says.
  const ResolvedModel components =
      resolve_model((kModels / "flux2-klein-kv-tiny").string(), "/nonexistent-hub");
  v = detect_variant(resolve_model(kKleinBfl.string(), "/nonexistent-hub"), &components);
  EXPECT_TRUE(v.reference_kv);
}

}  // namespace
}  // namespace fluxrt::pipelines
