// Distributed shared memory read bandwidth on sm_90 (docs/flash_history.md, "Where this leaves the 6.3 ms goal"): each
// block of a 2-block cluster (one per SM) reads a 32 KB buffer of its peer's shared memory through the cluster window
// (ld.shared::cluster, 16 bytes per thread and load), or its own for comparison, 200 times; bytes per SM clock from
// clock64() and TB/s over all blocks from CUDA events. It decides whether a pair of backward blocks could sum their dQ
// tiles by reading each other's staging (32 KB per tile) instead of both adding into L2.
// Build: nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -O3 tools/probes/dsmem/dsmem_probe.cu -o build-probe/dsmem_probe
#include <cstdio>
#include <cuda_runtime.h>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
constexpr int kBytes = 32 * 1024;
template <bool kRemote, int kThreads>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(kThreads, 1) read_kernel(int iters, float* out, long long* cycles) {
  extern __shared__ float4 buf[];
  cg::cluster_group cluster = cg::this_cluster();
  for (int i = threadIdx.x; i < kBytes / 16; i += kThreads) buf[i] = make_float4(i, 1, 2, 3);
  cluster.sync();
  const float4* src = kRemote ? cluster.map_shared_rank(buf, cluster.block_rank() ^ 1) : buf;
  float4 acc = make_float4(0, 0, 0, 0);
  long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
#pragma unroll 8
    for (int i = threadIdx.x; i < kBytes / 16; i += kThreads) {
      float4 v = src[(i + it) % (kBytes / 16)];
      acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    }
  }
  __syncthreads();
  long long t1 = clock64();
  cluster.sync();
  if (acc.x == -1.f) out[threadIdx.x] = acc.y + acc.z + acc.w;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}
template <bool kRemote, int kThreads>
void run(int blocks) {
  float* out; long long* cyc;
  cudaMalloc(&out, 4096); cudaMalloc(&cyc, blocks * 8);
  auto k = read_kernel<kRemote, kThreads>;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
  const int iters = 200;
  k<<<blocks, kThreads, 200 * 1024>>>(iters, out, cyc);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  cudaEventRecord(a);
  k<<<blocks, kThreads, 200 * 1024>>>(iters, out, cyc);
  cudaEventRecord(b); cudaEventSynchronize(b);
  float ms; cudaEventElapsedTime(&ms, a, b);
  long long c[264]; cudaMemcpy(c, cyc, blocks * 8, cudaMemcpyDeviceToHost);
  double mean = 0; for (int i = 0; i < blocks; ++i) mean += c[i]; mean /= blocks;
  const double bytes = double(iters) * kBytes;
  printf("%-6s threads %4d blocks %3d: %.1f B/clk per SM (%.0f cycles for %.0f KB), %.2f TB/s all SMs, err %s\n",
         kRemote ? "remote" : "local", kThreads, blocks, bytes / mean, mean, bytes / 1024, bytes * blocks / ms / 1e9,
         cudaGetErrorString(cudaGetLastError()));
}
int main() {
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int blocks = sms / 2 * 2;
  run<false, 256>(blocks); run<true, 256>(blocks);
  run<false, 512>(blocks); run<true, 512>(blocks);
  run<true, 128>(blocks); run<true, 128>(2);
  return 0;
}
