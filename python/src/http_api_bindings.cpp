// fluxrt._fluxrt.HttpApi: `fluxrt serve`'s request handling (include/fluxrt/http_api.h) for an HTTP
// server written in Python (fluxrt.ray on Ray Serve): a request's method, path, headers, body and
// form parts in, its status, headers and body out, or a stream of Server-Sent Events. The same C++
// answers both, so routes, validation, error bodies and metrics cannot drift apart.
//
// The blocking calls (handle, which waits for the image; HttpStream.next, which waits up to 100 ms
// for progress) run with the GIL released, through call_without_gil alone: the API never calls
// back into Python (a client that went away is a flag the caller sets, ClientWatch.cancel).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fluxrt/engine.h"
#include "fluxrt/http_api.h"
#include "fluxrt/run.h"

namespace py = pybind11;

namespace {

// The one place this file gives the GIL up: `f` touches no Python object.
template <class F>
auto call_without_gil(F&& f) {
  py::gil_scoped_release release;
  return f();
}

// Set by the caller when its client disconnects: the request's job is then cancelled at the
// engine's next step (HttpRequest::client_gone).
struct ClientWatch {
  std::shared_ptr<std::atomic<bool>> gone = std::make_shared<std::atomic<bool>>(false);
};

// A streamed answer's body: next() -> (bytes, more).
struct HttpStream {
  std::shared_ptr<fluxrt::HttpResponseStream> stream;
  bool done = false;
};

fluxrt::HttpApiOptions api_options(const fluxrt::Run& run, int max_queue, int max_batch, int batch_window_ms,
                                   const std::string& api_key, const std::string& cors_origin, int max_size,
                                   int max_images, const std::string& lora_dir, size_t max_body_mb) {
  fluxrt::HttpApiOptions o;
  o.model = run.model;
  o.engine = run.engine;
  // A server's requests may bring images (/v1/images/edits): it keeps the VAE encoder.
  o.engine.vae_encoder = true;
  auto shared_run = std::make_shared<fluxrt::Run>(run);
  shared_run->engine.vae_encoder = true;
  // The engine on the model as resolve_run resolved it, not resolved a second time.
  o.engine_factory = [shared_run] { return std::make_unique<fluxrt::Engine>(*shared_run); };
  o.request_defaults = run.request;
  o.max_queue = max_queue;
  o.max_batch = max_batch;
  o.batch_window_ms = batch_window_ms;
  o.api_key = api_key;
  o.cors_origin = cors_origin;
  o.max_width = o.max_height = max_size;
  o.max_images = max_images;
  o.lora_dir = lora_dir;
  if (max_body_mb < 1)
    throw fluxrt::Error(fluxrt::ErrorCode::InvalidArgument, "max_body_mb must be at least 1");
  o.max_body_bytes = max_body_mb << 20;
  return o;
}

using Headers = std::vector<std::pair<std::string, std::string>>;
using Part = std::tuple<std::string, std::string, std::string, py::bytes>;  // name, filename, type, content

// (status, headers, body bytes, HttpStream or None)
py::tuple handle(fluxrt::HttpApi& api, const std::string& method, const std::string& path,
                 const Headers& headers, const py::bytes& body, const std::vector<Part>& parts,
                 std::optional<ClientWatch> watch) {
  fluxrt::HttpRequest request;
  request.method = method;
  request.path = path;
  request.headers = headers;
  request.body = std::string(body);
  for (const auto& [name, filename, content_type, content] : parts)
    request.parts.push_back({name, filename, content_type, std::string(content)});
  if (watch) request.client_gone = [gone = watch->gone] { return gone->load(); };
  fluxrt::HttpResponse response = call_without_gil([&] { return api.handle(request); });
  py::object stream = py::none();
  if (response.stream) stream = py::cast(HttpStream{std::move(response.stream)});
  return py::make_tuple(response.status, response.headers, py::bytes(response.body), stream);
}

}  // namespace

void bind_http_api(py::module_& m) {
  py::class_<ClientWatch>(m, "ClientWatch")
      .def(py::init<>())
      .def(
          "cancel", [](ClientWatch& w) { w.gone->store(true); },
          "the client went away: its job stops at the engine's next step")
      .def_property_readonly("cancelled", [](const ClientWatch& w) { return w.gone->load(); });

  py::class_<HttpStream>(m, "HttpStream")
      .def(
          "next",
          // (py::tuple named: newer pybind11 gives each make_tuple its own typed tuple type.)
          [](HttpStream& s) -> py::tuple {
            if (s.done || !s.stream) return py::make_tuple(py::bytes(), false);
            std::string chunk;
            const bool more = call_without_gil([&] { return s.stream->next(chunk); });
            if (!more) s.done = true;
            return py::make_tuple(py::bytes(chunk), more);
          },
          "waits up to 100 ms for the job's progress: (the events it brought, whether more follow)")
      .def(
          "close", [](HttpStream& s) { s.stream.reset(); },
          "drops the stream; an unfinished job is cancelled at the engine's next step");

  py::class_<fluxrt::HttpApi>(m, "HttpApi")
      .def(py::init([](const fluxrt::Run& run, int max_queue, int max_batch, int batch_window_ms,
                       const std::string& api_key, const std::string& cors_origin, int max_size,
                       int max_images, const std::string& lora_dir, size_t max_body_mb) {
             return std::make_unique<fluxrt::HttpApi>(api_options(run, max_queue, max_batch, batch_window_ms,
                                                                  api_key, cors_origin, max_size, max_images,
                                                                  lora_dir, max_body_mb));
           }),
           py::arg("run"), py::arg("max_queue") = 32, py::arg("max_batch") = 1,
           py::arg("batch_window_ms") = 0, py::arg("api_key") = "", py::arg("cors_origin") = "",
           py::arg("max_size") = 2048, py::arg("max_images") = 4, py::arg("lora_dir") = "",
           py::arg("max_body_mb") = 64,
           "fluxrt serve's HTTP API over the run's model, with fluxrt serve's flags of the same names")
      .def("start_loading", &fluxrt::HttpApi::start_loading, "loads the model on a thread of its own")
      .def(
          "wait_until_loaded", [](fluxrt::HttpApi& a) { call_without_gil([&] { a.wait_until_loaded(); }); },
          "blocks until the model is loaded; raises the load's error")
      .def("status", &fluxrt::HttpApi::status, "\"loading\", \"ok\", \"error\" or \"draining\"")
      .def("handle", &handle, py::arg("method"), py::arg("path"), py::arg("headers"),
           py::arg("body") = py::bytes(), py::arg("parts") = std::vector<Part>{},
           py::arg("watch") = std::nullopt,
           "answers one request: (status, headers, body, stream); stream is an HttpStream for "
           "text/event-stream "
           "answers, else None. parts: a multipart form's (name, filename, content_type, content)")
      .def(
          "transport_error",
          [](fluxrt::HttpApi& a, int status, const std::string& method,
             const std::string& path) -> py::tuple {
            const fluxrt::HttpResponse r = a.transport_error(status, method, path);
            return py::make_tuple(r.status, r.headers, py::bytes(r.body), py::none());
          },
          py::arg("status"), py::arg("method"), py::arg("path"),
          "the answer fluxrt serve gives when its HTTP layer refuses a request (400 malformed framing, 413, "
          "...), "
          "in handle()'s shape")
      .def(
          "drain", [](fluxrt::HttpApi& a) { call_without_gil([&] { a.drain(); }); },
          "refuses new requests, finishes the accepted ones and releases the engine");
}
