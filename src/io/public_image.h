#pragma once
// Between the public fluxrt::Image (RGB only, include/fluxrt/image.h) and io::Image (1, 3 or 4
// channels), for the code that implements the public API.
#include "fluxrt/image.h"
#include "io/image.h"

namespace fluxrt::io {

// InvalidArgument naming `what` when the pixel count is not width x height x 3.
Image from_public(const fluxrt::Image& image, const char* what = "image");
// Converts to RGB first (to_rgb) when the image has 1 or 4 channels.
fluxrt::Image to_public(Image image);

}  // namespace fluxrt::io
