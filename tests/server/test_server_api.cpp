// The server's endpoints and fields over real loopback HTTP on the demo model (2 steps): the
// OpenAI response shapes, PNG text chunks equal to what the engine gives alone, edits, the SSE
// event sequence, url responses, /models, /health while loading, /metrics, the page, auth, CORS,
// the queue's 429, cancellation by disconnect, and the drain on shutdown and on SIGTERM.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <regex>
#include <thread>

#include "fluxrt/engine.h"
#include "server/api.h"
#include "server_fixture.h"

extern char** environ;

namespace fluxrt::test {
namespace {

using nlohmann::json;

class ServerApi : public DemoServerSuite {};

TEST_F(ServerApi, HealthAndModels) {
  auto h = client_->Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(json_of(h)["status"], "ok");
  auto m = client_->Get("/v1/models");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  const json j = json_of(m);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  for (const char* key : {"id", "object", "created", "owned_by", "family", "variant", "dtype"})
    EXPECT_TRUE(j["data"][0].contains(key)) << key;
  EXPECT_EQ(j["data"][0]["id"], "demo");
  EXPECT_EQ(j["data"][0]["object"], "model");
  // The bounds a request is checked against: the demo model's, tightened by the server's options.
  const json& limits = j["data"][0]["limits"];
  EXPECT_EQ(limits["max_steps"], 1000);
  EXPECT_EQ(limits["size_multiple"], 8);
  EXPECT_EQ(limits["max_n"], 4);                 // ServerOptions::max_images, below the model's 256
  EXPECT_EQ(limits["max_width"], 256);           // the fixture's --max-size
  EXPECT_EQ(limits["max_reference_images"], 4);  // a klein model: BFL's four
  const std::vector<std::string> fields = limits["fields"];
  EXPECT_NE(std::find(fields.begin(), fields.end(), "num_inference_steps"), fields.end());
  EXPECT_EQ(std::find(fields.begin(), fields.end(), "true_cfg_scale"), fields.end());  // FLUX.1's
  EXPECT_EQ(json_of(client_->Get("/v1/models/demo"))["id"], "demo");
  EXPECT_EQ(client_->Get("/v1/models/other")->status, 404);
}

TEST_F(ServerApi, GenerationMatchesTheEngineAloneWithTheCliTextChunks) {
  auto r = post({{"prompt", "a red circle on a blue background"},
                 {"size", "64x64"},
                 {"seed", 7},
                 {"num_inference_steps", 2},
                 {"model", "demo"},
                 {"user", "test"},
                 {"quality", "high"}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json_of(r);
  EXPECT_TRUE(j["created"].is_number_integer());
  EXPECT_EQ(j["size"], "64x64");
  EXPECT_EQ(j["output_format"], "png");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_TRUE(j["data"][0]["revised_prompt"].is_null());
  // Server-Timing (W3C): the queue wait and the generation, in ms.
  const std::string timing = r->get_header_value("Server-Timing");
  std::smatch t;
  ASSERT_TRUE(std::regex_match(timing, t, std::regex(R"(queue;dur=(\d+\.\d), generate;dur=(\d+\.\d))")))
      << timing;
  EXPECT_GT(std::stod(t[2].str()), 0.0) << timing;
  const std::string png = base64_decode(j["data"][0]["b64_json"]);

  Engine engine(kDemoModel);
  GenerateRequest request;
  request.prompts = {"a red circle on a blue background"};
  request.width = request.height = 64;
  request.steps = 2;
  request.seed = 7;
  const GenerateResult alone = engine.generate(request);
  const io::Image image = png_of(png);
  EXPECT_EQ(image.pixels, alone.images[0].image.rgb);
  const auto text = png_text_of(png);
  for (const auto& [key, value] : metadata_text(alone.images[0].metadata))
    EXPECT_EQ(text.at(key), value) << key;
}

TEST_F(ServerApi, NImagesSizesAndExtras) {
  auto r = post({{"prompt", "a green star"},
                 {"n", 2},
                 {"size", "48x32"},
                 {"seed", 3},
                 {"num_inference_steps", 1},
                 {"guidance_scale", 2.5},
                 {"negative_prompt", "blurry"},
                 {"max_sequence_length", 64},
                 {"response_format", "b64_json"},
                 {"unknown_field", {1, 2}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json_of(r);
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["size"], "48x32");
  const auto text = png_text_of(base64_decode(j["data"][1]["b64_json"]));
  EXPECT_EQ(text.at("negative_prompt"), "blurry");
  EXPECT_EQ(text.at("steps"), "1");
  EXPECT_EQ(text.at("batch_index"), "1 of 2");
  EXPECT_EQ(text.at("guidance"), "2.5");
  EXPECT_EQ(text.at("max_sequence_length"), "64");
  const io::Image image = png_of(base64_decode(j["data"][0]["b64_json"]));
  EXPECT_EQ(image.width, 48);
  EXPECT_EQ(image.height, 32);
}

TEST_F(ServerApi, RandomSeedWhenUnsetOrMinusOne) {
  auto a = json_of(post({{"prompt", "x"}, {"size", "32x32"}, {"num_inference_steps", 1}}));
  auto b = json_of(post({{"prompt", "x"}, {"size", "32x32"}, {"num_inference_steps", 1}, {"seed", -1}}));
  EXPECT_NE(a["data"][0]["seed"], b["data"][0]["seed"]);
}

TEST_F(ServerApi, UrlResponsesAreFetchableOnce) {
  const json body = {
      {"prompt", "a blue square"}, {"size", "32x32"}, {"seed", 11}, {"num_inference_steps", 1}};
  json with_url = body;
  with_url["response_format"] = "url";
  const json u = json_of(post(with_url));
  const std::string url = u["data"][0]["url"];
  const std::regex shape("http://127\\.0\\.0\\.1:[0-9]+(/v1/images/[0-9a-f]{32}/content)");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(url, m, shape)) << url;
  auto got = client_->Get(m[1].str());
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(got->get_header_value("Content-Type"), "image/png");
  const json b = json_of(post(body));
  EXPECT_EQ(png_of(got->body).pixels, png_of(base64_decode(b["data"][0]["b64_json"])).pixels);
  EXPECT_EQ(client_->Get("/v1/images/0123456789abcdef0123456789abcdef/content")->status, 404);
  EXPECT_EQ(client_->Get("/v1/images/..%2F..%2Fetc%2Fpasswd/content")->status, 404);
}

TEST_F(ServerApi, StreamSendsStepEventsThenCompleted) {
  auto r = post({{"prompt", "a pink ring"},
                 {"size", "32x32"},
                 {"seed", 5},
                 {"num_inference_steps", 3},
                 {"stream", true},
                 {"partial_images", 2}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  const auto events = sse_events(r->body);
  ASSERT_EQ(events.size(), 4u) << r->body.substr(0, 500);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(events[i].first, "image_generation.partial_image");
    EXPECT_EQ(events[i].second["type"], "image_generation.partial_image");
    EXPECT_EQ(events[i].second["step"], i + 1);
    EXPECT_EQ(events[i].second["steps"], 3);
    EXPECT_EQ(events[i].second["partial_image_index"], i);
  }
  EXPECT_EQ(events[3].first, "image_generation.completed");
  const json& done = events[3].second;
  EXPECT_EQ(done["size"], "32x32");
  EXPECT_EQ(done["output_format"], "png");
  EXPECT_TRUE(done.contains("usage"));
  const json plain =
      json_of(post({{"prompt", "a pink ring"}, {"size", "32x32"}, {"seed", 5}, {"num_inference_steps", 3}}));
  EXPECT_EQ(done["b64_json"], plain["data"][0]["b64_json"]);
}

// partial_images: previews at steps spread over the loop (2 over 4 steps: after steps 1 and 3,
// round(4/3) and round(8/3)), PNGs of the output size; empty before the server has finished an image
// to fit its preview colours from, present once it has.
TEST_F(ServerApi, StreamCarriesPreviewsOnceAnImageHasFinished) {
  const json body = {{"prompt", "a red circle on a blue background"},
                     {"size", "32x32"},
                     {"seed", 4},
                     {"num_inference_steps", 4},
                     {"stream", true},
                     {"partial_images", 2}};
  auto previews_of = [&]() {
    auto r = post(body);
    EXPECT_TRUE(r);
    const auto events = sse_events(r->body);
    EXPECT_EQ(events.size(), 5u) << r->body.substr(0, 300);
    std::vector<std::string> b64;
    for (size_t i = 0; i + 1 < events.size(); ++i) b64.push_back(events[i].second["b64_json"]);
    return b64;
  };
  // The fixture's server is shared by the tests: finish one image first so the fit exists.
  post({{"prompt", "a red circle on a blue background"},
        {"size", "32x32"},
        {"seed", 1},
        {"num_inference_steps", 2}});
  const std::vector<std::string> b64 = previews_of();
  ASSERT_EQ(b64.size(), 4u);
  EXPECT_EQ(b64[1], "");  // step 2: not asked
  EXPECT_EQ(b64[3], "");  // step 4: the completed event has the image
  for (int step : {1, 3}) {
    ASSERT_FALSE(b64[step - 1].empty()) << "no preview at step " << step;
    const auto png = png_of(base64_decode(b64[step - 1]));
    EXPECT_EQ(png.width, 32);
    EXPECT_EQ(png.height, 32);
  }
}

TEST_F(ServerApi, EditsTakeReferenceImagesAndMasks) {
  httplib::MultipartFormDataItems items = {
      {"prompt", "a red circle on a blue background", "", ""},
      {"image[]", png_bytes(64, 64, 200, 30, 30), "a.png", "image/png"},
      {"image[]", png_bytes(64, 64, 30, 30, 200), "b.png", "image/png"},
      {"seed", "9", "", ""},
      {"num_inference_steps", "2", "", ""},
  };
  auto r = client_->Post("/v1/images/edits", items);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json_of(r);
  EXPECT_EQ(j["size"], "64x64");  // the first image's size
  const auto text = png_text_of(base64_decode(j["data"][0]["b64_json"]));
  EXPECT_EQ(text.at("reference_images"), "a.png, b.png");

  httplib::MultipartFormDataItems single = {{"prompt", "x", "", ""},
                                            {"image", png_bytes(64, 64, 1, 2, 3), "one.png", "image/png"},
                                            {"size", "32x32", "", ""},
                                            {"num_inference_steps", "1", "", ""},
                                            {"stream", "true", "", ""}};
  auto s = client_->Post("/v1/images/edits", single);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->status, 200) << s->body;
  const auto events = sse_events(s->body);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].first, "image_edit.partial_image");
  EXPECT_EQ(events[1].first, "image_edit.completed");

  // OpenAI's mask: its fully transparent pixels are what to edit. The first image is the one
  // edited, the second a reference; the engine gives the same image for the mask that rule makes.
  io::Image rgba{64, 64, 4, std::vector<uint8_t>(64 * 64 * 4, 255)};
  for (int y = 16; y < 48; ++y)
    for (int x = 8; x < 40; ++x) rgba.pixels[(y * 64 + x) * 4 + 3] = 0;
  items.push_back({"mask", as_string(io::encode_png(rgba)), "mask.png", "image/png"});
  auto m = client_->Post("/v1/images/edits", items);
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200) << m->body;
  const std::string edited = base64_decode(json_of(m)["data"][0]["b64_json"]);
  const auto edited_text = png_text_of(edited);
  EXPECT_EQ(edited_text.at("init_image"), "a.png");
  EXPECT_EQ(edited_text.at("mask"), "mask.png");
  EXPECT_EQ(edited_text.at("reference_images"), "b.png");
  EXPECT_EQ(edited_text.at("strength"), "0.8");  // Flux2KleinInpaintPipeline's default

  Engine engine(kDemoModel);
  GenerateRequest request;
  request.prompts = {"a red circle on a blue background"};
  request.seed = 9;
  request.steps = 2;
  const std::string source = png_bytes(64, 64, 200, 30, 30), reference = png_bytes(64, 64, 30, 30, 200);
  request.init_image = decode_image(source.data(), source.size());
  request.reference_images = {decode_image(reference.data(), reference.size())};
  Image mask{64, 64, std::vector<uint8_t>(64 * 64 * 3, 0)};
  for (int y = 16; y < 48; ++y)
    for (int x = 8; x < 40; ++x)
      for (int c = 0; c < 3; ++c) mask.rgb[(y * 64 + x) * 3 + c] = 255;
  request.mask_image = mask;
  EXPECT_EQ(png_of(edited).pixels, engine.generate(request).images[0].image.rgb);

  // A mask of another size, and one that is no image: 400 naming `mask`.
  items.back() = {"mask", png_bytes(32, 64, 255, 255, 255), "small.png", "image/png"};
  for (const std::string& bad : {std::string("small"), std::string("not an image")}) {
    if (bad != "small") items.back() = {"mask", "GIF89a...", "mask.gif", "image/gif"};
    auto b = client_->Post("/v1/images/edits", items);
    ASSERT_TRUE(b);
    EXPECT_EQ(b->status, 400) << bad;
    EXPECT_EQ(json_of(b)["error"]["param"], "mask") << bad << ": " << b->body;
  }
}

// padding_mask_crop on the edits endpoint: the window around an off-centre hole is repainted and
// pasted back, so the image keeps the source's size, and it equals Engine::generate's for the same
// request; without a mask it is a 400 naming the field.
TEST_F(ServerApi, EditsTakePaddingMaskCrop) {
  const std::string source = png_bytes(64, 48, 200, 30, 30);
  io::Image rgba{64, 48, 4, std::vector<uint8_t>(64 * 48 * 4, 255)};
  for (int y = 4; y < 20; ++y)
    for (int x = 40; x < 56; ++x) rgba.pixels[(y * 64 + x) * 4 + 3] = 0;
  httplib::MultipartFormDataItems items = {{"prompt", "a red circle", "", ""},
                                           {"image", source, "a.png", "image/png"},
                                           {"seed", "9", "", ""},
                                           {"num_inference_steps", "2", "", ""},
                                           {"padding_mask_crop", "4", "", ""}};
  auto refused = client_->Post("/v1/images/edits", items);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400) << refused->body;
  EXPECT_EQ(json_of(refused)["error"]["param"], "padding_mask_crop") << refused->body;

  items.push_back({"mask", as_string(io::encode_png(rgba)), "mask.png", "image/png"});
  auto r = client_->Post("/v1/images/edits", items);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string edited = base64_decode(json_of(r)["data"][0]["b64_json"]);
  EXPECT_EQ(png_text_of(edited).at("padding_mask_crop"), "4");
  const io::Image got = png_of(edited);
  EXPECT_EQ(got.width, 64);
  EXPECT_EQ(got.height, 48);

  Engine engine(kDemoModel);
  GenerateRequest request;
  request.prompts = {"a red circle"};
  request.seed = 9;
  request.steps = 2;
  request.padding_mask_crop = 4;
  request.init_image = decode_image(source.data(), source.size());
  Image mask{64, 48, std::vector<uint8_t>(64 * 48 * 3, 0)};
  for (int y = 4; y < 20; ++y)
    for (int x = 40; x < 56; ++x)
      for (int c = 0; c < 3; ++c) mask.rgb[(y * 64 + x) * 3 + c] = 255;
  request.mask_image = mask;
  const GenerateResult direct = engine.generate(request);
  EXPECT_EQ(got.pixels, direct.images[0].image.rgb);
  // Outside the window the source comes back untouched (the overlay keeps it where the mask is 0).
  EXPECT_EQ(got.pixels[(40 * 64 + 4) * 3], 200);
}

TEST_F(ServerApi, MetricsPageAndErrors) {
  post({{"prompt", "x"}, {"size", "32x32"}, {"num_inference_steps", 1}});
  auto m = client_->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  for (const char* name :
       {"fluxrt_queue_depth ", "fluxrt_http_requests_total{", "fluxrt_images_generated_total ",
        "fluxrt_steps_per_second ", "fluxrt_request_duration_seconds_bucket{le=\"+Inf\"}",
        "fluxrt_batches_total{images=\"1\"}", "fluxrt_peak_resident_memory_bytes "})
    EXPECT_NE(m->body.find(name), std::string::npos) << name;
  auto page = client_->Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("<title>fluxrt</title>"), std::string::npos);
  EXPECT_EQ(page->body.find("http://"), std::string::npos) << "the page must load nothing from elsewhere";
  EXPECT_EQ(page->body.find("https://"), std::string::npos);
  auto nf = client_->Get("/v2/nothing");
  EXPECT_EQ(nf->status, 404);
  EXPECT_EQ(json_of(nf)["error"]["code"], "not_found");
  auto na = client_->Get("/v1/images/generations");
  EXPECT_EQ(na->status, 405);
  EXPECT_EQ(na->get_header_value("Allow"), "POST");
  EXPECT_EQ(client_->Delete("/v1/models")->status, 405);
  EXPECT_FALSE(client_->Get("/health")->has_header("Access-Control-Allow-Origin"));
}

// Counted in steps, not seconds: the test once allowed the engine 10 s to stop, and on a busy
// 2-core machine a step of the demo model (two OpenMP threads among busy processes) took up to
// 5 s, after a text encoding of up to 10 s, so the stop came later than that while it still came
// at the next step.
TEST_F(ServerApi, DisconnectCancelsAtTheNextStep) {
  constexpr int kSteps = 500;  // minutes on a busy machine: only the cancel ends it early
  auto doomed = client_for(server_->port());
  std::thread t([&] {
    doomed->Post("/v1/images/generations",
                 json({{"prompt", "x"}, {"size", "64x64"}, {"num_inference_steps", kSteps}}).dump(),
                 "application/json");
  });
  auto metric = [&](const std::string& name) { return metric_of(*client_, name); };
  const double cancelled_before = metric("fluxrt_requests_cancelled_total");
  const double steps_before = metric("fluxrt_denoise_steps_total");
  // In its loop: a step done (a running count of 1 could still be an earlier request's).
  ASSERT_TRUE(
      wait_for_metric(*client_, "fluxrt_denoise_steps_total", [&](double v) { return v > steps_before; }));
  doomed->stop();
  t.join();
  const double steps_at_disconnect = metric("fluxrt_denoise_steps_total") - steps_before;
  ASSERT_TRUE(wait_for_metric(*client_, "fluxrt_running_requests", [](double v) { return v == 0; }));
  const double steps_run = metric("fluxrt_denoise_steps_total") - steps_before;
  // The server looks at the connection at every step, and the engine stops before its next one:
  // the step running when the server noticed still completes.
  EXPECT_LE(steps_run, steps_at_disconnect + 2);
  EXPECT_LT(steps_run, kSteps);
  EXPECT_EQ(metric("fluxrt_requests_cancelled_total"), cancelled_before + 1);
  EXPECT_EQ(post({{"prompt", "still serving"}, {"size", "32x32"}, {"num_inference_steps", 1}})->status, 200);
}

TEST(ServerOptionsTest, ApiKeyCorsAndBinding) {
  server::ServerOptions o = demo_options();
  o.api_key = "sekret-key";
  o.cors_origin = "http://example.test";
  auto s = start_server(o);
  auto c = client_for(s->port());
  const std::string body = json({{"prompt", "x"}, {"size", "32x32"}, {"num_inference_steps", 1}}).dump();
  auto none = c->Post("/v1/images/generations", body, "application/json");
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(json_of(none)["error"]["code"], "invalid_api_key");
  auto wrong =
      c->Post("/v1/images/generations", {{"Authorization", "Bearer sekret-kez"}}, body, "application/json");
  EXPECT_EQ(wrong->status, 401);
  EXPECT_EQ(c->Get("/v1/models", {{"Authorization", "Bearer sekret"}})->status, 401);
  EXPECT_EQ(c->Get("/metrics")->status, 401);
  EXPECT_EQ(c->Get("/health")->status, 200);  // for load balancers
  auto ok =
      c->Post("/v1/images/generations", {{"Authorization", "Bearer sekret-key"}}, body, "application/json");
  EXPECT_EQ(ok->status, 200);
  auto pre = c->Options("/v1/images/generations",
                        {{"Origin", "http://example.test"}, {"Access-Control-Request-Method", "POST"}});
  EXPECT_EQ(pre->status, 204);
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "http://example.test");
  auto other = c->Get("/health", {{"Origin", "http://evil.test"}});
  EXPECT_FALSE(other->has_header("Access-Control-Allow-Origin"));

  server::ServerOptions open = demo_options();
  open.host = "0.0.0.0";
  server::ImageServer refused(open);
  EXPECT_THROW(refused.start(), Error);
  EXPECT_TRUE(server::is_loopback_host("127.0.0.2"));
  EXPECT_FALSE(server::is_loopback_host("10.0.0.1"));
  EXPECT_TRUE(server::constant_time_equal("abc", "abc"));
  EXPECT_FALSE(server::constant_time_equal("abc", "abcd"));
  EXPECT_FALSE(server::constant_time_equal("abd", "abc"));
}

TEST(ServerLoading, HealthIsLoadingUntilTheModelIsReady) {
  std::promise<void> release;
  std::shared_future<void> go = release.get_future().share();
  server::ServerOptions o = demo_options();
  o.engine_factory = [go] {
    go.wait();
    return std::make_unique<Engine>(kDemoModel);
  };
  server::ImageServer s(o);
  s.start();
  auto c = client_for(s.port());
  auto h = c->Get("/health");
  EXPECT_EQ(h->status, 503);
  EXPECT_EQ(json_of(h)["status"], "loading");
  auto g = c->Post("/v1/images/generations", R"({"prompt":"x"})", "application/json");
  EXPECT_EQ(g->status, 503);
  EXPECT_EQ(json_of(g)["error"]["code"], "model_loading");
  release.set_value();
  s.wait_until_loaded();
  EXPECT_EQ(c->Get("/health")->status, 200);
}

// The running, queued and refused requests are states the test waits for, not moments it hopes a
// sleep catches: the running one is cancelled (its client goes) once the refusal is seen.
TEST(ServerQueue, FullQueueAnswers429WithRetryAfterAndShutdownDrains) {
  server::ServerOptions o = demo_options();
  o.max_queue = 1;
  auto s = start_server(o);
  auto c = client_for(s->port());
  auto request = [](int steps) {
    return json({{"prompt", "x"}, {"size", "32x32"}, {"num_inference_steps", steps}}).dump();
  };
  auto holder = client_for(s->port());
  auto held = std::async(std::launch::async, [&] {
    auto r = holder->Post("/v1/images/generations", request(500), "application/json");  // the most allowed
    return r ? r->status : -1;
  });
  ASSERT_TRUE(wait_for_metric(*c, "fluxrt_running_requests", [](double v) { return v >= 1; }));
  auto queued = std::async(std::launch::async, [&] {
    auto r = client_for(s->port())->Post("/v1/images/generations", request(2), "application/json");
    return r ? r->status : -1;
  });
  ASSERT_TRUE(wait_for_metric(*c, "fluxrt_queue_depth", [](double v) { return v >= 1; }));
  auto full = c->Post("/v1/images/generations", request(2), "application/json");
  ASSERT_TRUE(full);
  EXPECT_EQ(full->status, 429);
  EXPECT_GE(std::stoi(full->get_header_value("Retry-After")), 1);
  EXPECT_EQ(json_of(full)["error"]["type"], "rate_limit_error");
  holder->stop();  // the running request's client goes: it stops at its next step
  EXPECT_EQ(held.get(), -1);
  s->shutdown();  // what was accepted finishes
  EXPECT_EQ(queued.get(), 200);
  EXPECT_FALSE(client_for(s->port())->Get("/health"));  // no longer listening
}

TEST(ServerCommand, SigtermFinishesTheRunningRequestAndExitsZero) {
  const std::string binary = std::string(FLUXRT_BINARY_DIR) + "/fluxrt";
  if (access(binary.c_str(), X_OK) != 0) GTEST_SKIP() << binary << " not built";
  // Named per process: another build's test run on the same machine writes its own.
  const std::string log = testing::TempDir() + "serve_sigterm_" + std::to_string(getpid()) + ".log";
  const std::string command = "exec " + binary + " serve --port 0 --model " + kDemoModel + " 2>" + log;
  pid_t pid = 0;
  const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
  ASSERT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
  // A server that a failed assertion leaves behind is killed, not left running; the log goes.
  struct Reaper {
    pid_t pid;
    std::string log;
    bool reaped = false;
    ~Reaper() {
      if (!reaped) kill(pid, SIGKILL), waitpid(pid, nullptr, 0);
      std::remove(log.c_str());
    }
  } reaper{pid, log};
  int port = 0;
  const std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
  ASSERT_TRUE(wait_until([&] {
    std::FILE* f = std::fopen(log.c_str(), "r");
    if (!f) return false;
    char buf[4096] = {};
    std::string text(buf, std::fread(buf, 1, sizeof buf - 1, f));
    std::fclose(f);
    std::smatch m;
    if (std::regex_search(text, m, listening)) port = std::stoi(m[1]);
    return port > 0;
  }));
  auto c = client_for(port);
  ASSERT_TRUE(wait_until([&] {
    const httplib::Result h = c->Get("/health");
    return h && h->status == 200;
  }));
  auto pending = std::async(std::launch::async, [port] {
    auto client = client_for(port);
    client->set_read_timeout(600, 0);  // 20 steps take minutes on an oversubscribed machine
    auto r = client->Post("/v1/images/generations",
                          R"({"prompt":"x","size":"32x32","num_inference_steps":20})", "application/json");
    return r ? r->status : -1;
  });
  // SIGTERM once the request is in its loop (a step done, 19 to go): it must still be answered.
  ASSERT_TRUE(wait_for_metric(*c, "fluxrt_denoise_steps_total", [](double v) { return v >= 1; }));
  kill(pid, SIGTERM);
  EXPECT_EQ(pending.get(), 200);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  reaper.reaped = true;
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace fluxrt::test
