// Compiled by ctest Build.WgmmaMissingWidthNamesTheGenerator, expected to fail: a wgmma width that
// generate_wgmma.py has no wrapper for (112 is not in its NS) must stop the compile with a message naming
// the script, not leave an undefined symbol for the linker.
#include "kernels/hopper/wgmma_ops.cuh"

__global__ void missing_width_kernel(uint64_t desc_a, uint64_t desc_b) {
  float d[56];
  lmscale::kernels::hopper::wgmma_ss<__nv_bfloat16, 112>(d, desc_a, desc_b, 1);
}
