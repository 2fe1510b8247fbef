#pragma once
// The HTTP API of `fluxrt serve` (docs/server.md) as a function from a request to a response, with
// no socket: the OpenAI images API, /v1/models, /v1/loras, /health, /metrics and the web page, with
// their validation, error bodies, authentication, CORS and Server-Sent Events. `fluxrt serve` puts
// it behind its HTTP server (apps/server/server.cpp); the Python package hands it the requests of
// another one (fluxrt.HttpApi, fluxrt.ray on Ray Serve), so every front end answers alike.
//
//   fluxrt::HttpApiOptions options;  options.model = "models/demo";
//   fluxrt::HttpApi api(options);
//   api.start_loading();            // the model loads on a thread of its own
//   api.wait_until_loaded();        // throws the load's Error
//   fluxrt::HttpResponse r = api.handle({"POST", "/v1/images/generations",
//                                        {{"Content-Type", "application/json"}}, R"({"prompt": "a fox"})"});
//
// Implemented in apps/server (library fluxrt_http_api, on the public API alone).
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fluxrt/engine.h"

namespace fluxrt {

// What the API needs to know; `fluxrt serve`'s flags (docs/server.md) set the same fields.
struct HttpApiOptions {
  std::string model;  // as fluxrt::Engine takes it
  EngineOptions engine;
  std::string api_key;      // "" accepts every request
  std::string cors_origin;  // "" sends no CORS headers; "*" or one origin

  int max_queue = 32;  // requests waiting; beyond, 429 with Retry-After
  int max_batch = 1;   // images per engine call
  int batch_window_ms = 0;
  int max_width = 2048, max_height = 2048;  // --max-size
  int max_images = 4;                       // n per request
  // --lora-dir: the folder whose .safetensors LoRAs requests may name in `loras`; "" refuses them.
  std::string lora_dir;

  // What every request starts from (fluxrt::Run::request: the run preset's and the flags' fields,
  // as `fluxrt generate` has them); its unset fields are the model's.
  GenerateRequest request_defaults;

  size_t max_body_bytes = size_t(64) << 20;
  size_t max_header_bytes = size_t(16) << 10;  // all header lines together
  int max_parts = 16;                          // multipart parts of an edit
  uint64_t max_upload_pixels = 4096ull * 4096ull;
  std::chrono::seconds url_ttl{3600};  // response_format url: how long an image is kept
  size_t url_max_images = 256;         // and how many at most
  bool log_requests = true;            // one stderr line per generation request

  // Tests: makes the engine instead of Engine(model, engine), e.g. to hold /health at loading.
  std::function<std::unique_ptr<Engine>()> engine_factory;
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// A part of a multipart/form-data body (POST /v1/images/edits), as the HTTP server parsed it.
struct HttpFormPart {
  std::string name, filename, content_type, content;
};

struct HttpRequest {
  std::string method;   // "GET", "POST", "OPTIONS", ...
  std::string path;     // without the query string
  HttpHeaders headers;  // names in any case; Host names the server in `url` answers
  std::string body;     // the raw body; empty for a multipart form, which comes as `parts`
  std::vector<HttpFormPart> parts;
  // Polled while a request waits for its image: true (the client went away) cancels its job.
  std::function<bool()> client_gone;
};

// The body of a streamed answer (text/event-stream): the events of a job as it runs. Dropping it
// before it is finished cancels the job at its next denoising step.
class HttpResponseStream {
 public:
  virtual ~HttpResponseStream() = default;
  // Waits up to about 100 ms for progress and appends the events it brings to `chunk` (maybe
  // none). Returns false once the body is complete: `chunk` then holds its last events.
  virtual bool next(std::string& chunk) = 0;
};

struct HttpResponse {
  int status = 200;
  HttpHeaders headers;  // Content-Type among them
  std::string body;
  std::shared_ptr<HttpResponseStream> stream;  // set for a streamed answer; `body` is then empty
};

class HttpApi {
 public:
  // Checks the options (InvalidArgument: a limit under 1, a LoRA folder that is not there).
  explicit HttpApi(HttpApiOptions options);
  ~HttpApi();  // drain()
  HttpApi(const HttpApi&) = delete;
  HttpApi& operator=(const HttpApi&) = delete;

  // Loads the model on a thread of its own; meanwhile /health answers 503 "loading" and the
  // image routes 503. Once only.
  void start_loading();
  // Blocks until the model is loaded; rethrows the load's Error when it failed.
  void wait_until_loaded();
  // "loading", "ok", "error" or "draining".
  std::string status() const;

  // Answers one request. Never throws: every refusal is an HttpResponse with OpenAI's error body.
  // Blocks while the request's image is made (a streamed answer returns at once with `stream`).
  // Thread-safe: call it from as many threads as requests run at once.
  HttpResponse handle(const HttpRequest& request);

  // The checks handle() starts with that need only the request line and headers (their size,
  // a CORS preflight, the API key): a transport may run them before it reads the body. True when
  // they answered the request (`response` is then the answer, counted on /metrics); false when
  // it goes on to handle().
  bool screen(const HttpRequest& request, HttpResponse& response);
  // The transport's own refusals (a body over its limit, unparsable framing) in the same JSON
  // shape, counted on /metrics: 413, 414, 400, or 404/405 for a path.
  HttpResponse transport_error(int status, const std::string& method, const std::string& path);

  // Waits for a load under way, then new requests get 503 "shutting_down"; what was accepted
  // still runs.
  void begin_drain();
  // begin_drain(), then waits for the queued and running jobs and releases the engine.
  // Idempotent.
  void drain();

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace fluxrt
