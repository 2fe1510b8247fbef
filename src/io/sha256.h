#pragma once
// SHA-256 (FIPS 180-4) of a byte range or a whole file, as lowercase hex: what image metadata
// records to identify a LoRA file (A1111 / ComfyUI users compare the first 12 hex digits).
#include <cstddef>
#include <cstdint>
#include <string>

namespace fluxrt::io {

std::string sha256_hex(const uint8_t* data, size_t size);
// Reads the file through its mapping; Io / NotFound errors name the file.
std::string sha256_file_hex(const std::string& path);

}  // namespace fluxrt::io
