// Images in and out of the server: JPEG and WebP uploads to /v1/images/edits give what the
// engine gives with the same decoded image, output_format jpeg / webp answers (b64_json and url,
// with their Content-Type) decode to the requested size and carry the settings as XMP, and the
// FLUX.1 img2img path (the first image as the init image, with strength) equals
// fluxrt::Engine::generate with that init image and strength; on a klein-9B-KV folder the edit
// runs with cached reference keys and values, each request with its own. An int8 engine
// (`fluxrt serve --dtype int8`) says so on /v1/models and answers with its images.
#include <regex>
#include <thread>
#include <vector>

#include "fluxrt/engine.h"
#include "fluxrt/http_api.h"
#include "fluxrt/image.h"
#include "server_fixture.h"

namespace fluxrt::test {
namespace {

using nlohmann::json;

const std::string kKleinKvTiny =
    (std::filesystem::path(FLUXRT_SOURCE_DIR) / "tests" / "data" / "models" / "flux2-klein-kv-tiny").string();
const std::string kFlux1Tiny =
    (std::filesystem::path(FLUXRT_SOURCE_DIR) / "tests" / "data" / "models" / "flux1-dev-tiny").string();

fluxrt::Image public_image(const std::string& bytes) {
  return decode_image(bytes.data(), bytes.size(), "upload");
}

class ServerImages : public DemoServerSuite {};

TEST_F(ServerImages, JpegAndWebpUploadsAreReferenceImages) {
  const std::string prompt = "a red circle on a blue background";
  for (const std::string& upload : {jpeg_bytes(80, 64), webp_bytes(80, 64)}) {
    httplib::MultipartFormDataItems items = {{"prompt", prompt, "", ""},
                                             {"image", upload, "photo", "application/octet-stream"},
                                             {"seed", "4", "", ""},
                                             {"num_inference_steps", "2", "", ""}};
    auto r = client_->Post("/v1/images/edits", items);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json_of(r);
    EXPECT_EQ(j["size"], "80x64");  // the upload's size

    Engine engine(kDemoModel);
    GenerateRequest request;
    request.prompts = {prompt};
    request.steps = 2;
    request.seed = 4;
    request.reference_images = {public_image(upload)};
    const GenerateResult alone = engine.generate(request);
    EXPECT_EQ(png_of(base64_decode(j["data"][0]["b64_json"])).pixels, alone.images[0].image.rgb);
  }
}

TEST_F(ServerImages, OutputFormatsDecodeToTheRequestedSize) {
  const json body = {{"prompt", "a green star"}, {"size", "48x32"}, {"seed", 3}, {"num_inference_steps", 1}};
  const io::Image png = png_of(base64_decode(json_of(post(body))["data"][0]["b64_json"]));
  for (const auto& [format, compression, type] : {std::tuple{"jpeg", 90, "image/jpeg"},
                                                  {"jpg", 50, "image/jpeg"},
                                                  {"webp", 80, "image/webp"},
                                                  {"webp", 100, "image/webp"}}) {
    json b = body;
    b["output_format"] = format;
    b["output_compression"] = compression;
    const json j = json_of(post(b));
    ASSERT_TRUE(j.contains("data")) << j.dump();
    EXPECT_EQ(j["output_format"], std::string(format) == "jpg" ? "jpeg" : format);
    const std::string bytes = base64_decode(j["data"][0]["b64_json"]);
    const io::Image image = image_of(bytes);
    EXPECT_EQ(image.width, 48) << format;
    EXPECT_EQ(image.height, 32) << format;
    if (compression == 100) {
      EXPECT_EQ(io::to_rgb(image).pixels, png.pixels) << "lossless WebP";
    }
    EXPECT_NE(bytes.find("<fluxrt:seed>3</fluxrt:seed>"), std::string::npos) << format;

    b["response_format"] = "url";
    const std::string url = json_of(post(b))["data"][0]["url"];
    std::smatch m;
    ASSERT_TRUE(std::regex_match(url, m, std::regex("http://[^/]+(/v1/images/[0-9a-f]+/content)"))) << url;
    auto got = client_->Get(m[1].str());
    ASSERT_TRUE(got);
    EXPECT_EQ(got->status, 200);
    EXPECT_EQ(got->get_header_value("Content-Type"), type);
    EXPECT_EQ(image_of(got->body).width, 48);
  }
}

TEST_F(ServerImages, BadUploadsOfEachFormatName400Image) {
  const std::string jpeg = jpeg_bytes(32, 32), webp = webp_bytes(32, 32), png = png_bytes(32, 32, 1, 2, 3);
  std::string jpeg_bomb = jpeg;  // the frame header declares 30000 x 30000 (over the upload limit)
  for (size_t i = 2; i + 8 < jpeg_bomb.size();
       i += 2 + (size_t(uint8_t(jpeg_bomb[i + 2])) << 8 | uint8_t(jpeg_bomb[i + 3])))
    if (uint8_t(jpeg_bomb[i + 1]) == 0xC0 || uint8_t(jpeg_bomb[i + 1]) == 0xC1) {
      jpeg_bomb[i + 5] = jpeg_bomb[i + 7] = char(30000 >> 8);
      jpeg_bomb[i + 6] = jpeg_bomb[i + 8] = char(30000 & 0xFF);
      break;
    }
  const std::vector<std::pair<std::string, std::string>> uploads = {
      {"truncated JPEG", jpeg.substr(0, jpeg.size() / 2)},
      {"JPEG header only", jpeg.substr(0, 3)},
      {"JPEG bomb", jpeg_bomb},
      {"truncated WebP", webp.substr(0, webp.size() / 2)},
      {"WebP header only", webp.substr(0, 12)},
      {"truncated PNG", png.substr(0, png.size() / 2)},
      {"empty file", ""},
  };
  for (const auto& [what, bytes] : uploads) {
    httplib::MultipartFormDataItems items = {{"prompt", "x", "", ""},
                                             {"image", bytes, "up.bin", "image/jpeg"}};
    auto r = client_->Post("/v1/images/edits", items);
    ASSERT_TRUE(r) << what;
    EXPECT_EQ(r->status, 400) << what << ": " << r->body;
    const json j = json_of(r);
    EXPECT_EQ(j["error"]["param"], "image") << what << ": " << r->body;
    EXPECT_EQ(j["error"]["message"].get<std::string>().find('\n'), std::string::npos) << what;
  }
  EXPECT_EQ(client_->Get("/health")->status, 200);  // and it keeps serving
}

// The missing test of the FLUX.1 img2img path: the server on the tiny FLUX.1-dev model.
TEST(ServerFlux1, Img2imgEqualsTheEngineWithTheSameInitImageAndStrength) {
  server::ServerOptions o = demo_options();
  o.model = kFlux1Tiny;
  const auto server = start_server(o);
  const auto client = client_for(server->port());
  const std::string init = png_bytes(64, 64, 200, 120, 40);
  httplib::MultipartFormDataItems items = {{"prompt", "an orange square", "", ""},
                                           {"image", init, "init.png", "image/png"},
                                           {"strength", "0.5", "", ""},
                                           {"size", "64x64", "", ""},
                                           {"seed", "13", "", ""},
                                           {"num_inference_steps", "4", "", ""}};
  auto r = client->Post("/v1/images/edits", items);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string png = base64_decode(json_of(r)["data"][0]["b64_json"]);

  Engine engine(kFlux1Tiny);
  GenerateRequest request;
  request.prompts = {"an orange square"};
  request.width = request.height = 64;
  request.steps = 4;
  request.seed = 13;
  request.init_image = public_image(init);
  request.strength = 0.5f;
  const GenerateResult alone = engine.generate(request);
  EXPECT_EQ(png_of(png).pixels, alone.images[0].image.rgb);
  const auto text = png_text_of(png);
  EXPECT_EQ(text.at("init_image"), "init.png");
  EXPECT_EQ(text.at("strength"), "0.5");
  GenerateRequest no_init = request;  // the init image does matter
  no_init.init_image.reset();
  no_init.strength.reset();
  EXPECT_NE(png_of(png).pixels, engine.generate(no_init).images[0].image.rgb);

  // Without strength the engine's default applies on both sides too, and a second init image
  // is refused naming `image`.
  items.erase(items.begin() + 2);
  auto d = client->Post("/v1/images/edits", items);
  ASSERT_TRUE(d);
  ASSERT_EQ(d->status, 200) << d->body;
  request.strength.reset();
  EXPECT_EQ(png_of(base64_decode(json_of(d)["data"][0]["b64_json"])).pixels,
            engine.generate(request).images[0].image.rgb);
  items.push_back({"image", init, "second.png", "image/png"});
  auto two = client->Post("/v1/images/edits", items);
  ASSERT_TRUE(two);
  EXPECT_EQ(two->status, 400);
  EXPECT_EQ(json_of(two)["error"]["param"], "image");

  // With a mask: FluxInpaintPipeline, the engine's image for the same mask.
  items.pop_back();
  const std::string mask = png_bytes(64, 64, 255, 255, 255);
  items.push_back({"mask", mask, "mask.png", "image/png"});
  auto masked = client->Post("/v1/images/edits", items);
  ASSERT_TRUE(masked);
  ASSERT_EQ(masked->status, 200) << masked->body;
  request.mask_image = public_image(mask);
  const std::string inpainted = base64_decode(json_of(masked)["data"][0]["b64_json"]);
  EXPECT_EQ(png_of(inpainted).pixels, engine.generate(request).images[0].image.rgb);
  EXPECT_EQ(png_text_of(inpainted).at("mask"), "mask.png");
}

// Concurrent edits with different references on a klein-9B-KV model: each response is the
// engine's image for its own reference alone (no request sees another's cached keys).
TEST(ServerKleinKv, EditsWithDifferentReferencesGetTheirOwnImages) {
  server::ServerOptions o = demo_options();
  o.model = kKleinKvTiny;
  o.max_batch = 4;
  const auto server = start_server(o);
  const std::vector<std::string> uploads = {png_bytes(64, 64, 200, 40, 40), png_bytes(64, 64, 30, 60, 220),
                                            png_bytes(64, 64, 20, 200, 90)};
  std::vector<std::string> pngs(uploads.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < uploads.size(); ++i)
    clients.emplace_back([&, i] {
      httplib::MultipartFormDataItems items = {{"prompt", "a red square", "", ""},
                                               {"image", uploads[i], "ref.png", "image/png"},
                                               {"seed", "5", "", ""},
                                               {"num_inference_steps", "2", "", ""}};
      auto r = client_for(server->port())->Post("/v1/images/edits", items);
      if (r && r->status == 200) pngs[i] = base64_decode(json_of(r)["data"][0]["b64_json"]);
    });
  for (std::thread& t : clients) t.join();

  Engine engine(kKleinKvTiny);
  for (size_t i = 0; i < uploads.size(); ++i) {
    ASSERT_FALSE(pngs[i].empty()) << "request " << i << " failed";
    GenerateRequest request;
    request.prompts = {"a red square"};
    request.steps = 2;
    request.seed = 5;
    request.reference_images = {public_image(uploads[i])};
    EXPECT_EQ(png_of(pngs[i]).pixels, engine.generate(request).images[0].image.rgb) << "request " << i;
  }
  EXPECT_NE(png_of(pngs[0]).pixels, png_of(pngs[1]).pixels);
}

// The HTTP API without a socket over an engine at precision int8: the model object's dtype is
// "int8" and a generation is the int8 engine's image alone.
TEST(ServerInt8, ModelSaysInt8AndImagesAreTheInt8Engines) {
  HttpApiOptions o;
  o.model = kFlux1Tiny;
  o.engine.precision = Precision::Int8;
  o.log_requests = false;
  HttpApi api(o);
  api.start_loading();
  api.wait_until_loaded();
  const HttpResponse models = api.handle({"GET", "/v1/models", {}, "", {}, {}});
  ASSERT_EQ(models.status, 200) << models.body;
  EXPECT_EQ(json::parse(models.body)["data"][0]["dtype"], "int8");
  const json body = {{"prompt", "a green field"}, {"size", "64x64"}, {"seed", 3}, {"num_inference_steps", 2}};
  const HttpResponse r = api.handle(
      {"POST", "/v1/images/generations", {{"Content-Type", "application/json"}}, body.dump(), {}, {}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string png = base64_decode(json::parse(r.body)["data"][0]["b64_json"]);
  EXPECT_EQ(png_text_of(png).at("dtype"), "int8");
  GenerateRequest request;
  request.prompts = {"a green field"};
  request.width = request.height = 64;
  request.steps = 2;
  request.seed = 3;
  EngineOptions int8;
  int8.precision = Precision::Int8;
  EXPECT_EQ(png_of(png).pixels, Engine(kFlux1Tiny, int8).generate(request).images[0].image.rgb);
  EXPECT_NE(png_of(png).pixels, Engine(kFlux1Tiny).generate(request).images[0].image.rgb);
}

}  // namespace
}  // namespace fluxrt::test
