// `fluxrt serve` itself (docs/server.md): options, binding, the model's load on its own thread,
// authentication, CORS, header limits, the JSON answers for what no route handles (404, 405,
// 413, ...), the per-endpoint request counter, and the drain on shutdown. The endpoints live one
// file per surface (routes.h); the jobs run on the library's fluxrt::Scheduler.
#include "server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "fluxrt/request_fields.h"
#include "output.h"
#include "routes.h"

namespace fluxrt::server {

using nlohmann::json;

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return false;
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  // Every byte of the longer string is looked at whatever matches, so the time says nothing
  // about how much of the key was right.
  const size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

namespace {

struct Route {
  const char* pattern;
  const char* methods;
};
// Every path served, for 405 (a known path, another method) against 404.
const Route kRoutes[] = {{"/", "GET"},
                         {"/health", "GET"},
                         {"/metrics", "GET"},
                         {"/v1/models", "GET"},
                         {"/v1/models/[^/]+", "GET"},
                         {"/v1/loras", "GET"},
                         {"/v1/images/generations", "POST"},
                         {"/v1/images/edits", "POST"},
                         {"/v1/images/[^/]+/content", "GET"}};

const char* allowed_methods(const std::string& path) {
  for (const Route& r : kRoutes)
    if (std::regex_match(path, std::regex(r.pattern))) return r.methods;
  return nullptr;
}

// The endpoint label for metrics: the route, not the path (ids would make a label per image).
std::string endpoint_of(const std::string& path) {
  for (const Route& r : kRoutes)
    if (std::regex_match(path, std::regex(r.pattern))) return r.pattern;
  return "other";
}

// What a request may ask of this server, as /v1/models lists it: the model's bounds with the
// server's own (--max-size, --max-images) where those are tighter, so a client can check before
// it sends.
nlohmann::json limits_object(const ApiLimits& l) {
  const RequestLimits& m = l.model;
  // The field table's rows this model takes, by their JSON names (FLUX.1 has two more).
  nlohmann::json taken = nlohmann::json::array();
  for (const RequestField& f : request_fields())
    if (request_field_taken(f, m)) taken.push_back(f.api);
  return {{"max_steps", m.max_steps},
          {"max_guidance", m.max_guidance},
          {"max_sequence_length", m.max_sequence_length},
          {"size_multiple", m.size_multiple},
          {"max_width", std::min(l.max_width, m.max_side)},
          {"max_height", std::min(l.max_height, m.max_side)},
          {"max_n", std::min(l.max_images, m.max_images_per_prompt)},
          {"max_prompt_chars", m.max_prompt_chars},
          {"max_reference_images", m.max_reference_images},
          {"init_image", m.init_image},
          {"mask", m.mask},
          {"mask_required", m.mask_required},
          {"fields", taken}};
}

}  // namespace

std::string ServerState::status_text() const {
  switch (status.load()) {
    case ServerStatus::Loading:
      return "loading";
    case ServerStatus::Ready:
      return "ok";
    case ServerStatus::Failed:
      return "error";
    case ServerStatus::Draining:
      return "draining";
  }
  return "error";
}

void ServerState::require_ready() const {
  switch (status.load()) {
    case ServerStatus::Ready:
      return;
    case ServerStatus::Loading:
      throw HttpError(503, "the model is still loading; GET /health says when it is ready", "",
                      "model_loading");
    case ServerStatus::Draining:
      throw HttpError(503, "the server is shutting down", "", "shutting_down");
    case ServerStatus::Failed:
      throw HttpError(503, "the model failed to load", "", "model_load_failed");
  }
}

SchedulerStats ServerState::scheduler_stats() const {
  // The scheduler exists from Ready on; shutdown drops it only once no handler runs.
  const ServerStatus s = status.load();
  return (s == ServerStatus::Ready || s == ServerStatus::Draining) && scheduler ? scheduler->stats()
                                                                                : SchedulerStats{};
}

class ImageServer::Impl {
 public:
  explicit Impl(ServerOptions options) : server_(std::move(options)) {}

  void start();
  void load();
  void shutdown();
  void wait_until_loaded();
  std::string status() const { return server_.status_text(); }
  int port() const { return port_; }

 private:
  void routes();
  void authorize(const httplib::Request& req) const;

  ServerState server_;
  httplib::Server http_;
  std::thread listen_thread_, load_thread_;
  int port_ = 0;
  std::condition_variable loaded_;
  std::once_flag shutdown_once_;
};

void ImageServer::Impl::start() {
  const ServerOptions& o = server_.options;
  if (!is_loopback_host(o.host) && o.api_key.empty() && !o.insecure_no_auth)
    throw Error(ErrorCode::InvalidArgument,
                "refusing to serve on " + o.host +
                    " (not a loopback address) without an API key: give --api-key (or FLUXRT_API_KEY), or "
                    "--insecure-no-auth to serve anyone who can reach the port");
  if (o.max_queue < 1 || o.max_batch < 1 || o.max_images < 1 || o.batch_window_ms < 0)
    throw Error(ErrorCode::InvalidArgument, "--max-queue, --max-batch and --max-images must be at least 1");
  if (o.max_width < 16 || o.max_height < 16)
    throw Error(ErrorCode::InvalidArgument, "--max-size is too small");
  // Checked before binding, so a mistyped folder is an error at start, not a 400 per request.
  if (!o.lora_dir.empty()) static_cast<void>(LoraDirectory(o.lora_dir, ""));

  const int threads = o.http_threads > 0 ? o.http_threads : o.max_queue + o.max_batch + 16;
  http_.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  http_.set_payload_max_length(o.max_body_bytes);
  http_.set_read_timeout(o.read_timeout);
  http_.set_write_timeout(std::chrono::seconds(30));
  // Short, so that a drain is not held up long by an idle keep-alive connection.
  http_.set_keep_alive_timeout(2);
  http_.set_keep_alive_max_count(100);
  routes();

  // cpp-httplib 0.11 listens with a backlog of 5, compiled into Debian's library: a burst of
  // clients connecting while the accept thread is not scheduled overflows it, and the kernel then
  // drops their handshakes (retried after 1, 3, 7... s, or lost). The socket is kept here as
  // httplib creates it, and listened on again with the system's limit once bound.
  int listen_fd = -1;
  http_.set_socket_options([&listen_fd](socket_t fd) {
    httplib::default_socket_options(fd);
    listen_fd = fd;  // the last one created is the one that bound
  });
  port_ = o.port == 0 ? http_.bind_to_any_port(o.host) : (http_.bind_to_port(o.host, o.port) ? o.port : -1);
  http_.set_socket_options(httplib::default_socket_options);  // the lambda's reference ends here
  if (port_ < 0)
    throw Error(ErrorCode::Io, "cannot listen on " + o.host + ":" + std::to_string(o.port) +
                                   " (in use, or not an address of this machine)");
  if (listen_fd >= 0 && ::listen(listen_fd, SOMAXCONN) != 0)
    std::fprintf(stderr, "fluxrt serve: cannot raise the listen backlog (%s)\n", std::strerror(errno));
  listen_thread_ = std::thread([this] { http_.listen_after_bind(); });
  load_thread_ = std::thread([this] { load(); });
}

void ImageServer::Impl::load() {
  try {
    server_.engine = server_.options.engine_factory
                         ? server_.options.engine_factory()
                         : std::make_unique<Engine>(server_.options.model, server_.options.engine);
    const ModelInfo info = server_.engine->info();
    std::string path = info.path.empty() ? server_.engine->model() : info.path;
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    std::string stem = path.substr(path.find_last_of('/') + 1);
    if (stem.size() > 12 && stem.ends_with(".safetensors")) stem.resize(stem.size() - 12);
    server_.model_id = !info.repo_id.empty() ? info.repo_id : stem;

    ApiLimits& l = server_.limits;
    l.max_width = server_.options.max_width;
    l.max_height = server_.options.max_height;
    l.max_images = server_.options.max_images;
    l.max_upload_pixels = server_.options.max_upload_pixels;
    l.model = server_.engine->limits();
    l.model_ids = {server_.model_id};
    if (server_.engine->model() != server_.model_id) l.model_ids.push_back(server_.engine->model());
    if (info.variant != "custom" && info.variant != "unknown" && info.variant != server_.model_id)
      l.model_ids.push_back(info.variant);
    l.output_formats = output_formats();
    l.defaults = server_.options.request_defaults;
    if (!server_.options.lora_dir.empty()) {
      server_.loras = std::make_unique<LoraDirectory>(server_.options.lora_dir, info.family);
      l.loras = true;
    }

    const std::string dtype = server_.engine->options().precision == Precision::F32 ? "f32" : "bf16";
    server_.model_object = {{"id", server_.model_id},
                            {"object", "model"},
                            {"created", int64_t(std::time(nullptr))},
                            {"owned_by", "fluxrt"},
                            {"family", info.family},
                            {"variant", info.variant},
                            {"description", info.description},
                            {"dtype", dtype},
                            {"limits", limits_object(l)}};

    SchedulerOptions s;
    s.max_queue = server_.options.max_queue;
    s.max_batch = server_.options.max_batch;
    s.batch_window = std::chrono::milliseconds(server_.options.batch_window_ms);
    server_.scheduler = std::make_unique<Scheduler>(*server_.engine, s);
    ServerStatus expected = ServerStatus::Loading;
    server_.status.compare_exchange_strong(expected, ServerStatus::Ready);
  } catch (const Error& e) {
    std::lock_guard<std::mutex> lock(server_.load_mutex);
    server_.load_error = e;
    server_.status = ServerStatus::Failed;
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(server_.load_mutex);
    server_.load_error.emplace(ErrorCode::Internal, e.what());
    server_.status = ServerStatus::Failed;
  }
  { std::lock_guard<std::mutex> lock(server_.load_mutex); }
  loaded_.notify_all();
}

void ImageServer::Impl::wait_until_loaded() {
  std::unique_lock<std::mutex> lock(server_.load_mutex);
  loaded_.wait(lock, [&] { return server_.status != ServerStatus::Loading; });
  if (server_.load_error) throw *server_.load_error;
}

void ImageServer::Impl::shutdown() {
  std::call_once(shutdown_once_, [this] {
    if (load_thread_.joinable()) load_thread_.join();  // a load cannot be stopped midway
    if (server_.status != ServerStatus::Failed) server_.status = ServerStatus::Draining;
    // Closes the listening socket at once; listen_after_bind then returns once every handler
    // has answered, and the handlers wait for their jobs, so what was accepted is finished.
    http_.stop();
    if (listen_thread_.joinable()) listen_thread_.join();
    if (server_.scheduler) server_.scheduler->drain();
    server_.scheduler.reset();
    server_.engine.reset();
  });
}

void ImageServer::Impl::authorize(const httplib::Request& req) const {
  if (server_.options.api_key.empty()) return;
  const std::string header = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (header.empty())
    throw HttpError(401, "missing API key: send the header 'Authorization: Bearer <key>'", "",
                    "invalid_api_key");
  const std::string given = header.compare(0, prefix.size(), prefix) == 0 ? header.substr(prefix.size()) : "";
  if (!constant_time_equal(given, server_.options.api_key))
    throw HttpError(401, "incorrect API key", "", "invalid_api_key");
}

void ImageServer::Impl::routes() {
  using httplib::Request;
  using httplib::Response;

  http_.set_pre_routing_handler([this](const Request& req, Response& res) {
    try {
      size_t header_bytes = 0;
      for (const auto& [k, v] : req.headers) header_bytes += k.size() + v.size() + 4;
      if (header_bytes > server_.options.max_header_bytes)
        throw HttpError(
            431,
            "the request headers are over " + std::to_string(server_.options.max_header_bytes) + " bytes", "",
            "headers_too_large");
      if (!server_.options.cors_origin.empty() && req.has_header("Origin")) {
        const std::string origin = req.get_header_value("Origin");
        if (server_.options.cors_origin == "*" || origin == server_.options.cors_origin) {
          res.set_header("Access-Control-Allow-Origin", server_.options.cors_origin == "*" ? "*" : origin);
          res.set_header("Vary", "Origin");
          if (req.method == "OPTIONS") {
            res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
            res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
            res.set_header("Access-Control-Max-Age", "600");
            res.status = 204;
            return httplib::Server::HandlerResponse::Handled;
          }
        }
      }
      if (req.path.rfind("/v1/", 0) == 0 || req.path == "/metrics") authorize(req);
    } catch (const HttpError& e) {
      send_error(res, e);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  // Statuses httplib sets itself (no route, a body over the limit, an unparsable request) get
  // the same JSON shape; what a handler answered is left alone.
  http_.set_error_handler(httplib::Server::HandlerWithResponse([](const Request& req, Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    HttpError e(res.status, "bad request");
    if (res.status == 404) {
      if (const char* methods = allowed_methods(req.path)) {
        res.set_header("Allow", methods);
        e = HttpError(405, req.method + " is not allowed on " + req.path + "; use " + methods, "",
                      "method_not_allowed");
      } else {
        e = HttpError(404, "no such endpoint: " + req.path, "", "not_found");
      }
    } else if (res.status == 413) {
      e = HttpError(413, "the request body is over this server's limit", "", "payload_too_large");
    } else if (res.status == 414) {
      e = HttpError(414, "the request URI is too long", "", "uri_too_long");
    } else if (res.status == 400) {
      e = HttpError(400, "malformed request (HTTP framing, headers or multipart body)", "",
                    "malformed_request");
    }
    send_error(res, e);
    return httplib::Server::HandlerResponse::Handled;
  }));

  http_.set_exception_handler([](const Request&, Response& res, std::exception_ptr) {
    send_error(res, HttpError(500, "internal error", "", "internal_error"));
  });

  // Counted before the response goes out (cpp-httplib calls a logger only after writing it), so a
  // client that reads /metrics right after an answer finds that answer counted.
  http_.set_post_routing_handler([this](const Request& req, Response& res) {
    server_.metrics.count_request(endpoint_of(req.path), res.status);
  });

  add_page_route(http_);
  add_model_routes(http_, server_);
  add_image_routes(http_, server_);
}

ImageServer::ImageServer(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
ImageServer::~ImageServer() { shutdown(); }
void ImageServer::start() { impl_->start(); }
int ImageServer::port() const { return impl_->port(); }
void ImageServer::wait_until_loaded() { impl_->wait_until_loaded(); }
void ImageServer::shutdown() { impl_->shutdown(); }
std::string ImageServer::status() const { return impl_->status(); }

}  // namespace fluxrt::server
