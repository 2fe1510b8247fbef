#pragma once
// Puts the process's worker-thread count back when a test scope ends, so a test that runs something
// on a chosen number of threads cannot leave the next test in the binary on it.
#include "core/threads.h"

namespace fluxrt::test {

struct RestoreThreadCount {
  int saved = num_threads();
  RestoreThreadCount() = default;
  explicit RestoreThreadCount(int threads) { set_num_threads(threads); }
  RestoreThreadCount(const RestoreThreadCount&) = delete;
  RestoreThreadCount& operator=(const RestoreThreadCount&) = delete;
  ~RestoreThreadCount() { set_num_threads(saved); }
};

}  // namespace fluxrt::test
