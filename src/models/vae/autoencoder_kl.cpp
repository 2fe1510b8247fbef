// The AutoencoderKL body shared by the FLUX.1 and FLUX.2 autoencoders: blocks, decoder, encoder,
// the lean exact pass and the tiled passes (the plan that picks between them and its FLOP/memory
// estimates: vae_tiling_plan.cpp; config.json, loading, the BFL name map, synthetic weights and
// post-processing: vae_files.cpp).
#include "models/vae/autoencoder_kl.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/memory_info.h"
#include "io/safetensors.h"
#include "models/vae/banded_conv.h"
#include "nn/linear.h"
#include "ops/attention.h"
#include "ops/conv.h"
#include "ops/elementwise.h"
#include "ops/tile_blend.h"
#include "ops/vae_ops.h"

namespace fluxrt::models {
using PConv = std::shared_ptr<ops::PreparedConv2d>;

// ---------------------------------------------------------------------------------------------
// Blocks

namespace {

struct Norm {
  Tensor weight, bias;
};

struct Resnet {  // diffusers ResnetBlock2D (temb None, output_scale_factor 1)
  Norm norm1, norm2;
  PConv conv1, conv2, shortcut;  // shortcut only when in != out
};

struct MidAttention {  // diffusers Attention(heads = 1, dim_head = C, residual, group_norm)
  Norm norm;
  nn::Linear qkv, out;
  int64_t channels = 0;
};

struct MidBlock {  // diffusers UNetMidBlock2D: resnet, attention, resnet
  Resnet res0, res1;
  std::optional<MidAttention> attn;
};

struct Level {
  std::vector<Resnet> resnets;
  PConv resample;  // encoder downsampler / decoder upsampler, or null
};

}  // namespace

struct AutoencoderKL::Impl {
  AutoencoderKLConfig config;
  AutoencoderKLOptions options;
  // decoder
  PConv post_quant_conv, dec_conv_in, dec_conv_out;
  MidBlock dec_mid;
  std::vector<Level> up;  // diffusers up_blocks order (deepest first)
  Norm dec_norm_out;
  // encoder
  bool has_encoder = false;
  PConv quant_conv, enc_conv_in, enc_conv_out;
  std::vector<Level> down;
  MidBlock enc_mid;
  Norm enc_norm_out;
  // Activations channels-last from the first convolution to the last (ops::prefers_channels_last):
  // every op below keeps the layout it is given, so only the passes' entries convert.
  bool channels_last = false;

  Tensor in_work_layout(const Tensor& t) const { return channels_last ? ops::to_channels_last(t) : t; }

  Tensor group_norm(const Tensor& x, const Norm& n, bool silu) const {
    return ops::group_norm(x, n.weight, n.bias, config.norm_num_groups, config.norm_eps, silu);
  }

  // ResnetBlock2D.forward: h = conv1(silu(norm1(x))); h = conv2(silu(norm2(h))); out = shortcut(x) + h.
  Tensor resnet(const Tensor& x, const Resnet& r) const {
    Tensor h = group_norm(x, r.norm1, true);                                  // [B, Cin, H, W]
    h = ops::conv2d(h, *r.conv1, ops::Conv2dOptions::same(3));                // [B, Cout, H, W]
    h = group_norm(h, r.norm2, true);                                         // [B, Cout, H, W]
    Tensor skip = r.shortcut ? ops::conv2d(x, *r.shortcut) : x;               // [B, Cout, H, W]
    return ops::conv2d(h, *r.conv2, ops::Conv2dOptions::same(3), skip);       // [B, Cout, H, W]
  }

  // Attention (AttnProcessor2_0) on the mid block: one head of width C over all H*W pixels. A
  // channels-last x already is the [B, L, C] sequence; NCHW <-> NLC transposes are real copies,
  // acceptable at the mid block's 1/8 resolution.
  Tensor attention(const Tensor& x, const MidAttention& a) const {
    const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), L = H * W;
    Tensor h = group_norm(x, a.norm, false);                                  // [B, C, H, W]
    if (h.is_channels_last() && x.is_channels_last()) {
      Tensor seq = h.permute({0, 2, 3, 1}).view({B, L, C});          // [B, L, C]
      Tensor out = a.out(single_head_attention(a.qkv(seq), C));      // [B, L, C]
      out = ops::add(out, x.permute({0, 2, 3, 1}).view({B, L, C}));  // [B, L, C]
      return out.view({B, H, W, C}).permute({0, 3, 1, 2});           // [B, C, H, W] channels-last
    }
    Tensor seq = h.view({B, C, L}).transpose(1, 2).contiguous();              // [B, L, C]
    Tensor proj = a.out(single_head_attention(a.qkv(seq), C));                // [B, L, C]
    Tensor back = proj.transpose(1, 2).contiguous().view({B, C, H, W});       // [B, C, H, W]
    return ops::add(back, x);                                                 // [B, C, H, W]
  }

  // One head of width C over the sequence: qkv [B, L, 3C] -> [B, L, C].
  static Tensor single_head_attention(const Tensor& qkv, int64_t C) {
    Tensor q = qkv.slice(2, 0, C).unsqueeze(2);                               // [B, L, 1, C]
    Tensor k = qkv.slice(2, C, 2 * C).unsqueeze(2);                           // [B, L, 1, C]
    Tensor v = qkv.slice(2, 2 * C, 3 * C).unsqueeze(2);                       // [B, L, 1, C]
    Tensor o = ops::attention(q, k, v);                                       // [B, L, 1, C]
    return o.view({qkv.size(0), qkv.size(1), C});                             // [B, L, C]
  }

  Tensor mid(const Tensor& x, const MidBlock& m) const {
    Tensor h = resnet(x, m.res0);                                             // [B, C, h, w]
    if (m.attn) h = attention(h, *m.attn);                                    // [B, C, h, w]
    return resnet(h, m.res1);                                                 // [B, C, h, w]
  }

  // diffusers Decoder.forward (+ post_quant_conv): z [B, z, h, w] -> [B, 3, 8h, 8w].
  Tensor decode_untiled(const Tensor& z) const { return decode_tail(decode_head(z, 0), 0); }

  // The decoder up to the split point: post_quant_conv, conv_in, the mid block, then the resnets of
  // up levels [0, levels) with the upsamplers between them (not the last one's).
  // z [B, z, h, w] -> [B, Ci, h * 2^(levels-1), w * 2^(levels-1)] (levels 0: [B, C3, h, w]).
  Tensor decode_head(const Tensor& z_in, int levels) const {
    Tensor z = in_work_layout(z_in.to(options.dtype));                        // [B, z, h, w]
    if (post_quant_conv) z = ops::conv2d(z, *post_quant_conv);                // [B, z, h, w]
    Tensor h = ops::conv2d(z, *dec_conv_in, ops::Conv2dOptions::same(3));     // [B, C3, h, w]
    h = mid(h, dec_mid);                                                      // [B, C3, h, w]
    for (int i = 0; i < levels; ++i) {  // UpDecoderBlock2D: resnets, then nearest 2x + conv
      for (const Resnet& r : up[i].resnets) h = resnet(h, r);                 // [B, Ci, h', w']
      if (i + 1 < levels && up[i].resample)
        h = ops::conv2d(h, *up[i].resample, ops::Conv2dOptions::upsample_then_same(3));  // [B, Ci, 2h', 2w']
    }
    return h;
  }
  // The rest of the decoder from decode_head(z, levels)'s output: [B, Ci, h', w'] -> [B, 3, H, W].
  Tensor decode_tail(Tensor h, int levels) const {
    h = in_work_layout(h);  // a tile is NCHW
    if (levels > 0 && up[levels - 1].resample)
      h = ops::conv2d(h, *up[levels - 1].resample, ops::Conv2dOptions::upsample_then_same(3));  // [B, Ci, 2h', 2w']
    for (size_t i = static_cast<size_t>(levels); i < up.size(); ++i) {
      for (const Resnet& r : up[i].resnets) h = resnet(h, r);                 // [B, Ci, h', w']
      if (up[i].resample) h = ops::conv2d(h, *up[i].resample, ops::Conv2dOptions::upsample_then_same(3));  // [B, Ci, 2h', 2w']
    }
    h = group_norm(h, dec_norm_out, true);                                    // [B, C0, H, W]
    return ops::conv2d(h, *dec_conv_out, ops::Conv2dOptions::same(3)).contiguous();  // [B, 3, H, W]
  }
  // Pixels of decode_head(z, levels)'s output per latent pixel is 1 / this.
  int64_t decode_head_factor(int levels) const {
    return config.spatial_factor() >> std::max(0, levels - 1);
  }

  // diffusers Encoder.forward (+ quant_conv), then DiagonalGaussianDistribution.mode() = mean:
  // x [B, 3, H, W] -> [B, 2z, H/8, W/8] (mean | logvar).
  Tensor encode_untiled(const Tensor& x) const {
    const int n = static_cast<int>(down.size());
    return encode_tail(encode_head(x, n), n);
  }
  // The encoder up to the split point: conv_in, then down levels [0, levels) (resnets and
  // downsamplers). x [B, 3, H, W] -> [B, Ci, H / 2^min(levels, n-1), W / ...].
  Tensor encode_head(const Tensor& x_in, int levels) const {
    Tensor x = in_work_layout(x_in.to(options.dtype));                        // [B, 3, H, W]
    Tensor h = ops::conv2d(x, *enc_conv_in, ops::Conv2dOptions::same(3));     // [B, C0, H, W]
    for (int i = 0; i < levels; ++i) {  // DownEncoderBlock2D: resnets, then pad (0,1,0,1) + stride-2 conv
      for (const Resnet& r : down[i].resnets) h = resnet(h, r);               // [B, Ci, H', W']
      if (down[i].resample) h = ops::conv2d(h, *down[i].resample, ops::Conv2dOptions::downsample());  // [B, Ci, H'/2, W'/2]
    }
    return h;
  }
  // The rest from encode_head(x, levels)'s output: down levels [levels, n), the mid block,
  // conv_norm_out, conv_out, quant_conv -> [B, 2z, H/8, W/8].
  Tensor encode_tail(Tensor h, int levels) const {
    h = in_work_layout(h);  // a blend of tiles is NCHW
    for (size_t i = static_cast<size_t>(levels); i < down.size(); ++i) {
      for (const Resnet& r : down[i].resnets) h = resnet(h, r);               // [B, Ci, H', W']
      if (down[i].resample) h = ops::conv2d(h, *down[i].resample, ops::Conv2dOptions::downsample());  // [B, Ci, H'/2, W'/2]
    }
    h = mid(h, enc_mid);                                                      // [B, C3, H/8, W/8]
    h = group_norm(h, enc_norm_out, true);                                    // [B, C3, H/8, W/8]
    h = ops::conv2d(h, *enc_conv_out, ops::Conv2dOptions::same(3));           // [B, 2z, H/8, W/8]
    if (quant_conv) h = ops::conv2d(h, *quant_conv);                          // [B, 2z, H/8, W/8]
    return h.contiguous();  // [B, 2z, H/8, W/8]: mean | logvar
  }
  // Image pixels per pixel of encode_head(x, levels)'s output.
  int64_t encode_head_factor(int levels) const {
    return int64_t{1} << std::min<int>(levels, static_cast<int>(down.size()) - 1);
  }

  // ---- The lean exact pass (TilingMode::Lean): the same computation as decode_untiled /
  // encode_untiled on whole-image tensors (whole-image GroupNorm statistics, the mid block's
  // attention as before), with the convolutions banded (banded_conv.h) and each tensor dropped
  // after its last use, so a resnet holds at most its input, one normed tensor and one conv output.

  int64_t band_rows(int64_t cin, int64_t cout, int64_t width, int64_t batch) const {
    if (options.tiling.band_rows > 0) return options.tiling.band_rows;
    return band_rows_for(cin, cout, width, batch, kLeanBandBytes);
  }
  Tensor conv_lean(const Tensor& x, const ops::PreparedConv2d& w, const ops::Conv2dOptions& o) const {
    const int64_t up = o.upsample_nearest_2x ? 2 : 1;
    return conv2d_banded(x, w, o, band_rows(w.weight.size(1), w.weight.size(0), x.size(3) * up / o.stride, x.size(0)));
  }

  // resnet() with the same arithmetic; takes its input by value so that, without a shortcut conv,
  // conv2's residual is added in place into the input's buffer (the caller must hold no other
  // reference to it).
  Tensor resnet_lean(Tensor x, const Resnet& r) const {
    const int64_t B = x.size(0), W = x.size(3), cout = r.conv1->weight.size(0);
    Tensor h = group_norm(x, r.norm1, true);                                  // [B, Cin, H, W]
    Tensor c1 = conv_lean(h, *r.conv1, ops::Conv2dOptions::same(3));          // [B, Cout, H, W]
    h = Tensor();
    h = group_norm(c1, r.norm2, true);                                        // [B, Cout, H, W]
    c1 = Tensor();
    Tensor out = r.shortcut ? conv_lean(x, *r.shortcut, {}) : std::move(x);   // [B, Cout, H, W]
    x = Tensor();
    conv2d_banded(h, *r.conv2, ops::Conv2dOptions::same(3), out, out, band_rows(cout, cout, W, B));  // [B, Cout, H, W]
    return out;
  }

  Tensor mid_lean(Tensor x, const MidBlock& m) const {
    Tensor h = resnet_lean(std::move(x), m.res0);                             // [B, C, h, w]
    if (m.attn) h = attention(h, *m.attn);                                    // [B, C, h, w]
    return resnet_lean(std::move(h), m.res1);                                 // [B, C, h, w]
  }

  // decode_untiled, lean: z [B, z, h, w] -> [B, 3, 8h, 8w].
  Tensor decode_lean(const Tensor& z_in) const {
    Tensor z = in_work_layout(z_in.to(options.dtype));                        // [B, z, h, w]
    if (post_quant_conv) z = ops::conv2d(z, *post_quant_conv);                // [B, z, h, w]
    Tensor h = conv_lean(z, *dec_conv_in, ops::Conv2dOptions::same(3));       // [B, C3, h, w]
    z = Tensor();
    h = mid_lean(std::move(h), dec_mid);                                      // [B, C3, h, w]
    for (const Level& level : up) {
      for (const Resnet& r : level.resnets) h = resnet_lean(std::move(h), r); // [B, Ci, h', w']
      if (level.resample) h = conv_lean(h, *level.resample, ops::Conv2dOptions::upsample_then_same(3));  // [B, Ci, 2h', 2w']
    }
    Tensor normed = group_norm(h, dec_norm_out, true);                        // [B, C0, H, W]
    h = Tensor();
    return conv_lean(normed, *dec_conv_out, ops::Conv2dOptions::same(3)).contiguous();  // [B, 3, H, W]
  }

  // encode_untiled, lean: x [B, 3, H, W] -> [B, 2z, H/8, W/8] (mean | logvar).
  Tensor encode_lean(const Tensor& x_in) const {
    Tensor h = conv_lean(in_work_layout(x_in.to(options.dtype)), *enc_conv_in,
                         ops::Conv2dOptions::same(3));  // [B, C0, H, W]
    for (const Level& level : down) {
      for (const Resnet& r : level.resnets) h = resnet_lean(std::move(h), r); // [B, Ci, H', W']
      if (level.resample) h = conv_lean(h, *level.resample, ops::Conv2dOptions::downsample());  // [B, Ci, H'/2, W'/2]
    }
    h = mid_lean(std::move(h), enc_mid);                                      // [B, C3, H/8, W/8]
    h = group_norm(h, enc_norm_out, true);                                    // [B, C3, H/8, W/8]
    h = ops::conv2d(h, *enc_conv_out, ops::Conv2dOptions::same(3));           // [B, 2z, H/8, W/8]
    if (quant_conv) h = ops::conv2d(h, *quant_conv);                          // [B, 2z, H/8, W/8]
    return h.contiguous();
  }

  // Tiled encode under `plan`: the tiled levels per tile, blended at their output resolution, then
  // the whole-image stages; -> [B, 2z, H/8, W/8].
  Tensor encode_tiled(const Tensor& image, const TilePlan& plan) const {
    const auto& t = options.tiling;
    const int n = static_cast<int>(down.size());
    if (plan.whole_image_stages == 0)  // even the mid block alone would need more than a tile
      return tiled(image, t.tile_pixels, t.overlap_pixels, 1, config.spatial_factor(),
                   [&](const Tensor& tile) { return encode_untiled(tile); });  // [B, 2z, H/8, W/8]
    const int levels = n + 1 - plan.whole_image_stages;  // down levels run per tile
    const int64_t hf = encode_head_factor(levels);
    const Tensor h = tiled(image, t.tile_pixels, t.overlap_pixels, 1, hf,
                           [&](const Tensor& tile) { return encode_head(tile, levels); });  // [B, Ci, H/hf, W/hf]
    return encode_tail(h, levels);                                            // [B, 2z, H/8, W/8]
  }

  // Runs `fn` on overlapping tiles of x [B, C, H, W] (tile / overlap in x's pixels, output scale
  // `scale` = output pixels per input pixel, as a ratio out_num/out_den) and blends the results
  // with linear ramps over the overlaps (ops/tile_blend.h), on x's device: on a GPU the tiles never
  // leave it.
  template <typename Fn>
  Tensor tiled(const Tensor& x, int64_t tile, int64_t overlap, int64_t out_num, int64_t out_den, Fn fn) const {
    const int64_t B = x.size(0), H = x.size(2), W = x.size(3);
    const auto ys = vae_tile_starts(H, tile, overlap), xs = vae_tile_starts(W, tile, overlap);
    const int64_t OH = H * out_num / out_den, OW = W * out_num / out_den;
    const Tensor weight_sum = Tensor::zeros({OH, OW}, DType::F32, x.device());  // [OH, OW]
    Tensor acc;
    for (size_t iy = 0; iy < ys.size(); ++iy) {
      for (size_t ix = 0; ix < xs.size(); ++ix) {
        const int64_t th = std::min(tile, H), tw = std::min(tile, W);
        const Tensor part = x.slice(2, ys[iy], ys[iy] + th).slice(3, xs[ix], xs[ix] + tw);
        const Tensor in = channels_last ? ops::to_channels_last(part) : part.contiguous();  // [B, C, th, tw]
        const Tensor out = fn(in);                                                                // [B, OC, oth, otw]
        if (!acc.defined()) acc = Tensor::zeros({B, out.size(1), OH, OW}, DType::F32, x.device());  // [B, OC, OH, OW]
        ops::TilePlacement at;
        at.top = ys[iy] * out_num / out_den;
        at.left = xs[ix] * out_num / out_den;
        at.ramp = overlap * out_num / out_den;
        at.ramp_top = iy > 0;
        at.ramp_bottom = iy + 1 < ys.size();
        at.ramp_left = ix > 0;
        at.ramp_right = ix + 1 < xs.size();
        ops::tile_blend_(acc, weight_sum, out, at);
      }
    }
    return ops::tile_normalize(acc, weight_sum, options.dtype);  // [B, OC, OH, OW]
  }
};

// ---------------------------------------------------------------------------------------------
// Binding (diffusers names). The same walk either binds tensors or records the expected shapes
// (for synthetic weights), so the two can never disagree.

namespace {

struct Walk {
  WeightBinder* binder = nullptr;                       // bind mode
  std::vector<std::pair<std::string, Shape>>* record = nullptr;  // record mode
  DType dtype = DType::BF16;
  Device device = Device::cpu();

  Tensor get(const std::string& name, const Shape& shape, DType dt) {
    if (record) {
      record->emplace_back(name, shape);
      return Tensor();
    }
    return binder->require(name, shape, dt);
  }
  PConv conv(const std::string& p, int64_t cout, int64_t cin, int64_t k) {
    Tensor w = get(p + ".weight", {cout, cin, k, k}, dtype);
    Tensor b = get(p + ".bias", {cout}, dtype);
    if (record || !w.defined() || !b.defined()) return nullptr;
    return ops::prepare_conv2d(w, b, device);
  }
  nn::Linear linear_qkv(const std::string& p, int64_t c) {
    std::vector<Tensor> ws, bs;
    for (const char* n : {"to_q", "to_k", "to_v"}) {
      ws.push_back(get(p + "." + n + ".weight", {c, c}, dtype));
      bs.push_back(get(p + "." + n + ".bias", {c}, dtype));
    }
    if (record) return nn::Linear();
    for (size_t i = 0; i < 3; ++i)
      if (!ws[i].defined() || !bs[i].defined()) return nn::Linear();
    return nn::Linear::prepare(ops::concat(ws, 0), ops::concat(bs, 0), device);  // [3C, C], [3C]
  }
  nn::Linear linear(const std::string& p, int64_t c) {
    Tensor w = get(p + ".weight", {c, c}, dtype);
    Tensor b = get(p + ".bias", {c}, dtype);
    if (record || !w.defined() || !b.defined()) return nn::Linear();
    return nn::Linear::prepare(w, b, device);
  }
  Norm norm(const std::string& p, int64_t c) {
    Norm n;
    n.weight = to_device(get(p + ".weight", {c}, dtype), device);
    n.bias = to_device(get(p + ".bias", {c}, dtype), device);
    return n;
  }
  Resnet resnet(const std::string& p, int64_t cin, int64_t cout) {
    Resnet r;
    r.norm1 = norm(p + ".norm1", cin);
    r.conv1 = conv(p + ".conv1", cout, cin, 3);
    r.norm2 = norm(p + ".norm2", cout);
    r.conv2 = conv(p + ".conv2", cout, cout, 3);
    if (cin != cout) r.shortcut = conv(p + ".conv_shortcut", cout, cin, 1);
    return r;
  }
  MidBlock mid(const std::string& p, int64_t c, bool attn) {
    MidBlock m;
    m.res0 = resnet(p + ".resnets.0", c, c);
    if (attn) {
      MidAttention a;
      a.channels = c;
      a.norm = norm(p + ".attentions.0.group_norm", c);
      a.qkv = linear_qkv(p + ".attentions.0", c);
      a.out = linear(p + ".attentions.0.to_out.0", c);
      m.attn = std::move(a);
    }
    m.res1 = resnet(p + ".resnets.1", c, c);
    return m;
  }
};

void walk_model(Walk& w, AutoencoderKL::Impl& m, const AutoencoderKLConfig& c, bool decoder, bool encoder) {
  const int64_t z = c.latent_channels;
  int64_t prev = 0;
  if (decoder) {
  // decoder (diffusers Decoder: reversed channels, layers_per_block + 1 resnets per level)
  const auto& dch = c.decoder_channels();
  const int n = static_cast<int>(dch.size());
  if (c.use_post_quant_conv) m.post_quant_conv = w.conv("post_quant_conv", z, z, 1);
  m.dec_conv_in = w.conv("decoder.conv_in", dch[n - 1], z, 3);
  m.dec_mid = w.mid("decoder.mid_block", dch[n - 1], c.mid_block_add_attention);
  m.up.clear();
  prev = dch[n - 1];
  for (int i = 0; i < n; ++i) {
    const int64_t out = dch[n - 1 - i];
    Level lvl;
    for (int j = 0; j <= c.layers_per_block; ++j)
      lvl.resnets.push_back(w.resnet(fmt::format("decoder.up_blocks.{}.resnets.{}", i, j), j == 0 ? prev : out, out));
    if (i + 1 < n) lvl.resample = w.conv(fmt::format("decoder.up_blocks.{}.upsamplers.0.conv", i), out, out, 3);
    m.up.push_back(std::move(lvl));
    prev = out;
  }
  m.dec_norm_out = w.norm("decoder.conv_norm_out", dch[0]);
  m.dec_conv_out = w.conv("decoder.conv_out", c.out_channels, dch[0], 3);
  }
  if (!encoder) return;
  // encoder (diffusers Encoder, double_z)
  const auto& ech = c.block_out_channels;
  const int ne = static_cast<int>(ech.size());
  m.enc_conv_in = w.conv("encoder.conv_in", ech[0], c.in_channels, 3);
  m.down.clear();
  prev = ech[0];
  for (int i = 0; i < ne; ++i) {
    Level lvl;
    for (int j = 0; j < c.layers_per_block; ++j)
      lvl.resnets.push_back(
          w.resnet(fmt::format("encoder.down_blocks.{}.resnets.{}", i, j), j == 0 ? prev : ech[i], ech[i]));
    if (i + 1 < ne) lvl.resample = w.conv(fmt::format("encoder.down_blocks.{}.downsamplers.0.conv", i), ech[i], ech[i], 3);
    m.down.push_back(std::move(lvl));
    prev = ech[i];
  }
  m.enc_mid = w.mid("encoder.mid_block", ech[ne - 1], c.mid_block_add_attention);
  m.enc_norm_out = w.norm("encoder.conv_norm_out", ech[ne - 1]);
  m.enc_conv_out = w.conv("encoder.conv_out", 2 * z, ech[ne - 1], 3);
  if (c.use_quant_conv) m.quant_conv = w.conv("quant_conv", 2 * z, 2 * z, 1);
  m.has_encoder = true;
}

}  // namespace

AutoencoderKL::AutoencoderKL(const AutoencoderKLConfig& config, const AutoencoderKLOptions& options,
                             WeightBinder& binder)
    : impl_(std::make_unique<Impl>()) {
  FLUXRT_CHECK(options.dtype == DType::F32 || options.dtype == DType::BF16 || options.dtype == DType::F16,
               ErrorCode::Unsupported, "{}: dtype {} (f32, bf16 or f16)", binder.component(), dtype_name(options.dtype));
  config.validate(binder.component());
  impl_->config = config;
  impl_->options = options;
  impl_->channels_last = ops::prefers_channels_last(options.device);
  if (!options.load_encoder) {
    binder.ignore_prefix("encoder.");
    binder.ignore_prefix("quant_conv.");
  }
  Walk w;
  w.binder = &binder;
  w.dtype = options.dtype;
  w.device = options.device;
  walk_model(w, *impl_, config, true, options.load_encoder);
}

AutoencoderKL::AutoencoderKL(AutoencoderKL&&) noexcept = default;
AutoencoderKL& AutoencoderKL::operator=(AutoencoderKL&&) noexcept = default;
AutoencoderKL::~AutoencoderKL() = default;

std::vector<std::pair<std::string, Shape>> AutoencoderKL::tensor_shapes(const AutoencoderKLConfig& config,
                                                                        bool decoder, bool encoder) {
  Impl dummy;
  std::vector<std::pair<std::string, Shape>> rec;
  Walk w;
  w.record = &rec;
  walk_model(w, dummy, config, decoder, encoder);
  return rec;
}

const AutoencoderKLConfig& AutoencoderKL::config() const { return impl_->config; }
const AutoencoderKLOptions& AutoencoderKL::options() const { return impl_->options; }
void AutoencoderKL::set_tiling(const TilingOptions& tiling) { impl_->options.tiling = tiling; }
bool AutoencoderKL::has_encoder() const { return impl_->has_encoder; }

size_t AutoencoderKL::estimate_decode_bytes(int64_t b, int64_t h, int64_t w) const {
  return vae_decode_estimate_bytes(impl_->config, impl_->options.dtype, b, h, w);
}
size_t AutoencoderKL::estimate_encode_bytes(int64_t b, int64_t h, int64_t w) const {
  return vae_encode_estimate_bytes(impl_->config, impl_->options.dtype, b, h, w);
}

TilePlan AutoencoderKL::decode_tile_plan(int64_t b, int64_t h, int64_t w) const {
  return plan_vae_decode(impl_->config, impl_->options.dtype, impl_->options.tiling, b, h, w, impl_->options.device);
}
TilePlan AutoencoderKL::encode_tile_plan(int64_t b, int64_t h, int64_t w) const {
  return plan_vae_encode(impl_->config, impl_->options.dtype, impl_->options.tiling, b, h, w, impl_->options.device);
}

bool AutoencoderKL::decode_would_tile(int64_t b, int64_t h, int64_t w) const { return decode_tile_plan(b, h, w).tiled; }
bool AutoencoderKL::encode_would_tile(int64_t b, int64_t h, int64_t w) const { return encode_tile_plan(b, h, w).tiled; }

namespace {

// On a GPU nothing (no swap) stands behind a pass that does not fit, and tiles are the leanest pass
// there is: say so in one line before the first tile instead of failing in the middle of one.
void check_tiles_fit_device(const TilePlan& plan, Device device, const char* what) {
  if (!device.is_cpu()) check_tiled_pass_fits(plan, device_free_bytes(device), device, what);
}

}  // namespace

Tensor AutoencoderKL::decode(const Tensor& z_in, const char* what) const {
  FLUXRT_CHECK(z_in.defined() && z_in.dim() == 4 && z_in.size(1) == impl_->config.latent_channels,
               ErrorCode::InvalidArgument, "{}: z must be [B, {}, h, w], got {}", what, impl_->config.latent_channels,
               z_in.defined() ? z_in.shape().str() : "undefined");
  const Tensor z = to_device(z_in, impl_->options.device);  // host latents are uploaded; the result stays there
  const int64_t f = impl_->config.spatial_factor();
  const TilePlan plan = decode_tile_plan(z.size(0), z.size(2) * f, z.size(3) * f);
  if (plan.lean) return impl_->decode_lean(z);
  if (!plan.tiled) return impl_->decode_untiled(z);
  const auto& t = impl_->options.tiling;
  FLUXRT_CHECK(t.tile_pixels % f == 0 && t.overlap_pixels % f == 0 && t.overlap_pixels < t.tile_pixels,
               ErrorCode::InvalidArgument, "vae tiling: tile {} / overlap {} must be multiples of {} (overlap < tile)",
               t.tile_pixels, t.overlap_pixels, f);
  check_tiles_fit_device(plan, impl_->options.device, what);
  const int whole = plan.whole_image_stages;
  if (whole == 0)  // the mid block on the whole latent would need more than a tile: all of it per tile
    return impl_->tiled(z, t.tile_pixels / f, t.overlap_pixels / f, f, 1,
                        [&](const Tensor& tile) { return impl_->decode_untiled(tile); });  // [B, 3, H, W]
  const Tensor h = impl_->decode_head(z, whole - 1);                          // [B, Ci, h', w']
  const int64_t hf = impl_->decode_head_factor(whole - 1);
  return impl_->tiled(h, t.tile_pixels / hf, t.overlap_pixels / hf, hf, 1,
                      [&](const Tensor& tile) { return impl_->decode_tail(tile, whole - 1); });  // [B, 3, H, W]
}

Tensor AutoencoderKL::encode_mode(const Tensor& image_in, const char* what) const {
  FLUXRT_CHECK(impl_->has_encoder, ErrorCode::InvalidArgument, "{}: loaded without the encoder", what);
  const Tensor image = to_device(image_in, impl_->options.device);
  const int64_t f = impl_->config.spatial_factor();
  FLUXRT_CHECK(image.defined() && image.dim() == 4 && image.size(1) == impl_->config.in_channels &&
                   image.size(2) % f == 0 && image.size(3) % f == 0,
               ErrorCode::InvalidArgument, "{}: image must be [B, {}, H, W] with H, W multiples of {}, got {}", what,
               impl_->config.in_channels, f, image.defined() ? image.shape().str() : "undefined");
  const int64_t z = impl_->config.latent_channels;
  const TilePlan plan = encode_tile_plan(image.size(0), image.size(2), image.size(3));
  if (plan.lean) return impl_->encode_lean(image).slice(1, 0, z).contiguous();           // [B, z, H/8, W/8] (mean)
  if (!plan.tiled) return impl_->encode_untiled(image).slice(1, 0, z).contiguous();  // [B, z, H/8, W/8] (mean)
  const auto& t = impl_->options.tiling;
  FLUXRT_CHECK(t.tile_pixels % f == 0 && t.overlap_pixels % f == 0 && t.overlap_pixels < t.tile_pixels,
               ErrorCode::InvalidArgument, "vae tiling: tile {} / overlap {} must be multiples of {} (overlap < tile)",
               t.tile_pixels, t.overlap_pixels, f);
  check_tiles_fit_device(plan, impl_->options.device, what);
  return impl_->encode_tiled(image, plan).slice(1, 0, z).contiguous();  // [B, z, H/8, W/8] (mean)
}

Tensor AutoencoderKL::encode_moments(const Tensor& image_in, const char* what) const {
  FLUXRT_CHECK(impl_->has_encoder, ErrorCode::InvalidArgument, "{}: loaded without the encoder", what);
  const Tensor image = to_device(image_in, impl_->options.device);
  const int64_t f = impl_->config.spatial_factor();
  FLUXRT_CHECK(image.defined() && image.dim() == 4 && image.size(1) == impl_->config.in_channels &&
                   image.size(2) % f == 0 && image.size(3) % f == 0,
               ErrorCode::InvalidArgument, "{}: image must be [B, {}, H, W] with H, W multiples of {}, got {}", what,
               impl_->config.in_channels, f, image.defined() ? image.shape().str() : "undefined");
  const TilePlan plan = encode_tile_plan(image.size(0), image.size(2), image.size(3));
  if (plan.lean) return impl_->encode_lean(image);
  if (!plan.tiled) return impl_->encode_untiled(image);
  const auto& t = impl_->options.tiling;
  FLUXRT_CHECK(t.tile_pixels % f == 0 && t.overlap_pixels % f == 0 && t.overlap_pixels < t.tile_pixels,
               ErrorCode::InvalidArgument, "vae tiling: tile {} / overlap {} must be multiples of {} (overlap < tile)",
               t.tile_pixels, t.overlap_pixels, f);
  check_tiles_fit_device(plan, impl_->options.device, what);
  return impl_->encode_tiled(image, plan);  // [B, 2z, H/8, W/8]
}

double AutoencoderKL::decode_flops(int64_t b, int64_t h, int64_t w) const {
  return vae_decode_flops(impl_->config, b, h, w);
}
double AutoencoderKL::encode_flops(int64_t b, int64_t h, int64_t w) const {
  return vae_encode_flops(impl_->config, b, h, w);
}

}  // namespace fluxrt::models
