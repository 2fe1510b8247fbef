#include "models/flux/flux_checkpoint_shape.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace fluxrt::models {
namespace {

using ShapeTable = std::map<std::string, Shape>;

int64_t dim(const ShapeTable& shapes, const std::string& name, int axis) {
  auto it = shapes.find(name);
  if (it == shapes.end()) return 0;
  const Shape& shape = it->second;
  return axis < shape.size() ? shape[axis] : 0;
}

// Number of blocks = highest index + 1 among names "<prefix><index>.".
int64_t count_blocks(const ShapeTable& shapes, const std::string& prefix) {
  int64_t count = 0;
  for (const auto& [n, shape] : shapes) {
    if (n.compare(0, prefix.size(), prefix) != 0) continue;
    const size_t end = n.find('.', prefix.size());
    if (end == std::string::npos || end == prefix.size()) continue;
    int64_t index = 0;
    bool digits = true;
    for (size_t i = prefix.size(); i < end && digits; ++i) {
      digits = std::isdigit(static_cast<unsigned char>(n[i])) != 0;
      if (digits && index < (int64_t{1} << 40)) index = index * 10 + (n[i] - '0');
    }
    if (digits) count = std::max(count, index + 1);
  }
  return count;
}

}  // namespace

std::optional<FluxCheckpointShape> read_flux_checkpoint_shape(const ShapeTable& ckpt) {
  FluxCheckpointShape s;
  // ComfyUI repackagings prefix every key; diffusers' single-file loader strips the same prefix.
  for (const char* prefix : {"model.diffusion_model."}) {
    if (ckpt.count(std::string(prefix) + "img_in.weight") ||
        ckpt.count(std::string(prefix) + "x_embedder.weight"))
      s.key_prefix = prefix;
  }
  const std::string& p = s.key_prefix;
  auto has = [&](const char* name) { return ckpt.count(p + name) != 0; };

  if (has("img_in.weight")) {
    s.bfl_names = true;
    s.shared_modulation = has("single_stream_modulation.lin.weight");
    s.pooled_text_embedder = has("time_in.in_layer.weight") && has("vector_in.in_layer.weight");
    s.hidden_size = dim(ckpt, p + "img_in.weight", 0);
    s.in_channels = dim(ckpt, p + "img_in.weight", 1);
    s.context_dim = dim(ckpt, p + "txt_in.weight", 1);
    s.head_dim = std::max(dim(ckpt, p + "double_blocks.0.img_attn.norm.query_norm.scale", 0),
                          dim(ckpt, p + "single_blocks.0.norm.query_norm.scale", 0));
    s.double_blocks = count_blocks(ckpt, p + "double_blocks.");
    s.single_blocks = count_blocks(ckpt, p + "single_blocks.");
    s.guidance_embed = has("guidance_in.in_layer.weight");
  } else if (has("x_embedder.weight")) {
    s.shared_modulation = has("single_stream_modulation.linear.weight");
    s.pooled_text_embedder = has("time_text_embed.timestep_embedder.linear_1.weight");
    s.hidden_size = dim(ckpt, p + "x_embedder.weight", 0);
    s.in_channels = dim(ckpt, p + "x_embedder.weight", 1);
    s.context_dim = dim(ckpt, p + "context_embedder.weight", 1);
    s.head_dim = std::max(dim(ckpt, p + "transformer_blocks.0.attn.norm_q.weight", 0),
                          dim(ckpt, p + "single_transformer_blocks.0.attn.norm_q.weight", 0));
    s.double_blocks = count_blocks(ckpt, p + "transformer_blocks.");
    s.single_blocks = count_blocks(ckpt, p + "single_transformer_blocks.");
    s.guidance_embed = has("time_text_embed.guidance_embedder.linear_1.weight") ||
                       has("time_guidance_embed.guidance_embedder.linear_1.weight");
  } else {
    return std::nullopt;
  }
  if (s.head_dim > 0) s.num_heads = s.hidden_size / s.head_dim;
  return s;
}

}  // namespace fluxrt::models
