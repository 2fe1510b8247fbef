#pragma once
// `fluxrt serve`: an OpenAI-compatible image server over one fluxrt::Engine (docs/server.md): the
// HTTP API (fluxrt::HttpApi, include/fluxrt/http_api.h) behind cpp-httplib. Built on the public
// API alone; scripts/check-layering keeps it that way. The model loads once, on a thread of its
// own, while the server already answers GET /health with 503 "loading".
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

#include "fluxrt/http_api.h"

namespace fluxrt::server {

// The API's options (HttpApiOptions: the model, limits, key, CORS) and the socket's.
struct ServerOptions : HttpApiOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (port() says which)
  // A non-loopback host without an api_key is refused unless this is set.
  bool insecure_no_auth = false;
  int http_threads = 0;                   // 0: max_queue + max_batch + 16
  std::chrono::seconds read_timeout{10};  // a client that stops sending mid-request is dropped
};

class ImageServer {
 public:
  explicit ImageServer(ServerOptions options);
  ~ImageServer();  // shutdown()
  ImageServer(const ImageServer&) = delete;
  ImageServer& operator=(const ImageServer&) = delete;

  // Checks the options (InvalidArgument: a non-loopback host without a key and without
  // insecure_no_auth, HttpApi's checks: a bad limit, a missing LoRA folder), binds (Io when the
  // port is taken) and starts serving and loading. Returns once listening.
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
