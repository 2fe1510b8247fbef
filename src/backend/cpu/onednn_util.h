#pragma once
// Shared oneDNN plumbing for the CPU GEMM and convolution: one engine per process, a stream per
// thread, dtype mapping, and the run-time question "does this CPU do bf16 natively?".
#include <oneapi/dnnl/dnnl.hpp>

#include "core/dtype.h"

namespace fluxrt::backend::onednn {

dnnl::engine& engine();
dnnl::stream& stream();  // thread-local (oneDNN streams are not thread-safe)

// True when oneDNN's effective ISA has native bf16 arithmetic (avx512_core_bf16 or AMX). Below
// that, oneDNN 2.6 either has no bf16 matmul at all (AVX2) or emulates it (avx512_core).
bool native_bf16();
const char* isa_name();  // "avx2", "avx512_core_bf16", ...

// The oneDNN type for a fluxrt dtype (f32, bf16, f16); Unsupported otherwise.
dnnl::memory::data_type to_dnnl(DType dtype);

// Sets oneDNN's thread count to fluxrt::num_threads() (OpenMP runtime).
void sync_threads();

}  // namespace fluxrt::backend::onednn
