// FlashAttention-2 backward device code (docs/spec.md §3.2, recomputation): a preprocess kernel (D = rowsum(dO ⊙ O),
// dQ accumulator zeroed), the main kernel (one block per 128-key tile: dK, dV in registers, dQ added
// atomically in fp32), and a kernel that scales and casts the dQ accumulator. Launch choices live in
// flash_bwd_launch.cuh.
#pragma once
#include <climits>
#include <cmath>
#include <type_traits>

#include "kernels/flash_common.cuh"
#include "kernels/flash_params.h"
#include "kernels/flash_sequence.cuh"

namespace lmscale::kernels::flash {

// ----------------------------------------------------------------------------- preprocess

// kPreRowThreads threads per query row, each taking every kPreRowThreads-th 16-byte chunk of the row:
// dsum[row] = sum_d dO*O in fp32 (the threads' partial sums combined by shuffles), and the row's dQ
// accumulator zeroed where the main kernel only adds into it. One thread per row left the kernel at
// a third of HBM bandwidth (xl: 21 us for 26 MB, ncu): too few loads in flight, each thread walking
// its own row serially.
constexpr int kPreRowThreads = 8;
constexpr int kPreThreads = 128;
constexpr int kPreRowsPerBlock = kPreThreads / kPreRowThreads;

// Which rows of dq_accum the preprocess zeroes. kDqAddsEverywhere (0): every row of every sequence (the main kernel
// only adds). n > 0: the Hopper backward's first key block per query tile stores rather than adds (Note [dQ first
// store], flash_bwd_hopper.cuh) in each whole n-row tile of a sequence, so only the rows from (len_q / n) * n on are
// zeroed: none for n = 1 (a dense batch, whose tiles end at their plane's end), a packed sequence's last partial tile
// for n = the backward's query tile. It zeroes p.dq_tile_ticket too, when given.
constexpr int kDqAddsEverywhere = 0;
template <typename T, int D>
__global__ void __launch_bounds__(kPreThreads) flash_bwd_preprocess_kernel(const FlashParams p, int first_store_rows) {
  static_assert(D % 8 == 0, "rows are read in 16-byte chunks");
  const int part = threadIdx.x % kPreRowThreads;
  int b, h, row_tile;
  if (flash_varlen(p)) {  // blocks over the row tiles the batch has (Note [packed tile slots]), x heads
    if (!flash_packed_tile(p.cu_seqlens_q, p.batch, kPreRowsPerBlock, blockIdx.x, b, row_tile)) return;
    h = blockIdx.y;
  } else {  // Note [grid order], flash_fwd_kernel.cuh
    b = blockIdx.x / p.heads, h = blockIdx.x % p.heads, row_tile = blockIdx.y;
  }
  const int bh = b * p.heads + h;
  const int row = row_tile * kPreRowsPerBlock + threadIdx.x / kPreRowThreads;
  const FlashSeq seq = flash_seq(p, b);
  const int64_t stat_row = seq.stat_row0(h) + row;
  float sum = 0.f;
  if (row < seq.len_q) {  // no early return: every lane of the row's group takes part in the shuffles
    const int64_t r = seq.q_row0 + row;
    const T* o = static_cast<const T*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride + r * p.o_row_stride;
    const T* dout = static_cast<const T*>(p.dout) + b * p.do_batch_stride + h * p.do_head_stride + r * p.do_row_stride;
    float* acc = p.dq_accum + stat_row * D;
    const bool zero_dq_accum =
        first_store_rows == kDqAddsEverywhere || row >= seq.len_q / first_store_rows * first_store_rows;
#pragma unroll
    for (int c = part * 8; c < D; c += kPreRowThreads * 8) {
      const uint4 ov = *reinterpret_cast<const uint4*>(o + c);
      const uint4 dv = *reinterpret_cast<const uint4*>(dout + c);
      const uint32_t* ow = reinterpret_cast<const uint32_t*>(&ov);
      const uint32_t* dw = reinterpret_cast<const uint32_t*>(&dv);
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float2 a = Elem<T>::unpack(ow[w]), d = Elem<T>::unpack(dw[w]);
        sum += a.x * d.x + a.y * d.y;
      }
      if (zero_dq_accum) {
        *reinterpret_cast<float4*>(acc + c) = make_float4(0.f, 0.f, 0.f, 0.f);
        *reinterpret_cast<float4*>(acc + c + 4) = make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
    if (p.dq_tile_ticket && row % 64 == 0 && part == 0)
      *reinterpret_cast<int2*>(p.dq_tile_ticket + (static_cast<int64_t>(bh) * ((p.seqlen_q + 63) / 64) + row / 64) * 2) =
          make_int2(0, 0);
  }
#pragma unroll
  for (int off = kPreRowThreads / 2; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off, kPreRowThreads);
  if (row < seq.len_q && part == 0) p.dsum[stat_row] = sum;
}

// The preprocess launch, shared by the mma.sync and the Hopper backward (the caller checks the grid's y). A packed
// batch's grid covers the rows it has: sized by its longest sequence, 16 documents in 16k tokens left 60 % of the
// blocks empty and the preprocess at 2.2 TB/s (d = 64, H200).
inline dim3 flash_bwd_preprocess_grid(const FlashParams& p) {
  if (flash_varlen(p)) return dim3(flash_packed_slots(p.total_q, p.batch, kPreRowsPerBlock), p.heads);
  return dim3(p.batch * p.heads, (p.seqlen_q + kPreRowsPerBlock - 1) / kPreRowsPerBlock);
}
inline int flash_bwd_preprocess_blocks(const FlashParams& p) { return flash_bwd_preprocess_grid(p).y; }
template <typename T, int D>
void launch_flash_bwd_preprocess(const FlashParams& p, cudaStream_t stream, int first_store_rows) {
  flash_bwd_preprocess_kernel<T, D><<<flash_bwd_preprocess_grid(p), kPreThreads, 0, stream>>>(p, first_store_rows);
}

// ----------------------------------------------------------------------------- main kernel

// Note [bwd in transposed form]. Each warp owns kKT x 16 keys and computes S^T = K_w Q_i^T directly (keys
// on the MMA's M side), so P^T and dS^T land in registers already shaped as A operands of dV += P^T dO
// and dK += dS^T Q. dQ needs a sum over all the block's keys, i.e. across warps: dS^T goes through
// shared memory once per query tile and the warps then split dQ_i = dS K over (16-query tile, n8
// tiles of the head dim), adding into the fp32 accumulator with atomics (other key blocks add too).
// kKT = 2 makes every Q / dO fragment read from shared memory feed twice the MMAs (docs/flash_notes.md,
// v3); the tile choices per head dim live in flash_tiles.h.
// Note [grouped heads]. One block per (K/V head, key tile): with grouped-query attention it walks the query tiles
// of every query head of its group in turn, so dK and dV of its keys sum over the group in registers (no
// per-query-head copies, no reduction afterwards); dQ goes to each query head's own accumulator.
template <typename T, int D, int kBlockM, int kKT, int kWarps, bool Masked>
__global__ void __launch_bounds__(kWarps * 32) flash_bwd_kernel(const FlashParams p) {
  constexpr int kWarpKeys = 16 * kKT;
  constexpr int kBlockN = kWarpKeys * kWarps;
  constexpr int kThreads = kWarps * 32;
  constexpr int kLd = D + 8;
  constexpr int kLdS = kBlockM + 8;
  using E = Elem<T>;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + kBlockN * kLd;
  T* sQ = sV + kBlockN * kLd;
  T* sdO = sQ + 2 * kBlockM * kLd;
  T* sdS = sdO + 2 * kBlockM * kLd;
  float* sL = reinterpret_cast<float*>(sdS + 2 * kBlockN * kLdS);
  float* sDsum = sL + 2 * kBlockM;

  // Note [grid order] (flash_fwd_kernel.cuh): small n has the most causal query tiles and starts first.
  const int n_block = blockIdx.y;
  const int heads_k = flash_heads_k(p), group = flash_group(p);
  const int bhk = blockIdx.x, b = bhk / heads_k, hk = bhk % heads_k;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int n0 = n_block * kBlockN;
  const FlashSeq seq = flash_seq(p, b);
  if (n0 >= seq.len_k) return;  // a packed batch's shorter sequence: the grid is sized by the longest

  const T* gK = static_cast<const T*>(p.k) + b * p.k_batch_stride + hk * p.k_head_stride + seq.k_row0 * p.k_row_stride;
  const T* gV = static_cast<const T*>(p.v) + b * p.v_batch_stride + hk * p.v_head_stride + seq.k_row0 * p.v_row_stride;

  // The query tiles [m_first, m_first + m_count) hold every query that sees a key of this block (Note [mask
  // tiles], flash_fwd_kernel.cuh), walked for each query head of the group (Note [grouped heads]): iteration it is
  // tile m_first + it % m_count of query head hk * group + it / m_count.
  const int m_first = Masked ? seq.query_begin(n0) / kBlockM : 0;
  const int m_stop = Masked ? seq.query_end(min(n0 + kBlockN, seq.len_k)) : seq.len_q;
  const int m_count = m_stop > m_first * kBlockM ? (m_stop - m_first * kBlockM + kBlockM - 1) / kBlockM : 0;
  const int iters = m_count * group;
  auto head_of = [&](int it) { return hk * group + it / m_count; };
  auto tile_of = [&](int it) { return m_first + it % m_count; };

  auto load_query_tile = [&](int it, int buf) {
    const int h = head_of(it), m0 = tile_of(it) * kBlockM;
    const T* gQ = static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride + seq.q_row0 * p.q_row_stride;
    const T* gdO =
        static_cast<const T*>(p.dout) + b * p.do_batch_stride + h * p.do_head_stride + seq.q_row0 * p.do_row_stride;
    const int64_t stat0 = seq.stat_row0(h);
    load_rows<kBlockM, D, kLd, kThreads>(sQ + buf * kBlockM * kLd, gQ, p.q_row_stride, m0, seq.len_q, tid);
    load_rows<kBlockM, D, kLd, kThreads>(sdO + buf * kBlockM * kLd, gdO, p.do_row_stride, m0, seq.len_q, tid);
    load_floats<kBlockM, kThreads>(sL + buf * kBlockM, p.lse + stat0, m0, seq.len_q, tid);
    load_floats<kBlockM, kThreads>(sDsum + buf * kBlockM, p.dsum + stat0, m0, seq.len_q, tid);
  };
  load_rows<kBlockN, D, kLd, kThreads>(sK, gK, p.k_row_stride, n0, seq.len_k, tid);
  load_rows<kBlockN, D, kLd, kThreads>(sV, gV, p.v_row_stride, n0, seq.len_k, tid);
  if (iters > 0) load_query_tile(0, 0);
  cp_async_commit();

  float acc_dk[kKT][D / 8][4], acc_dv[kKT][D / 8][4];
#pragma unroll
  for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_dk[kt][i][e] = acc_dv[kt][i][e] = 0.f;

  constexpr float kLog2e = static_cast<float>(M_LOG2E);
  const float scale_log2 = p.scale * kLog2e;
  const int warp_key0 = warp * kWarpKeys;         // first key row of this warp within the block
  const int key_a = n0 + warp_key0 + lane / 4;    // this thread's keys: key_a + kt*16 + {0, 8}
  // The queries that see each of this thread's keys, [q_lo, q_hi] (none for a key past the end), fixed for the
  // block: two compares per masked entry; and the query tiles that see the block's keys whole (none at the key tail).
  int q_lo[kKT][2], q_hi[kKT][2];
#pragma unroll
  for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key = key_a + kt * 16 + r * 8;
      q_lo[kt][r] = seq.first_query<Masked>(key);
      q_hi[kt][r] = seq.last_query<Masked>(key);
    }
  const int2 whole = seq.whole_query_tiles<Masked>(n0, kBlockN, kBlockM);
  constexpr int kMTiles = kBlockM / 16;
  constexpr int kNStride = kWarps / kMTiles;      // warps per 16-query dQ tile
  constexpr int kDqTiles = (D / 8) / kNStride;    // adjacent n8 tiles per warp (pairs load with one x4)
  static_assert(kWarps % kMTiles == 0 && (D / 8) % kNStride == 0,
                "dQ tiles must split evenly over warps: pick bwd tiles for this head dim in flash_tiles.h");
  const int dq_m = warp % kMTiles, dq_nbase = (warp / kMTiles) * kDqTiles;

  // One query tile; `buf` (which half of the double buffers) is a compile-time constant, so every
  // shared-memory address below is a register plus an immediate (the loop runs two steps per trip).
  auto step = [&](const int it, auto buf_c) {
    constexpr int buf = decltype(buf_c)::value;
    const int m0 = tile_of(it) * kBlockM;
    float* gdQacc = p.dq_accum + seq.stat_row0(head_of(it)) * D;
    if (it + 1 < iters) {
      load_query_tile(it + 1, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const T* q_s = sQ + buf * kBlockM * kLd;
    const T* do_s = sdO + buf * kBlockM * kLd;
    const float* l_s = sL + buf * kBlockM;
    const float* dsum_s = sDsum + buf * kBlockM;
    T* ds_s = sdS + buf * kBlockN * kLdS;

    // S^T = K_w Q^T and dP^T = V_w dO^T, (kWarpKeys x kBlockM) per warp.
    float s[kKT][kBlockM / 8][4], dp[kKT][kBlockM / 8][4];
#pragma unroll
    for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
      for (int i = 0; i < kBlockM / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[kt][i][e] = dp[kt][i][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ka[kKT][4], va[kKT][4];
#pragma unroll
      for (int kt = 0; kt < kKT; ++kt) {
        ldmatrix_x4(ka[kt], a_frag(sK, kLd, warp_key0 + kt * 16, kk * 16, lane));
        ldmatrix_x4(va[kt], a_frag(sV, kLd, warp_key0 + kt * 16, kk * 16, lane));
      }
#pragma unroll
      for (int mm = 0; mm < kBlockM / 16; ++mm) {
        uint32_t bq[4], bdo[4];
        ldmatrix_x4(bq, b_frag_pair(q_s, kLd, mm * 16, kk * 16, lane));
        ldmatrix_x4(bdo, b_frag_pair(do_s, kLd, mm * 16, kk * 16, lane));
#pragma unroll
        for (int kt = 0; kt < kKT; ++kt) {
          mma_pair<T>(s[kt][2 * mm], s[kt][2 * mm + 1], ka[kt], bq);
          mma_pair<T>(dp[kt][2 * mm], dp[kt][2 * mm + 1], va[kt], bdo);
        }
      }
    }

    // P^T = exp(S^T*scale - L) and dS^T = P^T ⊙ (dP^T - D). Two copies of the loop: only tiles on the
    // causal diagonal or a sequence tail pay for the mask (if-converted, it cost ~190 instructions per
    // thread on every tile in v2).
    auto softmax_grad = [&](auto masked) {
      constexpr bool kMasked = decltype(masked)::value;
#pragma unroll
      for (int mt = 0; mt < kBlockM / 8; ++mt) {
        const int q_local = mt * 8 + (lane % 4) * 2;
        const float2 lv = *reinterpret_cast<const float2*>(l_s + q_local);
        const float2 dv = *reinterpret_cast<const float2*>(dsum_s + q_local);
        const float l0 = lv.x * kLog2e, l1 = lv.y * kLog2e;  // L in the exp2 domain
#pragma unroll
        for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float pv = exp2f(fmaf(s[kt][mt][e], scale_log2, -(e % 2 ? l1 : l0)));
            if constexpr (kMasked) {
              const int q = m0 + q_local + (e % 2);
              if (q >= seq.len_q || q < q_lo[kt][e / 2] || q > q_hi[kt][e / 2]) pv = 0.f;
            }
            s[kt][mt][e] = pv;
            dp[kt][mt][e] = pv * (dp[kt][mt][e] - (e % 2 ? dv.y : dv.x));
          }
      }
    };
    const bool need_mask = m0 + kBlockM > seq.len_q || m0 < whole.x || m0 > whole.y;
    if (need_mask)
      softmax_grad(std::true_type{});
    else
      softmax_grad(std::false_type{});

    // dV += P^T dO and dK += dS^T Q; dS^T also goes to shared memory for dQ.
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk) {
      uint32_t pa[kKT][4], dsa[kKT][4];
#pragma unroll
      for (int kt = 0; kt < kKT; ++kt) {
        c_pair_to_a<T>(pa[kt], s[kt][2 * kk], s[kt][2 * kk + 1]);
        c_pair_to_a<T>(dsa[kt], dp[kt][2 * kk], dp[kt][2 * kk + 1]);
        T* ds_row = ds_s + (warp_key0 + kt * 16 + lane / 4) * kLdS + kk * 16 + (lane % 4) * 2;
        *reinterpret_cast<uint32_t*>(ds_row) = dsa[kt][0];
        *reinterpret_cast<uint32_t*>(ds_row + 8 * kLdS) = dsa[kt][1];
        *reinterpret_cast<uint32_t*>(ds_row + 8) = dsa[kt][2];
        *reinterpret_cast<uint32_t*>(ds_row + 8 * kLdS + 8) = dsa[kt][3];
      }
#pragma unroll
      for (int dd = 0; dd < D / 16; ++dd) {
        uint32_t bdo[4], bq[4];
        ldmatrix_x4_trans(bdo, bt_frag_pair(do_s, kLd, kk * 16, dd * 16, lane));
        ldmatrix_x4_trans(bq, bt_frag_pair(q_s, kLd, kk * 16, dd * 16, lane));
#pragma unroll
        for (int kt = 0; kt < kKT; ++kt) {
          mma_pair<T>(acc_dv[kt][2 * dd], acc_dv[kt][2 * dd + 1], pa[kt], bdo);
          mma_pair<T>(acc_dk[kt][2 * dd], acc_dk[kt][2 * dd + 1], dsa[kt], bq);
        }
      }
    }
    __syncthreads();  // dS^T complete

    // dQ_i += dS K over this block's keys (unscaled; the convert kernel applies the softmax scale).
    float acc_dq[kDqTiles][4];
#pragma unroll
    for (int i = 0; i < kDqTiles; ++i) acc_dq[i][0] = acc_dq[i][1] = acc_dq[i][2] = acc_dq[i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      uint32_t dsa[4];
      ldmatrix_x4_trans(dsa, at_frag(ds_s, kLdS, kk * 16, dq_m * 16, lane));
#pragma unroll
      for (int i = 0; i + 1 < kDqTiles; i += 2) {
        uint32_t bk[4];
        ldmatrix_x4_trans(bk, bt_frag_pair(sK, kLd, kk * 16, (dq_nbase + i) * 8, lane));
        mma_pair<T>(acc_dq[i], acc_dq[i + 1], dsa, bk);
      }
      if constexpr (kDqTiles % 2 == 1) {
        uint32_t bk[2];
        ldmatrix_x2_trans(bk, sK + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * kLd +
                                  (dq_nbase + kDqTiles - 1) * 8);
        E::mma(acc_dq[kDqTiles - 1], dsa, bk[0], bk[1]);
      }
    }
#pragma unroll
    for (int i = 0; i < kDqTiles; ++i) {
      const int nt = dq_nbase + i;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int q = m0 + dq_m * 16 + lane / 4 + r * 8;
        if (q < seq.len_q) {
          float* dst = gdQacc + static_cast<int64_t>(q) * D + nt * 8 + (lane % 4) * 2;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
          atomicAdd(reinterpret_cast<float2*>(dst), make_float2(acc_dq[i][2 * r], acc_dq[i][2 * r + 1]));
#else
          atomicAdd(dst, acc_dq[i][2 * r]);
          atomicAdd(dst + 1, acc_dq[i][2 * r + 1]);
#endif
        }
      }
    }
  };
  for (int it = 0; it < iters; it += 2) {
    step(it, std::integral_constant<int, 0>{});
    if (it + 1 < iters) step(it + 1, std::integral_constant<int, 1>{});
  }
  cp_async_wait<0>();  // K and V were loaded even when no query sees this block (its dK, dV are then 0)

  T* gdK = static_cast<T*>(p.dk) + b * p.dk_batch_stride + hk * p.dk_head_stride + seq.k_row0 * p.dk_row_stride;
  T* gdV = static_cast<T*>(p.dv) + b * p.dv_batch_stride + hk * p.dv_head_stride + seq.k_row0 * p.dv_row_stride;
#pragma unroll
  for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key = key_a + kt * 16 + r * 8;
      if (key >= seq.len_k) continue;
      T* dk_row = gdK + key * p.dk_row_stride + (lane % 4) * 2;
      T* dv_row = gdV + key * p.dv_row_stride + (lane % 4) * 2;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        *reinterpret_cast<uint32_t*>(dk_row + dt * 8) =
            E::pack(acc_dk[kt][dt][2 * r] * p.scale, acc_dk[kt][dt][2 * r + 1] * p.scale);
        *reinterpret_cast<uint32_t*>(dv_row + dt * 8) = E::pack(acc_dv[kt][dt][2 * r], acc_dv[kt][dt][2 * r + 1]);
      }
    }
}

// ----------------------------------------------------------------------------- dQ convert

// dq = dq_accum * scale in the input dtype; one thread per 8 elements (16-byte stores), over every row of dq_accum
// (all (batch, head) planes dense; every head's total_q rows packed). A row whose L is +inf saw no key: its dQ is 0
// whatever dq_accum holds there (no key block may have touched its tile: Note [dQ first store] stores only where one
// does), and so is a packed batch's row in no sequence (past the last offset: nothing zeroes dq_accum there, and a
// sequence's last tile adds zeros into it).
// kPairsSplit: each 8-column group of dq_accum holds columns 0 2 4 6 1 3 5 7 (the Hopper backward's stmatrix staging,
// Note [dQ pairs split] in hopper/flash_bwd_hopper.cuh).
template <typename T, int D, bool kPairsSplit = false>
__global__ void flash_bwd_convert_dq_kernel(const FlashParams p) {
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  constexpr int kChunksPerRow = D / 8;
  const int64_t plane_rows = flash_stat_rows(p);
  if (chunk >= flash_stat_planes(p) * plane_rows * kChunksPerRow) return;
  const int64_t flat_row = chunk / kChunksPerRow;  // (plane, row) flattened: the row of lse and dq_accum
  const int c = static_cast<int>(chunk % kChunksPerRow) * 8;
  const int64_t row = flat_row % plane_rows;
  const int plane = static_cast<int>(flat_row / plane_rows), b = plane / p.heads, h = plane % p.heads;
  const float* src = p.dq_accum + flat_row * D + c;
  float4 x0 = *reinterpret_cast<const float4*>(src), x1 = *reinterpret_cast<const float4*>(src + 4);
  if (p.lse[flat_row] == INFINITY || (flash_varlen(p) && row >= p.cu_seqlens_q[p.batch]))
    x0 = x1 = make_float4(0.f, 0.f, 0.f, 0.f);
  if constexpr (kPairsSplit) {  // back to columns 0 1 2 3 | 4 5 6 7
    const float4 evens = x0, odds = x1;
    x0 = make_float4(evens.x, odds.x, evens.y, odds.y);
    x1 = make_float4(evens.z, odds.z, evens.w, odds.w);
  }
  uint4 out;
  out.x = Elem<T>::pack(x0.x * p.scale, x0.y * p.scale);
  out.y = Elem<T>::pack(x0.z * p.scale, x0.w * p.scale);
  out.z = Elem<T>::pack(x1.x * p.scale, x1.y * p.scale);
  out.w = Elem<T>::pack(x1.z * p.scale, x1.w * p.scale);
  T* dst = static_cast<T*>(p.dq) + b * p.dq_batch_stride + h * p.dq_head_stride + row * p.dq_row_stride + c;
  *reinterpret_cast<uint4*>(dst) = out;
}

// dk = dkv_accum's dK * scale, dv = its dV, in the input dtype (FlashParams::dkv_accum: grouped heads split over
// blocks); one thread per 8 elements of both, over every row (packed rows in no sequence hold 0).
template <typename T, int D>
__global__ void flash_bwd_convert_dkv_kernel(const FlashParams p) {
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  constexpr int kChunksPerRow = D / 8;
  const int64_t plane_rows = flash_kv_rows(p), elems = flash_kv_planes(p) * plane_rows * D;
  if (chunk >= elems / 8) return;
  const int64_t flat_row = chunk / kChunksPerRow;
  const int c = static_cast<int>(chunk % kChunksPerRow) * 8;
  const int64_t row = flat_row % plane_rows;
  const int heads_k = flash_heads_k(p);
  const int plane = static_cast<int>(flat_row / plane_rows), b = plane / heads_k, hk = plane % heads_k;
  auto convert = [&](const float* src, void* out, int64_t bs, int64_t hs, int64_t rs, float scale) {
    const float4 x0 = *reinterpret_cast<const float4*>(src), x1 = *reinterpret_cast<const float4*>(src + 4);
    uint4 o;
    o.x = Elem<T>::pack(x0.x * scale, x0.y * scale);
    o.y = Elem<T>::pack(x0.z * scale, x0.w * scale);
    o.z = Elem<T>::pack(x1.x * scale, x1.y * scale);
    o.w = Elem<T>::pack(x1.z * scale, x1.w * scale);
    *reinterpret_cast<uint4*>(static_cast<T*>(out) + b * bs + hk * hs + row * rs + c) = o;
  };
  const float* dk_src = p.dkv_accum + flat_row * D + c;
  convert(dk_src, p.dk, p.dk_batch_stride, p.dk_head_stride, p.dk_row_stride, p.scale);
  convert(dk_src + elems, p.dv, p.dv_batch_stride, p.dv_head_stride, p.dv_row_stride, 1.f);
}

template <typename T, int D>
void launch_flash_bwd_convert_dkv(const FlashParams& p, cudaStream_t stream) {
  const int64_t chunks = flash_kv_planes(p) * flash_kv_rows(p) * (D / 8);
  constexpr int kConvThreads = 256;
  flash_bwd_convert_dkv_kernel<T, D>
      <<<static_cast<unsigned>((chunks + kConvThreads - 1) / kConvThreads), kConvThreads, 0, stream>>>(p);
}

template <typename T, int D, bool kPairsSplit = false>
void launch_flash_bwd_convert_dq(const FlashParams& p, cudaStream_t stream) {
  const int64_t chunks = flash_stat_planes(p) * flash_stat_rows(p) * (D / 8);
  constexpr int kConvThreads = 256;
  flash_bwd_convert_dq_kernel<T, D, kPairsSplit>
      <<<static_cast<unsigned>((chunks + kConvThreads - 1) / kConvThreads), kConvThreads, 0, stream>>>(p);
}

}  // namespace lmscale::kernels::flash
