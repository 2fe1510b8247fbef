#pragma once
// One thread setting for the whole process, shared with OpenMP and oneDNN (`--threads`).

namespace fluxrt {

// Sets the number of worker threads (<= 0 means all available cores).
void set_num_threads(int n);
int num_threads();
int hardware_threads();

}  // namespace fluxrt
