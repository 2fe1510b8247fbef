#pragma once
// What the API's route files share: the API's state as its handlers see it (ServerState), a
// request as a handler sees it (RouteCall: the request and its path's matches), the response
// helpers, and one function per surface adding its routes: routes_images.cpp (the OpenAI images
// API), routes_models.cpp (models, LoRAs, health, metrics), routes_page.cpp (the web page).
// http_api.cpp owns the rest: loading, authentication, CORS, limits, the 404/405 answers, the
// error shape of whatever a handler throws, and the drain. No socket here: `fluxrt serve`
// (server.cpp) and the Python package bring their own HTTP server.
#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "api.h"
#include "fluxrt/engine.h"
#include "fluxrt/http_api.h"
#include "fluxrt/scheduler.h"
#include "http_error.h"
#include "image_store.h"
#include "lora_dir.h"
#include "metrics.h"

namespace fluxrt::server {

enum class ServerStatus { Loading, Ready, Failed, Draining };

// The server's state. The load thread sets engine, scheduler, limits, loras, model_id and
// model_object before it stores Ready in `status`; a handler reads them only after it has seen
// Ready (or Draining, which follows Ready): the atomic store and load order the two.
struct ServerState {
  explicit ServerState(HttpApiOptions o)
      : options(std::move(o)), store(options.url_ttl, options.url_max_images) {}

  // "loading", "ok", "error" or "draining".
  std::string status_text() const;
  // A 503 naming why, unless the model is loaded and the server is not draining.
  void require_ready() const;
  // The scheduler's counters; zeros while there is no scheduler (loading, failed).
  SchedulerStats scheduler_stats() const;

  const HttpApiOptions options;
  std::atomic<ServerStatus> status{ServerStatus::Loading};
  mutable std::mutex load_mutex;
  std::optional<Error> load_error;

  std::unique_ptr<Engine> engine;
  std::unique_ptr<Scheduler> scheduler;
  ApiLimits limits;
  std::unique_ptr<LoraDirectory> loras;  // --lora-dir; null without
  std::string model_id;
  nlohmann::json model_object;  // the entry /v1/models lists
  HttpMetrics metrics;
  ImageStore store;  // response_format url
};

// A header of `headers` by its name in any case; "" when absent.
std::string header_value(const HttpHeaders& headers, const std::string& name);

inline void set_header(HttpResponse& res, const std::string& name, const std::string& value) {
  res.headers.emplace_back(name, value);
}

inline void set_content(HttpResponse& res, std::string body, const std::string& content_type) {
  res.body = std::move(body);
  set_header(res, "Content-Type", content_type);
}

inline void send_error(HttpResponse& res, const HttpError& e) {
  res.status = e.status();
  set_content(res, error_body(e.status(), e.what(), e.param(), e.code()), "application/json");
}

// A request as its handler sees it: the request and what its path's pattern captured (matches[0]
// is the whole path).
struct RouteCall {
  const HttpRequest& request;
  std::vector<std::string> matches;
  std::string header(const std::string& name) const { return header_value(request.headers, name); }
};

// A handler answers into the response or throws: an HttpError, an engine Error (http_error_of) or
// anything else (a 500) becomes OpenAI's error object (http_api.cpp), so no exception leaves it.
using RouteHandler = std::function<void(const RouteCall&, HttpResponse&)>;

struct Route {
  std::string method;
  std::string pattern;  // a regular expression over the whole path
  std::string label;    // the endpoint on /metrics: the pattern without its groups, never an id
  std::regex regex;
  RouteHandler handler;
};

class RouteTable {
 public:
  void add(const std::string& method, const std::string& pattern, RouteHandler handler) {
    std::string label = pattern;
    std::erase_if(label, [](char c) { return c == '(' || c == ')'; });
    routes_.push_back({method, pattern, label, std::regex(pattern), std::move(handler)});
  }
  const std::vector<Route>& routes() const { return routes_; }

 private:
  std::vector<Route> routes_;
};

// POST /v1/images/generations, POST /v1/images/edits, GET /v1/images/{id}/content.
void add_image_routes(RouteTable& routes, const std::shared_ptr<ServerState>& server);
// GET /v1/models, /v1/models/{id}, /v1/loras, /health, /metrics.
void add_model_routes(RouteTable& routes, const std::shared_ptr<ServerState>& server);
// GET /: the web page.
void add_page_route(RouteTable& routes);

}  // namespace fluxrt::server
