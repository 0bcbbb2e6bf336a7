// Hopper backward instantiations for bf16: head dims 64, 80, 128, causal and not (flash_hopper.cu dispatches).
#include "kernels/hopper/flash_bwd_hopper_launch.cuh"

namespace lmscale::kernels::hopper {
template bool launch_bwd<BwdShipped<__nv_bfloat16, 64>>(const FlashParams&, cudaStream_t);
template bool launch_bwd<BwdShipped<__nv_bfloat16, 80>>(const FlashParams&, cudaStream_t);
template bool launch_bwd<BwdShipped<__nv_bfloat16, 128>>(const FlashParams&, cudaStream_t);
}  // namespace lmscale::kernels::hopper
