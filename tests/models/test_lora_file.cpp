// LoRA file reading (models/lora/lora_file.h) and the canonical deltas (lora_delta.h) on small
// in-memory files: every key scheme names the same module, the factor rules, the FLUX name schemes
// (which architecture a file is for, each one's targets), the row slices of fused modules, and the
// refusals. The images these give are checked against
// diffusers in tests/pipelines/test_lora_golden.cpp; the SHA-256 against Python's hashlib here.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "io/sha256.h"
#include "models/flux/flux_lora_names.h"
#include "models/lora/lora_delta.h"
#include "models/lora/lora_file.h"
#include "models/lora/lora_scheme.h"
#include "support/compare.h"
#include "support/random_tensor.h"

namespace fluxrt::models {
namespace {

namespace fs = std::filesystem;
using test::random_normal;

std::map<std::string, Tensor> module_tensors(const std::string& stem, const std::string& down,
                                             const std::string& up, int64_t out = 8, int64_t in = 6,
                                             int64_t r = 2) {
  return {{stem + down, random_normal({r, in}, DType::F32, 1)},
          {stem + up, random_normal({out, r}, DType::F32, 2)}};
}

TEST(LoraFile, EverySchemeNamesTheSameModule) {
  struct Scheme {
    std::string stem, down, up, module, format;
  };
  const std::vector<Scheme> schemes = {
      {"transformer.transformer_blocks.0.attn.to_q", ".lora_A.weight", ".lora_B.weight",
       "transformer_blocks.0.attn.to_q", "diffusers/PEFT"},
      {"base_model.model.double_blocks.3.img_attn.qkv", ".lora_A.weight", ".lora_B.weight",
       "double_blocks.3.img_attn.qkv", "PEFT-wrapped (fal / SimpleTuner)"},
      {"transformer.base_model.model.single_transformer_blocks.2.proj_mlp", ".lora_A.weight",
       ".lora_B.weight", "single_transformer_blocks.2.proj_mlp", "PEFT-wrapped (fal / SimpleTuner)"},
      {"diffusion_model.single_blocks.5.linear1", ".lora_down.weight", ".lora_up.weight",
       "single_blocks.5.linear1", "BFL/ComfyUI"},
      {"lora_unet_double_blocks_0_txt_mlp_2", ".lora_down.weight", ".lora_up.weight",
       "double_blocks.0.txt_mlp.2", "kohya"},
      {"lora_unet_single_transformer_blocks_0_attn_to_k_", ".lora_down.weight", ".lora_up.weight",
       "single_transformer_blocks.0.attn.to_k", "kohya (diffusers names)"},
      {"diffusion_model.double_blocks.1.img_attn_proj", ".lora_A.weight", ".lora_B.weight",
       "double_blocks.1.img_attn.proj", "musubi-tuner (underscore names)"},
      {"lora_transformer_transformer_blocks_0_ff_context_net_0_proj", ".lora_down.weight", ".lora_up.weight",
       "transformer_blocks.0.ff_context.net.0.proj", "OneTrainer"},
      {"double_blocks.4.processor.qkv_lora2", ".down.weight", ".up.weight", "double_blocks.4.txt_attn.qkv",
       "XLabs"},
      {"single_blocks.7.processor.proj_lora", ".down.weight", ".up.weight", "single_blocks.7.linear2",
       "XLabs"},
      {"lora_unet_final_layer_adaLN_modulation_1", ".lora_down.weight", ".lora_up.weight",
       "final_layer.adaLN_modulation.1", "kohya"},
      {"diffusion_model.double_stream_modulation_img.lin", ".lora_A.weight", ".lora_B.weight",
       "double_stream_modulation_img.lin", "BFL/ComfyUI"},
      // CLIP-L (FLUX.1's text_encoder) in transformers 4 and 5 names.
      {"lora_te1_text_model_encoder_layers_3_self_attn_out_proj", ".lora_down.weight", ".lora_up.weight",
       "text_encoder.encoder.layers.3.self_attn.out_proj", "kohya"},
      {"lora_te_text_model_encoder_layers_0_mlp_fc2", ".lora_down.weight", ".lora_up.weight",
       "text_encoder.encoder.layers.0.mlp.fc2", "kohya"},
      {"text_encoder.text_model.encoder.layers.11.self_attn.q_proj", ".lora_A.weight", ".lora_B.weight",
       "text_encoder.encoder.layers.11.self_attn.q_proj", "diffusers/PEFT"},
      {"text_encoder.encoder.layers.1.mlp.fc1", ".lora_A.weight", ".lora_B.weight",
       "text_encoder.encoder.layers.1.mlp.fc1", "diffusers/PEFT"},
      {"text_encoders.clip_l.transformer.text_model.encoder.layers.2.self_attn.v_proj", ".lora_down.weight",
       ".lora_up.weight", "text_encoder.encoder.layers.2.self_attn.v_proj", "ComfyUI"},
      // T5 (FLUX.1's text_encoder_2): kohya's lora_te3_, OneTrainer's lora_te2_, diffusers, ComfyUI.
      {"lora_te3_encoder_block_0_layer_0_SelfAttention_q", ".lora_down.weight", ".lora_up.weight",
       "text_encoder_2.encoder.block.0.layer.0.SelfAttention.q", "kohya"},
      {"lora_te2_encoder_block_5_layer_1_DenseReluDense_wi_1", ".lora_down.weight", ".lora_up.weight",
       "text_encoder_2.encoder.block.5.layer.1.DenseReluDense.wi_1", "kohya"},
      {"text_encoder_2.encoder.block.23.layer.1.DenseReluDense.wo", ".lora_A.weight", ".lora_B.weight",
       "text_encoder_2.encoder.block.23.layer.1.DenseReluDense.wo", "diffusers/PEFT"},
      {"text_encoders.t5xxl.transformer.encoder.block.1.layer.0.SelfAttention.o", ".lora_down.weight",
       ".lora_up.weight", "text_encoder_2.encoder.block.1.layer.0.SelfAttention.o", "ComfyUI"},
  };
  for (const Scheme& s : schemes) {
    const LoraFile f = parse_lora(module_tensors(s.stem, s.down, s.up), {}, "mem");
    ASSERT_EQ(f.modules.size(), 1u) << s.stem;
    EXPECT_EQ(f.modules[0].module, s.module) << s.stem;
    EXPECT_EQ(f.modules[0].key, s.stem);
    EXPECT_EQ(f.format, s.format) << s.stem;
  }
}

TEST(LoraFile, FactorRules) {
  auto t = module_tensors("lora_unet_img_in", ".lora_down.weight", ".lora_up.weight", 8, 6, 4);
  EXPECT_FLOAT_EQ(parse_lora(t, {}, "mem").modules[0].factor(), 1.0f);  // no alpha: 1
  t["lora_unet_img_in.alpha"] = Tensor::full({}, DType::BF16, 2.0);
  EXPECT_FLOAT_EQ(parse_lora(t, {}, "mem").modules[0].factor(), 0.5f);  // alpha / rows of A
  t["lora_unet_img_in.scale"] = Tensor::full({1}, DType::F32, 3.0);
  EXPECT_FLOAT_EQ(parse_lora(t, {}, "mem").modules[0].factor(), 3.0f);  // a .scale tensor wins

  // diffusers' lora_adapter_metadata: lora_alpha, and alpha_pattern for one module.
  auto p = module_tensors("transformer.x_embedder", ".lora_A.weight", ".lora_B.weight", 8, 6, 4);
  const auto q = module_tensors("transformer.proj_out", ".lora_A.weight", ".lora_B.weight", 8, 6, 4);
  p.insert(q.begin(), q.end());
  const std::map<std::string, std::string> meta = {
      {"lora_adapter_metadata", R"({"r": 4, "lora_alpha": 8, "alpha_pattern": {"proj_out": 2}})"}};
  const LoraFile f = parse_lora(p, meta, "mem");
  ASSERT_EQ(f.modules.size(), 2u);
  EXPECT_EQ(f.modules[0].module, "proj_out");
  EXPECT_FLOAT_EQ(f.modules[0].factor(), 0.5f);
  EXPECT_EQ(f.modules[1].module, "x_embedder");
  EXPECT_FLOAT_EQ(f.modules[1].factor(), 2.0f);
}

// Which architecture a file is for: the layers only one FLUX transformer has.
TEST(LoraScheme, FamilyFromTheLayersOnlyOneArchitectureHas) {
  const std::vector<const LoraNameScheme*> both{&flux1_lora_scheme(), &flux2_lora_scheme()};
  auto family_of = [&](const std::string& stem) {
    return lora_family(parse_lora(module_tensors(stem, ".lora_A.weight", ".lora_B.weight"), {}, "m"), both);
  };
  LoraFamily f = family_of("transformer_blocks.0.norm1.linear");
  EXPECT_EQ(f.scheme, &flux1_lora_scheme());
  EXPECT_EQ(f.module, "transformer_blocks.0.norm1.linear");
  EXPECT_EQ(family_of("single_stream_modulation.lin").scheme, &flux2_lora_scheme());
  EXPECT_EQ(family_of("lora_te1_text_model_encoder_layers_0_mlp_fc1").scheme, &flux1_lora_scheme());  // CLIP
  f = family_of("double_blocks.0.img_attn.qkv");  // both have it
  EXPECT_EQ(f.scheme, nullptr);
  EXPECT_EQ(f.module, "");
  // The order of the schemes asked does not matter.
  EXPECT_EQ(lora_family(
                parse_lora(module_tensors("single_stream_modulation.lin", ".lora_A.weight", ".lora_B.weight"),
                           {}, "m"),
                {&flux2_lora_scheme(), &flux1_lora_scheme()})
                .scheme,
            &flux2_lora_scheme());

  auto mixed = module_tensors("transformer_blocks.0.norm1.linear", ".lora_A.weight", ".lora_B.weight");
  const auto f2 = module_tensors("single_stream_modulation.lin", ".lora_A.weight", ".lora_B.weight");
  mixed.insert(f2.begin(), f2.end());
  const LoraFile m =
      parse_lora(mixed, {}, "mixed.safetensors");  // reading it is fine; telling its family is not
  try {
    lora_family(m, {&flux2_lora_scheme(), &flux1_lora_scheme()});
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Format);
    EXPECT_EQ(std::string(e.what()),
              "mixed.safetensors: the LoRA mixes FLUX.1-only and FLUX.2-only layer names");
  }
}

// Each scheme maps a module to its own canonical layers: FLUX.1 splits a single block's linear1 in
// four (q, k, v, MLP), FLUX.2 keeps it whole; diffusers names go through each name map.
TEST(LoraScheme, TargetsOfEachArchitecture) {
  using Targets = std::vector<std::string>;
  EXPECT_EQ(flux1_lora_scheme().targets_of("single_blocks.3.linear1"),
            (Targets{"single_blocks.3.q.weight", "single_blocks.3.k.weight", "single_blocks.3.v.weight",
                     "single_blocks.3.mlp.weight"}));
  EXPECT_EQ(flux2_lora_scheme().targets_of("single_blocks.3.linear1"),
            Targets{"single_blocks.3.linear1.weight"});
  for (const LoraNameScheme* scheme : {&flux1_lora_scheme(), &flux2_lora_scheme()}) {
    EXPECT_EQ(scheme->targets_of("double_blocks.1.txt_attn.qkv"),
              (Targets{"double_blocks.1.txt_attn.q.weight", "double_blocks.1.txt_attn.k.weight",
                       "double_blocks.1.txt_attn.v.weight"}));
    EXPECT_EQ(scheme->targets_of("transformer_blocks.0.attn.to_q"),
              Targets{"double_blocks.0.img_attn.q.weight"});
  }
  EXPECT_EQ(flux1_lora_scheme().rivals(), std::vector<const LoraNameScheme*>{&flux2_lora_scheme()});
  EXPECT_EQ(flux2_lora_scheme().rivals(), std::vector<const LoraNameScheme*>{&flux1_lora_scheme()});
}

// A file for the other architecture is refused by name before any shape is looked at.
TEST(LoraScheme, OtherArchitecturesLoraIsRefused) {
  const LoraFile f =
      parse_lora(module_tensors("single_stream_modulation.lin", ".lora_A.weight", ".lora_B.weight"), {},
                 "klein.safetensors");
  auto any_shape = [](const std::string&) { return std::optional<Shape>(Shape{8, 6}); };
  try {
    lora_deltas(f, flux1_lora_scheme(), 1.0f, any_shape);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Format);
    EXPECT_EQ(std::string(e.what()),
              "klein.safetensors: a FLUX.2 LoRA (its layer 'single_stream_modulation.lin' exists only there) "
              "cannot be applied to a FLUX.1 transformer");
  }
  EXPECT_EQ(lora_deltas(f, flux2_lora_scheme(), 1.0f, any_shape).size(), 1u);
}

TEST(LoraFile, Refusals) {
  auto code_of = [](const std::map<std::string, Tensor>& t) {
    try {
      parse_lora(t, {}, "mem");
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::Internal;
  };
  const Tensor x = random_normal({2, 6}, DType::F32, 1);
  // LoKr / LoHa / DoRA modules missing their other tensors (test_lora_lycoris.cpp has the rest).
  EXPECT_EQ(code_of({{"lycoris_single_blocks_0_linear1.lokr_w1", x}}), ErrorCode::Format);
  EXPECT_EQ(code_of({{"double_blocks.0.img_attn.qkv.hada_w1_a", x}}), ErrorCode::Format);
  EXPECT_EQ(code_of({{"img_in.dora_scale", x}}), ErrorCode::Format);
  // The other LyCORIS algorithms, by name.
  EXPECT_EQ(code_of({{"lycoris_single_blocks_0_linear1.oft_blocks", x}}), ErrorCode::Unsupported);
  // A T5 key naming no linear LoRA adapts (the relative position bias).
  EXPECT_EQ(
      code_of(
          {{"lora_te3_encoder_block_0_layer_0_SelfAttention_relative_attention_bias.lora_down.weight", x}}),
      ErrorCode::Format);
  // A CLIP key naming no linear LoRA adapts (the embeddings, the projection): listed, not applied.
  EXPECT_EQ(code_of({{"lora_te1_text_model_embeddings_token_embedding.lora_down.weight", x}}),
            ErrorCode::Format);
  EXPECT_EQ(code_of({{"img_in.lora_A.weight", x}}), ErrorCode::Format);  // no B
  EXPECT_EQ(code_of({{"img_in.lora_B.bias", x}}), ErrorCode::Format);    // Control-LoRA bias
  EXPECT_EQ(code_of({{"single_blocks.0.norm.key_norm.scale", x}}), ErrorCode::Format);
  EXPECT_EQ(code_of({}), ErrorCode::Format);
  // B [out, r] and A [r, in] must agree on r.
  EXPECT_EQ(
      code_of({{"img_in.lora_A.weight", x}, {"img_in.lora_B.weight", random_normal({8, 3}, DType::F32, 2)}}),
      ErrorCode::Format);
}

// A fused BFL qkv module on a model with split q/k/v: three deltas, A shared, B's row thirds.
TEST(LoraDelta, FusedModuleGivesRowSlices) {
  const LoraFile f = parse_lora(module_tensors("diffusion_model.double_blocks.0.img_attn.qkv",
                                               ".lora_A.weight", ".lora_B.weight", 12, 4, 2),
                                {}, "mem");
  const Shape qkv{4, 4};
  const std::vector<LoraDelta> d = lora_deltas(f, flux2_lora_scheme(), 0.5f, [&](const std::string& n) {
    return n.rfind("double_blocks.0.img_attn.", 0) == 0 ? std::optional<Shape>(qkv) : std::nullopt;
  });
  ASSERT_EQ(d.size(), 3u);
  const Tensor& up = f.modules[0].up;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(d[i].target, std::string("double_blocks.0.img_attn.") + "qkv"[i] + ".weight");
    EXPECT_FLOAT_EQ(d[i].scale, 0.5f);
    EXPECT_TRUE(
        test::all_close(d[i].up, up.narrow(0, 4 * static_cast<int64_t>(i), 4), test::TolClass::Exact));
    EXPECT_TRUE(test::all_close(d[i].down, f.modules[0].down, test::TolClass::Exact));
  }
  // The wrong widths name the module and both shapes.
  try {
    lora_deltas(f, flux2_lora_scheme(), 1.0f, [](const std::string&) {
      return std::optional<Shape>(Shape{5, 4});
    });
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[12, 2]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("double_blocks.0.img_attn.q.weight [5, 4]"), std::string::npos)
        << e.what();
  }
}

// The final layer: BFL rows (shift, scale), diffusers rows (scale, shift); both reach the layer
// each half was trained as.
TEST(LoraDelta, FinalLayerHalves) {
  auto shapes = [](const std::string& n) -> std::optional<Shape> {
    if (n == "final_layer.shift.weight" || n == "final_layer.scale.weight") return Shape{4, 4};
    return std::nullopt;
  };
  const LoraFile bfl = parse_lora(
      module_tensors("final_layer.adaLN_modulation.1", ".lora_A.weight", ".lora_B.weight", 8, 4, 2), {}, "m");
  const LoraFile diffusers = parse_lora(
      module_tensors("transformer.norm_out.linear", ".lora_A.weight", ".lora_B.weight", 8, 4, 2), {}, "m");
  for (const LoraNameScheme* scheme : {&flux1_lora_scheme(), &flux2_lora_scheme()}) {
    const auto b = lora_deltas(bfl, *scheme, 1.0f, shapes);
    const auto d = lora_deltas(diffusers, *scheme, 1.0f, shapes);
    ASSERT_EQ(b.size(), 2u);
    ASSERT_EQ(d.size(), 2u);
    EXPECT_EQ(b[0].target, "final_layer.shift.weight");  // BFL's first half
    EXPECT_EQ(d[0].target, "final_layer.scale.weight");  // diffusers' first half
  }
}

// Merging: W + s B A in f32, one rounding to W's dtype; untouched tensors stay the same views.
TEST(LoraDelta, MergeRoundsOnceAndKeepsTheRest) {
  TensorStore store;
  const Tensor w = random_normal({6, 5}, DType::BF16, 3);
  const Tensor other = random_normal({6, 5}, DType::BF16, 4);
  store.add("a.weight", w);
  store.add("b.weight", other);
  const Tensor down = random_normal({2, 5}, DType::F32, 5), up = random_normal({6, 2}, DType::F32, 6);
  const TensorStore merged = merge_lora_deltas(store, {{"a.weight", down, up, 0.25f, "mem"}});
  EXPECT_EQ(merged.get("b.weight").raw_data(), other.raw_data());
  const Tensor m = merged.get("a.weight");
  EXPECT_EQ(m.dtype(), DType::BF16);
  EXPECT_NE(m.raw_data(), w.raw_data());
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      double delta = 0;
      for (int64_t k = 0; k < 2; ++k) delta += up.item({i, k}) * down.item({k, j});
      const float expect = bf16_to_f32(f32_to_bf16(static_cast<float>(w.item({i, j}) + 0.25 * delta)));
      EXPECT_NEAR(m.item({i, j}), expect, std::abs(expect) * 1e-2 + 1e-6) << i << "," << j;
    }
}

// A tall, wide weight is merged a block of rows at a time (about 8 MB of f32 each): rows in every
// block, the last partial one included, get the sum of both LoRAs on that layer.
TEST(LoraDelta, MergeCoversEveryRowBlock) {
  const int64_t rows = 600, cols = 8192, rank = 3;  // 256-row blocks: 256 + 256 + 88
  TensorStore store;
  const Tensor w = random_normal({rows, cols}, DType::BF16, 11);
  store.add("a.weight", w);
  const Tensor down1 = random_normal({rank, cols}, DType::F32, 12),
               up1 = random_normal({rows, rank}, DType::F32, 13);
  const Tensor down2 = random_normal({1, cols}, DType::BF16, 14),
               up2 = random_normal({rows, 1}, DType::BF16, 15);
  const TensorStore merged = merge_lora_deltas(
      store, {{"a.weight", down1, up1, 0.5f, "one"}, {"a.weight", down2, up2, -2.0f, "two"}}, DType::F32);
  const Tensor m = merged.get("a.weight");
  ASSERT_EQ(m.dtype(), DType::F32);
  ASSERT_EQ(m.size(0), rows);
  for (const int64_t i : {int64_t{0}, int64_t{255}, int64_t{256}, int64_t{511}, int64_t{512}, int64_t{599}})
    for (int64_t j = 0; j < cols; j += 127) {
      double delta = -2.0 * up2.item({i, 0}) * down2.item({0, j});
      for (int64_t k = 0; k < rank; ++k) delta += 0.5 * up1.item({i, k}) * down1.item({k, j});
      const double expect = w.item({i, j}) + delta;
      EXPECT_NEAR(m.item({i, j}), expect, 1e-4 * (1 + std::abs(expect))) << i << "," << j;
    }
}

// SHA-256 against Python's hashlib (the digests dump_lora.py records for the checked-in files),
// and the FIPS 180-4 examples around the padding's block boundaries.
TEST(Sha256, MatchesHashlibAndTheStandard) {
  const fs::path lora = fs::path(FLUXRT_TEST_DATA_DIR) / "lora";
  std::ifstream in(lora / "manifest.json");
  const nlohmann::json m = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& [family, entry] : m["families"].items())
    for (const auto& [fmt, rec] : entry["formats"].items()) {
      EXPECT_EQ(io::sha256_file_hex((lora / family / (fmt + ".safetensors")).string()),
                rec["sha256"].get<std::string>())
          << family << " " << fmt;
      ++checked;
    }
  EXPECT_GT(checked, 10);
  auto hex = [](const std::string& s) {
    return io::sha256_hex(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  EXPECT_EQ(hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

}  // namespace
}  // namespace fluxrt::models
