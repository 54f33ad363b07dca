// Scaled dot-product attention picks its kernel through a per-device stub. Without an entry for
// PrivateUse1 it would take the math path on neuron while CPU takes its flash kernel, so results
// would differ from CPU. We answer with the CPU choice; the chosen op then runs the CPU kernel.
#include "neuron_sim.h"

#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_native.h>

namespace hf_neuron_sim {
namespace {

// The CPU choice depends only on metadata (shapes, strides, dtypes), so it is asked with meta
// tensors: no data is touched, which also keeps it working under Dynamo's fake tensors.
// The flag that a tensor requires grad is kept: CPU takes the math path for a mask that requires grad
// (a learned bias), as its fused kernels have no derivative for the mask.
at::Tensor as_meta(const at::Tensor& t) {
  auto meta = at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::DeviceType::Meta));
  if (t.requires_grad()) {
    meta.set_requires_grad(true);
  }
  return meta;
}

int64_t neuron_fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                                const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                                std::optional<double> scale, bool enable_gqa) {
  std::optional<at::Tensor> mask;
  if (attn_mask.has_value() && attn_mask->defined()) {
    mask = as_meta(*attn_mask);
  }
  return at::native::_fused_sdp_choice_cpp(as_meta(query), as_meta(key), as_meta(value), mask, dropout_p, is_causal,
                                           scale, enable_gqa);
}

}  // namespace
}  // namespace hf_neuron_sim

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &hf_neuron_sim::neuron_fused_sdp_choice)
}
