// Hopper forward instantiations for bf16 (head dims 64, 80, 128; causal and not). One file per dtype so
// the two compile in parallel (flash_hopper.cu holds the host side).
#include "kernels/hopper/flash_fwd_hopper_launch.cuh"

namespace lmscale::kernels::hopper {
template void launch_fwd<__nv_bfloat16, 64>(const FwdMaps&, const FlashParams&, cudaStream_t);
template void launch_fwd<__nv_bfloat16, 80>(const FwdMaps&, const FlashParams&, cudaStream_t);
template void launch_fwd<__nv_bfloat16, 128>(const FwdMaps&, const FlashParams&, cudaStream_t);
}  // namespace lmscale::kernels::hopper
