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
// An image entry of a response: b64_json, or a url into the image store on the server named by
// the request's Host header.
json image_entry(ServerState& server, const std::string& host, const ImageRequest& r,
                 const GeneratedImage& image) {
  Encoded encoded = encode_output(image, r.output_format, r.output_compression);
  json entry = {{"revised_prompt", nullptr}, {"seed", image.metadata.seed}};
  if (r.url) {
    // Only a plausible host:port goes into the URL: the header is the client's to choose.
    const bool plausible =
        !host.empty() && std::regex_match(host, std::regex(R"([A-Za-z0-9.\-:\[\]]{1,255})"));
    entry["url"] = (plausible ? "http://" + host : std::string()) + "/v1/images/" +
                   server.store.put(std::move(encoded.bytes), encoded.content_type) + "/content";
  } else {
    entry["b64_json"] = base64(encoded.bytes);
  }
  return entry;
}

// stream: true. OpenAI's event names: <kind>.partial_image per denoising step (with the step and
// the total; b64_json a PNG preview of the first image at the steps partial_images spreads over
// the loop, once the engine has finished an image to fit its preview colours from, else empty),
// then <kind>.completed per image, or an `error` event when the job fails after the 200 went out.
class ImageEventStream : public HttpResponseStream {
 public:
  ImageEventStream(std::shared_ptr<ServerState> server, std::shared_ptr<Job> job, ImageRequest r,
                   std::string host)
      : server_(std::move(server)), job_(std::move(job)), r_(std::move(r)), host_(std::move(host)) {
    kind_ = r_.edit ? "image_edit" : "image_generation";
    size_ = r_.request.width ? std::to_string(*r_.request.width) + "x" + std::to_string(*r_.request.height)
                             : "auto";
  }
  // Nobody reads the rest: the engine stops the job at its next step (or never starts it).
  ~ImageEventStream() override {
    // (The scheduler is gone once HttpApi::drain() has finished every job.)
    if (!finished_ && server_->scheduler) server_->scheduler->abandon(job_);
  }
  bool next(std::string& chunk) override;

 private:
  std::string completed_events(int64_t now);

  std::shared_ptr<ServerState> server_;
  std::shared_ptr<Job> job_;
  ImageRequest r_;
  std::string host_, kind_, size_;
  uint64_t version_ = 0;
  int sent_step_ = 0;
  bool finished_ = false;
};

bool ImageEventStream::next(std::string& chunk) {
  if (finished_) return false;
  const Job::State s = job_->wait(version_, std::chrono::milliseconds(100));
  version_ = s.version;
  const int64_t now = int64_t(std::time(nullptr));
  while (sent_step_ < s.step) {
    const int step = ++sent_step_;
    // A preview (PNG) at the steps partial_images asked for, once the engine can make one.
    const std::optional<Image> preview = job_->preview_at(step);
    std::string b64;
    if (preview) {
      const std::vector<uint8_t> png = encode_png(*preview);
      b64 = base64(std::string(png.begin(), png.end()));
    }
    json e = {{"type", kind_ + ".partial_image"},
              {"step", step},
              {"steps", s.total},
              {"partial_image_index", step - 1},
              {"b64_json", b64},
              {"created_at", now},
              {"size", size_},
              {"output_format", r_.output_format},
              {"background", "opaque"},
              {"quality", "auto"}};
    chunk += sse_event(kind_ + ".partial_image", e);
  }
  if (!s.done) return true;
  chunk += completed_events(now);
  finished_ = true;
  return false;
}

std::string ImageEventStream::completed_events(int64_t now) {
  if (job_->error()) {
    const HttpError e = http_error_of(without_lora_paths(*job_->error(), r_.request.loras));
    return sse_event(
        "error",
        json{{"type", "error"},
             {"error", json::parse(error_body(e.status(), e.what(), e.param(), e.code()))["error"]}});
  }
  std::string text;
  const GenerateResult& result = job_->results().front();
  const std::string out_size = std::to_string(result.width) + "x" + std::to_string(result.height);
  for (size_t i = 0; i < result.images.size(); ++i) {
    json e = image_entry(*server_, host_, r_, result.images[i]);
    e.erase("revised_prompt");
    e["type"] = kind_ + ".completed";
    e["index"] = i;
    e["created_at"] = now;
    e["size"] = out_size;
    e["output_format"] = r_.output_format;
    e["background"] = "opaque";
    e["quality"] = "auto";
    e["usage"] = {{"input_tokens", 0},
                  {"output_tokens", 0},
                  {"total_tokens", 0},
                  {"input_tokens_details", {{"image_tokens", 0}, {"text_tokens", 0}}}};
    text += sse_event(kind_ + ".completed", e);
  }
  return text;
}

// The handlers of one server's image endpoints.
class ImageRoutes {
 public:
  explicit ImageRoutes(std::shared_ptr<ServerState> server) : server_(std::move(server)) {}
  void handle_images(const RouteCall& call, HttpResponse& res, bool edit);

 private:
  void answer(const RouteCall& call, HttpResponse& res, const ImageRequest& r,
              const std::shared_ptr<Job>& job);

  std::shared_ptr<ServerState> server_;
};

void ImageRoutes::handle_images(const RouteCall& call, HttpResponse& res, bool edit) {
  ServerState& server = *server_;
  server.require_ready();
  const std::string type = call.header("Content-Type");
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
    r = parse_generation(call.request.body, server.limits);
  } else {
    if (!media_is("multipart/form-data"))
      throw HttpError(415, "send the request as 'Content-Type: multipart/form-data' (got '" + type + "')", "",
                      "unsupported_media_type");
    const std::vector<HttpFormPart>& form = call.request.parts;
    if (int(form.size()) > server.options.max_parts)
      throw HttpError(400,
                      "the form has " + std::to_string(form.size()) + " parts, over the limit of " +
                          std::to_string(server.options.max_parts),
                      "", "too_many_parts");
    std::vector<Part> parts;
    for (const HttpFormPart& f : form) parts.push_back({f.name, f.filename, f.content_type, f.content});
    r = parse_edit(parts, server.limits);
  }
  if (server.loras) r.request.loras = server.loras->resolve(r.loras);

  // What the engine will make of it: the size an edit takes from its first image must fit too.
  RequestPlan plan;
  try {
    plan = server.engine->plan(r.request);
  } catch (const Error& e) {
    throw http_error_of(e);
  }
  if (plan.width > server.options.max_width || plan.height > server.options.max_height)
    throw HttpError(400,
                    "the output would be " + std::to_string(plan.width) + "x" + std::to_string(plan.height) +
                        ", over this server's limit of " + std::to_string(server.options.max_width) + "x" +
                        std::to_string(server.options.max_height) + "; give 'size'",
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
  const std::shared_ptr<Job> job = server.scheduler->submit(r.request, std::move(job_options));
  if (!job) {
    if (server.status == ServerStatus::Draining)
      throw HttpError(503, "the server is shutting down", "", "shutting_down");
    const SchedulerStats stats = server.scheduler->stats();
    const double wait = stats.mean_call_seconds * (stats.queued + 1);
    set_header(res, "Retry-After", std::to_string(std::clamp(int(std::ceil(wait)), 1, 600)));
    throw HttpError(
        429, "the queue is full (" + std::to_string(server.options.max_queue) + " requests); retry later", "",
        "queue_full");
  }
  if (r.stream) {
    set_header(res, "Content-Type", "text/event-stream");
    set_header(res, "Cache-Control", "no-cache");
    set_header(res, "X-Accel-Buffering", "no");
    res.stream = std::make_shared<ImageEventStream>(server_, job, std::move(r), call.header("Host"));
  } else {
    answer(call, res, r, job);
  }
}

// A non-streamed answer: wait for the job, watching the connection so that a client that goes
// away cancels it.
void ImageRoutes::answer(const RouteCall& call, HttpResponse& res, const ImageRequest& r,
                         const std::shared_ptr<Job>& job) {
  const std::function<bool()>& client_gone = call.request.client_gone;
  Job::State s = job->state();
  while (!s.done) {
    s = job->wait(s.version, std::chrono::milliseconds(50));
    if (!s.done && client_gone && client_gone()) {
      // Nobody reads the answer; the engine stops at its next step (or never starts the job).
      server_->scheduler->abandon(job);
      throw HttpError(499, "the client closed the connection", "", "cancelled");
    }
  }
  if (job->error()) throw http_error_of(without_lora_paths(*job->error(), r.request.loras));
  const GenerateResult& result = job->results().front();
  json data = json::array();
  for (const GeneratedImage& image : result.images)
    data.push_back(image_entry(*server_, call.header("Host"), r, image));
  json body = {{"created", int64_t(std::time(nullptr))},
               {"data", data},
               {"size", std::to_string(result.width) + "x" + std::to_string(result.height)},
               {"output_format", r.output_format}};
  // W3C Server-Timing: how long the request waited in the queue and how long it ran, so a client
  // can tell a busy server from a slow one.
  auto ms = [](Job::Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  char timing[96];
  std::snprintf(timing, sizeof timing, "queue;dur=%.1f, generate;dur=%.1f",
                ms(s.started_at - job->enqueued()), ms(s.done_at - s.started_at));
  set_header(res, "Server-Timing", timing);
  set_content(res, body.dump(), "application/json");
}

}  // namespace

void add_image_routes(RouteTable& table, const std::shared_ptr<ServerState>& server) {
  auto routes = std::make_shared<ImageRoutes>(server);
  table.add("POST", "/v1/images/generations",
            [routes](const RouteCall& call, HttpResponse& res) { routes->handle_images(call, res, false); });
  table.add("POST", "/v1/images/edits",
            [routes](const RouteCall& call, HttpResponse& res) { routes->handle_images(call, res, true); });
  table.add("GET", "/v1/images/([^/]+)/content", [server](const RouteCall& call, HttpResponse& res) {
    const std::string& id = call.matches[1];
    std::optional<ImageStore::Entry> entry =
        std::regex_match(id, std::regex("[0-9a-f]{32}")) ? server->store.get(id) : std::nullopt;
    if (!entry)
      throw HttpError(404,
                      "no image with id '" + id + "' (images are kept " +
                          std::to_string(server->options.url_ttl.count()) + " s, the latest " +
                          std::to_string(server->options.url_max_images) + ")",
                      "", "not_found");
    set_header(res, "Cache-Control", "private, max-age=" + std::to_string(server->options.url_ttl.count()));
    set_content(res, entry->bytes, entry->content_type);
  });
}

}  // namespace fluxrt::server
