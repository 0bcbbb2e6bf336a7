// The Hopper (sm_90a) instructions the FlashAttention kernels use, one small inline-PTX wrapper each
// (PTX ISA 8.x sections named per function): mbarriers, TMA bulk tensor loads and reduce-adds, wgmma fences and shared
// memory descriptors, stmatrix, register reallocation. Written by hand instead of through CuTe: the kernels need
// about fifteen instructions, and seeing them is the point (docs/flash_notes.md, "Hopper: why raw PTX").
#pragma once
#include <cuda.h>  // CUtensorMap (a plain 128-byte struct; no driver call is made from device code)

#include <cstdint>

namespace lmscale::kernels::hopper {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The dynamic shared memory rounded up to 1024 bytes: the swizzle pattern repeats every 1024 bytes and the
// wgmma descriptors assume atom-aligned tile bases (the kernels ask for 1024 bytes of slack). Done by
// pointer arithmetic on the __shared__ array itself, never through an integer, so the compiler still
// knows every pointer derived from it is shared and emits LDS / STS (a round trip through uintptr_t made
// them generic LD / ST: slower, and fenced as global memory; docs/flash_notes.md, backward v5).
__device__ __forceinline__ unsigned char* align_1024(unsigned char* smem_raw) {
  return smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
}


// ---- mbarrier (PTX 9.7.13.15): a 64-bit shared-memory object counting arrivals and TMA bytes.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}
// Makes the initialised barriers visible to the TMA unit (async proxy) before any copy names them.
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// One arrival plus `bytes` expected from TMA copies that complete on this barrier.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// Waits until the phase with parity `parity` has completed. A fresh barrier is in phase 0, so waiting
// for parity 1 returns at once: producers start with parity 1 on their "slot free" barriers.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// ---- TMA (PTX 9.7.9.25): a 4-D tile (d, row, head, batch) of `map` into shared memory; the bytes
// complete_tx on `bar`. Out-of-range rows and columns are written as zeros (the tail tiles rely on it).
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2,
                                            int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---- wgmma bookkeeping (PTX 9.7.15.6): fence before a batch that reads registers written by ordinary
// instructions, commit closes a batch, wait<n> blocks until at most n batches are in flight.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Tells the compiler a register array is read and written here, so it keeps accumulator accesses on the
// right side of the asynchronous wgmma (which the compiler cannot see into).
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N, int M>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N][M]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < M; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

// ---- Shared memory matrix descriptor (PTX 9.7.15.5.1): start address, leading and stride byte offsets (all
// >> 4) and the swizzle mode (128-byte swizzle -> 1, 64-byte -> 2), built as two 32-bit words: desc_lo holds the
// start address and the leading offset, desc_hi the stride offset and the mode, and desc_at adds a byte offset
// to the address field alone. Shared addresses are below 2^18 (228 KB), so addr >> 4 fits the 14-bit field and
// an offset that stays inside shared memory never carries into the next one; a kernel builds a tile's base
// once and each k-step's descriptor with one integer add (rebuilding it from the byte address took six
// uniform-datapath instructions per wgmma: docs/flash_notes.md, backward v5.2).
__device__ __forceinline__ uint32_t desc_lo(uint32_t addr, uint32_t lbo_bytes) { return (addr >> 4) | ((lbo_bytes >> 4) << 16); }
template <int kSwizzleBytes>
constexpr uint32_t desc_hi(uint32_t sbo_bytes) {
  static_assert(kSwizzleBytes == 128 || kSwizzleBytes == 64, "128- or 64-byte swizzle");
  return (sbo_bytes >> 4) | ((kSwizzleBytes == 128 ? 1u : 2u) << 30);
}
__device__ __forceinline__ uint64_t desc_at(uint32_t lo, uint32_t hi, uint32_t byte_offset) {
  return (static_cast<uint64_t>(hi) << 32) | (lo + (byte_offset >> 4));
}

// ---- Register reallocation (PTX 9.7.17.1): a warpgroup gives registers back or takes them.
template <int N>
__device__ __forceinline__ void regs_release() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void regs_claim() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

// ---- Named barriers among a subset of warps (bar.sync id, thread count).
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Orders this thread's ordinary shared-memory stores before later async-proxy reads (wgmma operands),
// PTX 9.7.12.4: the backward writes dS with st.shared and then names it in a wgmma descriptor.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// ---- Bulk tensor reduce (PTX 9.7.9.27): adds a shared-memory tile into global memory through a tensor
// map (the backward's dQ: fp32, the add done by the TMA unit in L2, rows and columns past the tensor's end
// skipped). The issuing thread tracks it in a bulk group: commit, then wait until its shared-memory
// source has been read (the tile may be rewritten) or until the adds are done.
__device__ __forceinline__ void tma_reduce_add_3d(const void* src, const CUtensorMap* map, int c0, int c1, int c2) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(
          reinterpret_cast<uint64_t>(map)),
      "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
// The same box stored, not added (Note [dQ first store]).
__device__ __forceinline__ void tma_store_3d(const void* src, const CUtensorMap* map, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
// A 4-D box stored (the forward's O through shared memory: Note [O by TMA store]); coordinates outside the tensor
// (rows before or past a dense sequence) are not written.
__device__ __forceinline__ void tma_store_4d(const void* src, const CUtensorMap* map, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
// ---- Ordering between blocks (PTX 9.7.13.4 / 9.7.13.6 / 9.7.12.4): an acquire load and a release add on a
// global counter, and the proxy fence that orders generic-proxy accesses with bulk (async-proxy) copies.
__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(int* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void red_release_add_gpu(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }

__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// ---- stmatrix (PTX 9.7.14.5.16): four 8 x 8 16-bit tiles from mma fragments (one 32-bit register per
// tile per thread) into shared memory, transposed; lane 8 j + r gives the address of row r of tile j.
// The same without the transpose: lane 4 r + c's register of tile j goes to bytes [4 c, 4 c + 4) of row r.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// ---- ldmatrix (PTX 9.7.14.5.15): four 8 x 8 16-bit tiles from shared memory into mma fragments (one 32-bit
// register per tile per thread), lane 8 j + r giving the address of row r of tile j; the backward's K held in
// registers as the A operand of S^T = K Q^T (BwdConfig::kKInRegs). Volatile and with a memory clobber: the tile
// was written by TMA, whose completion the caller waited for on an mbarrier.
__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace lmscale::kernels::hopper
