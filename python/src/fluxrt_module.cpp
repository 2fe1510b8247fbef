// fluxrt._fluxrt: the Python extension under the `fluxrt` package (python/fluxrt/__init__.py,
// docs/python.md). A thin layer over the public API alone (include/fluxrt/): requests and images
// cross as plain Python values, the diffusers-shaped surface is written in Python on top.
//
// What only C++ can do lives here. A pipeline's calls run as jobs of the library's
// fluxrt::Scheduler, one per pipeline, so calls from several Python threads batch. The calling
// thread waits for its job with the GIL released, in one place (run_job); it takes the GIL back
// after each step to hand the step to Python (the progress bar, the step callback) and to run the
// handlers of signals that arrived (Ctrl-C). An exception there abandons the job, which stops
// before the engine's next step, and is raised. The engine's own worker thread never runs Python.
// fluxrt::Error becomes the Python class registered for its code.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fluxrt/engine.h"
#include "fluxrt/image.h"
#include "fluxrt/lora.h"
#include "fluxrt/model_info.h"
#include "fluxrt/request_fields.h"
#include "fluxrt/run.h"
#include "fluxrt/scheduler.h"
#include "fluxrt/timing.h"

namespace py = pybind11;

namespace {

// ErrorCode name ("invalid argument", ...) -> the Python class, set by fluxrt/__init__.py.
// Leaked on purpose: destroying Python objects after the interpreter is gone would crash at exit.
std::map<std::string, py::object>& error_classes() {
  static auto* classes = new std::map<std::string, py::object>();
  return *classes;
}

void raise_engine_error(const fluxrt::Error& e) {
  const std::string code = fluxrt::error_code_name(e.code());
  auto it = error_classes().find(code);
  if (it == error_classes().end()) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return;
  }
  py::object error = it->second(py::str(e.what()));
  error.attr("code") = py::str(code);
  error.attr("field") = e.field().empty() ? py::object(py::none()) : py::object(py::str(e.field()));
  PyErr_SetObject(it->second.ptr(), error.ptr());
}

fluxrt::Image image_from(int width, int height, const py::bytes& rgb) {
  fluxrt::Image image;
  image.width = width;
  image.height = height;
  const std::string_view bytes = rgb;
  image.rgb.assign(bytes.begin(), bytes.end());
  return image;
}

py::dict metadata_dict(const fluxrt::ImageMetadata& metadata) {
  py::dict d;
  for (const auto& [key, value] : fluxrt::metadata_text(metadata)) d[py::str(key)] = py::str(value);
  return d;
}

py::dict result_dict(const fluxrt::GenerateResult& result) {
  py::list images;
  for (const fluxrt::GeneratedImage& g : result.images) {
    py::dict image;
    image["width"] = g.image.width;
    image["height"] = g.image.height;
    image["rgb"] = py::bytes(reinterpret_cast<const char*>(g.image.rgb.data()), g.image.rgb.size());
    image["seed"] = g.metadata.seed;
    image["metadata"] = metadata_dict(g.metadata);
    images.append(std::move(image));
  }
  py::dict d;
  d["images"] = std::move(images);
  d["width"] = result.width;
  d["height"] = result.height;
  d["steps"] = result.steps;
  d["guidance"] = result.guidance;
  d["used_cfg"] = result.used_cfg;
  d["timing_json"] = fluxrt::timing_report_json(result.timing);
  return d;
}

// One pipeline call: `requests` as one job (one engine call when they share a batch key, else one
// call each, in order), waited for with the GIL released. on_step(step, total, step_s, elapsed_s,
// eta_s, timestep) runs on this thread after each step; with step_by_step the engine waits for it
// before its next step (diffusers' callback_on_step_end), else it only trails the engine (a
// progress bar). Returns one result dict per request, each with the images of the engine call
// that made it (batch_images).
py::list run_job(fluxrt::Scheduler& scheduler, std::vector<fluxrt::GenerateRequest> requests,
                 const py::object& on_step, bool step_by_step) {
  fluxrt::JobOptions options;
  options.step_by_step = step_by_step;
  const std::shared_ptr<fluxrt::Job> job = scheduler.submit(std::move(requests), options);
  if (!job) throw fluxrt::Error(fluxrt::ErrorCode::Internal, "the pipeline's scheduler is shut down");
  fluxrt::Job::State state = job->state();
  size_t handled = 0;  // steps handed to on_step
  try {
    while (!state.done) {
      {
        py::gil_scoped_release release;  // the one place this module waits without the GIL
        state = job->wait(state.version, std::chrono::milliseconds(100));
      }
      // The handlers of signals that arrived meanwhile (Ctrl-C) run here, on the main thread only.
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      for (const fluxrt::Progress& p : job->progress(handled)) {
        ++handled;
        if (!on_step.is_none())
          on_step(p.step, p.total, p.step_seconds, p.elapsed_seconds, p.eta_seconds, p.timestep);
      }
      job->resume(handled);
    }
  } catch (...) {
    scheduler.abandon(job);  // stops before the engine's next step; the exception is the caller's
    throw;
  }
  if (job->error()) throw fluxrt::Error(*job->error());
  py::list out;
  for (const fluxrt::GenerateResult& r : job->results()) {
    py::dict d = result_dict(r);
    d["batch_images"] = state.batch_images;
    out.append(std::move(d));
  }
  return out;
}

std::unique_ptr<fluxrt::Scheduler> open_scheduler(fluxrt::Engine& engine, int max_batch, int batch_window_ms,
                                                  int max_queue) {
  fluxrt::SchedulerOptions options;
  options.max_batch = max_batch;
  options.batch_window = std::chrono::milliseconds(batch_window_ms);
  options.max_queue = max_queue;
  return std::make_unique<fluxrt::Scheduler>(engine, options);
}

py::dict stats_dict(const fluxrt::SchedulerStats& s) {
  py::dict d;
  d["queued"] = s.queued;
  d["running"] = s.running;
  d["cancelled"] = s.cancelled;
  d["images"] = s.images;
  d["steps"] = s.steps;
  d["batches"] = s.batches;
  return d;
}

py::dict defaults_dict(const fluxrt::ModelDefaults& d) {
  py::dict out;
  out["steps"] = d.steps;
  out["guidance"] = d.guidance;
  out["width"] = d.width;
  out["height"] = d.height;
  out["max_sequence_length"] = d.max_sequence_length;
  out["size_multiple"] = d.size_multiple;
  out["img2img_guidance"] = d.img2img_guidance;
  out["img2img_strength"] = d.img2img_strength;
  return out;
}

// The run from_pretrained states, resolved as `fluxrt generate` resolves its flags (the settings
// resolver: a preset's defaults, the model resolved once, the memory check), so Engine(run) opens
// the model without resolving it again.
fluxrt::Run resolve(std::optional<std::string> model, std::optional<std::string> preset,
                    const std::string& device, const std::string& precision, std::optional<int> threads,
                    std::optional<bool> low_memory, std::optional<std::string> components, bool vae_encoder,
                    const std::vector<std::pair<std::string, float>>& loras,
                    std::optional<std::string> text_encoder, bool free_text_encoder) {
  fluxrt::RunSettings s;
  s.model = std::move(model);
  s.preset = std::move(preset);
  s.device = device;
  s.dtype = precision;
  fluxrt::parse_precision(precision, "precision");  // before the model is resolved
  s.threads = threads;
  s.low_memory = low_memory;
  s.free_text_encoder = free_text_encoder;
  s.components = std::move(components);
  s.text_encoder = std::move(text_encoder);
  s.loras.emplace();
  for (const auto& [path, strength] : loras) s.loras->push_back({path, strength});
  s.writes_images = false;
  py::gil_scoped_release release;  // reads checkpoint headers: let other threads run
  fluxrt::Run run = fluxrt::resolve_run(s);
  run.engine.vae_encoder = vae_encoder;
  return run;
}

// A Python value as the field table takes it (numbers already made int or float by the caller).
fluxrt::FieldValue field_value(const py::handle& value, const std::string& name) {
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (!py::isinstance<py::bool_>(value) && py::isinstance<py::int_>(value)) {
    try {
      return value.cast<int64_t>();
    } catch (const py::cast_error&) {
      return py::str(value).cast<std::string>();  // past int64: the field reads it in full from text
    }
  }
  if (py::isinstance<py::float_>(value)) return value.cast<double>();
  throw fluxrt::Error(fluxrt::ErrorCode::InvalidArgument,
                      name + " must be a number or a string, got " +
                          py::str(value.get_type().attr("__name__")).cast<std::string>(),
                      name);
}

}  // namespace

// fluxrt serve's request handling: HttpApi, HttpStream, ClientWatch (http_api_bindings.cpp).
void bind_http_api(py::module_& m);

PYBIND11_MODULE(_fluxrt, m) {
  m.doc() = "fluxrt's C++ engine; use the fluxrt package (fluxrt.FluxPipeline) rather than this module";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const fluxrt::Error& e) {
      raise_engine_error(e);
    }
  });

  m.def("version", &fluxrt::version, "the version of the fluxrt library linked in");
  m.def(
      "_register_error_classes",
      [](const py::dict& classes) {
        for (const auto& [code, cls] : classes)
          error_classes()[py::cast<std::string>(code)] = py::reinterpret_borrow<py::object>(cls);
      },
      "maps ErrorCode names (\"invalid argument\", ...) to the exception classes to raise");
  m.def(
      "inspect_model",
      [](const std::string& model) { return fluxrt::model_info_json(fluxrt::inspect_model(model)); },
      py::arg("model"), "`fluxrt info --json` for a model, without loading it");
  m.def(
      "encode_png",
      [](int width, int height, const py::bytes& rgb, const fluxrt::TextChunks& text) {
        const std::vector<uint8_t> png = fluxrt::encode_png(image_from(width, height, rgb), text);
        return py::bytes(reinterpret_cast<const char*>(png.data()), png.size());
      },
      py::arg("width"), py::arg("height"), py::arg("rgb"), py::arg("text"),
      "PNG bytes with text chunks, as `fluxrt generate` writes them");

  m.def(
      "inspect_lora",
      [](const std::string& path) {
        const fluxrt::LoraInfo info = fluxrt::inspect_lora(path);
        py::dict d;
        d["path"] = info.path;
        d["format"] = info.format;
        d["family"] = info.family;
        d["ranks"] = info.ranks;
        d["alphas"] = info.alphas;
        d["modules"] = info.modules;
        d["module_kinds"] = info.module_kinds;
        d["kinds"] = info.kinds;
        d["sha256"] = info.sha256;
        return d;
      },
      py::arg("path"), "`fluxrt info` for a LoRA file: its format, family, kinds, ranks, alphas and modules");

  py::class_<fluxrt::GenerateRequest>(m, "Request")
      .def(py::init<>())
      .def_readwrite("prompts", &fluxrt::GenerateRequest::prompts)
      .def_readwrite("images_per_prompt", &fluxrt::GenerateRequest::images_per_prompt)
      .def_readwrite("width", &fluxrt::GenerateRequest::width)
      .def_readwrite("height", &fluxrt::GenerateRequest::height)
      .def_readwrite("seed", &fluxrt::GenerateRequest::seed)
      .def_property(
          "loras",
          [](const fluxrt::GenerateRequest& r) {
            std::vector<std::pair<std::string, float>> out;
            for (const fluxrt::Lora& l : r.loras) out.emplace_back(l.path, l.strength);
            return out;
          },
          [](fluxrt::GenerateRequest& r, const std::vector<std::pair<std::string, float>>& loras) {
            r.loras.clear();
            for (const auto& [path, strength] : loras) r.loras.push_back({path, strength});
          },
          "this request's LoRAs, applied unmerged: [(path, strength), ...]")
      .def(
          "add_reference_image",
          [](fluxrt::GenerateRequest& r, int width, int height, const py::bytes& rgb,
             const std::string& name) {
            r.reference_images.push_back(image_from(width, height, rgb));
            r.reference_image_names.push_back(name);
          },
          py::arg("width"), py::arg("height"), py::arg("rgb"), py::arg("name") = "")
      .def(
          "set_init_image",
          [](fluxrt::GenerateRequest& r, int width, int height, const py::bytes& rgb,
             const std::string& name) {
            r.init_image = image_from(width, height, rgb);
            r.init_image_name = name;
          },
          py::arg("width"), py::arg("height"), py::arg("rgb"), py::arg("name") = "")
      .def(
          "set_mask_image",
          [](fluxrt::GenerateRequest& r, int width, int height, const py::bytes& rgb,
             const std::string& name) {
            r.mask_image = image_from(width, height, rgb);
            r.mask_image_name = name;
          },
          py::arg("width"), py::arg("height"), py::arg("rgb"), py::arg("name") = "");

  py::class_<fluxrt::Run>(m, "Run")
      .def_readonly("model", &fluxrt::Run::model)
      .def_readonly("variant", &fluxrt::Run::variant)
      .def_readonly("preset", &fluxrt::Run::preset)
      .def_readonly("notes", &fluxrt::Run::notes)
      .def_property_readonly(
          "request", [](const fluxrt::Run& r) { return r.request; },
          "a copy of the request the preset states: what a call's unset arguments become");
  m.def("resolve_run", &resolve, py::arg("model") = std::nullopt, py::arg("preset") = std::nullopt,
        py::arg("device") = "cpu", py::arg("precision") = "bf16", py::arg("threads") = std::nullopt,
        py::arg("low_memory") = std::nullopt, py::arg("components") = std::nullopt,
        py::arg("vae_encoder") = true, py::arg("loras") = std::vector<std::pair<std::string, float>>{},
        py::arg("text_encoder") = std::nullopt, py::arg("free_text_encoder") = false,
        "the settings resolver of fluxrt generate: a preset's defaults, the model resolved once "
        "(fluxrt/run.h)");

  py::class_<fluxrt::Engine>(m, "Engine")
      .def(py::init([](const fluxrt::Run& run) {
             py::gil_scoped_release release;  // loading takes seconds: let other threads run
             return std::make_unique<fluxrt::Engine>(run);
           }),
           py::arg("run"))
      .def(
          "set_field",
          [](const fluxrt::Engine& e, fluxrt::GenerateRequest& r, const std::string& api,
             const py::handle& value) {
            const fluxrt::RequestField* field = fluxrt::find_request_field_by_api(api);
            if (field == nullptr)
              throw fluxrt::Error(fluxrt::ErrorCode::InvalidArgument, "no request field named " + api);
            fluxrt::set_request_field(r, *field, field_value(value, api), e.limits(), api);
          },
          py::arg("request"), py::arg("name"), py::arg("value"),
          "sets a request field by its API name (num_inference_steps, ...) within this model's limits")
      .def("batch_key", &fluxrt::Engine::batch_key, py::arg("request"))
      .def(
          "plan",
          [](const fluxrt::Engine& e, const fluxrt::GenerateRequest& r) {
            const fluxrt::RequestPlan p = e.plan(r);
            py::dict d;
            d["width"] = p.width;
            d["height"] = p.height;
            d["steps"] = p.steps;
            d["steps_run"] = p.steps_run;
            d["guidance"] = p.guidance;
            d["max_sequence_length"] = p.max_sequence_length;
            d["strength"] = p.strength;
            d["images"] = p.images;
            d["cfg"] = p.cfg;
            d["notes"] = p.notes;
            return d;
          },
          py::arg("request"))
      .def("defaults", [](const fluxrt::Engine& e) { return defaults_dict(e.defaults()); })
      .def("info_json", [](const fluxrt::Engine& e) { return fluxrt::model_info_json(e.info()); })
      .def(
          "max_reference_images", [](const fluxrt::Engine& e) { return e.limits().max_reference_images; },
          "how many reference images a request may carry (klein 4, FLUX.1 Kontext 1, FLUX.1 0)")
      .def(
          "takes_field",
          [](const fluxrt::Engine& e, const std::string& api) {
            const fluxrt::RequestField* field = fluxrt::find_request_field_by_api(api);
            return field != nullptr && fluxrt::request_field_taken(*field, e.limits());
          },
          py::arg("name"),
          "whether this model takes the request field with this API name (max_area: Kontext)")
      .def_property_readonly("model", &fluxrt::Engine::model)
      .def_property_readonly("variant", &fluxrt::Engine::variant)
      .def_property_readonly("device", [](const fluxrt::Engine& e) { return e.options().device; })
      .def_property_readonly(
          "precision", [](const fluxrt::Engine& e) { return fluxrt::precision_name(e.options().precision); })
      .def_property_readonly("low_memory",
                             [](const fluxrt::Engine& e) { return e.options().low_memory.value_or(false); });

  py::class_<fluxrt::Scheduler>(m, "Scheduler")
      .def(py::init(&open_scheduler), py::arg("engine"), py::arg("max_batch") = 1,
           py::arg("batch_window_ms") = 0, py::arg("max_queue") = 0, py::keep_alive<1, 2>(),
           "the engine's queue: calls whose requests share a batch key run together, up to max_batch images, "
           "the first waiting up to batch_window_ms for the others; max_queue 0: no limit")
      .def("run", &run_job, py::arg("requests"), py::arg("on_step") = py::none(),
           py::arg("step_by_step") = false,
           "runs the requests as one job and waits for it; one result dict per request")
      .def("stats", [](const fluxrt::Scheduler& s) { return stats_dict(s.stats()); });

  bind_http_api(m);
}
