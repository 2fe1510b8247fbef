#pragma once
// The demo model's pixel classifier, rule for rule the one in tools/demo_model/shapes.py
// (classify / agrees): background = per-channel median of the 2-pixel frame, shape = pixels
// farther than 80 (RGB L2) from it, shape colour = per-channel median of those pixels, both named
// by the nearest palette colour, position = the shape centroid's band (< 0.4, 0.4..0.6, > 0.6)
// per axis. Change both together.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "io/image.h"

namespace fluxrt::test::demo {

struct PaletteColour {
  const char* name;
  std::array<int, 3> rgb;
};

inline const std::vector<PaletteColour>& palette() {
  static const std::vector<PaletteColour> colours = {
      {"red", {220, 30, 30}},    {"green", {30, 160, 50}},   {"blue", {30, 70, 230}},
      {"yellow", {245, 220, 30}}, {"orange", {245, 135, 20}}, {"purple", {130, 40, 170}},
      {"pink", {250, 140, 200}}, {"white", {245, 245, 245}}, {"black", {20, 20, 20}},
      {"gray", {128, 128, 128}},
  };
  return colours;
}

inline constexpr int kBorder = 2;
inline constexpr double kShapeDistance = 80.0;
inline constexpr int kMinShapePixels = 12;
inline constexpr double kBandLow = 0.40, kBandHigh = 0.60;

// numpy.median: the mean of the two middle values for an even count.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline std::string nearest_colour(const std::array<double, 3>& rgb) {
  std::string best;
  double best_d = 1e300;
  for (const auto& c : palette()) {  // first of equals wins, like Python's min()
    double d = 0;
    for (int k = 0; k < 3; ++k) d += (rgb[k] - c.rgb[k]) * (rgb[k] - c.rgb[k]);
    if (d < best_d) best_d = d, best = c.name;
  }
  return best;
}

struct Classification {
  std::string background;
  std::string shape_colour;  // empty when fewer than kMinShapePixels differ from the background
  int horizontal = 0, vertical = 0;  // -1 left/top, 0 centre, +1 right/bottom
  int shape_pixels = 0;
  std::string str() const {
    return "background " + background + ", shape " + (shape_colour.empty() ? "none" : shape_colour) + " at (" +
           std::to_string(horizontal) + ", " + std::to_string(vertical) + "), " + std::to_string(shape_pixels) +
           " px";
  }
};

inline Classification classify(const io::Image& image) {
  const int w = image.width, h = image.height, ch = image.channels;
  auto px = [&](int x, int y, int c) { return static_cast<double>(image.pixels[(size_t(y) * w + x) * ch + c]); };
  // Same pixel order as shapes.py (top rows, bottom rows, left columns, right columns) so ties in
  // the median cannot differ.
  std::array<std::vector<double>, 3> frame;
  auto add = [&](int x, int y) {
    for (int c = 0; c < 3; ++c) frame[c].push_back(px(x, y, c));
  };
  for (int y = 0; y < kBorder; ++y)
    for (int x = 0; x < w; ++x) add(x, y);
  for (int y = h - kBorder; y < h; ++y)
    for (int x = 0; x < w; ++x) add(x, y);
  for (int y = kBorder; y < h - kBorder; ++y)
    for (int x = 0; x < kBorder; ++x) add(x, y);
  for (int y = kBorder; y < h - kBorder; ++y)
    for (int x = w - kBorder; x < w; ++x) add(x, y);
  std::array<double, 3> background{};
  for (int c = 0; c < 3; ++c) background[c] = median(frame[c]);

  Classification out;
  out.background = nearest_colour(background);
  std::array<std::vector<double>, 3> shape;
  double sum_x = 0, sum_y = 0;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      double d2 = 0;
      for (int c = 0; c < 3; ++c) d2 += (px(x, y, c) - background[c]) * (px(x, y, c) - background[c]);
      if (std::sqrt(d2) > kShapeDistance) {
        for (int c = 0; c < 3; ++c) shape[c].push_back(px(x, y, c));
        sum_x += x, sum_y += y;
        ++out.shape_pixels;
      }
    }
  }
  if (out.shape_pixels < kMinShapePixels) return out;
  std::array<double, 3> colour{};
  for (int c = 0; c < 3; ++c) colour[c] = median(shape[c]);
  out.shape_colour = nearest_colour(colour);
  auto band = [](double v) { return v < kBandLow ? -1 : (v > kBandHigh ? 1 : 0); };
  out.horizontal = band((sum_x / out.shape_pixels + 0.5) / w);
  out.vertical = band((sum_y / out.shape_pixels + 0.5) / h);
  return out;
}

}  // namespace fluxrt::test::demo
