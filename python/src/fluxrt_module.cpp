// fluxrt._fluxrt: the Python extension under the `fluxrt` package (python/fluxrt/__init__.py,
// docs/python.md). A thin layer over the public API alone (include/fluxrt/): requests and images
// cross as plain Python values, the diffusers-shaped surface is written in Python on top.
//
// What only C++ can do lives here: the GIL is released while the engine loads and generates, so
// other Python threads run (and may call the same engine, which serialises calls itself); the
// per-step callback takes the GIL back to run Python and to check for signals, and an exception
// there (Ctrl-C's KeyboardInterrupt, an error in a user callback) cancels the call at the next
// step and is raised again once the engine has stopped; fluxrt::Error becomes the Python class
// registered for its code.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

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

// One generate call's bridge between the engine's thread and Python: the step callback and the
// first exception it raised, which cancels the call.
class StepBridge {
 public:
  explicit StepBridge(py::object on_step) : on_step_(std::move(on_step)) {}

  // Runs on the generating thread, without the GIL.
  void on_progress(const fluxrt::Progress& p) {
    py::gil_scoped_acquire gil;
    if (error_) return;  // already stopping
    try {
      // The handlers of signals that arrived meanwhile (Ctrl-C) run here, on the main thread only.
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      if (!on_step_.is_none())
        on_step_(p.step, p.total, p.step_seconds, p.elapsed_seconds, p.eta_seconds, p.timestep);
    } catch (py::error_already_set& e) {
      error_ = std::make_unique<py::error_already_set>(std::move(e));
      callbacks.cancel.cancel();
    }
  }

  // With the GIL held: the stored exception, if the callback raised one.
  void rethrow_if_raised() {
    if (error_) {
      std::unique_ptr<py::error_already_set> e = std::move(error_);
      throw std::move(*e);
    }
  }

  fluxrt::Callbacks callbacks;

 private:
  py::object on_step_;
  std::unique_ptr<py::error_already_set> error_;
};

// requests run as one batch (generate_batch) when `batch` and there are several, else one call
// each in order. Returns one result dict per call.
py::list generate(fluxrt::Engine& engine, const std::vector<fluxrt::GenerateRequest>& requests, bool batch,
                  py::object on_step) {
  StepBridge bridge(std::move(on_step));
  bridge.callbacks.on_progress = [&bridge](const fluxrt::Progress& p) { bridge.on_progress(p); };
  std::vector<fluxrt::GenerateResult> results;
  try {
    py::gil_scoped_release release;
    if (batch && requests.size() > 1) {
      results = engine.generate_batch(requests, bridge.callbacks);
    } else {
      for (const fluxrt::GenerateRequest& r : requests)
        results.push_back(engine.generate(r, bridge.callbacks));
    }
  } catch (const fluxrt::Error&) {
    bridge.rethrow_if_raised();  // the callback's exception caused the cancel: that is the error
    throw;
  }
  // A callback that raised during the last step: the engine may have finished anyway.
  bridge.rethrow_if_raised();
  py::list out;
  for (const fluxrt::GenerateResult& r : results) out.append(result_dict(r));
  return out;
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
                    std::optional<std::string> text_encoder) {
  fluxrt::RunSettings s;
  s.model = std::move(model);
  s.preset = std::move(preset);
  s.device = device;
  s.dtype = precision;
  if (precision != "bf16" && precision != "f32")
    throw fluxrt::Error(fluxrt::ErrorCode::InvalidArgument,
                        "precision must be \"bf16\" or \"f32\", got \"" + precision + "\"");
  s.threads = threads;
  s.low_memory = low_memory;
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
        d["sha256"] = info.sha256;
        return d;
      },
      py::arg("path"), "`fluxrt info` for a LoRA file: its format, family, ranks, alphas and modules");

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
        py::arg("text_encoder") = std::nullopt,
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
      .def("generate", &generate, py::arg("requests"), py::arg("batch") = true,
           py::arg("on_step") = py::none(),
           "runs the requests (one batch when `batch` and they share a batch key); one result dict per call")
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
      .def_property_readonly("model", &fluxrt::Engine::model)
      .def_property_readonly("variant", &fluxrt::Engine::variant)
      .def_property_readonly("device", [](const fluxrt::Engine& e) { return e.options().device; })
      .def_property_readonly("precision",
                             [](const fluxrt::Engine& e) {
                               return e.options().precision == fluxrt::Precision::F32 ? "f32" : "bf16";
                             })
      .def_property_readonly("low_memory",
                             [](const fluxrt::Engine& e) { return e.options().low_memory.value_or(false); });
}
