#include "pipelines/component_loading.h"

#include <exception>
#include <thread>

#include "core/threads.h"

namespace fluxrt::pipelines {

void load_components(const std::vector<std::function<void()>>& jobs, bool parallel) {
  if (!parallel) {
    for (const std::function<void()>& job : jobs) job();
    return;
  }
  std::vector<std::exception_ptr> errors(jobs.size());
  std::vector<std::thread> threads;
  threads.reserve(jobs.size());
  const int n = num_threads();
  for (size_t i = 0; i < jobs.size(); ++i) {
    threads.emplace_back([&, i] {
      set_num_threads(n);
      try {
        jobs[i]();
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

std::string text_encoding_key(const std::vector<std::string>& parts) {
  std::string key;
  for (const std::string& part : parts) key += std::to_string(part.size()) + ":" + part + ";";
  return key;
}

}  // namespace fluxrt::pipelines
