// What the server serves about itself (docs/server.md): GET /v1/models and /v1/models/{id} (OpenAI's
// list shape plus family, variant, description, dtype), /v1/loras (what a request's `loras` may
// name), /health (no key needed: load balancers ask it) and /metrics (Prometheus text).
#include "routes.h"

namespace fluxrt::server {
namespace {

using nlohmann::json;

void handle_models(const ServerState& server, const httplib::Request& req, httplib::Response& res) {
  server.require_ready();
  if (req.matches.size() > 1) {
    if (req.matches[1] != server.model_id)
      throw HttpError(404, "no model '" + req.matches[1].str() + "'", "", "model_not_found");
    res.set_content(server.model_object.dump(), "application/json");
    return;
  }
  res.set_content(json{{"object", "list"}, {"data", json::array({server.model_object})}}.dump(),
                  "application/json");
}

// GET /v1/loras: what `loras` may name, in the list shape of /v1/models.
void handle_loras(const ServerState& server, httplib::Response& res) {
  server.require_ready();
  json data = json::array();
  if (server.loras)
    for (const LoraDirectory::Entry& e : server.loras->list()) {
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

void handle_health(const ServerState& server, httplib::Response& res) {
  const std::string s = server.status_text();
  json body = {{"status", s}};
  if (s == "ok") body["model"] = server.model_id;
  if (s == "error") {
    std::lock_guard<std::mutex> lock(server.load_mutex);
    if (server.load_error) body["message"] = server.load_error->what();
  }
  res.status = s == "ok" ? 200 : 503;
  res.set_content(body.dump(), "application/json");
}

}  // namespace

void add_model_routes(httplib::Server& http, ServerState& server) {
  using httplib::Request;
  using httplib::Response;
  http.Get("/health", [&server](const Request&, Response& res) { handle_health(server, res); });
  http.Get("/metrics", [&server](const Request&, Response& res) {
    res.set_content(metrics_text(server.metrics, server.scheduler_stats()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/v1/models",
           guarded([&server](const Request& req, Response& res) { handle_models(server, req, res); }));
  http.Get(R"(/v1/models/([^/]+))",
           guarded([&server](const Request& req, Response& res) { handle_models(server, req, res); }));
  http.Get("/v1/loras", guarded([&server](const Request&, Response& res) { handle_loras(server, res); }));
}

}  // namespace fluxrt::server
