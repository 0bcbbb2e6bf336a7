// flash_hopper_probe: a standalone driver for the sm_90a FlashAttention kernels (src/kernels/hopper/),
// no ATen and no libtorch, so a kernel change builds here with nvcc alone 
// and runs on a GPU machine as one small binary. Build (from the repo root, ~1 min; add -DPROBE_SHIPPED_ONLY to
// leave the variants out, for a quicker A/B of the shipped kernels):
//   nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -O3 --use_fast_math --expt-relaxed-constexpr \
//     -lineinfo -Isrc tools/flash_hopper_probe.cu src/kernels/hopper/*.cu -o build-probe/flash_hopper_probe
//
//   flash_hopper_probe check [D]                bf16/fp16 x d 64/80/128 (or D) x causal, odd lengths and strides, vs fp64
//   flash_hopper_probe time B H S D causal [dtype] [iters] [all]   Hopper vs mma.sync (all: + variants), median ms
//   flash_hopper_probe variants                 every variant of variants<D>() vs fp64 on odd sizes
//   flash_hopper_probe small [D]                one small config per kernel (for compute-sanitizer)
//   flash_hopper_probe bwd_check [D]            backward: dQ, dK, dV vs fp64, same grid as check (mma.sync beside)
//   flash_hopper_probe bwd_small [D]            one small backward per kernel (for compute-sanitizer)
//   flash_hopper_probe bwd_variants             every backward variant (bwd_variants(D)) vs fp64 on odd sizes
//   flash_hopper_probe bwd_check_deterministic [D]  bwd_check with the deterministic dQ order
//   flash_hopper_probe bwd_repeatable           deterministic mode: dQ bitwise equal over reruns
//   flash_hopper_probe bwd_time B H S D causal [dtype] [iters]   backward and fwd+bwd, Hopper vs mma.sync
//   flash_hopper_probe bwd_compare B H S D causal [iters] [rounds]  shipped vs bwd_variants(D), alternating order (bf16)
//   flash_hopper_probe bwd_sustain B H S D causal [seconds] [variant]   fwd+bwd, bwd, fwd each run back to back (bf16),
//                                               mean ms; variant: one of bwd_variants(D)
//                                               instead of the shipped backward
//
// A development tool: tests/cpp/kernels/flash_kernel_test.cpp is the product's test.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/flash_bwd_launch.cuh"
#include "kernels/flash_fwd_launch.cuh"
#include "kernels/hopper/flash_bwd_hopper_launch.cuh"
#include "kernels/hopper/flash_bwd_hopper_steps.cuh"
#include "kernels/hopper/flash_fwd_hopper_launch.cuh"
#include "kernels/hopper/flash_hopper.h"
#include "probe_timing.h"

namespace lk = lmscale::kernels;
#define CHECK(x) LMSCALE_CUDA_CHECK(x)

namespace {

// Layout of one q/k/v/o buffer: (B, H, S, D) viewed through element strides. "bshd" puts heads inside
// rows (row stride H * ld), the layout a fused QKV projection produces; ld >= D pads each row.
struct Layout {
  int64_t batch, head, row;
  int64_t elems;
};
Layout make_layout(int b, int h, int s, int ld, bool bshd) {
  if (bshd) return {int64_t(s) * h * ld, ld, int64_t(h) * ld, int64_t(b) * s * h * ld};
  return {int64_t(h) * s * ld, int64_t(s) * ld, ld, int64_t(b) * h * s * ld};
}

uint16_t to_bits(float x, bool bf) {
  uint16_t r;
  if (bf) {
    __nv_bfloat16 v = __float2bfloat16(x);
    memcpy(&r, &v, 2);
  } else {
    __half v = __float2half(x);
    memcpy(&r, &v, 2);
  }
  return r;
}
float from_bits(uint16_t x, bool bf) {
  if (bf) {
    __nv_bfloat16 v;
    memcpy(&v, &x, 2);
    return __bfloat162float(v);
  }
  __half v;
  memcpy(&v, &x, 2);
  return __half2float(v);
}

struct Case {
  int b, h, s, d;
  bool causal, bf16, bshd;
  int ld;
};

lk::FlashParams make_params(const Case& c, const Layout& L, void* q, void* k, void* v, void* o, float* lse) {
  lk::FlashParams p;
  p.q = q, p.k = k, p.v = v, p.o = o, p.lse = lse;
  for (int64_t* x : {&p.q_batch_stride, &p.k_batch_stride, &p.v_batch_stride, &p.o_batch_stride}) *x = L.batch;
  for (int64_t* x : {&p.q_head_stride, &p.k_head_stride, &p.v_head_stride, &p.o_head_stride}) *x = L.head;
  for (int64_t* x : {&p.q_row_stride, &p.k_row_stride, &p.v_row_stride, &p.o_row_stride}) *x = L.row;
  p.batch = c.b, p.heads = c.h, p.seqlen_q = c.s, p.seqlen_k = c.s, p.head_dim = c.d;
  p.scale = 1.f / std::sqrt(float(c.d));
  p.is_causal = c.causal;
  p.dtype = c.bf16 ? lk::FlashDtype::kBF16 : lk::FlashDtype::kFP16;
  static int* tile_counter = [] {  // the forward's dynamic tile order, as the product's op passes it
    int* c = nullptr;
    CHECK(cudaMalloc(&c, sizeof(int)));
    return c;
  }();
  p.fwd_tile_counter = std::getenv("PROBE_STATIC_TILES") ? nullptr : tile_counter;
  return p;
}

// Makes p a packed batch over the documents [offsets[i], offsets[i + 1]) of its rows (flash-attn's varlen call: one
// (total, H, D) tensor, int32 offsets on the device, which the caller frees).
int* make_packed(lk::FlashParams& p, const std::vector<int>& offsets) {
  int* cu = nullptr;
  const int docs = int(offsets.size()) - 1;
  CHECK(cudaMalloc(&cu, (docs + 1) * 4));
  CHECK(cudaMemcpy(cu, offsets.data(), (docs + 1) * 4, cudaMemcpyHostToDevice));
  int longest = 0;
  for (int i = 0; i < docs; ++i) longest = std::max(longest, offsets[i + 1] - offsets[i]);
  p.batch = docs, p.cu_seqlens_q = p.cu_seqlens_k = cu, p.total_q = p.total_k = offsets.back();
  p.seqlen_q = p.seqlen_k = longest;
  p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = p.o_batch_stride = 0;
  return cu;
}

// One row's fp64 reference, softmax(q_i K^T / sqrt(d)) V over keys [0, n), folded into the largest |O - O_ref| and
// |L - L_ref| so far (a non-finite output counts as infinite). at(t, row, col) reads buffer t (0 q, 1 k, 2 v, 3 o).
template <typename At>
void row_errors(At&& at, int i, int n, int d, double got_l, std::vector<double>& sc, double& err_o, double& err_l) {
  double mx = -INFINITY;
  for (int j = 0; j < n; ++j) {
    double a = 0;
    for (int x = 0; x < d; ++x) a += at(0, i, x) * at(1, j, x);
    sc[j] = a / std::sqrt(double(d));
    mx = std::max(mx, sc[j]);
  }
  double sum = 0;
  for (int j = 0; j < n; ++j) sum += (sc[j] = std::exp(sc[j] - mx));
  for (int x = 0; x < d; ++x) {
    double a = 0;
    for (int j = 0; j < n; ++j) a += sc[j] * at(2, j, x);
    const double got = at(3, i, x);
    err_o = std::isfinite(got) ? std::max(err_o, std::abs(got - a / sum)) : INFINITY;
  }
  err_l = std::isfinite(got_l) ? std::max(err_l, std::abs(got_l - (mx + std::log(sum)))) : INFINITY;
}

// Max |O - O_ref| / max(max |O_ref|, 1) and max |L - L_ref| over sampled rows (every row up to 1024).
int check_case(const Case& c, std::mt19937& rng, bool (*variant)(const lk::FlashParams&, cudaStream_t) = nullptr) {
  const Layout L = make_layout(c.b, c.h, c.s, c.ld, c.bshd);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<uint16_t> hq(L.elems), hk(L.elems), hv(L.elems);
  for (auto* x : {&hq, &hk, &hv})
    for (auto& e : *x) e = to_bits(dist(rng), c.bf16);
  void *q, *k, *v, *o;
  float* lse;
  for (void** x : {&q, &k, &v, &o}) CHECK(cudaMalloc(x, L.elems * 2));
  CHECK(cudaMalloc(&lse, int64_t(c.b) * c.h * c.s * 4));
  CHECK(cudaMemcpy(q, hq.data(), L.elems * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(k, hk.data(), L.elems * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(v, hv.data(), L.elems * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(o, 0xff, L.elems * 2));  // NaN poison: a skipped element fails
  CHECK(cudaMemset(lse, 0xff, int64_t(c.b) * c.h * c.s * 4));
  const auto p = make_params(c, L, q, k, v, o, lse);
  const std::string why = lk::hopper::fwd_unsupported_reason(p);
  if (!why.empty()) {
    std::printf("check SKIP %s\n", why.c_str());
    return 1;
  }
  if (variant)
    variant(p, nullptr);
  else
    lk::hopper::run_fwd(p, nullptr);
  CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> ho(L.elems);
  std::vector<float> hl(int64_t(c.b) * c.h * c.s);
  CHECK(cudaMemcpy(ho.data(), o, L.elems * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hl.data(), lse, hl.size() * 4, cudaMemcpyDeviceToHost));
  std::vector<int> rows;  // every row up to 256, else every 11th plus the last (fp64 on one CPU core)
  for (int i = 0; i < c.s; i += c.s > 256 ? 11 : 1) rows.push_back(i);
  if (rows.back() != c.s - 1) rows.push_back(c.s - 1);
  double err_o = 0, err_l = 0;
  std::vector<double> sc(c.s);
  for (int bi = 0; bi < c.b; ++bi)
    for (int hi = 0; hi < c.h; ++hi)
      for (int i : rows) {
        const std::vector<uint16_t>* bufs[4] = {&hq, &hk, &hv, &ho};
        auto at = [&](int t, int row, int col) {
          return double(from_bits((*bufs[t])[bi * L.batch + hi * L.head + row * L.row + col], c.bf16));
        };
        row_errors(at, i, c.causal ? i + 1 : c.s, c.d, hl[(int64_t(bi) * c.h + hi) * c.s + i], sc, err_o, err_l);
      }
  for (void* x : {q, k, v, o}) CHECK(cudaFree(x));
  CHECK(cudaFree(lse));
  // O entries are convex combinations of N(0,1) values (|O| <= ~4): an absolute bound of a few ulps of
  // the output dtype; L in fp32.
  const double tol_o = c.bf16 ? 2e-2 : 4e-3, tol_l = 2e-3;
  const bool ok = err_o < tol_o && err_l < tol_l;
  std::printf("check %s d=%-3d b=%d h=%d s=%-5d causal=%d %s ld=%-3d  |dO| %.2e  |dL| %.2e  %s\n",
              c.bf16 ? "bf16" : "fp16", c.d, c.b, c.h, c.s, c.causal, c.bshd ? "bshd" : "bhsd", c.ld, err_o, err_l,
              ok ? "ok" : "FAIL");
  return ok ? 0 : 1;
}

// The checked grid: bf16 and fp16 x d 64/80/128 (or only_d) x causal and not x lengths that are not tile
// multiples, plus heads-inside-rows and padded-row layouts; `small` is one N = 130 case per kernel (for
// compute-sanitizer). `run` returns the failures of one case; `extra` adds cases per (dtype, d, causal).
template <typename Run, typename Extra>
int check_grid(bool small, int only_d, Run&& run, Extra&& extra) {
  int failures = 0;
  for (bool bf : {true, false})
    for (int d : {64, 80, 128})
      for (bool causal : {false, true}) {
        if (only_d && d != only_d) continue;
        if (small) {
          failures += run(Case{1, 2, 130, d, causal, bf, false, d});
          continue;
        }
        for (int s : {1, 17, 130}) failures += run(Case{2, 3, s, d, causal, bf, false, d});
        for (int s : {1000, 4099}) failures += run(Case{1, 2, s, d, causal, bf, false, d});
        failures += run(Case{2, 3, 257, d, causal, bf, true, d});       // heads inside rows
        failures += run(Case{1, 2, 300, d, causal, bf, false, d + 8});  // padded rows
        failures += extra(d, causal, bf);
      }
  return failures;
}

// A forward variant's launch (the shipped kernels' when null).
using VariantFn = bool (*)(const lk::FlashParams&, cudaStream_t);
int check_packed_case(int d, bool causal, std::mt19937& rng, VariantFn variant);

int check(bool small, int only_d) {
  std::mt19937 rng(1234);
  auto run = [&](const Case& c) { return check_case(c, rng); };
  const int failures = check_grid(small, only_d, run, [&](int d, bool causal, bool bf) {
    return run(Case{3, 1, 129, d, causal, bf, true, d + 16}) +  // heads inside padded rows
           (bf && !small ? check_packed_case(d, causal, rng, nullptr) : 0);
  });
  std::printf("check: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}

template <typename T>
void run_mma_sync(const lk::FlashParams& p) {
  auto go = [&](auto dconst) {
    constexpr int D = decltype(dconst)::value;
    if (p.is_causal)
      lk::flash::launch_flash_fwd<T, D, true>(p, 0);
    else
      lk::flash::launch_flash_fwd<T, D, false>(p, 0);
  };
  if (p.head_dim == 64) go(std::integral_constant<int, 64>{});
  if (p.head_dim == 80) go(std::integral_constant<int, 80>{});
  if (p.head_dim == 128) go(std::integral_constant<int, 128>{});
}

// Variants of the Hopper forward timed next to the shipped one (bf16): key tile, consumer groups, ping-pong.
struct Variant {
  const char* name;
  VariantFn fn;
};
template <int D, int N, int C, bool PP, int QS = 1, bool HalfEdge = false, bool TmaStoreO = false>
Variant variant(const char* name) {
  return {name, lk::hopper::launch_fwd<lk::hopper::FwdConfig<__nv_bfloat16, D, N, C, PP, QS, HalfEdge, TmaStoreO>>};
}
// Per head dim: v1's n128c2, the shipped one (FwdShipped: "shipped" in `time` dispatches as the product does, so at
// d = 64's short causal shapes it is FwdShort, n128c2pp_q2) and the nearest alternatives; _q2: two Q slots, the next
// tile's Q loading while the last one runs (Note [persistent forward]). d = 64: n128c3_q2 is shipped (2026-12-04),
// n176c2pp_q2 the tile before it, n128c2pp_q2 FwdShort; d = 128: n128c2pp_q2 is shipped, n128c2_q2 the tile before it,
// 160-key tiles the nearest alternative for the GQA 8k x 128 forward, 64- and 96-key ping-pong tiles and three groups
// of 64-key tiles the alternatives for short causal calls (all slower at 512-2048 tokens, 2026-12-04). _half: FwdShort at
// d = 64 and the shipped tile at d = 128 with half-width GEMMs where a group sees half of a query tile's first key tile
// (Note [half edge tile], flash_fwd_hopper.cuh); _tma: the shipped tiles (and FwdShort) with O through shared memory
// and TMA stores (Note [O by TMA store]; d = 80 then keeps three K/V stages, not four). Both built 2026-12-04, not yet
// timed.
template <int D>
std::vector<Variant> variants() {
#ifdef PROBE_SHIPPED_ONLY  // -DPROBE_SHIPPED_ONLY: no variants, a quicker build for A/B of the shipped kernels
  return {};
#else
  if constexpr (D == 64)
    return {variant<D, 176, 2, true>("n176c2pp"), variant<D, 176, 2, true, 2>("n176c2pp_q2"),
            variant<D, 128, 2, true>("n128c2pp"), variant<D, 128, 2, true, 2>("n128c2pp_q2"),
            variant<D, 192, 2, true>("n192c2pp"), variant<D, 128, 3, false>("n128c3"),
            variant<D, 128, 3, false, 2>("n128c3_q2"), variant<D, 128, 2, true, 2, true>("n128c2pp_q2_half"),
            variant<D, 128, 3, false, 2, false, true>("n128c3_q2_tma"),
            variant<D, 128, 2, true, 2, false, true>("n128c2pp_q2_tma")};
  else if constexpr (D == 80)
    return {variant<D, 96, 3, false>("n96c3"), variant<D, 96, 3, false, 2>("n96c3_q2"),
            variant<D, 96, 3, false, 2, false, true>("n96c3_q2_tma")};
  else
    return {variant<D, 128, 2, false>("n128c2"), variant<D, 128, 2, false, 2>("n128c2_q2"),
            variant<D, 128, 2, true, 2>("n128c2pp_q2"), variant<D, 160, 2, false, 2>("n160c2_q2"),
            variant<D, 64, 2, true, 2>("n64c2pp_q2"), variant<D, 96, 2, true, 2>("n96c2pp_q2"),
            variant<D, 64, 3, false, 2>("n64c3_q2"), variant<D, 128, 2, true, 2, true>("n128c2pp_q2_half"),
            variant<D, 128, 2, true, 2, false, true>("n128c2pp_q2_tma")};
#endif
}

// PROBE_VARIANTS=a,b: only the variants of those names, forward or backward, in `time`, `variants` and
// `bwd_variants` (all of them when unset).
template <typename V>
std::vector<V> listed(std::vector<V> vs) {
  if (const char* only = std::getenv("PROBE_VARIANTS")) {
    const std::string names = std::string(",") + only + ",";
    auto unlisted = [&](const V& v) { return names.find("," + std::string(v.name) + ",") == std::string::npos; };
    vs.erase(std::remove_if(vs.begin(), vs.end(), unlisted), vs.end());
  }
  return vs;
}

// PROBE_STATIC_TILES=1: the Hopper forward's fixed tile shares instead of its dynamic order (make_params).
// PROBE_BSHD=1: q, k, v, o in (B, S, H, D) rows (flash-attn's layout, what the product's benchmarks pass) instead of
// (B, H, S, D). PROBE_QUEUED=1: the mean of calls queued back to back (queued_ms) instead of the median of
// synchronised ones. The shipped kernel is timed again after the variants, so drift over the run shows.
// PROBE_HEADS_K=n: grouped K/V heads (h / n query heads each, K and V in their own n-head layout). PROBE_DOCS=n
// (batch 1): the sequence packed as n documents of random lengths (seed 5), a varlen call; FLOPs count only the work
// inside the documents. PROBE_VARIANTS=a,b: only those variants; PROBE_ROUNDS=n: the shipped kernel and the variants
// timed n times in turn (the H200's clocks fall over a line, so neighbours in one round compare best).
int time(const Case& c, int iters, bool all) {
  const bool bshd = std::getenv("PROBE_BSHD") != nullptr, queued = std::getenv("PROBE_QUEUED") != nullptr;
  const Layout L = make_layout(c.b, c.h, c.s, c.d, bshd);
  auto clock = [&](auto&& f) { return queued ? queued_ms(f, iters) : median_ms(f, iters); };
  void *q, *k, *v, *o;
  float* lse;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<uint16_t> h(L.elems);
  for (void** x : {&q, &k, &v, &o}) {
    CHECK(cudaMalloc(x, L.elems * 2));
    for (auto& e : h) e = to_bits(dist(rng), c.bf16);
    CHECK(cudaMemcpy(*x, h.data(), L.elems * 2, cudaMemcpyHostToDevice));
  }
  CHECK(cudaMalloc(&lse, int64_t(c.b) * c.h * c.s * 4));
  auto p = make_params(c, L, q, k, v, o, lse);
  double flop = 4.0 * c.b * c.h * double(c.s) * c.s * c.d / (c.causal ? 2 : 1);
  if (const char* hk = std::getenv("PROBE_HEADS_K")) {
    // K and V laid out with their own heads (buffers sized for h are big enough), as a GQA caller's are.
    p.heads_k = std::atoi(hk);
    const Layout Lk = make_layout(c.b, p.heads_k, c.s, c.d, bshd);
    p.k_batch_stride = p.v_batch_stride = Lk.batch;
    p.k_head_stride = p.v_head_stride = Lk.head;
    p.k_row_stride = p.v_row_stride = Lk.row;
  }
  int* cu = nullptr;
  if (const char* docs_env = std::getenv("PROBE_DOCS")) {
    const int docs = std::atoi(docs_env);
    std::mt19937 lens_rng(5);
    std::vector<double> w(docs);
    for (auto& x : w) x = std::uniform_real_distribution<double>(0.2, 1.8)(lens_rng);
    const double sum = std::accumulate(w.begin(), w.end(), 0.0);
    std::vector<int> offsets(docs + 1, 0);
    for (int i = 0; i < docs; ++i) offsets[i + 1] = i + 1 == docs ? c.s : offsets[i] + int(w[i] / sum * c.s);
    flop = 0;
    for (int i = 0; i < docs; ++i) {
      const double len = offsets[i + 1] - offsets[i];
      flop += 4.0 * c.h * len * len * c.d / (c.causal ? 2 : 1);
    }
    cu = make_packed(p, offsets);
    std::printf("packed: %d documents, longest %d\n", docs, p.seqlen_q);
  }
  const float th = clock([&] { lk::hopper::run_fwd(p, nullptr); });
  const float tm = cu ? 0.f : clock([&] { c.bf16 ? run_mma_sync<__nv_bfloat16>(p) : run_mma_sync<__half>(p); });
  std::printf("time%s%s %s b=%d h=%d hk=%d s=%d d=%d causal=%d  hopper %.3f ms (%.0f TFLOP/s)  mma.sync %.3f ms "
              "(%.0f TFLOP/s)\n",
              bshd ? " bshd" : "", queued ? " queued" : "", c.bf16 ? "bf16" : "fp16", c.b, c.h, p.heads_k, c.s, c.d,
              c.causal, th, flop / th / 1e9, tm, tm > 0 ? flop / tm / 1e9 : 0.0);
  if (all && c.bf16) {
    auto vs = listed(c.d == 64 ? variants<64>() : c.d == 80 ? variants<80>() : variants<128>());
    const int rounds = std::getenv("PROBE_ROUNDS") ? std::max(1, std::atoi(std::getenv("PROBE_ROUNDS"))) : 1;
    for (int r = 0; r < rounds; ++r) {
      if (r > 0) {
        const float ts = clock([&] { lk::hopper::run_fwd(p, nullptr); });
        std::printf("  shipped   %.3f ms (%.0f TFLOP/s)\n", ts, flop / ts / 1e9);
      }
      for (const auto& var : vs) {
        const float t = clock([&] { var.fn(p, nullptr); });
        std::printf("  variant %-9s %.3f ms (%.0f TFLOP/s)\n", var.name, t, flop / t / 1e9);
      }
    }
    const float again = clock([&] { lk::hopper::run_fwd(p, nullptr); });
    std::printf("  shipped again %.3f ms (%.0f TFLOP/s)\n", again, flop / again / 1e9);
  }
  for (void* x : {q, k, v, o}) CHECK(cudaFree(x));
  CHECK(cudaFree(lse));
  if (cu) CHECK(cudaFree(cu));
  return 0;
}

// A packed batch (flash-attn's varlen layout: (total, H, D) rows, int32 offsets), causal or not, against fp64 per
// document (bf16, poisoned outputs): query tiles that straddle documents, partial last tiles, an empty document and a
// one-token one. The rows a packed kernel stores from registers and those a variant may store otherwise meet here.
int check_packed_case(int d, bool causal, std::mt19937& rng, VariantFn variant) {
  const std::vector<int> lens = {77, 0, 300, 128, 1, 190, 64, 513};
  std::vector<int> off(1, 0);
  for (int n : lens) off.push_back(off.back() + n);
  const int h = 2, total = off.back(), docs = int(lens.size());
  const Case c{1, h, total, d, causal, true, true, d};
  const Layout L = make_layout(1, h, total, d, true);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<uint16_t> host[4] = {std::vector<uint16_t>(L.elems), std::vector<uint16_t>(L.elems),
                                   std::vector<uint16_t>(L.elems), std::vector<uint16_t>(L.elems)};
  void* dev[4];
  for (int t = 0; t < 4; ++t) {
    CHECK(cudaMalloc(&dev[t], L.elems * 2));
    if (t < 3) {
      for (auto& e : host[t]) e = to_bits(dist(rng), true);
      CHECK(cudaMemcpy(dev[t], host[t].data(), L.elems * 2, cudaMemcpyHostToDevice));
    }
  }
  float* lse;
  CHECK(cudaMalloc(&lse, int64_t(h) * total * 4));
  CHECK(cudaMemset(dev[3], 0xff, L.elems * 2));  // NaN poison: a skipped element fails
  CHECK(cudaMemset(lse, 0xff, int64_t(h) * total * 4));
  auto p = make_params(c, L, dev[0], dev[1], dev[2], dev[3], lse);
  int* cu = make_packed(p, off);
  if (variant)
    variant(p, nullptr);
  else
    lk::hopper::run_fwd(p, nullptr);
  CHECK(cudaDeviceSynchronize());
  std::vector<float> hl(int64_t(h) * total);
  CHECK(cudaMemcpy(host[3].data(), dev[3], L.elems * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hl.data(), lse, hl.size() * 4, cudaMemcpyDeviceToHost));
  double err_o = 0, err_l = 0;
  std::vector<double> sc(total);
  for (int b = 0; b < docs; ++b)
    for (int hi = 0; hi < h; ++hi)
      for (int i = 0; i < lens[b]; ++i) {
        auto at = [&](int t, int row, int col) {
          return double(from_bits(host[t][(off[b] + row) * L.row + hi * L.head + col], true));
        };
        row_errors(at, i, causal ? i + 1 : lens[b], d, hl[int64_t(hi) * total + off[b] + i], sc, err_o, err_l);
      }
  for (void* x : dev) CHECK(cudaFree(x));
  CHECK(cudaFree(lse));
  CHECK(cudaFree(cu));
  const bool ok = err_o < 2e-2 && err_l < 2e-3;  // the tolerances of check_case (bf16)
  std::printf("check packed bf16 d=%-3d %d documents (%d tokens) h=%d causal=%d  |dO| %.2e  |dL| %.2e  %s\n", d, docs,
              total, h, causal, err_o, err_l, ok ? "ok" : "FAIL");
  return ok ? 0 : 1;
}

// Every variant against fp64 on a few odd sizes and a packed batch (bf16): a variant must be correct before it is
// timed.
int check_variants() {
  int failures = 0;
  std::mt19937 rng(99);
  for (int d : {64, 80, 128}) {
    const auto vs = listed(d == 64 ? variants<64>() : d == 80 ? variants<80>() : variants<128>());
    for (const auto& var : vs)
      for (bool causal : {false, true}) {
        for (int s : {77, 700}) {
          std::printf("[%s] ", var.name);
          failures += check_case({1, 2, s, d, causal, true, false, d}, rng, var.fn);
        }
        std::printf("[%s] ", var.name);
        failures += check_packed_case(d, causal, rng, var.fn);
      }
  }
  std::printf("check_variants: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}


// ---------------------------------------------------------------------------------------- backward

// fn(i) for i in [0, n) on every hardware thread: the fp64 reference is the slow part of a check.
template <typename F>
void parallel_for(int n, F&& fn) {
  const int workers = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w)
    pool.emplace_back([&] {
      for (int i = next++; i < n; i = next++) fn(i);
    });
  for (auto& t : pool) t.join();
}

struct BwdBuffers {
  void *q, *k, *v, *o, *dout, *dq, *dk, *dv;
  float *lse, *dsum, *dq_accum;
  int* dq_tile_ticket;
};

BwdBuffers alloc_bwd(const Case& c, const Layout& L) {
  BwdBuffers bb;
  for (void** x : {&bb.q, &bb.k, &bb.v, &bb.o, &bb.dout, &bb.dq, &bb.dk, &bb.dv}) CHECK(cudaMalloc(x, L.elems * 2));
  const int64_t rows = int64_t(c.b) * c.h * c.s;
  CHECK(cudaMalloc(&bb.lse, rows * 4));
  CHECK(cudaMalloc(&bb.dsum, rows * 4));
  CHECK(cudaMalloc(&bb.dq_accum, rows * c.d * 4));
  CHECK(cudaMalloc(&bb.dq_tile_ticket, int64_t(c.b) * c.h * ((c.s + 63) / 64) * 2 * 4));
  CHECK(cudaMemset(bb.dq_tile_ticket, 0x5a, int64_t(c.b) * c.h * ((c.s + 63) / 64) * 2 * 4));  // the preprocess zeroes it
  return bb;
}
void free_bwd(BwdBuffers& bb) {
  for (void* x : {bb.q, bb.k, bb.v, bb.o, bb.dout, bb.dq, bb.dk, bb.dv}) CHECK(cudaFree(x));
  for (float* x : {bb.lse, bb.dsum, bb.dq_accum}) CHECK(cudaFree(x));
  CHECK(cudaFree(bb.dq_tile_ticket));
}
// q, k, v and dout filled with standard-normal values in the case's dtype.
void fill_bwd_inputs(const Case& c, const Layout& L, const BwdBuffers& bb, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<uint16_t> h(L.elems);
  for (void* x : {bb.q, bb.k, bb.v, bb.dout}) {
    for (auto& e : h) e = to_bits(dist(rng), c.bf16);
    CHECK(cudaMemcpy(x, h.data(), L.elems * 2, cudaMemcpyHostToDevice));
  }
}

lk::FlashParams make_bwd_params(const Case& c, const Layout& L, const BwdBuffers& bb) {
  auto p = make_params(c, L, bb.q, bb.k, bb.v, bb.o, bb.lse);
  p.dout = bb.dout, p.dq = bb.dq, p.dk = bb.dk, p.dv = bb.dv, p.dsum = bb.dsum, p.dq_accum = bb.dq_accum;
  p.dq_tile_ticket = bb.dq_tile_ticket;  // as the op passes it: dq_accum first-stored, never zeroed
  for (int64_t* x : {&p.do_batch_stride, &p.dq_batch_stride, &p.dk_batch_stride, &p.dv_batch_stride}) *x = L.batch;
  for (int64_t* x : {&p.do_head_stride, &p.dq_head_stride, &p.dk_head_stride, &p.dv_head_stride}) *x = L.head;
  for (int64_t* x : {&p.do_row_stride, &p.dq_row_stride, &p.dk_row_stride, &p.dv_row_stride}) *x = L.row;
  return p;
}

template <typename T>
void run_hopper_bwd(const lk::FlashParams& p) {
  lk::hopper::run_bwd_all_steps<T>(p, nullptr);
}
template <typename T>
void run_mma_sync_bwd(const lk::FlashParams& p) {
  auto go = [&](auto dconst) {
    constexpr int D = decltype(dconst)::value;
    if (p.is_causal)
      lk::flash::launch_flash_bwd<T, D, true>(p, 0);
    else
      lk::flash::launch_flash_bwd<T, D, false>(p, 0);
  };
  if (p.head_dim == 64) go(std::integral_constant<int, 64>{});
  if (p.head_dim == 80) go(std::integral_constant<int, 80>{});
  if (p.head_dim == 128) go(std::integral_constant<int, 128>{});
}

// The textbook backward in fp64 for one (batch, head): L and D for every row, then dQ on `rows` and dK, dV
// on the same indices as keys. Results are (rows.size() x d).
struct BwdRef {
  std::vector<double> dq, dk, dv;
};
BwdRef reference_bwd_head(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                          const std::vector<double>& dout, int s, int d, bool causal, const std::vector<int>& rows) {
  const double scale = 1.0 / std::sqrt(double(d));
  auto dot = [&](const std::vector<double>& a, int i, const std::vector<double>& b, int j) {
    double acc = 0;
    for (int x = 0; x < d; ++x) acc += a[size_t(i) * d + x] * b[size_t(j) * d + x];
    return acc;
  };
  std::vector<double> lse(s), dsum(s);
  parallel_for(s, [&](int i) {
    const int n = causal ? i + 1 : s;
    std::vector<double> sc(n), o(d, 0.0);
    double mx = -INFINITY;
    for (int j = 0; j < n; ++j) mx = std::max(mx, sc[j] = dot(q, i, k, j) * scale);
    double sum = 0;
    for (int j = 0; j < n; ++j) sum += (sc[j] = std::exp(sc[j] - mx));
    for (int j = 0; j < n; ++j)
      for (int x = 0; x < d; ++x) o[x] += sc[j] / sum * v[size_t(j) * d + x];
    lse[i] = mx + std::log(sum);
    double ds = 0;
    for (int x = 0; x < d; ++x) ds += o[x] * dout[size_t(i) * d + x];
    dsum[i] = ds;
  });
  BwdRef r;
  const int nr = static_cast<int>(rows.size());
  r.dq.assign(size_t(nr) * d, 0), r.dk.assign(size_t(nr) * d, 0), r.dv.assign(size_t(nr) * d, 0);
  parallel_for(nr, [&](int ri) {
    const int i = rows[ri];  // as a query: dQ_i = scale sum_j P_ij (dP_ij - D_i) K_j
    for (int j = 0; j < (causal ? i + 1 : s); ++j) {
      const double pij = std::exp(dot(q, i, k, j) * scale - lse[i]);
      const double ds = pij * (dot(dout, i, v, j) - dsum[i]) * scale;
      for (int x = 0; x < d; ++x) r.dq[size_t(ri) * d + x] += ds * k[size_t(j) * d + x];
    }
    const int j = rows[ri];  // as a key: dV_j = sum_i P_ij dO_i, dK_j = scale sum_i P_ij (dP_ij - D_i) Q_i
    for (int i2 = causal ? j : 0; i2 < s; ++i2) {
      const double pij = std::exp(dot(q, i2, k, j) * scale - lse[i2]);
      const double ds = pij * (dot(dout, i2, v, j) - dsum[i2]) * scale;
      for (int x = 0; x < d; ++x) {
        r.dv[size_t(ri) * d + x] += pij * dout[size_t(i2) * d + x];
        r.dk[size_t(ri) * d + x] += ds * q[size_t(i2) * d + x];
      }
    }
  });
  return r;
}

// Variants of the Hopper backward's main kernel (bf16), each run through run_bwd_steps: 64- or 128-query
// tiles (Note [dQ split]).
struct BwdVariant {
  const char* name;
  void (*fn)(const lk::FlashParams&);
};
template <int D, int kBlockM, int kKRegSteps = 0, bool kSkipBlind = false>
BwdVariant bwd_variant(const char* name) {
  return {name, [](const lk::FlashParams& p) {
            lk::hopper::run_bwd_steps<__nv_bfloat16, D>(p, nullptr, [](const lk::FlashParams& pp, cudaStream_t st) {
              lk::hopper::launch_bwd<lk::hopper::BwdConfig<__nv_bfloat16, D, kBlockM, kKRegSteps, kSkipBlind>>(pp, st);
            });
          }};
}
std::vector<BwdVariant> bwd_variants(int d) {
#ifdef PROBE_SHIPPED_ONLY
  (void)d;
  return {};
#else
  // The shipped tile (BwdShipped) is the probe's main row, run through the library: instantiating the same
  // kernel here too would register it from two fat binaries.
  // "zeroed": the shipped kernel without tickets, so the preprocess zeroes dq_accum and every key block adds
  // (the path before Note [dQ first store]).
  std::vector<BwdVariant> v = {{"zeroed", [](const lk::FlashParams& p) {
                                  lk::FlashParams q = p;
                                  q.dq_tile_ticket = nullptr;
                                  run_hopper_bwd<__nv_bfloat16>(q);
                                }}};
  if (d == 64) v.push_back(bwd_variant<64, 64>("m64"));
  // Note [K in registers] (backward v5.3), unless it is the shipped choice already.
  // (5 of K's 8 k-steps is the most that fits: with 6 or 8 ptxas serialises the wgmmas.) "ksmem": K all in
  // shared memory, the d = 128 kernel before v5.3.
  static_assert(lk::hopper::bwd_k_reg_steps(128) == 5, "the d = 128 variants below assume 5 k-steps shipped");
  if (d == 128) {
    v.push_back(bwd_variant<128, 64, 0>("ksmem"));
    v.push_back(bwd_variant<128, 64, 4>("kregs4"));
  }
  // "skip_blind": the shipped 64-query tiles with Note [blind group tiles] (a group none of whose keys the tile's
  // queries see runs only its share of dQ; built 2026-12-04, not yet timed).
  static_assert(lk::hopper::bwd_block_m(80) == 64 && lk::hopper::bwd_block_m(128) == 64, "skip_blind: 64-query tiles");
  if (d == 80) v.push_back(bwd_variant<80, 64, lk::hopper::bwd_k_reg_steps(80), true>("skip_blind"));
  if (d == 128) v.push_back(bwd_variant<128, 64, lk::hopper::bwd_k_reg_steps(128), true>("skip_blind"));
  return v;
#endif
}

// Backward of one case: the Hopper forward makes O and L, then the Hopper backward and the mma.sync one
// (same inputs, outputs NaN-poisoned before each) are compared with fp64 on sampled rows. Error per
// gradient: max |got - want| / max(max |want|, 1); the case fails on the Hopper error only (mma.sync's
// is printed beside it as the established kernel's error on the same data).
// With it set, the Hopper backward runs in its deterministic mode (a zeroed p.dq_semaphore).
bool g_deterministic = false;

// A zeroed dQ semaphore for p's shape (FlashParams::dq_semaphore), owned by the caller.
int* zeroed_semaphore(const lk::FlashParams& p) {
  int* sem = nullptr;
  const size_t n = size_t(p.batch) * p.heads * ((p.seqlen_q + 63) / 64);
  CHECK(cudaMalloc(&sem, n * 4));
  CHECK(cudaMemset(sem, 0, n * 4));
  return sem;
}

int check_bwd_case(const Case& c, std::mt19937& rng, const BwdVariant* variant = nullptr) {
  const Layout L = make_layout(c.b, c.h, c.s, c.ld, c.bshd);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<uint16_t> hq(L.elems), hk(L.elems), hv(L.elems), hdo(L.elems);
  for (auto* x : {&hq, &hk, &hv, &hdo})
    for (auto& e : *x) e = to_bits(dist(rng), c.bf16);
  BwdBuffers bb = alloc_bwd(c, L);
  CHECK(cudaMemcpy(bb.q, hq.data(), L.elems * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(bb.k, hk.data(), L.elems * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(bb.v, hv.data(), L.elems * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(bb.dout, hdo.data(), L.elems * 2, cudaMemcpyHostToDevice));
  const auto p = make_bwd_params(c, L, bb);
  const std::string why = lk::hopper::bwd_unsupported_reason(p);
  if (!why.empty()) {
    std::printf("bwd_check SKIP %s\n", why.c_str());
    free_bwd(bb);
    return 1;
  }
  lk::hopper::run_fwd(p, nullptr);
  std::vector<int> rows;  // every row up to 256, else every 11th plus the last
  for (int i = 0; i < c.s; i += c.s > 256 ? 11 : 1) rows.push_back(i);
  if (rows.back() != c.s - 1) rows.push_back(c.s - 1);
  std::vector<BwdRef> refs;
  for (int bi = 0; bi < c.b; ++bi)
    for (int hi = 0; hi < c.h; ++hi) {
      std::vector<double> q(size_t(c.s) * c.d), k(q.size()), v(q.size()), dout(q.size());
      for (int i = 0; i < c.s; ++i)
        for (int x = 0; x < c.d; ++x) {
          const int64_t at = bi * L.batch + hi * L.head + i * L.row + x;
          q[size_t(i) * c.d + x] = from_bits(hq[at], c.bf16), k[size_t(i) * c.d + x] = from_bits(hk[at], c.bf16);
          v[size_t(i) * c.d + x] = from_bits(hv[at], c.bf16), dout[size_t(i) * c.d + x] = from_bits(hdo[at], c.bf16);
        }
      refs.push_back(reference_bwd_head(q, k, v, dout, c.s, c.d, c.causal, rows));
    }
  // Errors of dQ, dK, dV for one backward implementation.
  auto errors = [&](auto&& run, double (&err)[3]) {
    for (void* x : {bb.dq, bb.dk, bb.dv}) CHECK(cudaMemset(x, 0xff, L.elems * 2));  // NaN poison
    CHECK(cudaMemset(bb.dq_accum, 0xff, int64_t(c.b) * c.h * c.s * c.d * 4));
    CHECK(cudaMemset(bb.dsum, 0xff, int64_t(c.b) * c.h * c.s * 4));
    lk::FlashParams pp = p;
    if (g_deterministic) pp.dq_semaphore = zeroed_semaphore(p);
    run(pp);
    CHECK(cudaDeviceSynchronize());
    if (pp.dq_semaphore) CHECK(cudaFree(pp.dq_semaphore));
    std::vector<uint16_t> got[3] = {std::vector<uint16_t>(L.elems), std::vector<uint16_t>(L.elems),
                                    std::vector<uint16_t>(L.elems)};
    CHECK(cudaMemcpy(got[0].data(), bb.dq, L.elems * 2, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(got[1].data(), bb.dk, L.elems * 2, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(got[2].data(), bb.dv, L.elems * 2, cudaMemcpyDeviceToHost));
    for (int g = 0; g < 3; ++g) {
      double num = 0, den = 0;
      for (int bi = 0; bi < c.b; ++bi)
        for (int hi = 0; hi < c.h; ++hi) {
          const BwdRef& r = refs[bi * c.h + hi];
          const std::vector<double>& want = g == 0 ? r.dq : g == 1 ? r.dk : r.dv;
          for (size_t ri = 0; ri < rows.size(); ++ri)
            for (int x = 0; x < c.d; ++x) {
              const double w = want[ri * c.d + x];
              const double v = from_bits(got[g][bi * L.batch + hi * L.head + rows[ri] * L.row + x], c.bf16);
              num = std::isfinite(v) ? std::max(num, std::abs(v - w)) : INFINITY;
              den = std::max(den, std::abs(w));
            }
        }
      err[g] = num / std::max(den, 1.0);
    }
  };
  double eh[3], em[3];
  errors(
      [&](const lk::FlashParams& pp) {
        if (variant)
          variant->fn(pp);
        else if (c.bf16)
          run_hopper_bwd<__nv_bfloat16>(pp);
        else
          run_hopper_bwd<__half>(pp);
      },
      eh);
  errors([&](const lk::FlashParams& pp) { c.bf16 ? run_mma_sync_bwd<__nv_bfloat16>(pp) : run_mma_sync_bwd<__half>(pp); },
         em);
  free_bwd(bb);
  // bf16 / fp16 outputs and P, dS rounded to the input dtype before their GEMMs, fp32 accumulation.
  const double tol = c.bf16 ? 2e-2 : 5e-3;
  const bool ok = eh[0] < tol && eh[1] < tol && eh[2] < tol;
  if (variant) std::printf("[%s] ", variant->name);
  std::printf("bwd_check %s d=%-3d b=%d h=%d s=%-5d causal=%d %s ld=%-3d  hopper dQ %.2e dK %.2e dV %.2e  "
              "(mma.sync %.2e %.2e %.2e)  %s\n",
              c.bf16 ? "bf16" : "fp16", c.d, c.b, c.h, c.s, c.causal, c.bshd ? "bshd" : "bhsd", c.ld, eh[0], eh[1],
              eh[2], em[0], em[1], em[2], ok ? "ok" : "FAIL");
  std::fflush(stdout);
  return ok ? 0 : 1;
}

int check_bwd(bool small, int only_d) {
  std::mt19937 rng(4321);
  const int failures = check_grid(
      small, only_d, [&](const Case& c) { return check_bwd_case(c, rng); }, [](int, bool, bool) { return 0; });
  std::printf("bwd_check: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}

// Deterministic mode (Note [deterministic dQ]): dQ of three runs on the same inputs must be bitwise equal;
// the default mode's three runs are compared too and printed (they may differ: that is what the mode is for).
int check_bwd_repeatable() {
  int failures = 0;
  std::mt19937 rng(99);
  for (int d : {64, 80, 128})
    for (bool causal : {false, true})
      for (int s : {1000, 4099}) {
        const Case c{2, 3, s, d, causal, true, false, d};
        const Layout L = make_layout(c.b, c.h, c.s, c.ld, c.bshd);
        BwdBuffers bb = alloc_bwd(c, L);
        fill_bwd_inputs(c, L, bb, rng);
        const auto p = make_bwd_params(c, L, bb);
        lk::hopper::run_fwd(p, nullptr);
        int differing[2] = {0, 0};
        for (int det = 0; det < 2; ++det) {
          std::vector<uint16_t> first(L.elems), got(L.elems);
          for (int run = 0; run < 3; ++run) {
            lk::FlashParams pp = p;
            if (det) pp.dq_semaphore = zeroed_semaphore(p);
            run_hopper_bwd<__nv_bfloat16>(pp);
            CHECK(cudaMemcpy(run ? got.data() : first.data(), bb.dq, L.elems * 2, cudaMemcpyDeviceToHost));
            if (pp.dq_semaphore) CHECK(cudaFree(pp.dq_semaphore));
            if (run && std::memcmp(first.data(), got.data(), L.elems * 2) != 0) ++differing[det];
          }
        }
        const bool ok = differing[1] == 0;
        failures += !ok;
        std::printf("bwd_repeatable d=%-3d causal=%d s=%-5d  deterministic: %d of 2 reruns differ  default: %d of 2  %s\n", d,
                    causal, s, differing[1], differing[0], ok ? "ok" : "FAIL");
        free_bwd(bb);
      }
  std::printf("bwd_repeatable: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}

// Every backward variant against fp64 on odd sizes and two layouts (bf16), before it is timed.
int check_bwd_variants() {
  int failures = 0;
  std::mt19937 rng(77);
  for (int d : {64, 80, 128})
    for (const BwdVariant& var : listed(bwd_variants(d)))
      for (bool causal : {false, true}) {
        for (int s : {1, 77, 130, 1000}) failures += check_bwd_case({1, 2, s, d, causal, true, false, d}, rng, &var);
        failures += check_bwd_case({2, 3, 257, d, causal, true, true, d}, rng, &var);
        g_deterministic = true;  // the deterministic order through the same variant
        std::printf("(deterministic) ");
        failures += check_bwd_case({1, 2, 1000, d, causal, true, false, d}, rng, &var);
        g_deterministic = false;
      }
  std::printf("bwd_variants: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}

// The inputs every timing mode starts from: a case's tensors (seed 7), the forward run once so the backward
// has O and L. The caller frees `bb`.
struct TimedBwd {
  BwdBuffers bb;
  lk::FlashParams p;
};
TimedBwd timed_bwd_setup(const Case& c) {
  const Layout L = make_layout(c.b, c.h, c.s, c.d, false);
  TimedBwd t{alloc_bwd(c, L), {}};
  std::mt19937 rng(7);
  fill_bwd_inputs(c, L, t.bb, rng);
  t.p = make_bwd_params(c, L, t.bb);
  lk::hopper::run_fwd(t.p, nullptr);
  return t;
}

// Backward (preprocess + main + dQ conversion) and forward + backward, Hopper vs mma.sync, CUDA-event
// medians. FLOPs by the flash-attention convention: backward = 2.5 x forward.
int time_bwd(const Case& c, int iters) {
  TimedBwd t = timed_bwd_setup(c);
  const lk::FlashParams& p = t.p;
  const double fwd_flop = 4.0 * c.b * c.h * double(c.s) * c.s * c.d / (c.causal ? 2 : 1);
  const double bwd_flop = 2.5 * fwd_flop;
  auto hb = [&] { c.bf16 ? run_hopper_bwd<__nv_bfloat16>(p) : run_hopper_bwd<__half>(p); };
  auto mb = [&] { c.bf16 ? run_mma_sync_bwd<__nv_bfloat16>(p) : run_mma_sync_bwd<__half>(p); };
  const float t_hb = median_ms(hb, iters);
  const float t_mb = median_ms(mb, iters);
  const float t_hf = median_ms([&] { lk::hopper::run_fwd(p, nullptr); }, iters);
  const float t_hfb = median_ms([&] { lk::hopper::run_fwd(p, nullptr); hb(); }, iters);
  const float t_mfb = median_ms([&] { lk::hopper::run_fwd(p, nullptr); mb(); }, iters);
  std::printf("bwd_time %s b=%d h=%d s=%d d=%d causal=%d  bwd: hopper %.3f ms (%.0f TFLOP/s)  mma.sync %.3f ms (%.0f)  "
              "| fwd+bwd (hopper fwd %.3f): hopper %.3f ms (%.0f)  hopper fwd + mma.sync bwd %.3f ms\n",
              c.bf16 ? "bf16" : "fp16", c.b, c.h, c.s, c.d, c.causal, t_hb, bwd_flop / t_hb / 1e9, t_mb,
              bwd_flop / t_mb / 1e9, t_hf, t_hfb, (fwd_flop + bwd_flop) / t_hfb / 1e9, t_mfb);
  {
    lk::FlashParams pd = p;
    pd.dq_semaphore = zeroed_semaphore(p);
    const size_t sem_bytes = size_t(p.batch) * p.heads * ((p.seqlen_q + 63) / 64) * 4;
    const float t = median_ms(
        [&] {
          CHECK(cudaMemsetAsync(pd.dq_semaphore, 0, sem_bytes));
          c.bf16 ? run_hopper_bwd<__nv_bfloat16>(pd) : run_hopper_bwd<__half>(pd);
        },
        iters);
    std::printf("  bwd deterministic       %.3f ms (%.0f TFLOP/s)\n", t, bwd_flop / t / 1e9);
    CHECK(cudaFree(pd.dq_semaphore));
  }
  if (c.bf16)
    for (const BwdVariant& var : bwd_variants(c.d)) {
      const float t = median_ms([&] { var.fn(p); }, iters);
      std::printf("  bwd variant %-13s %.3f ms (%.0f TFLOP/s)\n", var.name, t, bwd_flop / t / 1e9);
    }
  std::fflush(stdout);
  free_bwd(t.bb);
  return 0;
}

// The shipped backward and every variant of bwd_variants(D), timed in `rounds` rounds whose order alternates
// (forward, then reversed), so no kernel gains from running first under the power cap; per kernel the
// median of each round and their mean.
int compare_bwd(const Case& c, int iters, int rounds) {
  TimedBwd t = timed_bwd_setup(c);
  const lk::FlashParams& p = t.p;
  const double bwd_flop = 2.5 * 4.0 * c.b * c.h * double(c.s) * c.s * c.d / (c.causal ? 2 : 1);
  std::vector<BwdVariant> impls = {{"shipped", [](const lk::FlashParams& q) { run_hopper_bwd<__nv_bfloat16>(q); }}};
  for (const BwdVariant& v : bwd_variants(c.d)) impls.push_back(v);
  std::vector<std::vector<float>> ms(impls.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t k = 0; k < impls.size(); ++k) {
      const size_t i = r % 2 ? impls.size() - 1 - k : k;
      ms[i].push_back(median_ms([&] { impls[i].fn(p); }, iters));
    }
  std::printf("bwd_compare bf16 b=%d h=%d s=%d d=%d causal=%d (%d rounds x median of %d)\n", c.b, c.h, c.s, c.d, c.causal,
              rounds, iters);
  for (size_t i = 0; i < impls.size(); ++i) {
    double mean = 0;
    std::printf("  %-9s", impls[i].name);
    for (float t : ms[i]) std::printf(" %.3f", t), mean += t;
    mean /= ms[i].size();
    std::printf("  mean %.4f ms (%.0f TFLOP/s)  vs shipped %+.2f %%\n", mean, bwd_flop / mean / 1e9,
                100.0 * (mean / (std::accumulate(ms[0].begin(), ms[0].end(), 0.0) / ms[0].size()) - 1));
  }
  std::fflush(stdout);
  free_bwd(t.bb);
  return 0;
}

// Sustained timing, as `lmscale bench attention` times a phase: fwd + bwd, then bwd, then fwd, each run
// back to back for `seconds` after half a second of warm-up, the mean per call over that time. At long
// sequences this is bound by the H100's power cap (docs/flash_history.md, "The product's d = 128 gap is
// the power cap"), which bursts of ten calls (bwd_time) do not reach.
// `variant`: a name of bwd_variants(D) to time in place of the shipped backward (bf16),
// or null.
int sustain_bwd(const Case& c, double seconds, const char* variant = nullptr) {
  TimedBwd t = timed_bwd_setup(c);
  const lk::FlashParams& p = t.p;
  auto fwd = [&] { lk::hopper::run_fwd(p, nullptr); };
  std::vector<BwdVariant> vs = bwd_variants(c.d);
  const BwdVariant* var = nullptr;
  for (const BwdVariant& v : vs)
    if (variant && std::strcmp(v.name, variant) == 0) var = &v;
  if (variant && !var) throw std::runtime_error(std::string("bwd_sustain: no backward variant ") + variant);
  auto bwd = [&] {
    if (var)
      var->fn(p);
    else
      c.bf16 ? run_hopper_bwd<__nv_bfloat16>(p) : run_hopper_bwd<__half>(p);
  };
  auto sustained = [&](auto&& f) {
    cudaEvent_t a, z;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&z));
    auto run_for = [&](double s) {  // batches of 8 calls until s seconds have passed; returns ms per call
      int calls = 0;
      float total = 0;
      while (total < s * 1e3) {
        CHECK(cudaEventRecord(a));
        for (int i = 0; i < 8; ++i) f();
        CHECK(cudaEventRecord(z));
        CHECK(cudaEventSynchronize(z));
        float t;
        CHECK(cudaEventElapsedTime(&t, a, z));
        total += t, calls += 8;
      }
      return total / calls;
    };
    run_for(0.5);
    const float ms = run_for(seconds);
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(z));
    return ms;
  };
  const float t_fb = sustained([&] { fwd(); bwd(); });
  const float t_b = sustained(bwd);
  const float t_f = sustained(fwd);
  std::printf("bwd_sustain %s%s%s b=%d h=%d s=%d d=%d causal=%d  %.1f s each: fwd+bwd %.3f ms  bwd %.3f ms  fwd %.3f ms\n",
              c.bf16 ? "bf16" : "fp16", var ? " " : "", var ? var->name : "", c.b, c.h, c.s, c.d, c.causal, seconds, t_fb,
              t_b, t_f);
  std::fflush(stdout);
  free_bwd(t.bb);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "check";
    const int only_d = argc > 2 && mode != "time" && mode != "bwd_time" ? std::atoi(argv[2]) : 0;
    if (mode == "check") return check(false, only_d);
    if (mode == "small") return check(true, only_d);
    if (mode == "variants") return check_variants();
    if (mode == "bwd_check") return check_bwd(false, only_d);
    if (mode == "bwd_small") return check_bwd(true, only_d);
    if (mode == "bwd_variants") return check_bwd_variants();
    if (mode == "bwd_repeatable") return check_bwd_repeatable();
    if (mode == "bwd_check_deterministic") {
      g_deterministic = true;
      return check_bwd(false, only_d);
    }
    if (mode == "bwd_time" && argc >= 7) {
      const bool bf = argc < 8 || std::string(argv[7]) != "fp16";
      const Case c{std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]),
                   std::atoi(argv[6]) != 0, bf, false, std::atoi(argv[5])};
      return time_bwd(c, argc > 8 ? std::atoi(argv[8]) : 20);
    }
    if (mode == "bwd_sustain" && argc >= 7) {
      const Case c{std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]),
                   std::atoi(argv[6]) != 0, true, false, std::atoi(argv[5])};
      return sustain_bwd(c, argc > 7 ? std::atof(argv[7]) : 2.0, argc > 8 ? argv[8] : nullptr);
    }
    if (mode == "bwd_compare" && argc >= 7) {
      const Case c{std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]),
                   std::atoi(argv[6]) != 0, true, false, std::atoi(argv[5])};
      return compare_bwd(c, argc > 7 ? std::atoi(argv[7]) : 10, argc > 8 ? std::atoi(argv[8]) : 4);
    }
    if (mode == "time" && argc >= 7) {
      const bool bf = argc < 8 || std::string(argv[7]) != "fp16";
      const Case c{std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]),
                   std::atoi(argv[6]) != 0, bf, false, std::atoi(argv[5])};
      return time(c, argc > 8 ? std::atoi(argv[8]) : 20, argc > 9 && std::string(argv[9]) == "all");
    }
    std::fprintf(stderr, "usage: flash_hopper_probe check [D] | small [D] | variants | time B H S D causal [bf16|fp16] [iters] [all] | "
                 "bwd_check [D] | bwd_check_deterministic [D] | bwd_small [D] | bwd_variants | bwd_repeatable | bwd_time B H S D causal [bf16|fp16] [iters] | "
                 "bwd_compare B H S D causal [iters] [rounds] | bwd_sustain B H S D causal [seconds] [variant]\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flash_hopper_probe: %s\n", e.what());
    return 1;
  }
}
