// The HTTP side of `fluxrt serve`: routing, authentication, CORS, limits and the OpenAI response
// shapes (docs/server.md). Requests are parsed and checked on the HTTP thread (api.cpp), queued
// on the library's fluxrt::Scheduler and answered from the finished job; a streamed request gets
// its progress as Server-Sent Events while the job runs.
#include "server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "api.h"
#include "connection.h"
#include "fluxrt/image.h"
#include "fluxrt/scheduler.h"
#include "http_error.h"
#include "image_probe.h"
#include "image_store.h"
#include "lora_dir.h"
#include "metrics.h"
#include "output.h"
#include "page.h"

namespace fluxrt::server {

using nlohmann::json;

const char* error_type_for(int status) {
  if (status == 401) return "authentication_error";
  if (status == 429) return "rate_limit_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

std::string error_body(int status, const std::string& message, const std::string& param,
                       const std::string& code) {
  json e = {{"message", message},
            {"type", error_type_for(status)},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(nullptr) : json(code)}};
  return json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

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

enum class State { Loading, Ready, Failed, Draining };

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

void send_error(httplib::Response& res, const HttpError& e) {
  res.status = e.status();
  res.set_content(error_body(e.status(), e.what(), e.param(), e.code()), "application/json");
}

// The request parameter of this API that an engine error's GenerateRequest field comes from
// (Error::field), so a refusal found only when the engine looks at the request still names it.
std::string param_of_field(const std::string& field) {
  static const std::pair<const char*, const char*> kParams[] = {
      {"prompts", "prompt"},
      {"negative_prompt", "negative_prompt"},
      {"images_per_prompt", "n"},
      {"size", "size"},
      {"steps", "num_inference_steps"},
      {"guidance", "guidance_scale"},
      {"true_cfg", "true_cfg_scale"},
      {"max_sequence_length", "max_sequence_length"},
      {"reference_images", "image"},
      {"init_image", "image"},
      {"strength", "strength"},
      {"loras", "loras"},
  };
  for (const auto& [from, to] : kParams)
    if (field == from) return to;
  return "";
}

// What a failed generate call means for the client.
HttpError http_error_of(const Error& e) {
  // A LoRA the request chose that turns out not to fit the model (its shapes), or a file in the
  // LoRA folder that cannot be read: the request's choice, whatever the code.
  if (e.field() == "loras" && e.code() != ErrorCode::OutOfMemory && e.code() != ErrorCode::Cancelled &&
      e.code() != ErrorCode::Internal && e.code() != ErrorCode::Device)
    return HttpError(400, std::string("'loras': ") + e.what(), "loras", "invalid_lora");
  switch (e.code()) {
    case ErrorCode::InvalidArgument:
    case ErrorCode::Unsupported:
      return HttpError(400, e.what(), param_of_field(e.field()), "invalid_request");
    case ErrorCode::OutOfMemory:
      return HttpError(400, std::string("the request does not fit in this server's memory: ") + e.what(),
                       "size", "out_of_memory");
    case ErrorCode::Cancelled:
      return HttpError(499, e.what(), "", "cancelled");
    default:
      return HttpError(500, std::string(error_code_name(e.code())) + ": " + e.what(), "", "internal_error");
  }
}

// An engine error about a request's LoRA names the file by its path on the server; the client
// knows it by its name in the LoRA folder.
Error without_lora_paths(const Error& e, const std::vector<Lora>& loras) {
  std::string message = e.what();
  for (const Lora& l : loras)
    show_path_as(message, l.path, std::filesystem::path(l.path).filename().string());
  return Error(e.code(), message, e.field());
}

std::string sse_event(const std::string& name, const json& data) {
  return "event: " + name + "\ndata: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace

class ImageServer::Impl {
 public:
  explicit Impl(ServerOptions options)
      : options_(std::move(options)), store_(options_.url_ttl, options_.url_max_images) {}

  void start();
  void load();
  void shutdown();
  void wait_until_loaded();
  std::string status() const;
  int port() const { return port_; }

 private:
  void routes();
  void require_ready() const;
  void authorize(const httplib::Request& req) const;
  void handle_images(const httplib::Request& req, httplib::Response& res, bool edit);
  void handle_models(const httplib::Request& req, httplib::Response& res);
  void handle_loras(httplib::Response& res);
  void answer(const httplib::Request& req, httplib::Response& res, const ImageRequest& r,
              const std::shared_ptr<Job>& job);
  void stream(const httplib::Request& req, httplib::Response& res, const ImageRequest& r,
              const std::shared_ptr<Job>& job);
  json image_entries(const httplib::Request& req, const ImageRequest& r, const GenerateResult& result);
  json image_entry(const httplib::Request& req, const ImageRequest& r, const GeneratedImage& image);
  std::string url_base(const httplib::Request& req) const;

  ServerOptions options_;
  httplib::Server http_;
  std::thread listen_thread_, load_thread_;
  int port_ = 0;
  std::atomic<State> state_{State::Loading};
  mutable std::mutex load_mutex_;
  std::condition_variable loaded_;
  std::optional<Error> load_error_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Scheduler> scheduler_;
  ApiLimits limits_;
  std::unique_ptr<LoraDirectory> loras_;  // --lora-dir; null without
  std::string model_id_;
  json model_object_;
  HttpMetrics metrics_;
  ImageStore store_;
  std::once_flag shutdown_once_;
};

void ImageServer::Impl::start() {
  const ServerOptions& o = options_;
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
    engine_ = options_.engine_factory ? options_.engine_factory()
                                      : std::make_unique<Engine>(options_.model, options_.engine);
    const ModelInfo info = engine_->info();
    const ModelDefaults d = engine_->defaults();
    std::string path = info.path.empty() ? engine_->model() : info.path;
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    std::string stem = path.substr(path.find_last_of('/') + 1);
    if (stem.size() > 12 && stem.ends_with(".safetensors")) stem.resize(stem.size() - 12);
    model_id_ = !info.repo_id.empty() ? info.repo_id : stem;

    ApiLimits& l = limits_;
    l.max_width = options_.max_width;
    l.max_height = options_.max_height;
    l.max_images = options_.max_images;
    l.max_prompt_chars = options_.max_prompt_chars;
    l.max_steps = options_.max_steps;
    l.max_upload_pixels = options_.max_upload_pixels;
    l.size_multiple = d.size_multiple;
    l.flux1 = info.family == "flux.1";
    l.model_ids = {model_id_};
    if (engine_->model() != model_id_) l.model_ids.push_back(engine_->model());
    if (info.variant != "custom" && info.variant != "unknown" && info.variant != model_id_)
      l.model_ids.push_back(info.variant);
    l.output_formats = output_formats();
    l.default_width = options_.default_width;
    l.default_height = options_.default_height;
    l.default_steps = options_.default_steps;
    l.default_guidance = options_.default_guidance;
    if (!options_.lora_dir.empty()) {
      loras_ = std::make_unique<LoraDirectory>(options_.lora_dir, info.family);
      l.loras = true;
    }

    const std::string dtype = engine_->options().precision == Precision::F32 ? "f32" : "bf16";
    model_object_ = {{"id", model_id_},
                     {"object", "model"},
                     {"created", int64_t(std::time(nullptr))},
                     {"owned_by", "fluxrt"},
                     {"family", info.family},
                     {"variant", info.variant},
                     {"description", info.description},
                     {"dtype", dtype}};

    SchedulerOptions s;
    s.max_queue = options_.max_queue;
    s.max_batch = options_.max_batch;
    s.batch_window = std::chrono::milliseconds(options_.batch_window_ms);
    scheduler_ = std::make_unique<Scheduler>(*engine_, s);
    State expected = State::Loading;
    state_.compare_exchange_strong(expected, State::Ready);
  } catch (const Error& e) {
    std::lock_guard<std::mutex> lock(load_mutex_);
    load_error_ = e;
    state_ = State::Failed;
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(load_mutex_);
    load_error_.emplace(ErrorCode::Internal, e.what());
    state_ = State::Failed;
  }
  { std::lock_guard<std::mutex> lock(load_mutex_); }
  loaded_.notify_all();
}

void ImageServer::Impl::wait_until_loaded() {
  std::unique_lock<std::mutex> lock(load_mutex_);
  loaded_.wait(lock, [&] { return state_ != State::Loading; });
  if (load_error_) throw *load_error_;
}

std::string ImageServer::Impl::status() const {
  switch (state_.load()) {
    case State::Loading:
      return "loading";
    case State::Ready:
      return "ok";
    case State::Failed:
      return "error";
    case State::Draining:
      return "draining";
  }
  return "error";
}

void ImageServer::Impl::shutdown() {
  std::call_once(shutdown_once_, [this] {
    if (load_thread_.joinable()) load_thread_.join();  // a load cannot be stopped midway
    if (state_ != State::Failed) state_ = State::Draining;
    // Closes the listening socket at once; listen_after_bind then returns once every handler
    // has answered, and the handlers wait for their jobs, so what was accepted is finished.
    http_.stop();
    if (listen_thread_.joinable()) listen_thread_.join();
    if (scheduler_) scheduler_->drain();
    scheduler_.reset();
    engine_.reset();
  });
}

void ImageServer::Impl::require_ready() const {
  switch (state_.load()) {
    case State::Ready:
      return;
    case State::Loading:
      throw HttpError(503, "the model is still loading; GET /health says when it is ready", "",
                      "model_loading");
    case State::Draining:
      throw HttpError(503, "the server is shutting down", "", "shutting_down");
    case State::Failed:
      throw HttpError(503, "the model failed to load", "", "model_load_failed");
  }
}

void ImageServer::Impl::authorize(const httplib::Request& req) const {
  if (options_.api_key.empty()) return;
  const std::string header = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (header.empty())
    throw HttpError(401, "missing API key: send the header 'Authorization: Bearer <key>'", "",
                    "invalid_api_key");
  const std::string given = header.compare(0, prefix.size(), prefix) == 0 ? header.substr(prefix.size()) : "";
  if (!constant_time_equal(given, options_.api_key))
    throw HttpError(401, "incorrect API key", "", "invalid_api_key");
}

void ImageServer::Impl::routes() {
  using httplib::Request;
  using httplib::Response;
  // Every handler's HttpError becomes its JSON answer here; anything else is a 500.
  auto guarded = [](auto fn) {
    return [fn](const Request& req, Response& res) {
      try {
        fn(req, res);
      } catch (const HttpError& e) {
        send_error(res, e);
      } catch (const Error& e) {
        send_error(res, http_error_of(e));
      } catch (const std::exception& e) {
        send_error(res, HttpError(500, std::string("internal error: ") + e.what(), "", "internal_error"));
      }
    };
  };

  http_.set_pre_routing_handler([this](const Request& req, Response& res) {
    try {
      size_t header_bytes = 0;
      for (const auto& [k, v] : req.headers) header_bytes += k.size() + v.size() + 4;
      if (header_bytes > options_.max_header_bytes)
        throw HttpError(
            431, "the request headers are over " + std::to_string(options_.max_header_bytes) + " bytes", "",
            "headers_too_large");
      if (!options_.cors_origin.empty() && req.has_header("Origin")) {
        const std::string origin = req.get_header_value("Origin");
        if (options_.cors_origin == "*" || origin == options_.cors_origin) {
          res.set_header("Access-Control-Allow-Origin", options_.cors_origin == "*" ? "*" : origin);
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
    metrics_.count_request(endpoint_of(req.path), res.status);
  });

  http_.Get("/",
            [](const Request&, Response& res) { res.set_content(index_page(), "text/html; charset=utf-8"); });

  http_.Get("/health", [this](const Request&, Response& res) {
    const std::string s = status();
    json body = {{"status", s}};
    if (s == "ok") body["model"] = model_id_;
    if (s == "error") {
      std::lock_guard<std::mutex> lock(load_mutex_);
      if (load_error_) body["message"] = load_error_->what();
    }
    res.status = s == "ok" ? 200 : 503;
    res.set_content(body.dump(), "application/json");
  });

  http_.Get("/metrics", [this](const Request&, Response& res) {
    // The scheduler exists once the model has loaded, until shutdown ends the handlers.
    const State state = state_.load();
    const SchedulerStats stats = (state == State::Ready || state == State::Draining) && scheduler_
                                     ? scheduler_->stats()
                                     : SchedulerStats{};
    res.set_content(metrics_text(metrics_, stats), "text/plain; version=0.0.4; charset=utf-8");
  });

  http_.Get("/v1/models", guarded([this](const Request& req, Response& res) { handle_models(req, res); }));
  http_.Get(R"(/v1/models/([^/]+))",
            guarded([this](const Request& req, Response& res) { handle_models(req, res); }));

  http_.Get("/v1/loras", guarded([this](const Request&, Response& res) { handle_loras(res); }));

  http_.Post("/v1/images/generations",
             guarded([this](const Request& req, Response& res) { handle_images(req, res, false); }));
  http_.Post("/v1/images/edits",
             guarded([this](const Request& req, Response& res) { handle_images(req, res, true); }));

  http_.Get(R"(/v1/images/([^/]+)/content)", guarded([this](const Request& req, Response& res) {
              const std::string id = req.matches[1];
              std::optional<ImageStore::Entry> entry =
                  std::regex_match(id, std::regex("[0-9a-f]{32}")) ? store_.get(id) : std::nullopt;
              if (!entry)
                throw HttpError(404,
                                "no image with id '" + id + "' (images are kept " +
                                    std::to_string(options_.url_ttl.count()) + " s, the latest " +
                                    std::to_string(options_.url_max_images) + ")",
                                "", "not_found");
              res.set_header("Cache-Control", "private, max-age=" + std::to_string(options_.url_ttl.count()));
              res.set_content(entry->bytes, entry->content_type);
            }));
}

void ImageServer::Impl::handle_models(const httplib::Request& req, httplib::Response& res) {
  require_ready();
  if (req.matches.size() > 1) {
    if (req.matches[1] != model_id_)
      throw HttpError(404, "no model '" + req.matches[1].str() + "'", "", "model_not_found");
    res.set_content(model_object_.dump(), "application/json");
    return;
  }
  res.set_content(json{{"object", "list"}, {"data", json::array({model_object_})}}.dump(),
                  "application/json");
}

// GET /v1/loras: what `loras` may name, in the list shape of /v1/models.
void ImageServer::Impl::handle_loras(httplib::Response& res) {
  require_ready();
  json data = json::array();
  if (loras_)
    for (const LoraDirectory::Entry& e : loras_->list()) {
      json item = {{"id", e.name}, {"object", "lora"}, {"bytes", e.bytes}, {"usable", e.error.empty()}};
      if (e.error.empty()) {
        item["format"] = e.format;
        item["family"] = e.family;
        item["ranks"] = e.ranks;
      } else {
        item["error"] = e.error;
      }
      data.push_back(std::move(item));
    }
  res.set_content(
      json{{"object", "list"}, {"data", data}}.dump(-1, ' ', false, json::error_handler_t::replace),
      "application/json");
}

void ImageServer::Impl::handle_images(const httplib::Request& req, httplib::Response& res, bool edit) {
  require_ready();
  const std::string type = req.get_header_value("Content-Type");
  auto media_is = [&](const char* want) {
    std::string t = type.substr(0, type.find(';'));
    t.erase(std::remove(t.begin(), t.end(), ' '), t.end());
    std::transform(t.begin(), t.end(), t.begin(), ::tolower);
    return t == want;
  };
  ImageRequest r;
  if (!edit) {
    if (!media_is("application/json"))
      throw HttpError(415, "send the request as 'Content-Type: application/json' (got '" + type + "')", "",
                      "unsupported_media_type");
    r = parse_generation(req.body, limits_);
  } else {
    if (!media_is("multipart/form-data"))
      throw HttpError(415, "send the request as 'Content-Type: multipart/form-data' (got '" + type + "')", "",
                      "unsupported_media_type");
    if (int(req.files.size()) > options_.max_parts)
      throw HttpError(400,
                      "the form has " + std::to_string(req.files.size()) + " parts, over the limit of " +
                          std::to_string(options_.max_parts),
                      "", "too_many_parts");
    std::vector<Part> parts;
    for (const auto& [name, f] : req.files) parts.push_back({name, f.filename, f.content_type, f.content});
    r = parse_edit(parts, limits_);
  }
  if (loras_) r.request.loras = loras_->resolve(r.loras);

  // What the engine will make of it: the size an edit takes from its first image must fit too.
  RequestPlan plan;
  try {
    plan = engine_->plan(r.request);
  } catch (const Error& e) {
    throw http_error_of(e);
  }
  if (plan.width > options_.max_width || plan.height > options_.max_height)
    throw HttpError(400,
                    "the output would be " + std::to_string(plan.width) + "x" + std::to_string(plan.height) +
                        ", over this server's limit of " + std::to_string(options_.max_width) + "x" +
                        std::to_string(options_.max_height) + "; give 'size'",
                    "size", "invalid_value");

  // partial_images previews spread evenly over the steps that run (1 of 4 steps: after step 2).
  JobOptions job_options;
  std::vector<int>& previews = job_options.preview_steps;
  if (r.stream)
    for (int k = 1; k <= r.partial_images; ++k) {
      const int step = std::clamp(int(std::lround(double(k) * plan.steps_run / (r.partial_images + 1))), 1,
                                  std::max(plan.steps_run, 1));
      if (std::find(previews.begin(), previews.end(), step) == previews.end()) previews.push_back(step);
    }
  // With --max-batch, requests of one Engine::batch_key share a denoising loop.
  const std::shared_ptr<Job> job = scheduler_->submit(r.request, std::move(job_options));
  if (!job) {
    if (state_ == State::Draining) throw HttpError(503, "the server is shutting down", "", "shutting_down");
    const SchedulerStats stats = scheduler_->stats();
    const double wait = stats.mean_call_seconds * (stats.queued + 1);
    res.set_header("Retry-After", std::to_string(std::clamp(int(std::ceil(wait)), 1, 600)));
    throw HttpError(429,
                    "the queue is full (" + std::to_string(options_.max_queue) + " requests); retry later",
                    "", "queue_full");
  }
  if (r.stream)
    stream(req, res, r, job);
  else
    answer(req, res, r, job);
}

std::string ImageServer::Impl::url_base(const httplib::Request& req) const {
  const std::string host = req.get_header_value("Host");
  // Only a plausible host:port goes into the URL: the header is the client's to choose.
  if (!host.empty() && std::regex_match(host, std::regex(R"([A-Za-z0-9.\-:\[\]]{1,255})")))
    return "http://" + host;
  return "";
}

json ImageServer::Impl::image_entry(const httplib::Request& req, const ImageRequest& r,
                                    const GeneratedImage& image) {
  Encoded encoded = encode_output(image, r.output_format, r.output_compression);
  json entry = {{"revised_prompt", nullptr}, {"seed", image.metadata.seed}};
  if (r.url)
    entry["url"] = url_base(req) + "/v1/images/" +
                   store_.put(std::move(encoded.bytes), encoded.content_type) + "/content";
  else
    entry["b64_json"] = base64(encoded.bytes);
  return entry;
}

json ImageServer::Impl::image_entries(const httplib::Request& req, const ImageRequest& r,
                                      const GenerateResult& result) {
  json data = json::array();
  for (const GeneratedImage& image : result.images) data.push_back(image_entry(req, r, image));
  return data;
}

// A non-streamed answer: wait for the job, watching the connection so that a client that goes
// away cancels it.
void ImageServer::Impl::answer(const httplib::Request& req, httplib::Response& res, const ImageRequest& r,
                               const std::shared_ptr<Job>& job) {
  const ClientConnection connection(req.remote_addr, req.remote_port, req.local_port);
  Job::State s = job->state();
  while (!s.done) {
    s = job->wait(s.version, std::chrono::milliseconds(50));
    if (!s.done && connection.closed()) {
      // Nobody reads the answer; the engine stops at its next step (or never starts the job).
      scheduler_->abandon(job);
      throw HttpError(499, "the client closed the connection", "", "cancelled");
    }
  }
  if (job->error()) throw http_error_of(without_lora_paths(*job->error(), r.request.loras));
  const GenerateResult& result = job->results().front();
  json body = {{"created", int64_t(std::time(nullptr))},
               {"data", image_entries(req, r, result)},
               {"size", std::to_string(result.width) + "x" + std::to_string(result.height)},
               {"output_format", r.output_format}};
  // W3C Server-Timing: how long the request waited in the queue and how long it ran, so a client
  // can tell a busy server from a slow one.
  auto ms = [](Job::Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  char timing[96];
  std::snprintf(timing, sizeof timing, "queue;dur=%.1f, generate;dur=%.1f",
                ms(s.started_at - job->enqueued()), ms(s.done_at - s.started_at));
  res.set_header("Server-Timing", timing);
  res.set_content(body.dump(), "application/json");
}

// stream: true. OpenAI's event names: <kind>.partial_image per denoising step (with the step and
// the total; b64_json a PNG preview of the first image at the steps partial_images spreads over
// the loop, once the engine has finished an image to fit its preview colours from, else empty),
// then <kind>.completed per image, or an `error` event when the job fails after the 200 went out.
void ImageServer::Impl::stream(const httplib::Request& req, httplib::Response& res, const ImageRequest& r,
                               const std::shared_ptr<Job>& job) {
  const std::string kind = r.edit ? "image_edit" : "image_generation";
  const std::string size =
      r.request.width ? std::to_string(*r.request.width) + "x" + std::to_string(*r.request.height) : "auto";
  struct StreamState {
    uint64_t version = 0;
    int sent_step = 0;
    bool finished = false;
  };
  auto progress = std::make_shared<StreamState>();
  auto connection = std::make_shared<ClientConnection>(req.remote_addr, req.remote_port, req.local_port);
  // httplib keeps the Request alive while the provider runs; these are what the events need.
  const httplib::Request* request = &req;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, job, r, kind, size, progress, connection, request](size_t, httplib::DataSink& sink) {
        Job::State s = job->wait(progress->version, std::chrono::milliseconds(100));
        progress->version = s.version;
        if (!s.done && connection->closed()) return false;  // the releaser cancels
        const int64_t now = int64_t(std::time(nullptr));
        while (progress->sent_step < s.step) {
          const int step = ++progress->sent_step;
          // A preview (PNG) at the steps partial_images asked for, once the engine can make one.
          const std::optional<Image> preview = job->preview_at(step);
          std::string b64;
          if (preview) {
            const std::vector<uint8_t> png = encode_png(*preview);
            b64 = base64(std::string(png.begin(), png.end()));
          }
          json e = {{"type", kind + ".partial_image"},
                    {"step", step},
                    {"steps", s.total},
                    {"partial_image_index", step - 1},
                    {"b64_json", b64},
                    {"created_at", now},
                    {"size", size},
                    {"output_format", r.output_format},
                    {"background", "opaque"},
                    {"quality", "auto"}};
          const std::string text = sse_event(kind + ".partial_image", e);
          if (!sink.write(text.data(), text.size())) return false;
        }
        if (!s.done) return true;
        std::string text;
        if (job->error()) {
          const HttpError e = http_error_of(without_lora_paths(*job->error(), r.request.loras));
          text = sse_event(
              "error",
              json{{"type", "error"},
                   {"error", json::parse(error_body(e.status(), e.what(), e.param(), e.code()))["error"]}});
        } else {
          const GenerateResult& result = job->results().front();
          const std::string out_size = std::to_string(result.width) + "x" + std::to_string(result.height);
          for (size_t i = 0; i < result.images.size(); ++i) {
            json e = image_entry(*request, r, result.images[i]);
            e.erase("revised_prompt");
            e["type"] = kind + ".completed";
            e["index"] = i;
            e["created_at"] = now;
            e["size"] = out_size;
            e["output_format"] = r.output_format;
            e["background"] = "opaque";
            e["quality"] = "auto";
            e["usage"] = {{"input_tokens", 0},
                          {"output_tokens", 0},
                          {"total_tokens", 0},
                          {"input_tokens_details", {{"image_tokens", 0}, {"text_tokens", 0}}}};
            text += sse_event(kind + ".completed", e);
          }
        }
        progress->finished = true;
        if (!sink.write(text.data(), text.size())) return false;
        sink.done();
        return true;
      },
      [this, job, progress](bool) {
        if (!progress->finished) scheduler_->abandon(job);
      });
}

ImageServer::ImageServer(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
ImageServer::~ImageServer() { shutdown(); }
void ImageServer::start() { impl_->start(); }
int ImageServer::port() const { return impl_->port(); }
void ImageServer::wait_until_loaded() { impl_->wait_until_loaded(); }
void ImageServer::shutdown() { impl_->shutdown(); }
std::string ImageServer::status() const { return impl_->status(); }

}  // namespace fluxrt::server
