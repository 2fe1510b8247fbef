#pragma once
// The FLUX transformers' layers as LoRA files name them (models/lora/lora_scheme.h): one name
// scheme per architecture, over the canonical names of flux1_names.h / flux2_names.h. LoRA files
// for the two share their key names except for the layers only one of them has.
#include "models/lora/lora_scheme.h"

namespace fluxrt::models {

const LoraNameScheme& flux1_lora_scheme();
const LoraNameScheme& flux2_lora_scheme();

}  // namespace fluxrt::models
