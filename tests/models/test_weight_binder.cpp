#include <gtest/gtest.h>

#include "models/weight_binder.h"

namespace fluxrt::models {
namespace {

TensorStore make_store() {
  TensorStore store;
  store.set_description("tiny.safetensors");
  store.add("a.weight", Tensor::zeros({4, 3}, DType::BF16));
  store.add("a.bias", Tensor::zeros({4}, DType::F32));
  store.add("b.weight", Tensor::zeros({2, 2}, DType::F8E4M3));
  return store;
}

TEST(WeightBinder, BindsEverythingAndConvertsDtypes) {
  TensorStore store = make_store();
  WeightBinder binder(store, "transformer");
  Tensor w = binder.require("a.weight", {4, 3});
  EXPECT_EQ(w.dtype(), DType::BF16);
  EXPECT_EQ(w.raw_data(), store.get("a.weight").raw_data());  // zero copy
  Tensor b = binder.require("a.bias", {4}, DType::BF16);
  EXPECT_EQ(b.dtype(), DType::BF16);
  Tensor f8 = binder.require("b.weight", {2, 2}, DType::BF16);
  EXPECT_EQ(f8.dtype(), DType::BF16);
  EXPECT_NO_THROW(binder.finish());
}

TEST(WeightBinder, ReportsMissingMisshapedAndUnusedTogether) {
  TensorStore store = make_store();
  WeightBinder binder(store, "transformer");
  EXPECT_FALSE(binder.require("c.weight", {1}).defined());
  EXPECT_FALSE(binder.require("a.weight", {3, 4}).defined());
  EXPECT_FALSE(binder.optional("d.weight", {1}).defined());
  try {
    binder.finish();
    FAIL() << "finish() accepted a broken binding";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(e.code(), ErrorCode::Format);
    EXPECT_NE(msg.find("transformer (tiny.safetensors)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("missing tensors: c.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("a.weight ([4, 3] expected [3, 4])"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unused tensors: a.bias, b.weight"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("d.weight"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos);
  }
}

TEST(WeightBinder, IgnoredPrefixesAreNotUnused) {
  TensorStore store = make_store();
  WeightBinder binder(store, "vae");
  binder.require("a.weight", {4, 3});
  binder.require("a.bias", {4});
  binder.ignore_prefix("b.");
  EXPECT_NO_THROW(binder.finish());
}

TEST(WeightBinder, ListsOnlyTheFirstFewNames) {
  TensorStore store;
  for (int i = 0; i < 10; ++i) store.add("t" + std::to_string(i), Tensor::zeros({1}, DType::F32));
  WeightBinder binder(store, "text_encoder");
  try {
    binder.finish();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(10 in all)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fluxrt::models
