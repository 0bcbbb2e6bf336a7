// Runs the fp32 FlashAttention kernels (forward, then backward) under emulate_cuda.h on a few shapes, masks
// (both causal alignments, sliding windows; the tile arithmetic of flash_sequence.cuh every kernel family shares)
// and grouped K/V heads, and compares O, L, dQ, dK, dV with an fp64 reference computed here (the mask written
// out entry by entry). Outputs start as NaN, q has a padded row stride. Prints one line per case; exits non-zero
// if any error exceeds 1e-4 (fp32 math gives ~1e-6), or a row that sees no key is not O = 0, L = +inf.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/flash_fp32.h"

using lmscale::kernels::FlashDtype;
using lmscale::kernels::FlashParams;

namespace {

struct Case {
  int B, H, Nq, Nk, D;
  bool causal;
  int Hk = 0;  // K/V heads (0: H)
  bool bottom_right = false;
  int left = -1, right = -1;  // window sides, FlashAttention's; -1 unbounded

  int kv_heads() const { return Hk > 0 ? Hk : H; }
  // Query i sees key j (docs/spec.md §3.6).
  bool sees(int i, int j) const {
    const int diag = i + (bottom_right ? Nk - Nq : 0);
    const int r = causal ? 0 : right;
    return (left < 0 || j >= diag - left) && (r < 0 || j <= diag + r);
  }
};

struct Reference {  // one head, fp64
  std::vector<double> O, L, dQ, dK, dV;
};

Reference reference(const float* Q, int qs, const float* K, const float* V, const float* dO, const Case& c) {
  const int D = c.D;
  const double scale = 1.0 / std::sqrt(double(D));
  Reference r{std::vector<double>(c.Nq * D), std::vector<double>(c.Nq), std::vector<double>(c.Nq * D),
              std::vector<double>(c.Nk * D), std::vector<double>(c.Nk * D)};
  std::vector<double> P(c.Nq * c.Nk);
  for (int i = 0; i < c.Nq; ++i) {
    double m = -INFINITY;
    for (int j = 0; j < c.Nk; ++j) {
      double s = 0;
      for (int d = 0; d < D; ++d) s += double(Q[i * qs + d]) * K[j * D + d];
      P[i * c.Nk + j] = c.sees(i, j) ? s * scale : -INFINITY;
      m = std::max(m, P[i * c.Nk + j]);
    }
    if (m == -INFINITY) {  // no key: O = 0, L = +inf, no gradient
      r.L[i] = INFINITY;
      for (int j = 0; j < c.Nk; ++j) P[i * c.Nk + j] = 0;
      continue;
    }
    double l = 0;
    for (int j = 0; j < c.Nk; ++j) l += std::exp(P[i * c.Nk + j] - m);
    r.L[i] = m + std::log(l);
    for (int j = 0; j < c.Nk; ++j) {
      P[i * c.Nk + j] = std::exp(P[i * c.Nk + j] - r.L[i]);
      for (int d = 0; d < D; ++d) r.O[i * D + d] += P[i * c.Nk + j] * V[j * D + d];
    }
  }
  for (int i = 0; i < c.Nq; ++i) {
    double Di = 0;
    for (int d = 0; d < D; ++d) Di += double(dO[i * D + d]) * r.O[i * D + d];
    for (int j = 0; j < c.Nk; ++j) {
      double dp = 0;
      for (int d = 0; d < D; ++d) dp += double(dO[i * D + d]) * V[j * D + d];
      const double p = P[i * c.Nk + j], ds = p * (dp - Di) * scale;
      for (int d = 0; d < D; ++d) {
        r.dV[j * D + d] += p * dO[i * D + d];
        r.dQ[i * D + d] += ds * K[j * D + d];
        r.dK[j * D + d] += ds * Q[i * qs + d];
      }
    }
  }
  return r;
}

// Largest |got - want| over n elements; NaN (an element never written) counts as infinite, and +inf must be
// met by +inf (L of a row that sees no key).
double max_error(const float* got, const std::vector<double>& want, size_t n, double so_far) {
  for (size_t i = 0; i < n; ++i) {
    if (std::isinf(want[i]) && std::isinf(got[i])) continue;
    const double e = std::fabs(got[i] - want[i]);
    so_far = std::isnan(e) || std::isinf(e) ? INFINITY : std::max(so_far, e);
  }
  return so_far;
}

bool run(const Case& c) {
  std::mt19937 rng(c.Nq * 7 + c.Nk * 3 + c.D + c.causal);
  std::normal_distribution<float> normal;
  auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = normal(rng);
    return v;
  };
  const int BH = c.B * c.H, BHk = c.B * c.kv_heads(), D = c.D, qs = D + 4;  // q rows padded: strides honoured
  auto q = random(size_t(BH) * c.Nq * qs), k = random(size_t(BHk) * c.Nk * D), v = random(size_t(BHk) * c.Nk * D);
  auto dout = random(size_t(BH) * c.Nq * D);
  const float nan = NAN;
  std::vector<float> o(BH * c.Nq * D, nan), lse(BH * c.Nq, nan), dq(BH * c.Nq * D, nan), dk(BHk * c.Nk * D, nan),
      dv(BHk * c.Nk * D, nan), dsum(BH * c.Nq, nan);

  FlashParams p;
  p.q = q.data(), p.k = k.data(), p.v = v.data(), p.o = o.data(), p.lse = lse.data(), p.dout = dout.data();
  p.dq = dq.data(), p.dk = dk.data(), p.dv = dv.data(), p.dsum = dsum.data();
  p.q_batch_stride = int64_t(c.H) * c.Nq * qs, p.q_head_stride = int64_t(c.Nq) * qs, p.q_row_stride = qs;
  for (auto* s : {&p.k_batch_stride, &p.v_batch_stride, &p.dk_batch_stride, &p.dv_batch_stride})
    *s = int64_t(c.kv_heads()) * c.Nk * D;
  for (auto* s : {&p.k_head_stride, &p.v_head_stride, &p.dk_head_stride, &p.dv_head_stride}) *s = int64_t(c.Nk) * D;
  for (auto* s : {&p.o_batch_stride, &p.do_batch_stride, &p.dq_batch_stride}) *s = int64_t(c.H) * c.Nq * D;
  for (auto* s : {&p.o_head_stride, &p.do_head_stride, &p.dq_head_stride}) *s = int64_t(c.Nq) * D;
  for (auto* s : {&p.k_row_stride, &p.v_row_stride, &p.o_row_stride, &p.do_row_stride, &p.dq_row_stride,
                  &p.dk_row_stride, &p.dv_row_stride})
    *s = D;
  p.batch = c.B, p.heads = c.H, p.seqlen_q = c.Nq, p.seqlen_k = c.Nk, p.head_dim = D;
  p.scale = 1.f / std::sqrt(float(D)), p.is_causal = c.causal, p.dtype = FlashDtype::kFP32;
  p.heads_k = c.kv_heads(), p.bottom_right = c.bottom_right, p.window_left = c.left, p.window_right = c.right;
  lmscale::kernels::run_flash_fp32_fwd(p, nullptr);
  lmscale::kernels::run_flash_fp32_bwd(p, nullptr);

  double eO = 0, eL = 0, eQ = 0, eK = 0, eV = 0;
  const int group = c.H / c.kv_heads();
  std::vector<double> sum_k(size_t(BHk) * c.Nk * D), sum_v(sum_k.size());  // dK, dV summed over each group
  for (int bh = 0; bh < BH; ++bh) {
    const int bhk = bh / c.H * c.kv_heads() + bh % c.H / group;
    const size_t qrow = size_t(bh) * c.Nq, krow = size_t(bhk) * c.Nk;
    const Reference r = reference(q.data() + qrow * qs, qs, k.data() + krow * D, v.data() + krow * D,
                                  dout.data() + qrow * D, c);
    eO = max_error(o.data() + qrow * D, r.O, r.O.size(), eO);
    eL = max_error(lse.data() + qrow, r.L, r.L.size(), eL);
    eQ = max_error(dq.data() + qrow * D, r.dQ, r.dQ.size(), eQ);
    for (size_t i = 0; i < r.dK.size(); ++i) sum_k[krow * D + i] += r.dK[i], sum_v[krow * D + i] += r.dV[i];
  }
  eK = max_error(dk.data(), sum_k, sum_k.size(), eK);
  eV = max_error(dv.data(), sum_v, sum_v.size(), eV);
  const bool ok = std::max({eO, eL, eQ, eK, eV}) < 1e-4;
  std::printf("%s B%d H%d/%d Nq%d Nk%d D%d %s%s window (%d, %d): max abs error O %.1e L %.1e dQ %.1e dK %.1e "
              "dV %.1e\n",
              ok ? "ok  " : "FAIL", c.B, c.H, c.kv_heads(), c.Nq, c.Nk, D, c.causal ? "causal" : "full",
              c.bottom_right ? " bottom-right" : "", c.left, c.right, eO, eL, eQ, eK, eV);
  return ok;
}

}  // namespace

// Cases: "quick" (for the thread-sanitizer build) or everything.
int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "quick";
  std::vector<Case> cases = {{1, 1, 70, 70, 16, true}, {1, 1, 40, 70, 16, false}, {1, 4, 70, 90, 16, true, 2, true, 20}};
  if (!quick)
    cases = {{1, 2, 1, 1, 16, false},   {1, 2, 1, 1, 16, true},     {2, 1, 17, 17, 32, true},
             {1, 2, 17, 130, 64, false}, {1, 1, 130, 130, 80, true}, {1, 1, 130, 130, 128, false},
             {1, 1, 97, 97, 64, true},   {1, 1, 65, 40, 16, false},
             // masks and grouped heads: both alignments off the square, rows that see no key, windows, GQA, MQA
             {1, 4, 60, 130, 16, true, 2},         {1, 4, 130, 60, 16, true, 2, true},
             {2, 2, 50, 90, 32, true, 1, true},    {1, 2, 1, 77, 16, true, 0, true},
             {1, 4, 150, 150, 16, true, 2, true, 37}, {1, 2, 120, 100, 16, false, 0, false, 20, 15},
             {1, 2, 100, 140, 16, false, 1, true, -1, 3}, {1, 2, 110, 110, 32, false, 2, false, 50, -1}};
  int failures = 0;
  for (const Case& c : cases) failures += !run(c);
  std::printf("%d failures\n", failures);
  return failures != 0;
}
