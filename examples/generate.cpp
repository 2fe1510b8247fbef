// A program built against an installed fluxrt (docs/api.md): opens a model, generates one image
// with progress on stderr and writes it as a PNG carrying its settings.
//
//   generate <model> <out.png> [prompt] [WxH] [steps] [seed]
//
// <model> is a diffusers folder (the bundled demo: <prefix>/share/fluxrt/models/demo), a
// .safetensors file or a hub repo id in the local cache. Unset size and steps are the model's.
#include <fluxrt/engine.h>

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (argc < 3 || argc > 7) {
    std::fprintf(stderr, "usage: %s <model> <out.png> [prompt] [WxH] [steps] [seed]\n", argv[0]);
    return 2;
  }
  fluxrt::GenerateRequest request;
  request.prompts = {argc > 3 ? argv[3] : "a red circle on a blue background"};
  if (argc > 4) {
    int width = 0, height = 0;
    if (std::sscanf(argv[4], "%dx%d", &width, &height) != 2) {
      std::fprintf(stderr, "size '%s' is not WxH\n", argv[4]);
      return 2;
    }
    request.width = width;
    request.height = height;
  }
  if (argc > 5) request.steps = std::atoi(argv[5]);
  if (argc > 6) request.seed = std::strtoull(argv[6], nullptr, 10);

  try {
    fluxrt::Engine engine(argv[1]);  // loads once; generate may be called again and from several threads
    fluxrt::Callbacks callbacks;
    callbacks.on_progress = [](const fluxrt::Progress& p) {
      std::fprintf(stderr, "step %d/%d, %.0f ms, ETA %.1f s\n", p.step, p.total, 1e3 * p.step_seconds,
                   p.eta_seconds);
    };
    const fluxrt::GenerateResult result = engine.generate(request, callbacks);
    const fluxrt::GeneratedImage& out = result.images.front();
    fluxrt::write_png(argv[2], out.image, fluxrt::metadata_text(out.metadata));
    std::printf("%s: %dx%d, %s, %d steps at %.1f ms/step (fluxrt %s)\n", argv[2], out.image.width,
                out.image.height, engine.variant().c_str(), result.steps, result.timing.run.ms_per_step(),
                fluxrt::version());
    return 0;
  } catch (const fluxrt::Error& e) {
    std::fprintf(stderr, "error (%s): %s\n", fluxrt::error_code_name(e.code()), e.what());
    return 1;
  }
}
