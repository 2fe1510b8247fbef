#pragma once
// Reference linear: naive loops with f64 accumulation, rounded once to the output dtype. This is
// the oracle the other backends are tested against, so it favours obviousness over speed (it is
// only parallelised over rows so the test suite stays fast).
#include <memory>

#include "backend/args/linear.h"

namespace fluxrt::backend {

std::shared_ptr<PreparedLinear> prepare_linear_ref(const Tensor& weight, const Tensor& bias);
// The oracle for quantized weights: dequantized whole (core's scalar reference) into f32 once.
std::shared_ptr<PreparedLinear> prepare_linear_quantized_ref(const QuantizedMatrix& weight,
                                                             const Tensor& bias);
void linear_ref(const LinearArgs& args);

// The activations in f64, shared with the conv oracle and the tests.
double apply_activation_ref(Activation act, double v);

}  // namespace fluxrt::backend
