// The per-tensor FP8 scaling rule, one definition for the CUDA cast kernels and the CPU path:
// scale s = the largest power of two with amax·s <= the format's largest finite value, so x·s and
// the inverse 1/s are exact; amax 0 gives s = 1, a non-finite amax gives NaN. Pure, no ATen.
#pragma once
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define LMSCALE_HD __host__ __device__
#else
#define LMSCALE_HD
#endif

namespace lmscale::kernels {

// The two FP8 formats of the H100's tensor cores. E4M3 (3 mantissa bits, up to 448, no inf) holds
// activations and weights; E5M2 (2 mantissa bits, up to 57344, 15 more binades) holds gradients.
enum class Fp8Format { kE4M3 = 0, kE5M2 = 1 };

LMSCALE_HD constexpr float fp8_max(Fp8Format f) { return f == Fp8Format::kE4M3 ? 448.f : 57344.f; }

// The scale for a tensor whose largest |x| is `amax`. Why each case (docs/training_step_notes.md, FP8):
// - amax finite > 0: 2^floor(log2(max/amax)), in [2^-126, 2^127]. A power of two costs at most one
//   binade of range at the top and makes quantize (x·s) and dequantize (q/s) exact in fp32.
// - amax = 0: the tensor is all zeros; any scale keeps it zero, 1 is the safe one.
// - amax inf or NaN: NaN, so every element of the quantized tensor and of the GEMM that reads it is
//   NaN and the loss says so. A finite scale would saturate inf to ±max and hide the overflow (silent
//   garbage); there is no host to throw to inside a CUDA graph.
LMSCALE_HD inline float fp8_scale_from_amax(float amax, Fp8Format f) {
  if (!(amax <= FLT_MAX)) return NAN;  // inf, or NaN (every comparison with NaN is false)
  if (amax <= 0.f) return 1.f;         // amax is |x|: only 0 reaches here
  // r = max/amax in fp64 is exact enough that floor(log2 r) is exact: amax has 24 significant bits,
  // so r is never within 2^-30 (relative) of a power of two without being one.
  const double r = static_cast<double>(fp8_max(f)) / static_cast<double>(amax);
  int k = 0;
  (void)frexp(r, &k);  // r = m·2^k with m in [0.5, 1): floor(log2 r) = k − 1
  int e = k - 1;
  e = e < -126 ? -126 : (e > 127 ? 127 : e);
  return ldexpf(1.f, e);
}

// amax as the atomic-max kernels keep it: the bits of |x| as an unsigned integer. For non-negative
// floats the integer order is the float order, and NaN (sign cleared) sorts above inf, so a max over
// these bits propagates NaN where fmaxf would drop it.
LMSCALE_HD inline uint32_t abs_bits(float v) {
  uint32_t u;
#ifdef __CUDA_ARCH__
  u = __float_as_uint(v);
#else
  std::memcpy(&u, &v, sizeof u);
#endif
  return u & 0x7fffffffu;
}
LMSCALE_HD inline float float_from_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
#endif
}

}  // namespace lmscale::kernels
