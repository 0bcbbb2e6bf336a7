// Hopper backward instantiations for fp16: head dims 64, 80, 128, causal and not (flash_hopper.cu dispatches).
#include "kernels/hopper/flash_bwd_hopper_launch.cuh"

namespace lmscale::kernels::hopper {
template bool launch_bwd<BwdShipped<__half, 64>>(const FlashParams&, cudaStream_t);
template bool launch_bwd<BwdShipped<__half, 80>>(const FlashParams&, cudaStream_t);
template bool launch_bwd<BwdShipped<__half, 128>>(const FlashParams&, cudaStream_t);
}  // namespace lmscale::kernels::hopper
