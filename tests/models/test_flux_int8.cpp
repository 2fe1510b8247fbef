// The FLUX.2 klein and FLUX.1 transformers with their linears in LinearFormat::Int8 (precision
// int8): every linear prepared so (and remembering it), the forward bit for bit what
// FLUXRT_LINEAR_IMPL=w8a8 gives for the same checkpoint, different from the bf16 forward (int8
// ran) yet close to diffusers' f32 output; from dense folders, fp8 single files and Q8_0 GGUFs.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "io/safetensors.h"
#include "models/flux/flux1_transformer.h"
#include "models/flux/flux2_transformer.h"
#include "support/compare.h"

namespace fluxrt::models {
namespace {

const std::string kData = FLUXRT_TEST_DATA_DIR;

struct Inputs {
  Tensor x, x_ids, ctx, ctx_ids, pooled, t, g, out;
};

Inputs load_inputs(const std::string& file) {
  const io::Checkpoint c = io::Checkpoint::open(file);
  auto get = [&](const char* n) { return c.contains(n) ? c.tensor(n).clone() : Tensor(); };
  return {get("x"), get("x_ids"), get("ctx"), get("ctx_ids"), get("pooled"), get("t"), get("g"), get("out")};
}

// One forward of `path` loaded with `format` (and FLUXRT_LINEAR_IMPL=w8a8 when `env`), bf16
// activations, as f32 values.
template <class Model, class Options>
std::vector<float> forward(const std::string& path, const Inputs& in, nn::LinearFormat format, bool env) {
  if (env) setenv("FLUXRT_LINEAR_IMPL", "w8a8", 1);
  Options o;
  o.linear_format = format;
  const auto model = Model::load(path, o);
  unsetenv("FLUXRT_LINEAR_IMPL");
  for (const auto& [name, layer] : model->linears()) EXPECT_EQ(layer.format(), format) << name;
  Tensor y;
  if constexpr (std::is_same_v<Model, Flux2Transformer>)
    y = model->forward(in.x, in.x_ids, in.ctx, in.ctx_ids, in.t);
  else
    y = model->forward(in.x, in.x_ids, in.ctx, in.ctx_ids, in.pooled, in.t, in.g);
  return y.to(DType::F32).to_vector();
}

template <class Model, class Options>
void expect_int8_is_the_env_vars(const std::string& path, const Inputs& in, double max_rel_l2) {
  SCOPED_TRACE(path);
  unsetenv("FLUXRT_LINEAR_IMPL");
  const std::vector<float> int8 = forward<Model, Options>(path, in, nn::LinearFormat::Int8, false);
  const std::vector<float> env = forward<Model, Options>(path, in, nn::LinearFormat::Native, true);
  const std::vector<float> bf16 = forward<Model, Options>(path, in, nn::LinearFormat::Native, false);
  EXPECT_EQ(int8, env) << "precision int8 is FLUXRT_LINEAR_IMPL=w8a8 on the transformer";
  EXPECT_NE(int8, bf16) << "int8 did not run";
  const Shape shape{static_cast<int64_t>(int8.size())};
  const double to_f32 = test::compare(Tensor::from_vector(int8, shape), in.out.reshape(shape)).rel_l2;
  const double bf16_to_f32 = test::compare(Tensor::from_vector(bf16, shape), in.out.reshape(shape)).rel_l2;
  std::printf("%s: rel-L2 to diffusers f32: int8 %.4f, bf16 %.4f\n", path.c_str(), to_f32, bf16_to_f32);
  EXPECT_LT(to_f32, max_rel_l2);
}

// Bounds: a few times the measured rel-L2 (klein 0.011 with 127-level weights, 0.015 with 63 under
// ONEDNN_MAX_CPU_ISA=AVX2; FLUX.1 0.030 / 0.032, where bf16 alone is 0.028).
TEST(FluxInt8, KleinFolderIsTheEnvVarsW8A8) {
  const Inputs in = load_inputs(kData + "/flux2_transformer/t2i.safetensors");
  expect_int8_is_the_env_vars<Flux2Transformer, Flux2LoadOptions>(
      kData + "/models/flux2-klein-tiny/transformer", in, 0.05);
}

TEST(FluxInt8, Flux1FolderFp8AndGgufAreTheEnvVarsW8A8) {
  const std::string dir = kData + "/flux1_transformer/";
  const Inputs in = load_inputs(dir + "dev.safetensors");
  expect_int8_is_the_env_vars<Flux1Transformer, Flux1LoadOptions>(dir + "dev", in, 0.1);
  // fp8 weights stay quantized entries: requantized from them (w8a8_applies), as the env var does.
  expect_int8_is_the_env_vars<Flux1Transformer, Flux1LoadOptions>(
      dir + "flux1-dev-fp8.safetensors", load_inputs(dir + "dev_fp8.safetensors"), 0.1);
  // Q8_0 blocks likewise.
  expect_int8_is_the_env_vars<Flux1Transformer, Flux1LoadOptions>(kData + "/gguf/flux1-dev-tiny-q8_0.gguf",
                                                                  in, 0.1);
}

}  // namespace
}  // namespace fluxrt::models
