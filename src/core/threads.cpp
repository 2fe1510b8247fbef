#include "core/threads.h"

#include <omp.h>

#include <atomic>
#include <thread>

namespace fluxrt {
namespace {
std::atomic<int> g_threads{0};
}

int hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void set_num_threads(int n) {
  if (n <= 0) n = hardware_threads();
  g_threads.store(n);
  omp_set_num_threads(n);
}

int num_threads() {
  int n = g_threads.load();
  return n > 0 ? n : omp_get_max_threads();
}

}  // namespace fluxrt
