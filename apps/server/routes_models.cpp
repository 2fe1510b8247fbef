// What the server serves about itself (docs/server.md): GET /v1/models and /v1/models/{id} (OpenAI's
// list shape plus family, variant, description, dtype), /v1/loras (what a request's `loras` may
// name), /health (no key needed: load balancers ask it) and /metrics (Prometheus text).
#include "routes.h"

namespace fluxrt::server {
namespace {

using nlohmann::json;

void handle_models(const ServerState& server, const RouteCall& call, HttpResponse& res) {
  server.require_ready();
  if (call.matches.size() > 1) {
    if (call.matches[1] != server.model_id)
      throw HttpError(404, "no model '" + call.matches[1] + "'", "", "model_not_found");
    set_content(res, server.model_object.dump(), "application/json");
    return;
  }
  set_content(res, json{{"object", "list"}, {"data", json::array({server.model_object})}}.dump(),
              "application/json");
}

// GET /v1/loras: what `loras` may name, in the list shape of /v1/models.
void handle_loras(const ServerState& server, HttpResponse& res) {
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
  set_content(res,
              json{{"object", "list"}, {"data", data}}.dump(-1, ' ', false, json::error_handler_t::replace),
              "application/json");
}

void handle_health(const ServerState& server, HttpResponse& res) {
  const std::string s = server.status_text();
  json body = {{"status", s}};
  if (s == "ok") body["model"] = server.model_id;
  if (s == "error") {
    std::lock_guard<std::mutex> lock(server.load_mutex);
    if (server.load_error) body["message"] = server.load_error->what();
  }
  res.status = s == "ok" ? 200 : 503;
  set_content(res, body.dump(), "application/json");
}

}  // namespace

void add_model_routes(RouteTable& routes, const std::shared_ptr<ServerState>& server) {
  // The handlers hold the state: a Python caller may keep a response past the API object.
  routes.add("GET", "/health",
             [server](const RouteCall&, HttpResponse& res) { handle_health(*server, res); });
  routes.add("GET", "/metrics", [server](const RouteCall&, HttpResponse& res) {
    set_content(res, metrics_text(server->metrics, server->scheduler_stats()),
                "text/plain; version=0.0.4; charset=utf-8");
  });
  routes.add("GET", "/v1/models",
             [server](const RouteCall& call, HttpResponse& res) { handle_models(*server, call, res); });
  routes.add("GET", "/v1/models/([^/]+)",
             [server](const RouteCall& call, HttpResponse& res) { handle_models(*server, call, res); });
  routes.add("GET", "/v1/loras",
             [server](const RouteCall&, HttpResponse& res) { handle_loras(*server, res); });
}

}  // namespace fluxrt::server
