#pragma once
// A fluxrt server on the demo model over real loopback HTTP, for the server tests: started once
// per test binary on a free port, with httplib clients and small helpers to read its answers.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "io/image.h"
#include "server/server.h"

namespace fluxrt::test {

inline const std::string kDemoModel = (std::filesystem::path(FLUXRT_SOURCE_DIR) / "models" / "demo").string();

// The options every test server starts from: the demo model, any free loopback port, 2 steps.
inline server::ServerOptions demo_options() {
  server::ServerOptions o;
  o.model = kDemoModel;
  o.port = 0;
  o.request_defaults.steps = 2;
  o.max_width = o.max_height = 256;
  o.log_requests = false;
  return o;
}

inline std::unique_ptr<server::ImageServer> start_server(server::ServerOptions o) {
  auto s = std::make_unique<server::ImageServer>(std::move(o));
  s->start();
  s->wait_until_loaded();
  return s;
}

inline std::unique_ptr<httplib::Client> client_for(int port) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
  c->set_read_timeout(120, 0);
  c->set_connection_timeout(5, 0);
  return c;
}

// A figure of GET /metrics (the line `name value`); -1 when it is not there.
inline double metric_of(httplib::Client& client, const std::string& name) {
  const httplib::Result r = client.Get("/metrics");
  if (!r) return -1;
  const size_t at = r->body.find("\n" + name + " ");
  return at == std::string::npos ? -1.0 : std::stod(r->body.substr(at + name.size() + 2));
}

// Polls `holds` until it is true; false if it is not after `guard`. A test waits for the server's
// state, never for a time that suffices on a quiet machine: on 2 cores with 4 busy loops beside
// it, a step of the demo model took up to 5 s (18 ms quiet). The guard only turns a hang into a
// failure.
inline bool wait_until(const std::function<bool()>& holds,
                       std::chrono::seconds guard = std::chrono::seconds(600)) {
  const auto give_up = std::chrono::steady_clock::now() + guard;
  while (!holds()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// Polls GET /metrics until `holds(value of name)`.
inline bool wait_for_metric(httplib::Client& client, const std::string& name,
                            const std::function<bool(double)>& holds) {
  return wait_until([&] { return holds(metric_of(client, name)); });
}

// A suite of tests sharing one demo-model server, started once for the suite (the model loads
// once), each test with its own client.
class DemoServerSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = start_server(demo_options()).release(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  httplib::Result post(const nlohmann::json& body) {
    return client_->Post("/v1/images/generations", body.dump(), "application/json");
  }
  std::unique_ptr<httplib::Client> client_ = client_for(server_->port());
  static inline server::ImageServer* server_ = nullptr;
};

// The body as JSON; a null value when it is not JSON.
inline nlohmann::json json_of(const httplib::Result& r) {
  if (!r) return nullptr;
  return nlohmann::json::parse(r->body, nullptr, false);
}

inline std::string base64_decode(const std::string& in) {
  static const std::string kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (char c : in) {
    if (c == '=') break;
    const size_t v = kAlphabet.find(c);
    if (v == std::string::npos) continue;
    bits = (bits << 6) | uint32_t(v);
    if ((count += 6) >= 8) {
      count -= 8;
      out += char((bits >> count) & 0xFF);
    }
  }
  return out;
}

inline io::Image png_of(const std::string& bytes) {
  return io::decode_png(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

inline std::map<std::string, std::string> png_text_of(const std::string& bytes) {
  return io::decode_png_text(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

// A small PNG upload (a flat colour, or a gradient).
inline std::string png_bytes(int w, int h, uint8_t r, uint8_t g, uint8_t b) {
  io::Image image;
  image.width = w;
  image.height = h;
  image.channels = 3;
  image.pixels.resize(size_t(w) * h * 3);
  for (size_t i = 0; i < image.pixels.size(); i += 3) {
    image.pixels[i] = r;
    image.pixels[i + 1] = g;
    image.pixels[i + 2] = b;
  }
  const std::vector<uint8_t> png = io::encode_png(image);
  return std::string(png.begin(), png.end());
}

// The bytes as an image of any format fluxrt reads (PNG, JPEG, WebP).
inline io::Image image_of(const std::string& bytes) {
  return io::decode_image(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

// A smooth w x h RGB image (lossy uploads stay close to it).
inline io::Image gradient_image(int w, int h) {
  io::Image image;
  image.width = w;
  image.height = h;
  image.channels = 3;
  image.pixels.resize(size_t(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        image.pixels[(size_t(y) * w + x) * 3 + c] = uint8_t(x * 150 / w + y * 60 / h + c * 20);
  return image;
}

inline std::string as_string(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}
inline std::string jpeg_bytes(int w, int h) { return as_string(io::encode_jpeg(gradient_image(w, h), 90)); }
inline std::string webp_bytes(int w, int h, int quality = 80) {
  return as_string(io::encode_webp(gradient_image(w, h), quality));
}

// Parses an SSE body into (event, data) pairs.
inline std::vector<std::pair<std::string, nlohmann::json>> sse_events(const std::string& body) {
  std::vector<std::pair<std::string, nlohmann::json>> events;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string block = body.substr(pos, end - pos);
    pos = end + 2;
    std::string event, data;
    size_t line_start = 0;
    while (line_start < block.size()) {
      size_t line_end = block.find('\n', line_start);
      if (line_end == std::string::npos) line_end = block.size();
      const std::string line = block.substr(line_start, line_end - line_start);
      if (line.rfind("event: ", 0) == 0) event = line.substr(7);
      if (line.rfind("data: ", 0) == 0) data += line.substr(6);
      line_start = line_end + 1;
    }
    if (!event.empty()) events.emplace_back(event, nlohmann::json::parse(data, nullptr, false));
  }
  return events;
}

}  // namespace fluxrt::test
