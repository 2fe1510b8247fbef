#include "models/lora/lora_delta.h"

#include <algorithm>
#include <functional>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "models/lora/lora_math.h"
#include "ops/elementwise.h"
#include "ops/linear.h"

namespace fluxrt::models {
namespace {

LoraComponent component_of(const std::string& module) {
  if (module.rfind(kClipTextModulePrefix, 0) == 0) return LoraComponent::ClipText;
  if (module.rfind(kT5TextModulePrefix, 0) == 0) return LoraComponent::T5Text;
  return LoraComponent::Transformer;
}

const char* module_prefix(LoraComponent c) {
  return c == LoraComponent::ClipText ? kClipTextModulePrefix
         : c == LoraComponent::T5Text ? kT5TextModulePrefix
                                      : "";
}

// The deltas of `lora`'s modules for `component`: the transformer's on the layers `scheme` names
// (scheme set), a text encoder's on its own layer names.
std::vector<LoraDelta> deltas_of(const LoraFile& lora, const LoraNameScheme* scheme, LoraComponent component,
                                 float strength, const LinearShapes& shapes) {
  const bool encoder = component != LoraComponent::Transformer;
  const std::string model = component == LoraComponent::ClipText ? "CLIP text encoder"
                            : component == LoraComponent::T5Text
                                ? "T5 text encoder"
                                : std::string(scheme->family) + " transformer";
  std::vector<LoraDelta> out;
  std::vector<std::string> unmatched;
  for (const LoraModule& m : lora.modules) {
    if (component_of(m.module) != component) continue;  // another component's part
    // An encoder's own names as it binds them ("encoder.layers.0.self_attn.q_proj.weight").
    const std::vector<std::string> targets =
        encoder ? std::vector<std::string>{m.module.substr(std::string(module_prefix(component)).size()) +
                                           ".weight"}
                : scheme->targets_of(m.module);
    std::vector<Shape> target_shapes;
    for (const auto& t : targets) {
      const std::optional<Shape> s = shapes(t);
      if (!s) break;
      target_shapes.push_back(*s);
    }
    if (target_shapes.size() != targets.size()) {
      unmatched.push_back(m.key);
      continue;
    }
    int64_t rows = 0;
    bool inputs_fit = true;
    const Shape delta_shape = m.delta_shape();
    for (const Shape& s : target_shapes) {
      rows += s[0];
      inputs_fit = inputs_fit && s[1] == delta_shape[1];
    }
    if (rows != delta_shape[0] || !inputs_fit) {
      std::string want;
      for (size_t i = 0; i < targets.size(); ++i)
        want += (i ? " + " : "") + targets[i] + " " + target_shapes[i].str();
      const std::string have = m.kind == LoraKind::Lora
                                   ? "up " + m.up.shape().str() + ", down " + m.down.shape().str()
                                   : std::string(lora_kind_name(m.kind)) + " delta " + delta_shape.str();
      fail(ErrorCode::Format,
           "{}: LoRA module '{}' ({}) does not fit this {}'s {} (a LoRA for another model size or family?)",
           lora.path, m.key, have, model, want);
    }
    // Strength 0 is checked like any other and then adds nothing: the base model bit for bit.
    if (strength * m.factor() == 0.0f) continue;
    const bool low_rank = m.kind == LoraKind::Lora && !m.dora();
    const auto module = low_rank ? nullptr : std::make_shared<const LoraModule>(m);
    int64_t at = 0;
    for (size_t i = 0; i < targets.size(); ++i) {
      const int64_t r = target_shapes[i][0];
      LoraDelta d;
      d.target = targets[i];
      d.scale = strength;
      d.source = lora.path + ": " + m.key;
      if (low_rank) {
        d.down = m.down;
        d.up = m.up.narrow(0, at, r);
        d.scale = strength * m.factor();
      } else {
        d.module = module;
        d.first_row = at;
        d.group = targets;
      }
      out.push_back(std::move(d));
      at += r;
    }
  }
  if (!unmatched.empty()) {
    for (const auto& k : unmatched)
      FLUXRT_LOG_WARN("{}: LoRA module '{}' matches no layer of this {}", lora.path, k, model);
    std::string first;
    for (size_t i = 0; i < unmatched.size() && i < 4; ++i) first += (i ? "', '" : "'") + unmatched[i] + "'";
    fail(ErrorCode::Format, "{}: {} LoRA module(s) match no layer of this {} (all in the log): {}{}",
         lora.path, unmatched.size(), model, first, unmatched.size() > 4 ? "', ..." : "'");
  }
  return out;
}

// Every spec's deltas for `component`, in order; errors carry the field "loras".
std::vector<LoraDelta> deltas_of(const std::vector<LoraSpec>& specs, const LoraNameScheme* scheme,
                                 LoraComponent component, const LinearShapes& shapes) {
  std::vector<LoraDelta> all;
  try {
    for (const LoraSpec& spec : specs) {
      const LoraFile lora = read_lora_file(spec.path);
      std::vector<LoraDelta> d = scheme ? lora_deltas(lora, *scheme, spec.strength, shapes)
                                        : lora_deltas(lora, component, spec.strength, shapes);
      all.insert(all.end(), std::make_move_iterator(d.begin()), std::make_move_iterator(d.end()));
    }
  } catch (const Error& e) {
    // Whatever the cause (a corrupt file, another family, a shape), it is the LoRA list at fault:
    // a front end names its own parameter for it (the server's 400 with param "loras").
    if (!e.field().empty()) throw;
    throw Error(e.code(), e.what(), "loras");
  }
  return all;
}

TensorStore merged(const TensorStore& canonical, const std::vector<LoraDelta>& deltas, DType model_dtype) {
  return merge_lora_deltas(canonical, deltas,
                           model_dtype == DType::F32 ? std::optional<DType>(DType::F32) : std::nullopt);
}

}  // namespace

std::vector<LoraDelta> lora_deltas(const LoraFile& lora, const LoraNameScheme& scheme, float strength,
                                   const LinearShapes& shapes) {
  std::vector<const LoraNameScheme*> schemes{&scheme};
  for (const LoraNameScheme* rival : scheme.rivals()) schemes.push_back(rival);
  const LoraFamily family = lora_family(lora, schemes);
  FLUXRT_CHECK(family.scheme == nullptr || family.scheme == &scheme, ErrorCode::Format,
               "{}: a {} LoRA (its layer '{}' exists only there) cannot be applied to a {} transformer",
               lora.path, family.scheme ? family.scheme->family : "", family.module, scheme.family);
  return deltas_of(lora, &scheme, LoraComponent::Transformer, strength, shapes);
}

std::vector<LoraDelta> lora_deltas(const LoraFile& lora, LoraComponent component, float strength,
                                   const LinearShapes& shapes) {
  FLUXRT_CHECK(component != LoraComponent::Transformer, ErrorCode::Internal,
               "{}: a transformer's LoRA deltas need its name scheme", lora.path);
  return deltas_of(lora, nullptr, component, strength, shapes);
}

std::vector<LoraDelta> lora_deltas(const std::vector<LoraSpec>& specs, const LoraNameScheme& scheme,
                                   const LinearShapes& shapes) {
  return deltas_of(specs, &scheme, LoraComponent::Transformer, shapes);
}

TensorStore merge_loras(const TensorStore& canonical, const std::vector<LoraSpec>& specs,
                        const LoraNameScheme& scheme, DType model_dtype) {
  if (specs.empty()) return canonical;
  return merged(canonical, deltas_of(specs, &scheme, LoraComponent::Transformer, linear_shapes_of(canonical)),
                model_dtype);
}

TensorStore merge_loras(const TensorStore& canonical, const std::vector<LoraSpec>& specs,
                        LoraComponent component, DType model_dtype) {
  if (specs.empty()) return canonical;
  return merged(canonical, deltas_of(specs, nullptr, component, linear_shapes_of(canonical)), model_dtype);
}

bool loras_adapt(const std::vector<LoraSpec>& specs, LoraComponent component) {
  try {
    for (const LoraSpec& spec : specs)
      for (const LoraModule& m : read_lora_file(spec.path).modules)
        if (component_of(m.module) == component) return true;
  } catch (const Error& e) {
    if (!e.field().empty()) throw;
    throw Error(e.code(), e.what(), "loras");
  }
  return false;
}

bool loras_batch_by_rows(const std::vector<LoraSpec>& specs) {
  if (specs.empty()) return false;
  try {
    for (const LoraSpec& spec : specs)
      for (const LoraModule& m : read_lora_file(spec.path).modules)
        if (m.kind != LoraKind::Lora || m.dora() || component_of(m.module) != LoraComponent::Transformer)
          return false;
  } catch (const Error&) {
    return false;  // kept to batches of its own list; generate reports the error
  }
  return true;
}

LinearShapes linear_shapes_of(const TensorStore& canonical) {
  return [&canonical](const std::string& name) -> std::optional<Shape> {
    if (!canonical.contains(name) || canonical.get(name).dim() != 2) return std::nullopt;
    return canonical.get(name).shape();
  };
}

LinearShapes linear_shapes_of(const std::map<std::string, nn::Linear>& linears) {
  return [&linears](const std::string& name) -> std::optional<Shape> {
    const auto it = linears.find(name);
    if (it == linears.end() || !it->second.bound()) return std::nullopt;
    return Shape{it->second.out_features(), it->second.in_features()};
  };
}

namespace {

// The targets that some delta merges as a whole weight (LoKr, LoHa, DoRA), grouped so that a
// DoRA module's targets (whose input-axis norm spans them all) land in one group.
std::vector<std::vector<std::string>> exact_groups(const std::vector<LoraDelta>& deltas) {
  std::map<std::string, std::string> parent;
  std::function<std::string(const std::string&)> root = [&](const std::string& t) {
    const std::string& p = parent.at(t);
    return p == t ? t : root(p);
  };
  for (const LoraDelta& d : deltas)
    if (!d.low_rank()) {
      parent.emplace(d.target, d.target);
      for (const std::string& g : d.group) parent.emplace(g, g);
      for (const std::string& g : d.group) parent[root(g)] = root(d.target);
    }
  std::map<std::string, std::vector<std::string>> groups;
  for (const auto& [t, p] : parent) groups[root(t)].push_back(t);
  std::vector<std::vector<std::string>> out;
  for (auto& [r, g] : groups) out.push_back(std::move(g));
  return out;
}

// The weights of `group` with every delta on them applied in order, in f32: the plain ones added,
// a DoRA module's rows renormalised together (lora_math.h). Each module's whole delta is formed
// once, here, and dropped with the group.
std::map<std::string, Tensor> merge_exact(const TensorStore& canonical, const std::vector<LoraDelta>& deltas,
                                          const std::vector<std::string>& group) {
  std::map<std::string, Tensor> work;
  for (const std::string& t : group) work[t] = canonical.get(t).to(DType::F32).contiguous().clone();
  std::map<const LoraModule*, Tensor> module_deltas;
  auto rows_of = [&](const LoraDelta& d, int64_t rows) {
    Tensor& whole = module_deltas[d.module.get()];
    if (!whole.defined()) whole = lora_module_delta(*d.module);
    return whole.narrow(0, d.first_row, rows);
  };
  for (size_t i = 0; i < deltas.size(); ++i) {
    const LoraDelta& d = deltas[i];
    if (!work.count(d.target)) continue;
    Tensor& w = work.at(d.target);
    if (d.low_rank() || !d.module->dora()) {
      Tensor add = d.low_rank() ? lora_matmul(d.up, d.down) : rows_of(d, w.size(0)).clone();
      ops::scale_(add, d.scale);
      ops::add_(w, add);
      continue;
    }
    // A DoRA module: its deltas are consecutive, one per target in row order. Row norms are per
    // target; an input-axis ([1, in]) norm needs all of the module's rows at once.
    const Tensor& g = d.module->magnitude;
    const bool per_column = g.dim() == 2 && g.size(0) == 1;
    if (!per_column) {
      apply_dora({w}, {rows_of(d, w.size(0))}, g.reshape({g.numel()}).narrow(0, d.first_row, w.size(0)),
                 d.module->magnitude_eps, d.scale);
      continue;
    }
    if (d.first_row != 0) continue;  // applied with the module's first target
    std::vector<Tensor> blocks, rows;
    for (size_t j = i; j < deltas.size() && blocks.size() < d.group.size(); ++j)
      if (deltas[j].module == d.module) {
        blocks.push_back(work.at(deltas[j].target));
        rows.push_back(rows_of(deltas[j], blocks.back().size(0)));
      }
    FLUXRT_CHECK(blocks.size() == d.group.size(), ErrorCode::Internal,
                 "{}: DoRA module's targets are not all here", d.source);
    apply_dora(blocks, rows, g, d.module->magnitude_eps, d.scale);
  }
  return work;
}

}  // namespace

TensorStore merge_lora_deltas(const TensorStore& canonical, const std::vector<LoraDelta>& deltas,
                              std::optional<DType> dtype) {
  TensorStore out = canonical;  // same views
  std::set<std::string> exact;
  for (const std::vector<std::string>& group : exact_groups(deltas)) {
    for (auto& [target, w] : merge_exact(canonical, deltas, group)) {
      out.add(target, w.to(dtype.value_or(canonical.get(target).dtype())).contiguous(),
              canonical.origin(target) + " + LoRA");
      exact.insert(target);
    }
  }
  std::map<std::string, std::vector<const LoraDelta*>> by_target;
  for (const LoraDelta& d : deltas)
    if (!exact.count(d.target)) by_target[d.target].push_back(&d);
  for (const auto& [target, list] : by_target) {
    const Tensor& w = canonical.get(target);  // [out, in], often a read-only mapping view
    const int64_t rows = w.size(0), cols = w.size(1);
    // B @ A as the prepared GEMM computes x @ W^T: x = B [out, r], W = A^T [in, r]. The scale and
    // the sum go into the GEMM's epilogue (block += s * B A as the gated residual, the gate s over
    // every column).
    struct Factor {
      std::shared_ptr<backend::PreparedLinear> a_t;
      Tensor up, scale;
    };
    std::vector<Factor> factors;
    for (const LoraDelta* d : list)
      factors.push_back({ops::prepare_linear(d->down.to(DType::F32).transpose(0, 1).contiguous()),
                         d->up.to(DType::F32).contiguous(), Tensor::full({cols}, DType::F32, d->scale)});
    // A block of rows at a time through one f32 scratch of about 8 MB: it stays in the last-level
    // cache, and is large enough that the dtype conversions run on every thread. The only new
    // memory is then the result; a whole-tensor f32 copy plus the GEMM's f32 temporary faulted in
    // 10 bytes per weight (34 s for klein-4B at rank 32, against 16 s this way).
    const int64_t block = std::clamp<int64_t>((int64_t{8} << 20) / (4 * std::max<int64_t>(cols, 1)) / 16 * 16,
                                              16, std::max<int64_t>(rows, 16));
    Tensor merged = Tensor::empty({rows, cols}, dtype.value_or(w.dtype()));
    Tensor scratch = Tensor::empty({std::min(block, rows), cols}, DType::F32);
    for (int64_t r0 = 0; r0 < rows; r0 += block) {
      const int64_t n = std::min(block, rows - r0);
      Tensor rows_f32 = scratch.narrow(0, 0, n);
      rows_f32.copy_from(w.narrow(0, r0, n));
      for (const Factor& f : factors)
        ops::linear_gated_residual_into(f.up.narrow(0, r0, n), *f.a_t, f.scale, rows_f32, rows_f32);
      merged.narrow(0, r0, n).copy_from(rows_f32);  // the one rounding
    }
    out.add(target, merged, canonical.origin(target) + " + LoRA");
  }
  return out;
}

LoraAttachment::LoraAttachment(const std::map<std::string, nn::Linear>& linears,
                               const std::vector<LoraDelta>& deltas, DType dtype, Device device,
                               nn::Linear::Rows rows) {
  auto layer_of = [&](const std::string& target) {
    const auto it = linears.find(target);
    FLUXRT_CHECK(it != linears.end() && it->second.bound(), ErrorCode::Internal,
                 "LoRA target '{}' is not bound", target);
    return it->second;  // shares the model layer's branches
  };
  // Layers a LoKr, LoHa or DoRA module touches get a merged copy for the request, with every delta
  // on them (plain ones too: DoRA renormalises what the deltas before it made).
  const std::vector<std::vector<std::string>> groups = exact_groups(deltas);
  FLUXRT_CHECK(groups.empty() || rows.all(), ErrorCode::Internal,
               "LoKr, LoHa and DoRA modules cannot be attached to some batch elements only");
  std::set<std::string> exact;
  for (const auto& group : groups) exact.insert(group.begin(), group.end());
  // A group at a time: only its layers' base weights, their f32 work copies and one module's delta
  // are held besides the merged copies the request keeps.
  try {
    for (const auto& group : groups) {
      TensorStore base;
      for (const std::string& t : group) {
        const nn::Linear layer = layer_of(t);
        FLUXRT_CHECK(
            layer.quantized() == nullptr, ErrorCode::Unsupported,
            "LoKr, LoHa and DoRA are not applied per request to quantized layers ('{}'); merge them at load",
            t);
        // A released source (synthetic benchmark weights) is a stride-0 stand-in: no weight to merge.
        FLUXRT_CHECK(
            layer.weight().dim() == 2 && (layer.weight().stride(0) != 0 || layer.weight().size(0) == 1),
            ErrorCode::Unsupported, "'{}' keeps no source weight to merge a LoKr, LoHa or DoRA module into",
            t);
        Tensor w = Tensor::empty(layer.weight().shape(), layer.weight().dtype());
        w.copy_from(layer.weight());  // the weight as the model holds it (engine LoRAs merged in)
        base.add(t, w);
      }
      for (auto& [target, w] : merge_exact(base, deltas, group)) {
        nn::Linear layer = layer_of(target);
        Tensor bias;
        if (layer.bias().defined()) {
          bias = Tensor::empty(layer.bias().shape(), layer.bias().dtype());
          bias.copy_from(layer.bias());
        }
        const Tensor merged = w.to(layer.weight().dtype()).contiguous();
        // In the layer's own format: an int8 base layer stays int8 with the module merged in.
        layer.attach_replacement(nn::Linear::prepare(merged, bias, device, layer.format()));
        replaced_.push_back(layer);
        replaced_bytes_ += merged.nbytes();
      }
    }
  } catch (...) {
    for (nn::Linear& layer : replaced_) layer.detach_replacement();
    throw;
  }
  for (const LoraDelta& d : deltas) {
    if (exact.count(d.target)) continue;
    nn::Linear layer = layer_of(d.target);
    // s folded into B in f32, then one rounding to the activation dtype.
    Tensor up = d.up.to(DType::F32).contiguous().clone();
    ops::scale_(up, d.scale);
    layer.attach_low_rank(nn::Linear::prepare(d.down.to(dtype).contiguous(), Tensor(), device),
                          nn::Linear::prepare(up.to(dtype), Tensor(), device), rows);
    touched_.push_back(layer);
  }
}

LoraAttachment::~LoraAttachment() {
  for (nn::Linear& layer : touched_) layer.detach_low_rank();
  for (nn::Linear& layer : replaced_) layer.detach_replacement();
}

}  // namespace fluxrt::models
