// The bad-request corpus: malformed JSON, wrong types, huge and negative numbers, impossible
// sizes, invalid UTF-8, multipart garbage, truncated and non-image uploads, decompression bombs,
// missing and wrong API keys, oversized headers and bodies, broken HTTP framing and a slow-loris
// client. Each gets its 4xx in OpenAI's error shape (or, for broken framing, a closed connection)
// and the server keeps serving: /health is checked after every case, a generation at the end.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "server_fixture.h"

namespace fluxrt::test {
namespace {

using nlohmann::json;

const std::string kKey = "corpus-key";

struct Case {
  std::string name;
  std::string path;
  std::string content_type;  // "" for none
  std::string body;
  int status;
  std::string param = "";  // the field the error must name, when it names one
  httplib::Headers headers = {{"Authorization", "Bearer " + kKey}};
};

// Raw bytes to the server; the status line of the answer, 0 when the connection closed without
// one.
int raw_request(int port, const std::string& bytes, int read_timeout_s = 10) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return -1;
  timeval tv{read_timeout_s, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  std::string answer;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) {
    answer.append(buf, size_t(n));
    if (answer.find("\r\n\r\n") != std::string::npos) break;
  }
  close(fd);
  if (answer.rfind("HTTP/1.1 ", 0) != 0) return 0;
  return std::stoi(answer.substr(9, 3));
}

std::string multipart(const std::vector<std::tuple<std::string, std::string, std::string>>& parts) {
  std::string body;
  for (const auto& [name, filename, content] : parts) {
    body += "--XBOUNDARY\r\nContent-Disposition: form-data; name=\"" + name + "\"";
    if (!filename.empty())
      body += "; filename=\"" + filename + "\"\r\nContent-Type: application/octet-stream";
    body += "\r\n\r\n" + content + "\r\n";
  }
  return body + "--XBOUNDARY--\r\n";
}

const std::string kMultipart = "multipart/form-data; boundary=XBOUNDARY";

std::string png_bomb() {
  // A valid signature and IHDR declaring 100000 x 100000 pixels, and a few bytes of "data".
  std::string png = png_bytes(8, 8, 1, 2, 3);
  const uint32_t side = htonl(100000);
  png.replace(16, 4, reinterpret_cast<const char*>(&side), 4);
  png.replace(20, 4, reinterpret_cast<const char*>(&side), 4);
  return png;
}

std::string webp_bomb() {
  std::string w = "RIFF\x40\x00\x00\x00WEBPVP8X\x0a\x00\x00\x00\x00\x00\x00\x00";
  w += std::string("\xff\xff\x3f\xff\xff\x3f", 6);  // 4 M x 4 M canvas
  return w + std::string(16, '\0');
}

std::vector<Case> corpus() {
  const std::string G = "/v1/images/generations", E = "/v1/images/edits", J = "application/json";
  auto gen = [&](const std::string& name, const json& body, const std::string& param) {
    return Case{name, G, J, body.dump(), 400, param};
  };
  const json ok = {{"prompt", "x"}, {"size", "32x32"}, {"num_inference_steps", 1}};
  auto with = [&](const char* key, const json& value) {
    json j = ok;
    j[key] = value;
    return j;
  };
  const std::string png = png_bytes(64, 64, 10, 20, 30);
  const std::string jpeg = jpeg_bytes(64, 64), webp = webp_bytes(64, 64);
  std::vector<Case> c = {
      {"malformed JSON", G, J, R"({"prompt": "x", )", 400},
      {"JSON array", G, J, "[1, 2]", 400},
      {"JSON string", G, J, "\"prompt\"", 400},
      {"empty body", G, J, "", 400},
      {"invalid UTF-8 in the JSON", G, J, "{\"prompt\": \"\xff\xfe bad\"}", 400},
      {"overlong UTF-8 in the JSON", G, J, "{\"prompt\": \"\xc0\xaf\"}", 400},
      gen("missing prompt", {{"size", "32x32"}}, "prompt"),
      gen("prompt a number", with("prompt", 5), "prompt"),
      gen("prompt an object", with("prompt", {{"a", 1}}), "prompt"),
      gen("prompt too long", with("prompt", std::string(32001, 'a')), "prompt"),
      gen("prompt with NUL", with("prompt", std::string("a\0b", 3)), "prompt"),
      gen("n zero", with("n", 0), "n"),
      gen("n negative", with("n", -1), "n"),
      gen("n huge", json::parse(R"({"prompt":"x","n":99999999999999999999999})"), "n"),
      gen("n a string", with("n", "2"), "n"),
      gen("n fractional", with("n", 1.5), "n"),
      gen("n over --max-images", with("n", 5), "n"),
      gen("size 0x0", with("size", "0x0"), "size"),
      gen("size 1x1", with("size", "1x1"), "size"),
      gen("size 99999x99999", with("size", "99999x99999"), "size"),
      gen("size over --max-size", with("size", "512x512"), "size"),
      gen("size not a multiple", with("size", "64x63"), "size"),
      gen("size negative", with("size", "-64x64"), "size"),
      gen("size one number", with("size", "64"), "size"),
      gen("size three numbers", with("size", "64x64x64"), "size"),
      gen("size a number", with("size", 64), "size"),
      gen("size overflowing int", with("size", "99999999999999999999x64"), "size"),
      gen("response_format unknown", with("response_format", "jpeg"), "response_format"),
      gen("output_format unknown", with("output_format", "gif"), "output_format"),
      gen("output_compression 101", with("output_compression", 101), "output_compression"),
      gen("seed a string", with("seed", "abc"), "seed"),
      gen("seed below -1", with("seed", -2), "seed"),
      gen("seed 1e300", with("seed", 1e300), "seed"),
      gen("steps zero", with("num_inference_steps", 0), "num_inference_steps"),
      gen("steps huge", with("num_inference_steps", 100000), "num_inference_steps"),
      gen("guidance a string", with("guidance_scale", "high"), "guidance_scale"),
      gen("guidance huge", with("guidance_scale", 1e9), "guidance_scale"),
      gen("negative_prompt a number", with("negative_prompt", 5), "negative_prompt"),
      gen("max_sequence_length zero", with("max_sequence_length", 0), "max_sequence_length"),
      gen("true_cfg_scale on FLUX.2", with("true_cfg_scale", 2.0), "true_cfg_scale"),
      gen("cache unknown method", with("cache", "teacache:threshold=0.1"), "cache"),
      gen("cache unknown key", with("cache", "first-block:thresh=0.1"), "cache"),
      gen("cache a number", with("cache", 0.2), "cache"),
      gen("cache mag without ratios", with("cache", "mag"), "cache"),
      gen("cache ratios file missing", with("cache", "mag:mag_ratios=/no/such.json"), "cache"),
      gen("stream a string", with("stream", "yes"), "stream"),
      gen("partial_images 7", with("partial_images", 7), "partial_images"),
      gen("unknown model", with("model", "gpt-image-1"), "model"),
      {"text/plain body", G, "text/plain", ok.dump(), 415},
      {"no content type", G, "", ok.dump(), 415},
      {"body over the limit", G, J, "{\"prompt\": \"" + std::string(2 << 20, 'a') + "\"}", 413},
      {"missing API key", G, J, ok.dump(), 401, "", {}},
      {"wrong API key", G, J, ok.dump(), 401, "", {{"Authorization", "Bearer corpus-kez"}}},
      {"key without Bearer", G, J, ok.dump(), 401, "", {{"Authorization", kKey}}},
      {"unknown path", "/v1/images/variations", J, ok.dump(), 404},
      {"edits as JSON", E, J, ok.dump(), 415},
      {"edits without image", E, kMultipart, multipart({{"prompt", "", "x"}}), 400, "image"},
      {"edits without prompt", E, kMultipart, multipart({{"image", "a.png", png}}), 400, "prompt"},
      {"edits non-image upload", E, kMultipart,
       multipart({{"prompt", "", "x"}, {"image", "a.txt", "hello, world"}}), 400, "image"},
      {"edits truncated PNG", E, kMultipart,
       multipart({{"prompt", "", "x"}, {"image", "a.png", png.substr(0, 60)}}), 400, "image"},
      {"edits PNG with a corrupt body", E, kMultipart,
       multipart({{"prompt", "", "x"}, {"image", "a.png", png.substr(0, 40) + std::string(200, 'z')}}), 400,
       "image"},
      {"edits PNG bomb", E, kMultipart, multipart({{"prompt", "", "x"}, {"image", "bomb.png", png_bomb()}}),
       400, "image"},
      {"edits truncated JPEG", E, kMultipart,
       multipart({{"prompt", "", "x"}, {"image", "a.jpg", jpeg.substr(0, jpeg.size() / 2)}}), 400, "image"},
      {"edits truncated WebP", E, kMultipart,
       multipart({{"prompt", "", "x"}, {"image", "a.webp", webp.substr(0, webp.size() / 2)}}), 400, "image"},
      {"edits WebP bomb", E, kMultipart,
       multipart({{"prompt", "", "x"}, {"image", "bomb.webp", webp_bomb()}}), 400, "image"},
      {"edits five images", E, kMultipart,
       multipart({{"prompt", "", "x"},
                  {"image[]", "1.png", png},
                  {"image[]", "2.png", png},
                  {"image[]", "3.png", png},
                  {"image[]", "4.png", png},
                  {"image[]", "5.png", png}}),
       400, "image"},
      {"edits mask of another size", E, kMultipart,
       multipart(
           {{"prompt", "", "x"}, {"image", "a.png", png}, {"mask", "m.png", png_bytes(32, 64, 1, 2, 3)}}),
       400, "mask"},
      {"edits mask not an image", E, kMultipart,
       multipart({{"prompt", "", "x"}, {"image", "a.png", png}, {"mask", "m.png", "not an image"}}), 400,
       "mask"},
      {"edits two masks", E, kMultipart,
       multipart(
           {{"prompt", "", "x"}, {"image", "a.png", png}, {"mask", "m.png", png}, {"mask", "n.png", png}}),
       400, "mask"},
      // Refusals the engine makes when it looks at the image still name the field.
      {"edits image too small", E, kMultipart,
       multipart({{"prompt", "", "x"}, {"image", "a.png", png_bytes(32, 64, 1, 2, 3)}}), 400, "image"},
      {"edits image too elongated", E, kMultipart,
       multipart(
           {{"prompt", "", "x"}, {"size", "", "64x64"}, {"image", "a.png", png_bytes(64, 640, 1, 2, 3)}}),
       400, "image"},
      {"edits padding_mask_crop without a mask", E, kMultipart,
       multipart({{"prompt", "", "x"}, {"image", "a.png", png}, {"padding_mask_crop", "", "8"}}), 400,
       "padding_mask_crop"},
      {"edits padding_mask_crop negative", E, kMultipart,
       multipart({{"prompt", "", "x"},
                  {"image", "a.png", png},
                  {"mask", "m.png", png},
                  {"padding_mask_crop", "", "-1"}}),
       400, "padding_mask_crop"},
      {"edits strength on FLUX.2", E, kMultipart,
       multipart({{"prompt", "", "x"}, {"image", "a.png", png}, {"strength", "", "0.5"}}), 400, "strength"},
      {"edits n not a number", E, kMultipart,
       multipart({{"prompt", "", "x"}, {"image", "a.png", png}, {"n", "", "two"}}), 400, "n"},
      {"edits prompt not UTF-8", E, kMultipart,
       multipart({{"prompt", "", "\xff\xfe"}, {"image", "a.png", png}}), 400, "prompt"},
      {"edits multipart garbage", E, kMultipart, "this is not a multipart body at all", 400},
      {"edits multipart without end", E, kMultipart,
       "--XBOUNDARY\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\nx", 400},
  };
  std::vector<std::tuple<std::string, std::string, std::string>> many{{"prompt", "", "x"}};
  for (int i = 0; i < 20; ++i) many.emplace_back(std::string("f").append(std::to_string(i)), "", "v");
  c.push_back({"edits too many parts", E, kMultipart, multipart(many), 400});
  return c;
}

class BadRequests : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server::ServerOptions o = demo_options();
    o.api_key = kKey;
    o.max_body_bytes = size_t(1) << 20;
    o.read_timeout = std::chrono::seconds(1);
    server_ = start_server(o).release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void expect_serving() {
    auto h = client_for(server_->port())->Get("/health");
    ASSERT_TRUE(h) << "the server stopped answering";
    EXPECT_EQ(h->status, 200);
  }
  static server::ImageServer* server_;
};
server::ImageServer* BadRequests::server_ = nullptr;

TEST_F(BadRequests, EveryCaseGetsItsStatusInOpenAIsShape) {
  const std::vector<Case> cases = corpus();
  EXPECT_GE(cases.size(), 40u);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto client = client_for(server_->port());
    httplib::Result r = c.content_type.empty()
                            ? client->Post(c.path, c.headers, c.body.data(), c.body.size(), "")
                            : client->Post(c.path, c.headers, c.body, c.content_type);
    ASSERT_TRUE(r) << "no answer: " << httplib::to_string(r.error());
    EXPECT_EQ(r->status, c.status) << r->body.substr(0, 300);
    const json j = json_of(r);
    ASSERT_TRUE(j.is_object()) << r->body.substr(0, 300);
    ASSERT_TRUE(j.contains("error"));
    for (const char* key : {"message", "type", "param", "code"}) EXPECT_TRUE(j["error"].contains(key)) << key;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
    if (!c.param.empty()) {
      EXPECT_EQ(j["error"]["param"], json(c.param)) << j["error"]["message"].dump();
    }
    expect_serving();
  }
}

TEST_F(BadRequests, BrokenHttpFramingIsRefusedOrDropped) {
  const int port = server_->port();
  const std::string auth = "Authorization: Bearer " + kKey + "\r\n";
  // Each: the answer's status, or 0 for a dropped connection; never a hang or a crash.
  EXPECT_EQ(raw_request(port, "GARBAGE\r\n\r\n"), 400);
  EXPECT_EQ(raw_request(port, "GET /health HTTP/9.9\r\n\r\n") / 100, 4);
  EXPECT_EQ(raw_request(port, "POST /v1/images/generations HTTP/1.1\r\nHost: x\r\n" + auth +
                                  "Content-Type: application/json\r\nContent-Length: -5\r\n\r\n{}") /
                100,
            4);
  // A single header line over httplib's 8 KiB and many lines over --max-header-bytes.
  EXPECT_EQ(raw_request(port, "GET /health HTTP/1.1\r\nX-Long: " + std::string(9000, 'a') + "\r\n\r\n") / 100,
            4);
  std::string many = "GET /health HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 400; ++i) many += "X-H" + std::to_string(i) + ": " + std::string(50, 'b') + "\r\n";
  EXPECT_EQ(raw_request(port, many + "\r\n"), 431);
  // A body shorter than its Content-Length, then silence: a 400 after the read timeout.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(
      raw_request(port, "POST /v1/images/generations HTTP/1.1\r\nHost: x\r\n" + auth +
                            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"prompt\""),
      400);
  // Slow loris: headers that never end, the same.
  EXPECT_EQ(raw_request(port, "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: a"), 400);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8));
  expect_serving();
}

TEST_F(BadRequests, SlowLorisClientsDoNotStopOthers) {
  // Many connections trickling headers: the others are still served meanwhile.
  std::vector<int> fds;
  for (int i = 0; i < 16; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(server_->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    send(fd, "GET /health HTTP/1.1\r\nX-Slow: ", 30, MSG_NOSIGNAL);
    fds.push_back(fd);
  }
  auto c = client_for(server_->port());
  auto r = c->Post("/v1/images/generations", {{"Authorization", "Bearer " + kKey}},
                   R"({"prompt":"x","size":"32x32","num_inference_steps":1})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  for (int fd : fds) close(fd);
}

}  // namespace
}  // namespace fluxrt::test
