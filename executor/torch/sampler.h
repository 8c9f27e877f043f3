// The head's token choice over its logits, on the logits' device: shared by
// runtime_model.cpp (LlamaModel::head_sampled) and sampler.cpp. Internal: it
// includes ATen, so only the runtime's own files include it.
#pragma once

#include <ATen/ATen.h>

#include "runtime.h"

namespace slicesched::rt::detail {

// `logits` [plan.seqs.size(), vocab] (any float type, on any device): one
// token per sequence, each chosen by its Sampling (argmax without one), and
// the log-probabilities asked for. Waits for the device.
LlamaModel::Sampled sample(const at::Tensor& logits, const StepPlan& plan);

}  // namespace slicesched::rt::detail
