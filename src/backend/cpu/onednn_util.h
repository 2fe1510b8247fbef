#pragma once
// Shared oneDNN plumbing for the CPU GEMM and convolution: one engine per process, a stream per
// thread, dtype mapping, and the run-time question "does this CPU do bf16 natively?".
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <string_view>

#include "core/dtype.h"

namespace fluxrt::backend::onednn {

dnnl::engine& engine();
dnnl::stream& stream();  // thread-local (oneDNN streams are not thread-safe)

// True when oneDNN's effective ISA has native bf16 arithmetic (avx512_core_bf16 or AMX). Below
// that, oneDNN 2.6 either has no bf16 matmul at all (AVX2) or emulates it (avx512_core).
bool native_bf16();
const char* isa_name();  // "avx2", "avx512_core_bf16", ...

// True when oneDNN's effective ISA multiplies int8 without 16-bit intermediate sums (AVX-VNNI,
// AVX512-VNNI, AMX). Below that its u8 x s8 pairs (vpmaddubsw) saturate at 2^15 unless the
// weights stay within 7 bits.
bool native_int8();

// The oneDNN type for a fluxrt dtype (f32, bf16, f16); Unsupported otherwise.
dnnl::memory::data_type to_dnnl(DType dtype);

// The scratchpad buffer of the calling thread, grown to at least `bytes` (4 KiB aligned): the
// matmuls and convolutions are created with scratchpad_mode::user and execute with it. oneDNN's
// default gives each primitive object its own scratchpad for its whole life (its brgemm matmul
// and convolution do not share the global one), with per-thread copy and accumulation buffers:
// per layer and call shape, hundreds of MB across a model that runs one call at a time per thread.
void* thread_scratchpad(size_t bytes);
// How many times a thread's scratchpad grew in this process (tests: steady state adds none).
int64_t scratchpad_allocations();

// Sets oneDNN's thread count to fluxrt::num_threads() (OpenMP runtime).
void sync_threads();

// Whether a primitive_desc::impl_info_str() names one of oneDNN's reference implementations
// ("ref:any", "ref_int8:any", "gemm:ref", ...): scalar loops, 10-1000x slower than the JIT ones.
bool is_reference_impl(std::string_view impl);

// Called whenever a hot primitive (matmul, convolution) is made, with its implementation and a
// description of its shape. A reference implementation is counted, logged once per
// (op, shape, implementation) at warn level, and is an Unsupported error under
// FLUXRT_STRICT_KERNELS=1: oneDNN picks "ref" silently when no JIT kernel accepts the
// descriptors, and a VAE decode then runs for minutes instead of seconds.
void check_implementation(std::string_view op, std::string_view impl, const std::string& shape);

// True the first time this process reports `key` (a warning's shape, say), false after: one log
// line per shape, not one per layer of that shape.
bool first_report(const std::string& key);

// How many primitives check_implementation saw on a reference implementation in this process
// (tests assert it stays 0).
int reference_primitive_count();

}  // namespace fluxrt::backend::onednn
