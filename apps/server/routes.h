#pragma once
// What the server's route files share: the server as its handlers see it (ServerState), the
// wrapper that answers a handler's errors in OpenAI's shape (guarded), and one function per
// surface adding its routes: routes_images.cpp (the OpenAI images API), routes_models.cpp (models,
// LoRAs, health, metrics), routes_page.cpp (the web page). server.cpp owns the rest: binding,
// loading, authentication, CORS, limits, the 404/405 answers and the drain.
#include <httplib.h>

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "api.h"
#include "fluxrt/engine.h"
#include "fluxrt/scheduler.h"
#include "http_error.h"
#include "image_store.h"
#include "lora_dir.h"
#include "metrics.h"
#include "server.h"

namespace fluxrt::server {

enum class ServerStatus { Loading, Ready, Failed, Draining };

// The server's state. The load thread sets engine, scheduler, limits, loras, model_id and
// model_object before it stores Ready in `status`; a handler reads them only after it has seen
// Ready (or Draining, which follows Ready): the atomic store and load order the two.
struct ServerState {
  explicit ServerState(ServerOptions o)
      : options(std::move(o)), store(options.url_ttl, options.url_max_images) {}

  // "loading", "ok", "error" or "draining".
  std::string status_text() const;
  // A 503 naming why, unless the model is loaded and the server is not draining.
  void require_ready() const;
  // The scheduler's counters; zeros while there is no scheduler (loading, failed).
  SchedulerStats scheduler_stats() const;

  const ServerOptions options;
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

inline void send_error(httplib::Response& res, const HttpError& e) {
  res.status = e.status();
  res.set_content(error_body(e.status(), e.what(), e.param(), e.code()), "application/json");
}

// The handler, answering its HttpError, an engine Error (http_error_of) or anything else (a 500)
// as OpenAI's error object, so no exception leaves a handler.
template <class Handler>
httplib::Server::Handler guarded(Handler handler) {
  return [handler](const httplib::Request& req, httplib::Response& res) {
    try {
      handler(req, res);
    } catch (const HttpError& e) {
      send_error(res, e);
    } catch (const Error& e) {
      send_error(res, http_error_of(e));
    } catch (const std::exception& e) {
      send_error(res, HttpError(500, std::string("internal error: ") + e.what(), "", "internal_error"));
    }
  };
}

// POST /v1/images/generations, POST /v1/images/edits, GET /v1/images/{id}/content.
void add_image_routes(httplib::Server& http, ServerState& server);
// GET /v1/models, /v1/models/{id}, /v1/loras, /health, /metrics.
void add_model_routes(httplib::Server& http, ServerState& server);
// GET /: the web page.
void add_page_route(httplib::Server& http);

}  // namespace fluxrt::server
