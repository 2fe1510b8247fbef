#pragma once
// Strict kernel mode (FLUXRT_STRICT_KERNELS=1): every silent slow path becomes an Unsupported
// error instead of a warning — an op's composed fallback (ops/dispatch.h) and a oneDNN primitive
// that lands on a reference implementation (backend/cpu). It lives in core so that both layers
// read the one flag.
namespace fluxrt {

// True when FLUXRT_STRICT_KERNELS=1 (read once per process; tests may override it).
bool strict_kernels();
void set_strict_kernels(bool strict);

}  // namespace fluxrt
