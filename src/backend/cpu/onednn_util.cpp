#include "backend/cpu/onednn_util.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "core/strict_kernels.h"
#include "core/threads.h"

namespace fluxrt::backend::onednn {

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

bool native_bf16() {
  static const bool native = [] {
    // cpu_isa values are bit sets: every ISA with native bf16 contains avx512_core_bf16's bits.
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    return (isa & bf16) == bf16;
  }();
  return native;
}

bool native_int8() {
  static const bool native = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    for (dnnl::cpu_isa vnni : {dnnl::cpu_isa::avx2_vnni, dnnl::cpu_isa::avx512_core_vnni}) {
      const auto bits = static_cast<unsigned>(vnni);
      if ((isa & bits) == bits) return true;
    }
    return false;
  }();
  return native;
}

const char* isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

dnnl::memory::data_type to_dnnl(DType dtype) {
  switch (dtype) {
    case DType::F32: return dnnl::memory::data_type::f32;
    case DType::BF16: return dnnl::memory::data_type::bf16;
    case DType::F16: return dnnl::memory::data_type::f16;
    default: fail(ErrorCode::Unsupported, "[onednn] no oneDNN type for {}", dtype_name(dtype));
  }
}

namespace {
std::atomic<int64_t> g_scratchpad_allocations{0};
}  // namespace

void* thread_scratchpad(size_t bytes) {
  struct Buffer {
    std::unique_ptr<char, decltype(&std::free)> data{nullptr, &std::free};
    size_t size = 0;
  };
  thread_local Buffer buffer;
  if (bytes > buffer.size) {
    const size_t rounded = (bytes + 4095) / 4096 * 4096;
    buffer.data.reset(static_cast<char*>(std::aligned_alloc(4096, rounded)));
    FLUXRT_CHECK(buffer.data != nullptr, ErrorCode::OutOfMemory,
                 "[onednn] cannot allocate a {} byte scratchpad", rounded);
    buffer.size = rounded;
    g_scratchpad_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  return buffer.data.get();
}

int64_t scratchpad_allocations() { return g_scratchpad_allocations.load(std::memory_order_relaxed); }

void sync_threads() {
  // oneDNN's OpenMP runtime follows omp_get_max_threads() of the calling thread.
  const int n = num_threads();
  if (omp_get_max_threads() != n) omp_set_num_threads(n);
}

bool is_reference_impl(std::string_view impl) {
  // impl_info_str is "name:isa" (e.g. "brg:avx512_core_amx", "jit:avx2", "gemm:jit", "ref:any");
  // a reference kernel has a part that starts with "ref".
  size_t start = 0;
  while (start <= impl.size()) {
    const size_t end = std::min(impl.find(':', start), impl.size());
    if (impl.substr(start, end - start).rfind("ref", 0) == 0) return true;
    start = end + 1;
  }
  return false;
}

namespace {
std::atomic<int> g_reference_count{0};
std::mutex g_reported_mutex;
std::set<std::string> g_reported;
}  // namespace

bool first_report(const std::string& key) {
  std::lock_guard<std::mutex> lock(g_reported_mutex);
  return g_reported.insert(key).second;
}

void check_implementation(std::string_view op, std::string_view impl, const std::string& shape) {
  if (!is_reference_impl(impl)) return;
  g_reference_count.fetch_add(1);
  if (strict_kernels()) {
    fail(ErrorCode::Unsupported,
         "[{}] oneDNN chose its reference implementation '{}' for {} (ISA {}) and FLUXRT_STRICT_KERNELS=1 "
         "forbids it",
         op, impl, shape, isa_name());
  }
  if (first_report(fmt::format("{}|{}|{}", op, shape, impl))) {
    FLUXRT_LOG_WARN(
        "[{}] oneDNN runs {} on its reference implementation '{}' (ISA {}): expect it to be very slow", op,
        shape, impl, isa_name());
  }
}

int reference_primitive_count() { return g_reference_count.load(); }

}  // namespace fluxrt::backend::onednn
