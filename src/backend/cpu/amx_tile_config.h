#pragma once
// The AMX tile configuration the tile GEMM (gemm_amx.cpp) and the register probe
// (register_peak.cpp) load: palette 1, tiles 0-7 all 16 rows x 64 bytes (16 x 32 bf16, or
// 16 x 16 f32), the largest tiles, which both use for every product.
#include <cstdint>

namespace fluxrt::backend::cpu {

// LDTILECFG's 64-byte operand.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(AmxTileConfig) == 64);

inline AmxTileConfig full_amx_tiles() {
  AmxTileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.bytes_per_row[t] = 64;
    config.rows[t] = 16;
  }
  return config;
}

}  // namespace fluxrt::backend::cpu
