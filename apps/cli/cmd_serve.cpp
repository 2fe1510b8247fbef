// `fluxrt serve`: the OpenAI-compatible image server (apps/server, docs/server.md) on one model.
// This file turns flags into ServerOptions, resolves the model and engine settings the way
// `fluxrt generate` does (no --model: the bundled demo model and its preset), and waits for
// SIGTERM or SIGINT, which drain the server: no new connections, the accepted requests finish,
// exit 0.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "commands.h"
#include "fluxrt/run.h"
#include "request_flags.h"
#include "server/server.h"

namespace fluxrt::cli {
namespace {

bool given(const ServeOptions& o, const char* flag) { return o.command->count(flag) > 0; }

// "WxH" for --max-size.
void parse_max_size(const std::string& size, int* w, int* h) {
  char x = 0;
  char rest = 0;
  if (std::sscanf(size.c_str(), "%d%c%d%c", w, &x, h, &rest) != 3 || x != 'x' || *w <= 0 || *h <= 0)
    throw Error(ErrorCode::InvalidArgument,
                "--max-size must be WIDTHxHEIGHT, e.g. 2048x2048 (got '" + size + "')");
}

}  // namespace

CLI::App* add_serve_command(CLI::App& app, ServeOptions& o) {
  CLI::App* cmd =
      app.add_subcommand("serve", "serve an OpenAI-compatible image API over HTTP (docs/server.md)");
  o.command = cmd;
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->add_option("--model", o.model,
                  "diffusers pipeline folder, .safetensors file or hub repo id (default: the demo model)");
  cmd->add_option("--components", o.components,
                  "with --model FILE: the pipeline folder of the other components");
  cmd->add_option(
      "--text-encoder", o.text_encoder,
      "a single text-encoder file (.gguf in llama.cpp names, e.g. a Qwen3 or T5-XXL GGUF, or .safetensors) "
      "used instead of the folder's klein Qwen3 / FLUX.1 T5; the tokenizer still comes from the folder");
  cmd->add_option("--host", o.host, "address to listen on (default 127.0.0.1; others need --api-key)");
  cmd->add_option("--port", o.port, "TCP port (default 8080; 0 picks a free one)");
  cmd->add_option("--api-key", o.api_key, "require 'Authorization: Bearer KEY' (default: $FLUXRT_API_KEY)");
  cmd->add_flag("--insecure-no-auth", o.insecure_no_auth, "allow a non-loopback --host without an API key");
  cmd->add_option("--cors-origin", o.cors_origin, "send CORS headers for this origin (or *); default: none");
  cmd->add_option("--max-queue", o.max_queue, "requests waiting before 429 (default 32)");
  cmd->add_option("--max-batch", o.max_batch, "images run together in one engine call (default 1)");
  cmd->add_option("--batch-window-ms", o.batch_window_ms,
                  "how long a request waits for others to batch with (default 0)");
  cmd->add_option("--max-size", o.max_size, "largest WxH a request may ask for (default 2048x2048)");
  cmd->add_option("--max-images", o.max_images, "largest n per request (default 4)");
  cmd->add_option("--max-body-mb", o.max_body_mb, "largest request body in MiB (default 64)");
  cmd->add_option("--max-upload-pixels", o.max_upload_pixels,
                  "largest uploaded image in pixels (default 16777216)");
  cmd->add_option("--dtype", o.dtype,
                  "bf16, f32, or int8 (the transformer's linears W8A8, the rest bf16; CPU only)")
      ->check(CLI::IsMember(dtype_choices()));
  cmd->add_option("--device", o.device, "cpu, cuda or cuda:N where built");
  cmd->add_option("--threads", o.threads, "worker threads (0 = all cores)");
  cmd->add_flag("--low-memory", o.low_memory, "keep one large component resident at a time");
  cmd->add_option("--vae-tiling", o.vae_tiling, "auto, on or off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  cmd->add_flag("--cuda-graphs", o.cuda_graphs, "on cuda:N: replay the denoising step as a CUDA graph");
  cmd->add_option("--config,-c", o.config,
                  "run preset whose request fields (size, steps, ...) are the defaults");
  add_request_field_flags(*cmd, o.fields);
  cmd->add_option("--lora-dir", o.lora_dir,
                  "folder of LoRA .safetensors files that requests may name in 'loras' (docs/server.md)");
  cmd->add_option("--lora", o.loras,
                  "LoRA FILE[:STRENGTH] merged into the model at load, for every request; repeatable")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  return cmd;
}

int run_serve(const ServeOptions& o) {
  // The model, the engine and the requests' defaults exactly as `fluxrt generate` resolves them
  // (no --model: the bundled demo model and its preset).
  RunSettings settings;
  if (given(o, "--model")) settings.model = o.model;
  if (given(o, "--components")) settings.components = o.components;
  if (given(o, "--text-encoder")) settings.text_encoder = o.text_encoder;
  if (given(o, "--dtype")) settings.dtype = o.dtype;
  if (given(o, "--device")) settings.device = o.device;
  if (given(o, "--threads")) settings.threads = o.threads;
  if (given(o, "--low-memory")) settings.low_memory = o.low_memory;
  if (given(o, "--vae-tiling")) settings.vae_tiling = o.vae_tiling;
  if (given(o, "--config")) settings.preset = o.config;
  if (!o.loras.empty()) {
    settings.loras.emplace();
    for (const std::string& text : o.loras) settings.loras->push_back(parse_lora_text(text));
  }
  settings.fields = o.fields;
  settings.cuda_graphs = o.cuda_graphs;
  settings.writes_images = false;
  auto run = std::make_shared<Run>(resolve_run(settings));
  // A server's requests may bring images (/v1/images/edits): it keeps the VAE encoder.
  run->engine.vae_encoder = true;

  server::ServerOptions s;
  s.model = run->model;
  s.engine = run->engine;
  // The engine on the model as resolved above, not resolved a second time.
  s.engine_factory = [run] { return std::make_unique<Engine>(*run); };
  s.request_defaults = run->request;
  s.host = o.host;
  s.port = o.port;
  s.api_key = o.api_key;
  if (!given(o, "--api-key"))
    if (const char* env = std::getenv("FLUXRT_API_KEY")) s.api_key = env;
  s.insecure_no_auth = o.insecure_no_auth;
  s.cors_origin = o.cors_origin;
  s.max_queue = o.max_queue;
  s.max_batch = o.max_batch;
  s.batch_window_ms = o.batch_window_ms;
  parse_max_size(o.max_size, &s.max_width, &s.max_height);
  s.max_images = o.max_images;
  if (o.max_body_mb < 1) throw Error(ErrorCode::InvalidArgument, "--max-body-mb must be at least 1");
  s.max_body_bytes = size_t(o.max_body_mb) << 20;
  s.max_upload_pixels = o.max_upload_pixels;
  s.lora_dir = o.lora_dir;

  // Blocked in every thread (the server's threads inherit the mask), taken here by sigwait: the
  // drain then runs on this thread, not in a signal handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  server::ImageServer server(s);
  server.start();
  std::fprintf(stderr, "fluxrt serve: listening on http://%s:%d (%s), loading %s\n", s.host.c_str(),
               server.port(), s.api_key.empty() ? "no API key" : "API key required", run->model.c_str());
  std::fflush(stderr);
  for (const std::string& note : run->notes) std::fprintf(stderr, "fluxrt serve: note: %s\n", note.c_str());
  std::thread loader_report([&] {
    try {
      server.wait_until_loaded();
      std::fprintf(stderr, "fluxrt serve: model loaded (%s); ready\n", run->variant.c_str());
    } catch (const Error& e) {
      std::fprintf(stderr, "fluxrt: error: %s\n", e.what());
      std::fflush(stderr);
      ::kill(::getpid(), SIGTERM);  // a server with no model has nothing to serve
    }
  });
  int signal = 0;
  sigwait(&signals, &signal);
  std::fprintf(stderr, "fluxrt serve: %s: finishing the running requests\n",
               signal == SIGTERM ? "SIGTERM" : "SIGINT");
  server.shutdown();
  loader_report.join();
  const bool failed = server.status() == "error";
  std::fprintf(stderr, "fluxrt serve: stopped\n");
  return failed ? 1 : 0;
}

}  // namespace fluxrt::cli
