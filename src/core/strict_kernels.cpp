#include "core/strict_kernels.h"

#include <atomic>
#include <cstdlib>
#include <string_view>

namespace fluxrt {
namespace {

std::atomic<int> g_strict{-1};  // -1: not read yet

int strict_from_env() {
  const char* v = std::getenv("FLUXRT_STRICT_KERNELS");
  return v && std::string_view(v) == "1" ? 1 : 0;
}

}  // namespace

bool strict_kernels() {
  int s = g_strict.load();
  if (s < 0) {
    s = strict_from_env();
    g_strict.store(s);
  }
  return s == 1;
}

void set_strict_kernels(bool strict) { g_strict.store(strict ? 1 : 0); }

}  // namespace fluxrt
