// flash_probe: a standalone driver for the FlashAttention-2 kernels, with no ATen and no libtorch, so a
// kernel change can be built here (CMake target flash_probe; scripts/gpu/build_flash_probe.sh) and carried
// to a GPU machine as one small binary: no CMake build there, more device time for measuring.
//
//   flash_probe check                      every backward variant vs an fp64 CPU reference (small sizes)
//   flash_probe time [B H S D causal]      forward and each backward variant, CUDA-event median (ms)
//
// It is a development tool, not the product's test: tests/cpp/kernels/flash_kernel_test.cpp checks the
// kernels through the ops against the ATen reference in fp64, and `lmscale bench attention` is the
// benchmark users run. bf16 only; one head dim per binary (default 64, the leaderboard's).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/flash_bwd_launch.cuh"
#include "kernels/flash_fwd_launch.cuh"

namespace lk = lmscale::kernels;
using bf16 = __nv_bfloat16;
// One head dim per binary (CMake targets flash_probe = 64, the leaderboard's, and flash_probe_d<D>).
#ifndef LMSCALE_PROBE_HEAD_DIM
#define LMSCALE_PROBE_HEAD_DIM 64
#endif
constexpr int kD = LMSCALE_PROBE_HEAD_DIM;

namespace {

#define CHECK(x) LMSCALE_CUDA_CHECK(x)

struct Problem {
  int b, h, s, d;
  bool causal;
  int64_t elems() const { return int64_t(b) * h * s * d; }
  int64_t rows() const { return int64_t(b) * h * s; }
};

struct Buffers {
  bf16 *q, *k, *v, *o, *dout, *dq, *dk, *dv;
  float *lse, *dq_accum, *dsum;
};

// The backward variants a run compares; a new variant adds a row here.
using BwdFn = void (*)(const lk::FlashParams&, cudaStream_t);
struct Variant {
  const char* name;
  BwdFn causal, plain;
};
template <int M, int KT, int W>
Variant bwd(const char* name) {
  return {name, lk::flash::launch_flash_bwd_tiles<bf16, kD, M, KT, W, true>,
          lk::flash::launch_flash_bwd_tiles<bf16, kD, M, KT, W, false>};
}
template <int M, int N, int W>
Variant fwd(const char* name) {
  return {name, lk::flash::launch_flash_fwd_tiles<bf16, kD, M, N, W, true>,
          lk::flash::launch_flash_fwd_tiles<bf16, kD, M, N, W, false>};
}
// Alternatives to the shipped tiles (flash_tiles.h), per head dim; the first row is what ships.
std::vector<Variant> fwd_variants() {
  if constexpr (kD <= 64)
    return {fwd<128, 64, 4>("fwd-m128n64w4"), fwd<128, 128, 8>("fwd-m128n128w8"), fwd<128, 64, 8>("fwd-m128n64w8"),
            fwd<64, 64, 4>("fwd-m64n64w4"), fwd<64, 128, 4>("fwd-m64n128w4")};
  else
    return {fwd<128, 64, 8>("fwd-m128n64w8"), fwd<64, 64, 4>("fwd-m64n64w4")};
}

std::vector<Variant> variants() {
  std::vector<Variant> v = {
      {"bwd-shipped", lk::flash::launch_flash_bwd<bf16, kD, true>, lk::flash::launch_flash_bwd<bf16, kD, false>}};
  if constexpr (kD <= 64) {
    v.push_back(bwd<64, 1, 8>("bwd-m64k1w8"));
    v.push_back(bwd<32, 2, 8>("bwd-m32k2w8"));
    v.push_back(bwd<64, 1, 4>("bwd-m64k1w4"));
  } else {
    v.push_back(bwd<16, 1, 8>("bwd-m16k1w8"));
    v.push_back(bwd<64, 1, 8>("bwd-m64k1w8"));
  }
  return v;
}

lk::FlashParams params(const Problem& pr, const Buffers& b) {
  lk::FlashParams p;
  p.q = b.q; p.k = b.k; p.v = b.v; p.o = b.o; p.lse = b.lse; p.dout = b.dout;
  p.dq = b.dq; p.dk = b.dk; p.dv = b.dv; p.dq_accum = b.dq_accum; p.dsum = b.dsum;
  const int64_t row = pr.d, head = int64_t(pr.s) * pr.d, batch = head * pr.h;
  auto set = [&](int64_t& bs, int64_t& hs, int64_t& rs) { bs = batch; hs = head; rs = row; };
  set(p.q_batch_stride, p.q_head_stride, p.q_row_stride);
  set(p.k_batch_stride, p.k_head_stride, p.k_row_stride);
  set(p.v_batch_stride, p.v_head_stride, p.v_row_stride);
  set(p.o_batch_stride, p.o_head_stride, p.o_row_stride);
  set(p.do_batch_stride, p.do_head_stride, p.do_row_stride);
  set(p.dq_batch_stride, p.dq_head_stride, p.dq_row_stride);
  set(p.dk_batch_stride, p.dk_head_stride, p.dk_row_stride);
  set(p.dv_batch_stride, p.dv_head_stride, p.dv_row_stride);
  p.batch = pr.b; p.heads = pr.h; p.seqlen_q = pr.s; p.seqlen_k = pr.s; p.head_dim = pr.d;
  p.scale = 1.f / std::sqrt(float(pr.d));
  p.is_causal = pr.causal;
  p.dtype = lk::FlashDtype::kBF16;
  return p;
}

Buffers alloc(const Problem& pr) {
  Buffers b;
  const size_t e = pr.elems() * sizeof(bf16), r = pr.rows() * sizeof(float);
  for (bf16** x : {&b.q, &b.k, &b.v, &b.o, &b.dout, &b.dq, &b.dk, &b.dv}) CHECK(cudaMalloc(x, e));
  CHECK(cudaMalloc(&b.lse, r));
  CHECK(cudaMalloc(&b.dsum, r));
  CHECK(cudaMalloc(&b.dq_accum, r * pr.d));
  return b;
}

void release(Buffers& b) {
  for (void* x : {(void*)b.q, (void*)b.k, (void*)b.v, (void*)b.o, (void*)b.dout, (void*)b.dq, (void*)b.dk,
                  (void*)b.dv, (void*)b.lse, (void*)b.dsum, (void*)b.dq_accum})
    CHECK(cudaFree(x));
}

std::vector<bf16> random_bf16(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<bf16> x(n);
  for (auto& v : x) v = __float2bfloat16(dist(rng));
  return x;
}

std::vector<float> to_float(const std::vector<bf16>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = __bfloat162float(x[i]);
  return y;
}

std::vector<bf16> download(const bf16* d, int64_t n) {
  std::vector<bf16> h(n);
  CHECK(cudaMemcpy(h.data(), d, n * sizeof(bf16), cudaMemcpyDeviceToHost));
  return h;
}

// fp64 attention forward and backward for one (batch, head): the textbook formulas, no tiling.
void reference_head(const float* q, const float* k, const float* v, const float* dout, int s, int d, bool causal,
                    std::vector<double>& dq, std::vector<double>& dk, std::vector<double>& dv) {
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> p(size_t(s) * s), dp(size_t(s) * s);
  for (int i = 0; i < s; ++i) {
    double mx = -INFINITY;
    for (int j = 0; j < s; ++j) {
      double acc = 0;
      for (int c = 0; c < d; ++c) acc += double(q[i * d + c]) * k[j * d + c];
      p[i * s + j] = (causal && j > i) ? -INFINITY : acc * scale;
      mx = std::max(mx, p[i * s + j]);
    }
    double sum = 0;
    for (int j = 0; j < s; ++j) sum += (p[i * s + j] = std::exp(p[i * s + j] - mx));
    for (int j = 0; j < s; ++j) p[i * s + j] /= sum;
  }
  dq.assign(size_t(s) * d, 0); dk.assign(size_t(s) * d, 0); dv.assign(size_t(s) * d, 0);
  for (int i = 0; i < s; ++i) {
    double rowdot = 0;
    for (int j = 0; j < s; ++j) {
      double acc = 0;
      for (int c = 0; c < d; ++c) acc += double(dout[i * d + c]) * v[j * d + c];
      dp[i * s + j] = acc;
      rowdot += p[i * s + j] * acc;
    }
    for (int j = 0; j < s; ++j) {
      const double ds = p[i * s + j] * (dp[i * s + j] - rowdot) * scale;
      for (int c = 0; c < d; ++c) {
        dv[j * d + c] += p[i * s + j] * dout[i * d + c];
        dq[i * d + c] += ds * k[j * d + c];
        dk[j * d + c] += ds * q[i * d + c];
      }
    }
  }
}

// Max |got - want| over max(max |want|, 1): one number per gradient (bf16 outputs: ~1e-2).
double rel_err(const std::vector<bf16>& got, const std::vector<double>& want, int64_t offset) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = __bfloat162float(got[offset + i]);
    if (!std::isfinite(g)) return INFINITY;
    num = std::max(num, std::abs(g - want[i]));
    den = std::max(den, std::abs(want[i]));
  }
  return num / std::max(den, 1.0);
}

template <bool C>
void forward(const lk::FlashParams& p, cudaStream_t s) {
  lk::flash::launch_flash_fwd<bf16, kD, C>(p, s);
}

void run_forward(const lk::FlashParams& p) { p.is_causal ? forward<true>(p, 0) : forward<false>(p, 0); }
void run_backward(const Variant& v, const lk::FlashParams& p) { (p.is_causal ? v.causal : v.plain)(p, 0); }

int check() {
  int failures = 0;
  std::mt19937 rng(1234);
  for (int s : {1, 17, 64, 97, 128, 200, 257, 300}) {
    for (bool causal : {false, true}) {
      const Problem pr{1, 2, s, kD, causal};
      Buffers b = alloc(pr);
      const int64_t n = pr.elems();
      auto q = random_bf16(n, rng), k = random_bf16(n, rng), v = random_bf16(n, rng), dout = random_bf16(n, rng);
      CHECK(cudaMemcpy(b.q, q.data(), n * 2, cudaMemcpyHostToDevice));
      CHECK(cudaMemcpy(b.k, k.data(), n * 2, cudaMemcpyHostToDevice));
      CHECK(cudaMemcpy(b.v, v.data(), n * 2, cudaMemcpyHostToDevice));
      CHECK(cudaMemcpy(b.dout, dout.data(), n * 2, cudaMemcpyHostToDevice));
      const auto p = params(pr, b);
      run_forward(p);
      const auto qf = to_float(q), kf = to_float(k), vf = to_float(v), df = to_float(dout);
      for (const Variant& var : variants()) {
        for (bf16* x : {b.dq, b.dk, b.dv}) CHECK(cudaMemset(x, 0xff, n * 2));  // NaN poison
        CHECK(cudaMemset(b.dq_accum, 0xff, n * 4));
        run_backward(var, p);
        CHECK(cudaDeviceSynchronize());
        const auto dq = download(b.dq, n), dk = download(b.dk, n), dv = download(b.dv, n);
        double worst = 0;
        for (int bh = 0; bh < pr.b * pr.h; ++bh) {
          const int64_t off = int64_t(bh) * s * kD;
          std::vector<double> rq, rk, rv;
          reference_head(qf.data() + off, kf.data() + off, vf.data() + off, df.data() + off, s, kD, causal, rq, rk, rv);
          worst = std::max({worst, rel_err(dq, rq, off), rel_err(dk, rk, off), rel_err(dv, rv, off)});
        }
        const bool ok = worst < 2e-2;  // bf16 inputs and outputs, fp32 accumulation
        failures += !ok;
        std::printf("check %-7s s=%-4d causal=%d  max err %.3e  %s\n", var.name, s, causal, worst,
                    ok ? "ok" : "FAIL");
      }
      release(b);
    }
  }
  std::printf("check: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}

template <typename F>
float median_ms(F&& f, int iters) {
  cudaEvent_t a, z;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&z));
  std::vector<float> ms;
  for (int i = 0; i < iters + 2; ++i) {
    CHECK(cudaEventRecord(a));
    f();
    CHECK(cudaEventRecord(z));
    CHECK(cudaEventSynchronize(z));
    float t;
    CHECK(cudaEventElapsedTime(&t, a, z));
    if (i >= 2) ms.push_back(t);  // two warm-up runs
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int time(const Problem& pr, int iters) {
  Buffers b = alloc(pr);
  std::mt19937 rng(7);
  const int64_t n = pr.elems();
  for (bf16* x : {b.q, b.k, b.v, b.dout}) {
    auto h = random_bf16(n, rng);
    CHECK(cudaMemcpy(x, h.data(), n * 2, cudaMemcpyHostToDevice));
  }
  const auto p = params(pr, b);
  const double fwd_flop = 4.0 * pr.b * pr.h * double(pr.s) * pr.s * pr.d / (pr.causal ? 2 : 1);
  const float f = median_ms([&] { run_forward(p); }, iters);
  std::printf("time b=%d h=%d s=%d d=%d causal=%d  fwd %.3f ms (%.0f TFLOP/s)\n", pr.b, pr.h, pr.s, pr.d,
              pr.causal, f, fwd_flop / f / 1e9);
  for (const Variant& var : fwd_variants()) {
    const float t = median_ms([&] { run_backward(var, p); }, iters);  // same call shape as a backward variant
    std::printf("time %-14s %.3f ms (%.0f TFLOP/s)\n", var.name, t, fwd_flop / t / 1e9);
  }
  for (const Variant& var : variants()) {
    const float t = median_ms([&] { run_backward(var, p); }, iters);
    std::printf("time %-7s %.3f ms (%.0f TFLOP/s)  fwd+bwd %.3f ms\n", var.name, t, 2.5 * fwd_flop / t / 1e9,
                f + t);
  }
  release(b);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "time";
    if (mode == "check") return check();
    if (mode == "time") {
      auto arg = [&](int i, int dflt) { return argc > i ? std::atoi(argv[i]) : dflt; };
      const Problem pr{arg(2, 1), arg(3, 16), arg(4, 16384), kD, arg(6, 1) != 0};
      if (arg(5, kD) != kD)
        throw std::runtime_error("this flash_probe is built for head dim " + std::to_string(kD) +
                                 "; build another with scripts/gpu/build_flash_probe.sh <head_dim>");
      return time(pr, arg(7, 20));
    }
    std::fprintf(stderr, "usage: flash_probe check | time [B H S D causal iters]\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flash_probe: %s\n", e.what());
    return 1;
  }
}
