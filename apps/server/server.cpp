// `fluxrt serve` itself (docs/server.md): the HTTP API (fluxrt::HttpApi, http_api.cpp) behind
// cpp-httplib: options, binding, the listen backlog, the translation of httplib's requests and
// responses (a streamed answer as chunks), the watch on the client's connection, and the drain on
// shutdown. What a request gets is decided in the API alone, so the Python package's transports
// answer alike.
#include "server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "connection.h"

namespace fluxrt::server {

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return false;
}

namespace {

// The API's view of an httplib request: the headers, the body or the multipart parts httplib
// parsed, and the watch on the client's socket.
HttpRequest api_request(const httplib::Request& req) {
  HttpRequest r;
  r.method = req.method;
  r.path = req.path;
  r.headers.assign(req.headers.begin(), req.headers.end());
  r.body = req.body;
  for (const auto& [name, f] : req.files) r.parts.push_back({name, f.filename, f.content_type, f.content});
  auto connection = std::make_shared<ClientConnection>(req.remote_addr, req.remote_port, req.local_port);
  r.client_gone = [connection] { return connection->closed(); };
  return r;
}

// `client_gone` ends a streamed answer early (then dropping the stream cancels its job).
void send(const HttpResponse& from, httplib::Response& res, std::function<bool()> client_gone = {}) {
  res.status = from.status;
  std::string content_type;  // "" when the API gave none
  for (const auto& [name, value] : from.headers) {
    if (name == "Content-Type")
      content_type = value;
    else
      res.set_header(name, value);
  }
  if (!from.stream) {
    // An answer without a body (a CORS preflight's 204) goes without a Content-Type too.
    if (!from.body.empty() || !content_type.empty())
      res.set_content(from.body, content_type.empty() ? "text/plain" : content_type);
    return;
  }
  // The events go out as the job makes them. The stream goes with the provider when httplib is
  // done with the response; unfinished (the client left), it cancels its job then.
  auto stream = from.stream;
  res.set_chunked_content_provider(content_type, [stream, client_gone](size_t, httplib::DataSink& sink) {
    std::string chunk;
    const bool more = stream->next(chunk);
    if (!chunk.empty() && !sink.write(chunk.data(), chunk.size())) return false;
    if (!more) sink.done();
    return !more || !client_gone || !client_gone();
  });
}

}  // namespace

class ImageServer::Impl {
 public:
  explicit Impl(ServerOptions options) : options_(std::move(options)) {}

  void start();
  void shutdown();
  void wait_until_loaded() {
    if (!api_) throw Error(ErrorCode::InvalidArgument, "ImageServer::wait_until_loaded before start()");
    api_->wait_until_loaded();
  }
  std::string status() const { return api_ ? api_->status() : "loading"; }
  int port() const { return port_; }

 private:
  void routes();

  const ServerOptions options_;
  std::unique_ptr<HttpApi> api_;  // made by start(), which checks the options
  httplib::Server http_;
  std::thread listen_thread_;
  int port_ = 0;
  std::once_flag shutdown_once_;
};

void ImageServer::Impl::start() {
  const ServerOptions& o = options_;
  if (!is_loopback_host(o.host) && o.api_key.empty() && !o.insecure_no_auth)
    throw Error(ErrorCode::InvalidArgument,
                "refusing to serve on " + o.host +
                    " (not a loopback address) without an API key: give --api-key (or FLUXRT_API_KEY), or "
                    "--insecure-no-auth to serve anyone who can reach the port");
  api_ = std::make_unique<HttpApi>(o);

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
  api_->start_loading();
}

void ImageServer::Impl::shutdown() {
  std::call_once(shutdown_once_, [this] {
    if (!api_) return;  // never started
    api_->begin_drain();
    // Closes the listening socket at once; listen_after_bind then returns once every handler
    // has answered, and the handlers wait for their jobs, so what was accepted is finished.
    http_.stop();
    if (listen_thread_.joinable()) listen_thread_.join();
    api_->drain();
  });
}

void ImageServer::Impl::routes() {
  using httplib::Request;
  using httplib::Response;

  // The API's checks on the headers alone run before httplib reads a body: a client without the
  // key cannot make the server read 64 MiB first.
  http_.set_pre_routing_handler([this](const Request& req, Response& res) {
    HttpRequest head;
    head.method = req.method;
    head.path = req.path;
    head.headers.assign(req.headers.begin(), req.headers.end());
    HttpResponse answer;
    if (!api_->screen(head, answer)) return httplib::Server::HandlerResponse::Unhandled;
    send(answer, res);
    return httplib::Server::HandlerResponse::Handled;
  });

  // Statuses httplib sets itself (a body over the limit, an unparsable request) get the API's
  // JSON shape; what the API answered is left alone.
  http_.set_error_handler(httplib::Server::HandlerWithResponse([this](const Request& req, Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    send(api_->transport_error(res.status, req.method, req.path), res);
    return httplib::Server::HandlerResponse::Handled;
  }));

  http_.set_exception_handler([this](const Request& req, Response& res, std::exception_ptr) {
    send(api_->transport_error(500, req.method, req.path), res);
  });

  // Every path and method goes to the API, which routes it (and answers 404/405 itself).
  const auto handler = [this](const Request& req, Response& res) {
    HttpRequest request = api_request(req);
    send(api_->handle(request), res, request.client_gone);
  };
  http_.Get(".*", handler);
  http_.Post(".*", handler);
  http_.Put(".*", handler);
  http_.Patch(".*", handler);
  http_.Delete(".*", handler);
  http_.Options(".*", handler);
}

ImageServer::ImageServer(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
ImageServer::~ImageServer() { shutdown(); }
void ImageServer::start() { impl_->start(); }
int ImageServer::port() const { return impl_->port(); }
void ImageServer::wait_until_loaded() { impl_->wait_until_loaded(); }
void ImageServer::shutdown() { impl_->shutdown(); }
std::string ImageServer::status() const { return impl_->status(); }

}  // namespace fluxrt::server
