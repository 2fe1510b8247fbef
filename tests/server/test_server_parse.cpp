// What the request parsers of the server (server/api.h) accept and refuse, without a server: the
// "auto" size, refusals that quote the request on one line, and masks for models that take none
// or need one.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "server/api.h"
#include "server_fixture.h"

namespace fluxrt::test {
namespace {

// What a parse that should refuse threw (status 0 and an "accepted" failure when it did not).
struct Refusal {
  int status = 0;
  std::string param, message;
};

template <typename Parse>
Refusal refusal_of(Parse parse) {
  try {
    parse();
  } catch (const server::HttpError& e) {
    return {e.status(), e.param(), e.what()};
  }
  ADD_FAILURE() << "accepted";
  return {};
}

TEST(ServerParse, AutoSizeIsThePresetsSizeAsWhenUnset) {
  server::ApiLimits limits;
  limits.model_ids = {"demo"};
  limits.model.size_multiple = 8;
  limits.defaults.width = limits.defaults.height = 64;  // the demo preset's
  for (const char* body : {R"({"prompt": "x"})", R"({"prompt": "x", "size": "auto"})"}) {
    const server::ImageRequest r = server::parse_generation(body, limits);
    EXPECT_EQ(r.request.width, std::optional<int>(64)) << body;
    EXPECT_EQ(r.request.height, std::optional<int>(64)) << body;
  }
  EXPECT_EQ(server::parse_generation(R"({"prompt": "x", "size": "128x96"})", limits).request.width,
            std::optional<int>(128));
  limits.defaults.width.reset();
  limits.defaults.height.reset();  // no preset: the engine's default, unset here
  EXPECT_FALSE(server::parse_generation(R"({"prompt": "x", "size": "auto"})", limits).request.width);
}

// Found by fuzz_generation_request and fuzz_edit_request: what a refusal quotes from the request
// (a model, an output format, a LoRA entry's key, an upload's file name) is escaped, so that the
// message is one line of UTF-8 for the log and the JSON error body.
TEST(ServerParse, RefusalsQuoteTheRequestOnOneLine) {
  server::ApiLimits limits;
  limits.model_ids = {"demo"};
  limits.loras = true;
  auto message_of = [&](auto parse) {
    const Refusal r = refusal_of(parse);
    EXPECT_EQ(r.status, 400);
    return r.message;
  };
  const std::string model =
      message_of([&] { server::parse_generation(R"({"prompt": "x", "model": "a\nb"})", limits); });
  EXPECT_NE(model.find("unknown model 'a\\nb'"), std::string::npos) << model;
  const std::string format =
      message_of([&] { server::parse_generation(R"({"prompt": "x", "output_format": "\u0001"})", limits); });
  EXPECT_NE(format.find("(got \"\\x01\")"), std::string::npos) << format;
  // A key of 39 ASCII bytes, "é", then more: cut near 40 bytes, never inside the character.
  const std::string key = message_of([&] {
    server::parse_generation(
        R"({"prompt": "x", "loras": [{")" + std::string(39, 'k') + "\xc3\xa9tail\": 1}]}", limits);
  });
  EXPECT_NE(key.find(std::string(39, 'k') + "\xc3\xa9...\""), std::string::npos) << key;
  const std::vector<server::Part> parts = {{"prompt", "", "", "x"}, {"image", "a\rb\xff.png", "", "GIF89a"}};
  limits.model.max_reference_images = 1;
  const std::string file = message_of([&] { server::parse_edit(parts, limits); });
  EXPECT_NE(file.find("(a\\rb\\xff.png) is not a PNG"), std::string::npos) << file;
  EXPECT_EQ(server::escape_for_message("\xe2\x82\xac\xe2\x82", 10), "\xe2\x82\xac\\xe2\\x82");
}

// A mask for a model whose limits take none (FLUX.1 Kontext): 400 naming `mask`, before any
// upload is decoded.
TEST(ServerParse, MaskOnAModelWithoutInpaintingNamesMask) {
  server::ApiLimits limits;
  limits.model_ids = {"demo"};
  limits.model.max_reference_images = 4;
  limits.model.mask = false;
  const std::string png = png_bytes(64, 64, 1, 2, 3);
  const std::vector<server::Part> parts = {
      {"prompt", "", "", "x"}, {"image", "a.png", "image/png", png}, {"mask", "m.png", "image/png", png}};
  const Refusal refused = refusal_of([&] { server::parse_edit(parts, limits); });
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(refused.param, "mask") << refused.message;
  EXPECT_NE(refused.message.find("does not inpaint"), std::string::npos) << refused.message;
  limits.model.mask = true;
  const server::ImageRequest r = server::parse_edit(parts, limits);
  ASSERT_TRUE(r.request.mask_image && r.request.init_image);
  EXPECT_TRUE(r.request.reference_images.empty());
  EXPECT_EQ(r.request.mask_image_name, "m.png");
}

// FLUX.1 Fill's limits: the image is edited only with its mask; without one, a 400 naming `mask`
// (not "this model takes no images").
TEST(ServerParse, FillModelNeedsTheMask) {
  server::ApiLimits limits;
  limits.model_ids = {"demo"};
  limits.model.mask = true;
  limits.model.mask_required = true;
  const std::string png = png_bytes(64, 64, 1, 2, 3);
  const std::vector<server::Part> image_only = {{"prompt", "", "", "x"},
                                                {"image", "a.png", "image/png", png}};
  const Refusal refused = refusal_of([&] { server::parse_edit(image_only, limits); });
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(refused.param, "mask") << refused.message;
  EXPECT_NE(refused.message.find("'mask' is required"), std::string::npos) << refused.message;
  std::vector<server::Part> with_mask = image_only;
  with_mask.push_back({"mask", "m.png", "image/png", png});
  const server::ImageRequest r = server::parse_edit(with_mask, limits);
  ASSERT_TRUE(r.request.mask_image && r.request.init_image);
  EXPECT_TRUE(r.request.reference_images.empty());
}

}  // namespace
}  // namespace fluxrt::test
