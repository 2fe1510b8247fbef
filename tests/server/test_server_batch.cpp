// Dynamic batching (--max-batch, --batch-window-ms): concurrent requests of one shape run as one
// engine call, and each gets exactly the image it gets alone (its own seed's noise); requests
// that cannot share (another size, reference images) run apart.
#include <future>
#include <regex>

#include "fluxrt/engine.h"
#include "server_fixture.h"

namespace fluxrt::test {
namespace {

using nlohmann::json;

double metric(httplib::Client& c, const std::string& name) {
  const std::string body = c.Get("/metrics")->body;
  const size_t at = body.find("\n" + name + " ");
  return at == std::string::npos ? 0 : std::stod(body.substr(at + name.size() + 2));
}

TEST(ServerBatch, BatchedRequestsEqualTheSameRequestsAlone) {
  server::ServerOptions o = demo_options();
  // The five images fill a batch, which then starts at once: the window only bounds the wait (it
  // was 1.5 s, "long enough for all four to arrive", a time a busy machine need not keep).
  o.max_batch = 5;
  o.batch_window_ms = 600000;
  auto s = start_server(o);
  const std::vector<json> bodies = {
      {{"prompt", "a red circle on a blue background"}, {"seed", 1}},
      {{"prompt", "a green star on a white background"}, {"seed", 2}, {"n", 2}},
      {{"prompt", "a yellow cross"}, {"seed", 3}},
      {{"prompt", "a red circle on a blue background"}, {"seed", 4}, {"stream", true}},
  };
  std::vector<std::future<httplib::Result>> answers;
  for (json b : bodies) {
    b["size"] = "32x32";
    b["num_inference_steps"] = 2;
    answers.push_back(std::async(std::launch::async, [port = s->port(), b] {
      return client_for(port)->Post("/v1/images/generations", b.dump(), "application/json");
    }));
  }
  Engine engine(kDemoModel);
  for (size_t i = 0; i < bodies.size(); ++i) {
    httplib::Result r = answers[i].get();
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body.substr(0, 300);
    std::vector<std::string> b64;
    if (bodies[i].value("stream", false)) {
      for (const auto& [event, data] : sse_events(r->body))
        if (event == "image_generation.completed") b64.push_back(data["b64_json"]);
    } else {
      const json j = json_of(r);
      for (const json& d : j["data"]) b64.push_back(d["b64_json"]);
    }
    GenerateRequest alone;
    alone.prompts = {bodies[i]["prompt"]};
    alone.seed = bodies[i]["seed"];
    alone.images_per_prompt = bodies[i].value("n", 1);
    alone.width = alone.height = 32;
    alone.steps = 2;
    const GenerateResult expected = engine.generate(alone);
    ASSERT_EQ(b64.size(), expected.images.size()) << i << ": " << r->body.substr(0, 400);
    for (size_t k = 0; k < b64.size(); ++k) {
      const std::string png = base64_decode(b64[k]);
      EXPECT_EQ(png_of(png).pixels, expected.images[k].image.rgb) << "request " << i << " image " << k;
      const auto text = png_text_of(png);
      for (const auto& [key, value] : metadata_text(expected.images[k].metadata))
        EXPECT_EQ(text.at(key), value);
    }
  }
  // The five images ran in one engine call.
  auto c = client_for(s->port());
  const std::string m = c->Get("/metrics")->body;
  const std::regex line(R"re(fluxrt_batches_total\{images="(\d+)"\} (\d+))re");
  int calls = 0;
  for (auto it = std::sregex_iterator(m.begin(), m.end(), line); it != std::sregex_iterator(); ++it)
    calls += std::stoi((*it)[2]);
  EXPECT_EQ(calls, 1) << m;
  EXPECT_NE(m.find("fluxrt_batches_total{images=\"5\"} 1"), std::string::npos) << m;
  EXPECT_EQ(metric(*c, "fluxrt_images_generated_total"), 5);
}

TEST(ServerBatch, DifferentShapesRunApart) {
  server::ServerOptions o = demo_options();
  o.max_batch = 8;
  o.batch_window_ms = 300;
  auto s = start_server(o);
  auto a = std::async(std::launch::async, [&] {
    return client_for(s->port())->Post("/v1/images/generations",
                                       R"({"prompt":"a","size":"32x32","num_inference_steps":1})",
                                       "application/json");
  });
  auto b = std::async(std::launch::async, [&] {
    return client_for(s->port())->Post("/v1/images/generations",
                                       R"({"prompt":"b","size":"48x48","num_inference_steps":1})",
                                       "application/json");
  });
  EXPECT_EQ(a.get()->status, 200);
  EXPECT_EQ(b.get()->status, 200);
  const std::string m = client_for(s->port())->Get("/metrics")->body;
  EXPECT_NE(m.find("fluxrt_batches_total{images=\"1\"} 2"), std::string::npos) << m;
}

}  // namespace
}  // namespace fluxrt::test
