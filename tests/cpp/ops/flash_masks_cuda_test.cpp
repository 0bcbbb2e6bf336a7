// The CUDA kernels of every family (Hopper, mma.sync, fp32) through the ops against the fp64 reference, for every
// mask (top-left and bottom-right causal with Nq = Nk, Nq < Nk, Nq > Nk, Nq = 1; sliding windows; left- or
// right-only bounds), grouped K/V heads (group 1, 2, 4: MQA) and packed batches (an empty sequence, a one-token
// one, rows past the last offset). Fresh random inputs; every cached block of the CUDA allocator is NaN-poisoned
// before each call, so a row or key the kernels skip, or a workspace they rely on being zeroed, fails loudly.
// Tolerances by dtype, relative to the reference's largest magnitude: bf16 2e-2, fp16 4e-3, fp32 1e-4. Skipped
// without a GPU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "ops/flash_attention.h"
#include "ops/flash_reference.h"

namespace lmscale::ops {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

// Fills the allocator's cached blocks with NaN: the next allocations reuse them (small and large pools alike).
void poison_cuda_cache() {
  std::vector<torch::Tensor> blocks;
  for (int64_t bytes = 512; bytes <= (int64_t(64) << 20); bytes *= 2)
    for (int i = 0; i < 3; ++i)
      blocks.push_back(torch::full({bytes / 4}, std::numeric_limits<float>::quiet_NaN(),
                                   torch::dtype(torch::kFloat).device(torch::kCUDA)));
  torch::cuda::synchronize();
}

double tolerance(torch::ScalarType dt) {
  return dt == torch::kBFloat16 ? 2e-2 : dt == torch::kHalf ? 4e-3 : 1e-4;
}

// max |got - want| / max(max |want|, 1), over entries where want is finite; NaN in got counts as infinite error.
double rel_error(const torch::Tensor& got, const torch::Tensor& want) {
  auto g = got.to(torch::kCPU, torch::kDouble), w = want.to(torch::kDouble);
  if (g.isnan().any().item<bool>()) return std::numeric_limits<double>::infinity();
  const double scale = std::max(1.0, w.abs().max().item<double>());
  return (g - w).abs().max().item<double>() / scale;
}

// L: +inf exactly where the reference has it (rows that see no key), close elsewhere.
void expect_lse(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  auto g = got.to(torch::kCPU, torch::kDouble), w = want.to(torch::kDouble);
  ASSERT_TRUE(torch::equal(g.isinf(), w.isinf())) << what << ": rows with L = +inf differ";
  auto fin = w.isfinite();
  if (fin.any().item<bool>())
    EXPECT_LT((g.masked_select(fin) - w.masked_select(fin)).abs().max().item<double>(), 2e-2) << what << ": L";
}

// O, L, dQ, dK, dV of a CUDA call against the fp64 reference: gradients get twice the forward's tolerance.
void expect_matches_reference(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want,
                              torch::ScalarType dtype, const std::string& what) {
  const double tol = tolerance(dtype);
  EXPECT_LT(rel_error(got[0], want[0]), tol) << what << ": O";
  expect_lse(got[1], want[1], what);
  const char* names[] = {"dQ", "dK", "dV"};
  for (int i = 0; i < 3; ++i) EXPECT_LT(rel_error(got[2 + i], want[2 + i]), 2 * tol) << what << ": " << names[i];
}

struct MaskCase {
  const char* name;
  FlashMask mask;
  int64_t nq, nk;
};

const MaskCase kMaskCases[] = {
    {"none", {}, 100, 100},
    {"none-nq1", {}, 1, 77},
    {"causal-top-left", {true}, 257, 257},
    {"causal-top-left-nq<nk", {true}, 60, 130},
    {"causal-top-left-nq>nk", {true}, 130, 60},
    {"causal-bottom-right-nq<nk", {true, true}, 60, 130},
    {"causal-bottom-right-nq>nk", {true, true}, 130, 60},
    {"causal-bottom-right-decode", {true, true}, 1, 77},
    {"sliding-window-causal", {true, true, 37, -1}, 300, 300},
    {"window-both-sides", {false, false, 20, 15}, 200, 170},
    {"window-right-only", {false, true, -1, 3}, 100, 140},
    {"window-left-only", {false, false, 50, -1}, 190, 190},
};

struct Family {
  const char* name;
  const char* path;  // ops::set_flash_path
  torch::ScalarType dtype;
};

// The families an sm_90 device runs: the Hopper kernels (auto there), mma.sync forced, fp16, and fp32's own kernels.
const Family kFamilies[] = {{"hopper-bf16", "auto", torch::kBFloat16},
                            {"mma-sync-bf16", "mma-sync", torch::kBFloat16},
                            {"hopper-fp16", "auto", torch::kHalf},
                            {"fp32", "auto", torch::kFloat}};

struct PathScope {
  std::string saved;
  explicit PathScope(const char* path) : saved(set_flash_path(path)) {}
  ~PathScope() { set_flash_path(saved); }
};

// One dense case: forward and backward on CUDA against the fp64 reference of the same rounded inputs.
void check_dense(const Family& f, const MaskCase& c, int64_t d, int64_t hq, int64_t hkv, bool deterministic) {
  const std::string what = std::string(f.name) + " " + c.name + " d=" + std::to_string(d) + " heads " +
                           std::to_string(hq) + "/" + std::to_string(hkv);
  auto opt = torch::dtype(f.dtype).device(torch::kCUDA);
  auto q = torch::randn({2, hq, c.nq, d}, opt), k = torch::randn({2, hkv, c.nk, d}, opt);
  auto v = torch::randn({2, hkv, c.nk, d}, opt), dout = torch::randn({2, hq, c.nq, d}, opt);
  auto q64 = q.to(torch::kCPU, torch::kDouble), k64 = k.to(torch::kCPU, torch::kDouble);
  auto v64 = v.to(torch::kCPU, torch::kDouble), do64 = dout.to(torch::kCPU, torch::kDouble);
  auto [o_ref, l_ref] = flash_reference_forward(q64, k64, v64, c.mask);
  auto [dq_ref, dk_ref, dv_ref] = flash_reference_backward(q64, k64, v64, o_ref, l_ref, do64, c.mask);

  PathScope path(f.path);
  poison_cuda_cache();
  auto [o, L] = flash_attention_forward(q, k, v, c.mask);
  poison_cuda_cache();
  auto [dq, dk, dv] = flash_attention_backward(q, k, v, o, L, dout, c.mask, std::nullopt, deterministic);
  expect_matches_reference({o, L, dq, dk, dv}, {o_ref, l_ref, dq_ref, dk_ref, dv_ref}, f.dtype, what);
  if (deterministic) {
    auto [dq2, dk2, dv2] = flash_attention_backward(q, k, v, o, L, dout, c.mask, std::nullopt, true);
    EXPECT_TRUE(torch::equal(dq, dq2) && torch::equal(dk, dk2) && torch::equal(dv, dv2))
        << what << ": the deterministic backward differs between two runs";
  }
}

TEST(FlashMasksCuda, EveryMaskAndGroupOnEveryFamily) {
  SKIP_WITHOUT_GPU();
  const int64_t groups[][2] = {{4, 4}, {4, 2}, {4, 1}};
  for (const auto& f : kFamilies)
    for (int64_t d : {64, 80, 128}) {
      if (!flash_kernel_available(f.dtype, d)) continue;
      int i = 0;
      for (const auto& c : kMaskCases) {
        const auto& g = groups[i++ % 3];
        check_dense(f, c, d, g[0], g[1], /*deterministic=*/false);
      }
    }
}

TEST(FlashMasksCuda, DeterministicBackwardUnderMasksAndGroups) {
  SKIP_WITHOUT_GPU();
  // The Hopper backward orders its dQ adds by key block, which under a window starts past block 0.
  for (const auto& c : kMaskCases) check_dense(kFamilies[0], c, 64, 4, 2, /*deterministic=*/true);
}

// Offsets from lengths, (B + 1,) int32.
torch::Tensor offsets(const std::vector<int64_t>& lengths) {
  std::vector<int32_t> cu{0};
  for (int64_t n : lengths) cu.push_back(cu.back() + static_cast<int32_t>(n));
  return torch::tensor(cu, torch::kInt);
}

// An empty sequence, a one-token one, one longer than a tile; keys as many, more or fewer (the kernels' short tiles).
const std::vector<int64_t> kShortQ = {37, 0, 128, 1, 200, 64}, kShortK = {37, 12, 150, 1, 180, 64};
// Sequences long enough on average for the Hopper forward's long tile (192 rows at d = 64, the partial one first:
// Note [top-aligned tiles]), lengths no tile divides.
const std::vector<int64_t> kLongQ = {2100, 0, 2299}, kLongK = {2100, 7, 2400};

void check_packed(const Family& f, const FlashMask& mask, int64_t d, const char* mask_name, bool deterministic,
                  const std::vector<int64_t>& lq = kShortQ, const std::vector<int64_t>& lk = kShortK) {
  const std::string what = std::string(f.name) + " packed " + mask_name + " d=" + std::to_string(d) +
                           (lq == kShortQ ? "" : " (long sequences)");
  const int64_t hq = 4, hkv = 2;  // and 5 spare rows past the last offset of each
  const int64_t total_q = std::accumulate(lq.begin(), lq.end(), int64_t(5));
  const int64_t total_k = std::accumulate(lk.begin(), lk.end(), int64_t(5));
  auto opt = torch::dtype(f.dtype).device(torch::kCUDA);
  auto q = torch::randn({total_q, hq, d}, opt), k = torch::randn({total_k, hkv, d}, opt);
  auto v = torch::randn({total_k, hkv, d}, opt), dout = torch::randn({total_q, hq, d}, opt);
  auto cu_q = offsets(lq), cu_k = offsets(lk);
  const int64_t max_q = *std::max_element(lq.begin(), lq.end()), max_k = *std::max_element(lk.begin(), lk.end());
  auto q64 = q.to(torch::kCPU, torch::kDouble), k64 = k.to(torch::kCPU, torch::kDouble);
  auto v64 = v.to(torch::kCPU, torch::kDouble), do64 = dout.to(torch::kCPU, torch::kDouble);
  auto [o_ref, l_ref] = flash_reference_varlen_forward(q64, k64, v64, cu_q, cu_k, mask);
  auto [dq_ref, dk_ref, dv_ref] =
      flash_reference_varlen_backward(q64, k64, v64, o_ref, l_ref, do64, cu_q, cu_k, mask);

  PathScope path(f.path);
  auto cq = cu_q.cuda(), ck = cu_k.cuda();
  poison_cuda_cache();
  auto [o, L] = flash_attention_varlen_forward(q, k, v, cq, ck, max_q, max_k, mask);
  poison_cuda_cache();
  auto [dq, dk, dv] = flash_attention_varlen_backward(q, k, v, o, L, dout, cq, ck, max_q, max_k, mask, std::nullopt,
                                                      deterministic);
  expect_matches_reference({o, L, dq, dk, dv}, {o_ref, l_ref, dq_ref, dk_ref, dv_ref}, f.dtype, what);
}

TEST(FlashMasksCuda, PackedBatchesOnEveryFamily) {
  SKIP_WITHOUT_GPU();
  const struct {
    const char* name;
    FlashMask mask;
  } masks[] = {{"none", {}},
               {"causal-top-left", {true}},
               {"causal-bottom-right", {true, true}},
               {"sliding-window", {true, true, 16, -1}}};
  for (const auto& f : kFamilies)
    for (int64_t d : {64, 80, 128})
      for (const auto& m : masks)
        if (flash_kernel_available(f.dtype, d)) check_packed(f, m.mask, d, m.name, /*deterministic=*/false);
  check_packed(kFamilies[0], {true, true, 16, -1}, 64, "sliding-window (deterministic)", true);
  check_packed(kFamilies[0], {true}, 128, "causal-top-left (deterministic)", true);
  for (const auto& m : masks)
    if (m.mask.causal) check_packed(kFamilies[0], m.mask, 64, m.name, /*deterministic=*/false, kLongQ, kLongK);
}

}  // namespace
}  // namespace lmscale::ops
