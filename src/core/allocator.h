#pragma once
// Host memory for tensors: 64-byte aligned so SIMD kernels and oneDNN never see split cache lines.
#include <cstddef>
#include <memory>

namespace fluxrt {

inline constexpr size_t kTensorAlignment = 64;

// Throws Error(OutOfMemory) naming the size when the allocation fails.
void* aligned_alloc_bytes(size_t bytes, size_t alignment = kTensorAlignment);
void aligned_free(void* ptr);

// Asks the OS to back the 2 MiB-aligned pages of [ptr, ptr + bytes) with transparent huge
// pages (Linux MADV_HUGEPAGE), before they are first written. Weights and activations are read
// in streams of hundreds of MB per step; with 4 KiB pages every 4 KiB of them is a TLB miss.
// A hint: does nothing where the OS has no such pages or refuses them.
void advise_huge_pages(void* ptr, size_t bytes);

// Freed blocks of 1 MiB and more are kept for reuse by the next allocation of the same size (up
// to an eighth of the RAM, between 1 and 4 GiB, in all; an allocation that fails releases them
// and retries). These free them now (all of them, or all but `keep_bytes`) and say how many
// bytes that was, and how many bytes are kept.
size_t release_cached_host_blocks();
size_t trim_cached_host_blocks(size_t keep_bytes);
size_t host_bytes_cached();

// Bytes currently held by tensor allocations (not counting the kept free blocks), and the
// high-water mark (for the timing report).
size_t host_bytes_in_use();
size_t host_bytes_peak();
void reset_host_bytes_peak();

// Peak resident set size of the process in bytes (from the OS), 0 where unknown.
size_t process_peak_rss_bytes();
size_t process_current_rss_bytes();

}  // namespace fluxrt
