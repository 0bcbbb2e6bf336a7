// TEMPORARY: placeholder until the FlashAttention ops land (issue 3); replaced by the real files.
#include "ops/flash_attention.h"

#include <c10/util/Exception.h>

namespace lmscale::ops {
std::tuple<at::Tensor, at::Tensor> flash_attention_forward(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                          bool) {
  TORCH_CHECK(false, "flash attention is not built yet");
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward(const at::Tensor&, const at::Tensor&,
                                                                        const at::Tensor&, const at::Tensor&,
                                                                        const at::Tensor&, const at::Tensor&, bool) {
  TORCH_CHECK(false, "flash attention is not built yet");
}
at::Tensor flash_attention(const at::Tensor&, const at::Tensor&, const at::Tensor&, bool) {
  TORCH_CHECK(false, "flash attention is not built yet");
}
}  // namespace lmscale::ops
