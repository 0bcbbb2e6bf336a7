// Hopper forward instantiations for bf16: the shipped variant of head dims 64, 80, 128, causal and not.
// One file per dtype so the two compile in parallel (flash_hopper.cu holds the dispatch).
#include "kernels/hopper/flash_fwd_hopper_launch.cuh"

namespace lmscale::kernels::hopper {
template bool launch_fwd<FwdShipped<__nv_bfloat16, 64>>(const FlashParams&, cudaStream_t);
template bool launch_fwd<FwdShipped<__nv_bfloat16, 80>>(const FlashParams&, cudaStream_t);
template bool launch_fwd<FwdShipped<__nv_bfloat16, 128>>(const FlashParams&, cudaStream_t);
}  // namespace lmscale::kernels::hopper
