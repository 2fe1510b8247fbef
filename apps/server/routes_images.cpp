// The OpenAI images API (docs/server.md): POST /v1/images/generations (JSON) and /v1/images/edits
// (multipart), parsed and checked on the HTTP thread (api.cpp), queued on the scheduler and
// answered from the finished job (b64_json, or a url into the image store), or streamed as
// Server-Sent Events while the job runs; and GET /v1/images/{id}/content for the url answers.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <regex>

#include "connection.h"
#include "fluxrt/image.h"
#include "output.h"
#include "routes.h"

namespace fluxrt::server {
namespace {

using nlohmann::json;

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

// The handlers of one server's image endpoints.
class ImageRoutes {
 public:
  explicit ImageRoutes(ServerState& server) : server_(server) {}
  void handle_images(const httplib::Request& req, httplib::Response& res, bool edit);

 private:
  void answer(const httplib::Request& req, httplib::Response& res, const ImageRequest& r,
              const std::shared_ptr<Job>& job);
  void stream(const httplib::Request& req, httplib::Response& res, const ImageRequest& r,
              const std::shared_ptr<Job>& job);
  json image_entries(const httplib::Request& req, const ImageRequest& r, const GenerateResult& result);
  json image_entry(const httplib::Request& req, const ImageRequest& r, const GeneratedImage& image);
  std::string url_base(const httplib::Request& req) const;

  ServerState& server_;
};

void ImageRoutes::handle_images(const httplib::Request& req, httplib::Response& res, bool edit) {
  server_.require_ready();
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
    r = parse_generation(req.body, server_.limits);
  } else {
    if (!media_is("multipart/form-data"))
      throw HttpError(415, "send the request as 'Content-Type: multipart/form-data' (got '" + type + "')", "",
                      "unsupported_media_type");
    if (int(req.files.size()) > server_.options.max_parts)
      throw HttpError(400,
                      "the form has " + std::to_string(req.files.size()) + " parts, over the limit of " +
                          std::to_string(server_.options.max_parts),
                      "", "too_many_parts");
    std::vector<Part> parts;
    for (const auto& [name, f] : req.files) parts.push_back({name, f.filename, f.content_type, f.content});
    r = parse_edit(parts, server_.limits);
  }
  if (server_.loras) r.request.loras = server_.loras->resolve(r.loras);

  // What the engine will make of it: the size an edit takes from its first image must fit too.
  RequestPlan plan;
  try {
    plan = server_.engine->plan(r.request);
  } catch (const Error& e) {
    throw http_error_of(e);
  }
  if (plan.width > server_.options.max_width || plan.height > server_.options.max_height)
    throw HttpError(400,
                    "the output would be " + std::to_string(plan.width) + "x" + std::to_string(plan.height) +
                        ", over this server's limit of " + std::to_string(server_.options.max_width) + "x" +
                        std::to_string(server_.options.max_height) + "; give 'size'",
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
  const std::shared_ptr<Job> job = server_.scheduler->submit(r.request, std::move(job_options));
  if (!job) {
    if (server_.status == ServerStatus::Draining)
      throw HttpError(503, "the server is shutting down", "", "shutting_down");
    const SchedulerStats stats = server_.scheduler->stats();
    const double wait = stats.mean_call_seconds * (stats.queued + 1);
    res.set_header("Retry-After", std::to_string(std::clamp(int(std::ceil(wait)), 1, 600)));
    throw HttpError(
        429, "the queue is full (" + std::to_string(server_.options.max_queue) + " requests); retry later",
        "", "queue_full");
  }
  if (r.stream)
    stream(req, res, r, job);
  else
    answer(req, res, r, job);
}

std::string ImageRoutes::url_base(const httplib::Request& req) const {
  const std::string host = req.get_header_value("Host");
  // Only a plausible host:port goes into the URL: the header is the client's to choose.
  if (!host.empty() && std::regex_match(host, std::regex(R"([A-Za-z0-9.\-:\[\]]{1,255})")))
    return "http://" + host;
  return "";
}

json ImageRoutes::image_entry(const httplib::Request& req, const ImageRequest& r,
                              const GeneratedImage& image) {
  Encoded encoded = encode_output(image, r.output_format, r.output_compression);
  json entry = {{"revised_prompt", nullptr}, {"seed", image.metadata.seed}};
  if (r.url)
    entry["url"] = url_base(req) + "/v1/images/" +
                   server_.store.put(std::move(encoded.bytes), encoded.content_type) + "/content";
  else
    entry["b64_json"] = base64(encoded.bytes);
  return entry;
}

json ImageRoutes::image_entries(const httplib::Request& req, const ImageRequest& r,
                                const GenerateResult& result) {
  json data = json::array();
  for (const GeneratedImage& image : result.images) data.push_back(image_entry(req, r, image));
  return data;
}

// A non-streamed answer: wait for the job, watching the connection so that a client that goes
// away cancels it.
void ImageRoutes::answer(const httplib::Request& req, httplib::Response& res, const ImageRequest& r,
                         const std::shared_ptr<Job>& job) {
  const ClientConnection connection(req.remote_addr, req.remote_port, req.local_port);
  Job::State s = job->state();
  while (!s.done) {
    s = job->wait(s.version, std::chrono::milliseconds(50));
    if (!s.done && connection.closed()) {
      // Nobody reads the answer; the engine stops at its next step (or never starts the job).
      server_.scheduler->abandon(job);
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
void ImageRoutes::stream(const httplib::Request& req, httplib::Response& res, const ImageRequest& r,
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
        if (!progress->finished) server_.scheduler->abandon(job);
      });
}

}  // namespace

void add_image_routes(httplib::Server& http, ServerState& server) {
  using httplib::Request;
  using httplib::Response;
  auto routes = std::make_shared<ImageRoutes>(server);
  http.Post("/v1/images/generations",
            guarded([routes](const Request& req, Response& res) { routes->handle_images(req, res, false); }));
  http.Post("/v1/images/edits",
            guarded([routes](const Request& req, Response& res) { routes->handle_images(req, res, true); }));
  http.Get(R"(/v1/images/([^/]+)/content)", guarded([&server](const Request& req, Response& res) {
             const std::string id = req.matches[1];
             std::optional<ImageStore::Entry> entry =
                 std::regex_match(id, std::regex("[0-9a-f]{32}")) ? server.store.get(id) : std::nullopt;
             if (!entry)
               throw HttpError(404,
                               "no image with id '" + id + "' (images are kept " +
                                   std::to_string(server.options.url_ttl.count()) + " s, the latest " +
                                   std::to_string(server.options.url_max_images) + ")",
                               "", "not_found");
             res.set_header("Cache-Control",
                            "private, max-age=" + std::to_string(server.options.url_ttl.count()));
             res.set_content(entry->bytes, entry->content_type);
           }));
}

}  // namespace fluxrt::server
