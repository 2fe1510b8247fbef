#pragma once
// LoRA modules (lora_file.h) -> one canonical list of deltas on the transformer's own linear
// weights (the canonical names its architecture's name scheme gives, lora_scheme.h), and the two
// ways to apply them (docs/lora.md):
// - merged, at load: W' = W + sum(s * B @ A), computed in f32 and rounded once to W's dtype, new
//   buffers only for the touched weights (the checkpoint mapping stays read-only);
// - unmerged, per request: each delta attached to its nn::Linear as a low-rank side branch; a layer
//   that a LoKr, LoHa or DoRA module touches gets a merged copy of its weight for the request
//   instead (they have no low-rank form, and DoRA rescales the whole weight).
//
// Fused and split projections meet by row slices of B (A shared): a BFL `img_attn.qkv` module
// gives three deltas (q, k, v rows), FLUX.1's `linear1` four (q, k, v, MLP), the final layer's
// `adaLN_modulation.1` (rows shift, scale) and diffusers' `norm_out.linear` (rows scale, shift) two,
// each half on the canonical layer it was trained for.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "fluxrt/request.h"
#include "models/lora/lora_file.h"
#include "models/lora/lora_scheme.h"
#include "models/weight_binder.h"
#include "nn/linear.h"

namespace fluxrt::models {

// Which model of the pipeline a list of deltas is for: a FLUX.1 LoRA may also adapt its CLIP-L and
// T5 text encoders (modules named kClipTextModulePrefix / kT5TextModulePrefix + the encoder's own
// module name, lora_file.h).
enum class LoraComponent { Transformer, ClipText, T5Text };

// One LoRA file and how strongly to apply it (negative allowed: subtracts the adapter): the public
// request's own type, so a request's LoRAs reach the model as they are.
using LoraSpec = fluxrt::Lora;

struct LoraDelta {
  std::string target;  // canonical weight name: "double_blocks.0.img_attn.q.weight"
  Tensor down;         // A [r, in]
  Tensor up;           // B's rows for this target [out, r] (a row view for fused modules)
  float scale = 1.0f;  // strength * the module's factor (lora_file.h); the strength alone with `dense`
  std::string source;  // "file: key stem", for messages
  // Or, for LoKr, LoHa and DoRA modules (down and up undefined): the module, whose whole delta
  // (lora_math.h) is formed only while its weights merge, one group of layers at a time (held for
  // every module at once, klein-4B's would be 16 GB of f32), the first of its rows this target
  // holds, and all of its targets in row order (a DoRA input-axis norm spans them).
  std::shared_ptr<const LoraModule> module = nullptr;
  int64_t first_row = 0;
  std::vector<std::string> group = {};
  bool low_rank() const { return module == nullptr; }
};

// Canonical weight name -> its [out, in] shape; nullopt when the model has no such linear.
using LinearShapes = std::function<std::optional<Shape>(const std::string& canonical_name)>;

// Every transformer module of `lora` as deltas on the layers `scheme` names. Throws Format when
// modules name layers the model lacks (all listed in the log, the first few in the message), when
// a module's shapes do not fit its layer (naming the first such tensor and both shapes), and when
// the file's layer names are one of the scheme's rivals' (lora_scheme.h).
std::vector<LoraDelta> lora_deltas(const LoraFile& lora, const LoraNameScheme& scheme, float strength,
                                   const LinearShapes& shapes);
// The same for a text encoder (`component` ClipText or T5Text): its modules, on the encoder's own
// layer names. Which transformer the file is for is the transformer's call to check.
std::vector<LoraDelta> lora_deltas(const LoraFile& lora, LoraComponent component, float strength,
                                   const LinearShapes& shapes);

// Reads every spec's file and returns all their deltas, in order. Errors carry the field "loras".
std::vector<LoraDelta> lora_deltas(const std::vector<LoraSpec>& specs, const LoraNameScheme& scheme,
                                   const LinearShapes& shapes);

// `canonical` with the files' transformer parts merged (lora_deltas, then merge_lora_deltas), as a
// model of `model_dtype` loads them: an f32 model keeps its merged weights in f32, a bf16 one
// rounds them to the stored dtype. `canonical` itself when `specs` is empty.
TensorStore merge_loras(const TensorStore& canonical, const std::vector<LoraSpec>& specs,
                        const LoraNameScheme& scheme, DType model_dtype);
// The same with a text encoder's parts (`component` ClipText or T5Text).
TensorStore merge_loras(const TensorStore& canonical, const std::vector<LoraSpec>& specs,
                        LoraComponent component, DType model_dtype);

// Whether any of the files adapts `component` (errors as lora_deltas', field "loras").
bool loras_adapt(const std::vector<LoraSpec>& specs, LoraComponent component);

// Whether requests carrying these files can share a batch with requests carrying other such files,
// each request's deltas attached to its own batch elements (LoraAttachment's rows): every module
// of every file is a plain low-rank pair (no LoKr, LoHa or DoRA, which attach merged weights) on
// the transformer (no text-encoder module: the prompts are encoded once for the batch). False
// for an empty list and for a file that cannot be read (generate then reports it).
bool loras_batch_by_rows(const std::vector<LoraSpec>& specs);

// The shapes of a canonical checkpoint store's 2-D tensors.
LinearShapes linear_shapes_of(const TensorStore& canonical);
// The shapes of a model's bound linears (by canonical weight name).
LinearShapes linear_shapes_of(const std::map<std::string, nn::Linear>& linears);

// `canonical` with every touched weight replaced by its merged copy (f32 math, one rounding to
// `dtype`, else the stored dtype: an f32 model keeps the merged weight in f32 instead of rounding
// it to a bf16 checkpoint's dtype first); untouched tensors stay the same views. The deltas apply
// in order: a DoRA module renormalises the weight as the deltas before it left it.
TensorStore merge_lora_deltas(const TensorStore& canonical, const std::vector<LoraDelta>& deltas,
                              std::optional<DType> dtype = std::nullopt);

// Unmerged: attaches the deltas to the named linears for the attachment's lifetime (a request) as
// low-rank branches in `dtype` on `device`, on the batch elements `rows` (a request's images in a
// batch of requests with different LoRAs; only plain low-rank deltas can be limited to rows:
// loras_batch_by_rows); detaches them again when destroyed. The linears are shared with the model
// (nn::Linear copies share their branches).
class LoraAttachment {
 public:
  LoraAttachment(const std::map<std::string, nn::Linear>& linears, const std::vector<LoraDelta>& deltas,
                 DType dtype, Device device, nn::Linear::Rows rows = {});
  ~LoraAttachment();
  LoraAttachment(const LoraAttachment&) = delete;
  LoraAttachment& operator=(const LoraAttachment&) = delete;
  size_t layers() const { return touched_.size() + replaced_.size(); }
  // The layers given a merged copy (LoKr, LoHa, DoRA) and its bytes.
  size_t replaced_layers() const { return replaced_.size(); }
  size_t replaced_bytes() const { return replaced_bytes_; }

 private:
  std::vector<nn::Linear> touched_;   // low-rank branches attached
  std::vector<nn::Linear> replaced_;  // merged copies attached
  size_t replaced_bytes_ = 0;
};

}  // namespace fluxrt::models
