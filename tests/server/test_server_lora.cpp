// `loras` on the server (--lora-dir, issue 25, docs/server.md): a request names LoRA files of the
// server's folder with strengths and gets diffusers' image for them (tests/data/lora, made by
// tools/reference/dump_lora.py from load_lora_weights + set_adapters) on the tiny klein model in
// f32; the next request without them gets the base image; requests with other LoRAs that arrive
// together (batched when their files are plain LoRAs, each request's on its own images) each get
// their own image; every bad `loras` value is a 400 naming the field.
// LyCORIS LoKr / LoHa and DoRA files give the images of the trainers' math (tests/data/lora_lycoris).
#include <filesystem>
#include <fstream>
#include <future>

#include "io/safetensors.h"
#include "server_fixture.h"
#include "support/image_compare.h"
#include "support/random_tensor.h"

namespace fluxrt::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kData = FLUXRT_TEST_DATA_DIR;
const fs::path kLora = kData / "lora";

server::ServerOptions klein_options(const fs::path& lora_dir) {
  server::ServerOptions o = demo_options();
  o.model = (kData / "models" / "flux2-klein-tiny").string();
  o.engine.precision = Precision::F32;
  o.lora_dir = lora_dir.string();
  o.max_batch = 8;
  o.batch_window_ms = 300;
  return o;
}

// The request tools/reference/dump_lora.py rendered, with `loras`.
json golden_body(const json& loras) {
  json b = {{"prompt", "a red circle on a blue background"},
            {"seed", 3},
            {"size", "64x64"},
            {"num_inference_steps", 2},
            {"max_sequence_length", 32}};
  if (!loras.is_null()) b["loras"] = loras;
  return b;
}

std::string image_bytes(const httplib::Result& r) {
  const json j = json_of(r);
  return base64_decode(j["data"][0]["b64_json"].get<std::string>());
}

void expect_golden(const httplib::Result& r, const std::string& case_dir) {
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body.substr(0, 400);
  const auto d =
      compare_images(png_of(image_bytes(r)), io::read_png((kLora / case_dir / "image_0.png").string()));
  EXPECT_LE(d.max_abs, 2) << case_dir << ": " << d.str();
}

std::string sha12(const std::string& format) {
  std::ifstream in(kLora / "manifest.json");
  return json::parse(in)["families"]["klein"]["formats"][format]["sha256"].get<std::string>().substr(0, 12);
}

class ServerLora : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = start_server(klein_options(kLora / "klein")).release(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  httplib::Result post(const json& body) {
    return client_->Post("/v1/images/generations", body.dump(), "application/json");
  }
  void expect_refused(const json& loras, const std::string& says, const std::string& code = "") {
    SCOPED_TRACE(loras.dump());
    const httplib::Result r = post(golden_body(loras));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    const json e = json_of(r)["error"];
    EXPECT_EQ(e["param"], "loras") << r->body;
    if (!code.empty()) {
      EXPECT_EQ(e["code"], code) << r->body;
    }
    EXPECT_NE(e["message"].get<std::string>().find(says), std::string::npos) << r->body;
  }
  std::unique_ptr<httplib::Client> client_ = client_for(server_->port());
  static inline server::ImageServer* server_ = nullptr;
};

TEST_F(ServerLora, NamedLorasRenderTheDiffusersImages) {
  const httplib::Result one = post(golden_body(json::array({{{"name", "peft"}, {"strength", 1.0}}})));
  expect_golden(one, "klein_peft_f32");
  EXPECT_EQ(png_text_of(image_bytes(one))["loras"], "peft.safetensors:1:" + sha12("peft"));
  // The BFL file of the same weights, named with its extension; a bare name has strength 1.
  expect_golden(post(golden_body(json::array({"bfl.safetensors"}))), "klein_peft_f32");
  expect_golden(post(golden_body(json::array({{{"name", "kohya"}, {"strength", 0.5}}}))), "klein_half_f32");
  expect_golden(post(golden_body(json::array({{{"name", "peft"}, {"strength", -0.7}}}))),
                "klein_negative_f32");
  expect_golden(post(golden_body(json::array({"peft", {{"name", "second"}, {"strength", 0.7}}}))),
                "klein_two_f32");
  // Per request only: the next request without LoRAs is the base model's.
  const httplib::Result base = post(golden_body(nullptr));
  expect_golden(base, "klein_base_f32");
  EXPECT_EQ(png_text_of(image_bytes(base)).count("loras"), 0u);
}

TEST_F(ServerLora, RequestsWithOtherLorasArrivingTogetherGetTheirOwnImages) {
  const std::vector<std::pair<json, std::string>> cases = {
      {json::array({"peft"}), "klein_peft_f32"},
      {nullptr, "klein_base_f32"},
      {json::array({{{"name", "peft"}, {"strength", 0.5}}}), "klein_half_f32"},
      {json::array({"peft"}), "klein_peft_f32"},
  };
  std::vector<std::future<httplib::Result>> answers;
  for (const auto& [loras, _] : cases)
    answers.push_back(std::async(std::launch::async, [port = server_->port(), body = golden_body(loras)] {
      return client_for(port)->Post("/v1/images/generations", body.dump(), "application/json");
    }));
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    expect_golden(answers[i].get(), cases[i].second);
  }
}

TEST_F(ServerLora, ListsTheFolder) {
  const httplib::Result r = client_->Get("/v1/loras");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json_of(r);
  EXPECT_EQ(j["object"], "list");
  std::vector<std::string> names;
  for (const json& e : j["data"]) {
    names.push_back(e["id"]);
    EXPECT_EQ(e["object"], "lora");
    EXPECT_TRUE(e["usable"].get<bool>()) << e.dump();
    EXPECT_EQ(e["family"], "FLUX.2") << e.dump();
    // rank 4; fused modules (musubi's qkv) stack their A matrices
    EXPECT_EQ(e["ranks"][0], 4) << e.dump();
    EXPECT_GT(e["bytes"].get<uint64_t>(), 0u);
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"bfl", "comfy_down_up", "fal", "kohya", "musubi", "peft", "second"}));
}

TEST_F(ServerLora, BadValuesAre400sNamingTheField) {
  expect_refused("peft", "must be a list");
  expect_refused(json::object({{"name", "peft"}}), "must be a list");
  expect_refused(json::array({3}), "must be a list");
  expect_refused(json::array({{{"name", 3}}}), "must be a list");
  expect_refused(json::array({{{"strength", 1}}}), "must be a list");
  expect_refused(json::array({{{"name", "peft"}, {"strength", "1"}}}), "strengths must be numbers");
  expect_refused(json::array({{{"name", "peft"}, {"strength", 1e9}}}), "strengths must be numbers");
  expect_refused(json::array({{{"name", "peft"}, {"weight", 1}}}), "\"weight\"");
  for (const char* name : {"../klein/peft", "/etc/passwd", "klein/peft", "peft/..", ".hidden", "a b", "",
                           "..", "peft\\x", "%2e%2e"})
    expect_refused(json::array({name}), "is not a LoRA name", "invalid_lora");
  expect_refused(json::array({"nope"}), "no LoRA \"nope\"", "lora_not_found");
  expect_refused(json::array({"peft", "peft.safetensors"}), "twice", "invalid_lora");
  expect_refused(json::array({"a", "b", "c", "d", "e", "f", "g", "h", "i"}), "at most 8");
  // The server still serves.
  expect_golden(post(golden_body(json::array({"peft"}))), "klein_peft_f32");
}

TEST_F(ServerLora, EditsTakeLorasAsAJsonFormField) {
  httplib::MultipartFormDataItems form = {
      {"prompt", "a red circle on a blue background", "", ""},
      {"seed", "3", "", ""},
      {"size", "64x64", "", ""},
      {"num_inference_steps", "2", "", ""},
      {"loras", R"([{"name": "peft", "strength": 0.5}])", "", ""},
      {"image", png_bytes(64, 64, 200, 40, 40), "ref.png", "image/png"},
  };
  httplib::Result r = client_->Post("/v1/images/edits", form);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body.substr(0, 400);
  EXPECT_EQ(png_text_of(image_bytes(r))["loras"], "peft.safetensors:0.5:" + sha12("peft"));
  form[4].content = "[{\"name\": ";
  r = client_->Post("/v1/images/edits", form);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(json_of(r)["error"]["param"], "loras") << r->body;
}

// A folder with files that cannot serve this model: each is listed as unusable with the reason
// and refused with a 400 (never a 500); the shapes of another model size are found only when the
// engine attaches the LoRA, and are a 400 too.
TEST(ServerLoraFolder, UnusableFilesAre400s) {
  const fs::path dir = fs::temp_directory_path() / ("fluxrt_server_loras_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kLora / "flux1" / "peft.safetensors", dir / "for_flux1.safetensors");
  std::ofstream(dir / "broken.safetensors") << "not a safetensors file at all";
  io::write_safetensors((dir / "wrong_size.safetensors").string(),
                        {{"diffusion_model.img_in.lora_A.weight", random_normal({4, 64}, DType::F32, 1)},
                         {"diffusion_model.img_in.lora_B.weight", random_normal({128, 4}, DType::F32, 2)}});
  fs::copy_file(kLora / "klein" / "peft.safetensors", dir / "good.safetensors");
  auto s = start_server(klein_options(dir));
  auto c = client_for(s->port());
  const json list = json_of(c->Get("/v1/loras"));
  std::map<std::string, json> by_name;
  for (const json& e : list["data"]) by_name[e["id"]] = e;
  ASSERT_EQ(by_name.size(), 4u) << list.dump();
  EXPECT_FALSE(by_name["for_flux1"]["usable"].get<bool>());
  EXPECT_FALSE(by_name["broken"]["usable"].get<bool>());
  EXPECT_TRUE(by_name["good"]["usable"].get<bool>());
  // The server's own path stays on the server.
  EXPECT_EQ(list.dump().find(dir.string()), std::string::npos) << list.dump();

  auto refused = [&](const std::string& name, const std::string& says) {
    SCOPED_TRACE(name);
    const httplib::Result r =
        c->Post("/v1/images/generations", golden_body(json::array({name})).dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_EQ(json_of(r)["error"]["param"], "loras") << r->body;
    EXPECT_NE(r->body.find(says), std::string::npos) << r->body;
    EXPECT_EQ(r->body.find(dir.string()), std::string::npos) << r->body;
  };
  refused("for_flux1", "is a LoRA for FLUX.1");
  refused("broken", "cannot be used");
  refused("wrong_size", "[4, 64]");
  // A file dropped in while the server runs is offered at once.
  fs::copy_file(kLora / "klein" / "second.safetensors", dir / "late.safetensors");
  const httplib::Result late = c->Post(
      "/v1/images/generations",
      golden_body(json::array({"good", {{"name", "late"}, {"strength", 0.7}}})).dump(), "application/json");
  expect_golden(late, "klein_two_f32");
  s.reset();
  fs::remove_all(dir);
}

// LyCORIS LoKr / LoHa and DoRA files per request (tests/data/lora_lycoris, docs/lora.md): the
// images of the trainers' math, and the base model's again after them.
TEST(ServerLoraFolder, LycorisAndDoraFilesPerRequest) {
  const fs::path lycoris = kData / "lora_lycoris";
  auto s = start_server(klein_options(lycoris / "klein"));
  auto c = client_for(s->port());
  const json list = json_of(c->Get("/v1/loras"));
  std::map<std::string, json> by_name;
  for (const json& e : list["data"]) by_name[e["id"]] = e;
  for (const char* name : {"kohya_mixed", "comfy_mixed", "peft_dora"})
    EXPECT_EQ(by_name[name]["usable"], true) << list.dump();
  auto golden = [&](const json& loras, const fs::path& image) {
    SCOPED_TRACE(loras.dump());
    const httplib::Result r =
        c->Post("/v1/images/generations", golden_body(loras).dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body.substr(0, 400);
    const auto d = compare_images(png_of(image_bytes(r)), io::read_png(image.string()));
    EXPECT_LE(d.max_abs, 2) << image << ": " << d.str();
  };
  golden(json::array({{{"name", "kohya_mixed"}, {"strength", 0.7}}}),
         lycoris / "klein_mixed_s07_f32" / "image_0.png");
  golden(json::array({"peft_dora"}), lycoris / "klein_peft_dora_f32" / "image_0.png");
  golden(nullptr, kLora / "klein_base_f32" / "image_0.png");
}

TEST(ServerLoraFolder, WithoutAFolderLorasAreRefused) {
  auto s = start_server(demo_options());
  auto c = client_for(s->port());
  const httplib::Result r =
      c->Post("/v1/images/generations", json{{"prompt", "x"}, {"loras", json::array({"peft"})}}.dump(),
              "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json_of(r)["error"]["param"], "loras");
  EXPECT_NE(r->body.find("--lora-dir"), std::string::npos) << r->body;
  EXPECT_EQ(json_of(c->Get("/v1/loras"))["data"], json::array());
  // A folder that is not there fails the start, before anything listens.
  server::ServerOptions o = demo_options();
  o.lora_dir = "/nonexistent/loras";
  server::ImageServer bad(o);
  try {
    bad.start();
    ADD_FAILURE() << "started with a missing --lora-dir";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/loras is not a directory"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fluxrt::test
