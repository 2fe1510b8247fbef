#pragma once
// `fluxrt serve`: an OpenAI-compatible image server over one fluxrt::Engine (docs/server.md).
// Built on the public API (include/fluxrt/) and cpp-httplib alone; scripts/check-layering keeps
// it that way. The model loads once, on a thread of its own, while the server already answers
// GET /health with 503 "loading".
//
//   fluxrt::server::ServerOptions options;  options.model = "models/demo";  options.port = 0;
//   fluxrt::server::ImageServer server(options);
//   server.start();                 // bound and listening; the model loads meanwhile
//   server.wait_until_loaded();     // throws the load's Error
//   ... http://127.0.0.1:<server.port()>/v1/images/generations ...
//   server.shutdown();              // stop accepting, finish what runs
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "fluxrt/engine.h"

namespace fluxrt::server {

struct ServerOptions {
  std::string model;  // as fluxrt::Engine takes it
  EngineOptions engine;
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: any free port (port() says which)
  std::string api_key;  // "" accepts every request (loopback only, unless insecure_no_auth)
  bool insecure_no_auth = false;
  std::string cors_origin;  // "" sends no CORS headers; "*" or one origin

  int max_queue = 32;  // requests waiting; beyond, 429 with Retry-After
  int max_batch = 1;   // images per engine call
  int batch_window_ms = 0;
  int max_width = 2048, max_height = 2048;  // --max-size
  int max_images = 4;                       // n per request
  // --lora-dir: the folder whose .safetensors LoRAs requests may name in `loras` (lora_dir.h);
  // "" refuses `loras`.
  std::string lora_dir;

  // What every request starts from (fluxrt::Run::request: the run preset's and the flags' fields,
  // as `fluxrt generate` has them); its unset fields are the model's.
  GenerateRequest request_defaults;

  size_t max_body_bytes = size_t(64) << 20;
  size_t max_header_bytes = size_t(16) << 10;  // all header lines together
  int max_parts = 16;                          // multipart parts of an edit
  uint64_t max_upload_pixels = 4096ull * 4096ull;
  std::chrono::seconds url_ttl{3600};     // response_format url: how long an image is kept
  size_t url_max_images = 256;            // and how many at most
  int http_threads = 0;                   // 0: max_queue + max_batch + 16
  std::chrono::seconds read_timeout{10};  // a client that stops sending mid-request is dropped
  bool log_requests = true;               // one stderr line per generation request

  // Tests: makes the engine instead of Engine(model, engine), e.g. to hold /health at loading.
  std::function<std::unique_ptr<Engine>()> engine_factory;
};

class ImageServer {
 public:
  explicit ImageServer(ServerOptions options);
  ~ImageServer();  // shutdown()
  ImageServer(const ImageServer&) = delete;
  ImageServer& operator=(const ImageServer&) = delete;

  // Checks the options (InvalidArgument: a non-loopback host without a key and without
  // insecure_no_auth, a bad limit), binds (Io when the port is taken) and starts serving and
  // loading. Returns once listening.
  void start();
  int port() const;
  // Blocks until the model is loaded; rethrows the load's Error when it failed.
  void wait_until_loaded();
  // Stops accepting connections, finishes the queued and running requests (their responses
  // are written), then returns. Idempotent; safe to call from any thread but a handler's.
  void shutdown();
  // "loading", "ok", "error" or "draining".
  std::string status() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether `host` names this machine only (127.0.0.0/8, ::1, localhost).
bool is_loopback_host(const std::string& host);

// Equal strings, in time that depends on the lengths only (API key checks).
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace fluxrt::server
