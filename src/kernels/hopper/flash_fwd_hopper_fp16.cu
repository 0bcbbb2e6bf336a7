// Hopper forward instantiations for fp16: the shipped variant of head dims 64, 80, 128, causal and not.
// One file per dtype so the two compile in parallel (flash_hopper.cu holds the dispatch).
#include "kernels/hopper/flash_fwd_hopper_launch.cuh"

namespace lmscale::kernels::hopper {
template bool launch_fwd<FwdShipped<__half, 64>>(const FlashParams&, cudaStream_t);
template bool launch_fwd<FwdShipped<__half, 80>>(const FlashParams&, cudaStream_t);
template bool launch_fwd<FwdShipped<__half, 128>>(const FlashParams&, cudaStream_t);
}  // namespace lmscale::kernels::hopper
