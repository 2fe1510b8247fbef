// fluxrt::HttpApi (include/fluxrt/http_api.h): the model's load on its own thread, the checks every
// request passes first (header size, CORS, the API key), the routing with its JSON answers for what
// no route handles (404, 405) and for whatever a handler throws, the per-endpoint request counter,
// and the drain. The endpoints live one file per surface (routes.h); the jobs run on the library's
// fluxrt::Scheduler. No socket: server.cpp and the Python package are its transports.
#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "fluxrt/request_fields.h"
#include "output.h"
#include "routes.h"
#include "server.h"

namespace fluxrt {

using server::HttpError;
using server::ServerState;
using server::ServerStatus;

namespace server {

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

std::string header_value(const HttpHeaders& headers, const std::string& name) {
  for (const auto& [key, value] : headers)
    if (std::equal(key.begin(), key.end(), name.begin(), name.end(),
                   [](char a, char b) { return std::tolower(uint8_t(a)) == std::tolower(uint8_t(b)); }))
      return value;
  return "";
}

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
  // The scheduler exists from Ready on; drain() drops it only once no job runs.
  const ServerStatus s = status.load();
  return (s == ServerStatus::Ready || s == ServerStatus::Draining) && scheduler ? scheduler->stats()
                                                                                : SchedulerStats{};
}

}  // namespace server

namespace {

// What a request may ask of this server, as /v1/models lists it: the model's bounds with the
// server's own (--max-size, --max-images) where those are tighter, so a client can check before
// it sends.
nlohmann::json limits_object(const server::ApiLimits& l) {
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

class HttpApi::Impl {
 public:
  explicit Impl(HttpApiOptions options) : state_(std::make_shared<ServerState>(std::move(options))) {
    server::add_page_route(routes_);
    server::add_model_routes(routes_, state_);
    server::add_image_routes(routes_, state_);
  }

  void load();
  void authorize(const HttpRequest& req) const;
  bool screen(const HttpRequest& req, HttpResponse& res);
  HttpResponse handle(const HttpRequest& req);
  HttpResponse transport_error(int status, const std::string& method, const std::string& path);
  // The methods a path is served with ("GET", "POST"), "" for an unknown path.
  std::string allowed_methods(const std::string& path) const;
  std::string endpoint_of(const std::string& path) const;

  std::shared_ptr<ServerState> state_;
  server::RouteTable routes_;
  std::thread load_thread_;
  std::once_flag load_once_, begin_drain_once_, drain_once_;
  std::condition_variable loaded_;
};

void HttpApi::Impl::load() {
  ServerState& s = *state_;
  try {
    s.engine = s.options.engine_factory ? s.options.engine_factory()
                                        : std::make_unique<Engine>(s.options.model, s.options.engine);
    const ModelInfo info = s.engine->info();
    std::string path = info.path.empty() ? s.engine->model() : info.path;
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    std::string stem = path.substr(path.find_last_of('/') + 1);
    if (stem.size() > 12 && stem.ends_with(".safetensors")) stem.resize(stem.size() - 12);
    s.model_id = !info.repo_id.empty() ? info.repo_id : stem;

    server::ApiLimits& l = s.limits;
    l.max_width = s.options.max_width;
    l.max_height = s.options.max_height;
    l.max_images = s.options.max_images;
    l.max_upload_pixels = s.options.max_upload_pixels;
    l.model = s.engine->limits();
    l.model_ids = {s.model_id};
    if (s.engine->model() != s.model_id) l.model_ids.push_back(s.engine->model());
    if (info.variant != "custom" && info.variant != "unknown" && info.variant != s.model_id)
      l.model_ids.push_back(info.variant);
    l.output_formats = server::output_formats();
    l.defaults = s.options.request_defaults;
    if (!s.options.lora_dir.empty()) {
      s.loras = std::make_unique<server::LoraDirectory>(s.options.lora_dir, info.family);
      l.loras = true;
    }

    const std::string dtype = precision_name(s.engine->options().precision);
    s.model_object = {{"id", s.model_id},
                      {"object", "model"},
                      {"created", int64_t(std::time(nullptr))},
                      {"owned_by", "fluxrt"},
                      {"family", info.family},
                      {"variant", info.variant},
                      {"description", info.description},
                      {"dtype", dtype},
                      {"limits", limits_object(l)}};

    SchedulerOptions so;
    so.max_queue = s.options.max_queue;
    so.max_batch = s.options.max_batch;
    so.batch_window = std::chrono::milliseconds(s.options.batch_window_ms);
    s.scheduler = std::make_unique<Scheduler>(*s.engine, so);
    ServerStatus expected = ServerStatus::Loading;
    s.status.compare_exchange_strong(expected, ServerStatus::Ready);
  } catch (const Error& e) {
    std::lock_guard<std::mutex> lock(s.load_mutex);
    s.load_error = e;
    s.status = ServerStatus::Failed;
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(s.load_mutex);
    s.load_error.emplace(ErrorCode::Internal, e.what());
    s.status = ServerStatus::Failed;
  }
  { std::lock_guard<std::mutex> lock(s.load_mutex); }
  loaded_.notify_all();
}

void HttpApi::Impl::authorize(const HttpRequest& req) const {
  const std::string& key = state_->options.api_key;
  if (key.empty()) return;
  const std::string header = server::header_value(req.headers, "Authorization");
  const std::string prefix = "Bearer ";
  if (header.empty())
    throw HttpError(401, "missing API key: send the header 'Authorization: Bearer <key>'", "",
                    "invalid_api_key");
  const std::string given = header.compare(0, prefix.size(), prefix) == 0 ? header.substr(prefix.size()) : "";
  if (!server::constant_time_equal(given, key))
    throw HttpError(401, "incorrect API key", "", "invalid_api_key");
}

bool HttpApi::Impl::screen(const HttpRequest& req, HttpResponse& res) {
  const HttpApiOptions& o = state_->options;
  try {
    size_t header_bytes = 0;
    for (const auto& [k, v] : req.headers) header_bytes += k.size() + v.size() + 4;
    if (header_bytes > o.max_header_bytes)
      throw HttpError(431, "the request headers are over " + std::to_string(o.max_header_bytes) + " bytes",
                      "", "headers_too_large");
    const std::string origin = server::header_value(req.headers, "Origin");
    if (!o.cors_origin.empty() && !origin.empty() && (o.cors_origin == "*" || origin == o.cors_origin)) {
      server::set_header(res, "Access-Control-Allow-Origin", o.cors_origin == "*" ? "*" : origin);
      server::set_header(res, "Vary", "Origin");
      if (req.method == "OPTIONS") {
        server::set_header(res, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        server::set_header(res, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        server::set_header(res, "Access-Control-Max-Age", "600");
        res.status = 204;
        state_->metrics.count_request(endpoint_of(req.path), res.status);
        return true;
      }
    }
    if (req.path.rfind("/v1/", 0) == 0 || req.path == "/metrics") authorize(req);
  } catch (const HttpError& e) {
    server::send_error(res, e);
    state_->metrics.count_request(endpoint_of(req.path), res.status);
    return true;
  }
  return false;
}

std::string HttpApi::Impl::allowed_methods(const std::string& path) const {
  std::string methods;
  for (const server::Route& r : routes_.routes())
    if (std::regex_match(path, r.regex) && methods.find(r.method) == std::string::npos)
      methods += (methods.empty() ? "" : ", ") + r.method;
  return methods;
}

// The endpoint label for metrics: the route, not the path (ids would make a label per image).
std::string HttpApi::Impl::endpoint_of(const std::string& path) const {
  for (const server::Route& r : routes_.routes())
    if (std::regex_match(path, r.regex)) return r.label;
  return "other";
}

HttpResponse HttpApi::Impl::transport_error(int status, const std::string& method, const std::string& path) {
  HttpResponse res;
  HttpError e(status, "bad request");
  if (status == 404 || status == 405) {
    const std::string methods = allowed_methods(path);
    if (!methods.empty()) {
      server::set_header(res, "Allow", methods);
      e = HttpError(405, method + " is not allowed on " + path + "; use " + methods, "",
                    "method_not_allowed");
    } else {
      e = HttpError(404, "no such endpoint: " + path, "", "not_found");
    }
  } else if (status == 413) {
    e = HttpError(413, "the request body is over this server's limit", "", "payload_too_large");
  } else if (status == 414) {
    e = HttpError(414, "the request URI is too long", "", "uri_too_long");
  } else if (status == 400) {
    e = HttpError(400, "malformed request (HTTP framing, headers or multipart body)", "",
                  "malformed_request");
  }
  server::send_error(res, e);
  state_->metrics.count_request(endpoint_of(path), res.status);
  return res;
}

HttpResponse HttpApi::Impl::handle(const HttpRequest& req) {
  HttpResponse res;
  if (screen(req, res)) return res;
  if (req.body.size() > state_->options.max_body_bytes) return transport_error(413, req.method, req.path);
  const server::Route* route = nullptr;
  std::smatch match;
  for (const server::Route& r : routes_.routes())
    if ((r.method == req.method || (req.method == "HEAD" && r.method == "GET")) &&
        std::regex_match(req.path, match, r.regex)) {
      route = &r;
      break;
    }
  if (!route) {
    HttpResponse error = transport_error(404, req.method, req.path);
    // The CORS headers screen() set go out with the refusal too.
    error.headers.insert(error.headers.begin(), res.headers.begin(), res.headers.end());
    return error;
  }
  server::RouteCall call{req, {}};
  for (const auto& m : match) call.matches.push_back(m.str());
  try {
    route->handler(call, res);
  } catch (const HttpError& e) {
    server::send_error(res, e);
  } catch (const Error& e) {
    server::send_error(res, server::http_error_of(e));
  } catch (const std::exception& e) {
    server::send_error(res, HttpError(500, std::string("internal error: ") + e.what(), "", "internal_error"));
  }
  if (server::header_value(res.headers, "Content-Type").empty())
    server::set_header(res, "Content-Type", "text/plain");
  state_->metrics.count_request(route->label, res.status);
  return res;
}

HttpApi::HttpApi(HttpApiOptions options) {
  if (options.max_queue < 1 || options.max_batch < 1 || options.max_images < 1 || options.batch_window_ms < 0)
    throw Error(ErrorCode::InvalidArgument, "--max-queue, --max-batch and --max-images must be at least 1");
  if (options.max_width < 16 || options.max_height < 16)
    throw Error(ErrorCode::InvalidArgument, "--max-size is too small");
  // Checked now, so a mistyped folder is an error at start, not a 400 per request.
  if (!options.lora_dir.empty()) static_cast<void>(server::LoraDirectory(options.lora_dir, ""));
  impl_ = std::make_shared<Impl>(std::move(options));
}

HttpApi::~HttpApi() { drain(); }

void HttpApi::start_loading() {
  std::call_once(impl_->load_once_,
                 [this] { impl_->load_thread_ = std::thread([impl = impl_] { impl->load(); }); });
}

void HttpApi::wait_until_loaded() {
  ServerState& s = *impl_->state_;
  std::unique_lock<std::mutex> lock(s.load_mutex);
  impl_->loaded_.wait(lock, [&] { return s.status != ServerStatus::Loading; });
  if (s.load_error) throw *s.load_error;
}

std::string HttpApi::status() const { return impl_->state_->status_text(); }

HttpResponse HttpApi::handle(const HttpRequest& request) { return impl_->handle(request); }

bool HttpApi::screen(const HttpRequest& request, HttpResponse& response) {
  return impl_->screen(request, response);
}

HttpResponse HttpApi::transport_error(int status, const std::string& method, const std::string& path) {
  return impl_->transport_error(status, method, path);
}

void HttpApi::begin_drain() {
  std::call_once(impl_->begin_drain_once_, [this] {
    Impl& impl = *impl_;
    if (impl.load_thread_.joinable()) impl.load_thread_.join();  // a load cannot be stopped midway
    ServerState& s = *impl.state_;
    if (s.status != ServerStatus::Failed) s.status = ServerStatus::Draining;
  });
}

void HttpApi::drain() {
  begin_drain();
  std::call_once(impl_->drain_once_, [this] {
    ServerState& s = *impl_->state_;
    if (s.scheduler) s.scheduler->drain();
    s.scheduler.reset();
    s.engine.reset();
  });
}

}  // namespace fluxrt
