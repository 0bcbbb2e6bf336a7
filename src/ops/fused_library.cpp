// The fused layers (RMSNorm + residual, SwiGLU, QKV-split + RoPE, cross-entropy) as torch.ops.lmscale.*
// forward/backward op pairs, for PyTorch models (python/lmscale/nn): schemas, a CPU reference of each
// direction in ATen (fp32 math, fp64 kept), and CUDA impls that run src/kernels/ where they apply and
// the reference elsewhere. Autograd and fake kernels are registered by the Python package, as for
// flash_attention; the C++ model keeps calling the autograd Functions of fused_*.cpp directly.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <initializer_list>
#include <optional>
#include <tuple>
#include <utility>

#include "ops/fused_rope.h"

#ifdef LMSCALE_HAS_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/fused_cross_entropy_params.h"
#include "kernels/fused_rmsnorm_params.h"
#include "kernels/fused_rope_params.h"
#include "kernels/fused_swiglu_params.h"
#endif

namespace lmscale::ops {
namespace {

using at::Tensor;

// The math dtype of the references: fp32, or fp64 for fp64 inputs (the tests' oracle).
at::ScalarType math_dtype(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

bool kernel_dtype(at::ScalarType t) { return t == at::kBFloat16 || t == at::kFloat; }

// PyTorch's rules for the inputs of one op: every tensor on one device (a tensor left on `meta` or on
// another device is refused by name, never read), and float data where the math is float.
void check_one_device(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> tensors) {
  const auto& [first_name, first] = *tensors.begin();
  for (const auto& [name, t] : tensors)
    TORCH_CHECK(!t->defined() || t->device() == first->device(), op,
                ": expected all tensors to be on the same device, but found at least two devices, ", first->device(),
                " (", first_name, ") and ", t->device(), " (", name, "). Move them to one device with .to()");
}

void check_floating(const char* op, const char* name, const Tensor& t) {
  TORCH_CHECK(at::isFloatingType(t.scalar_type()), op, ": ", name, " must be a floating-point tensor, got ",
              t.scalar_type(), " (as in PyTorch's layer: cast it first, e.g. .float())");
}

#ifdef LMSCALE_HAS_KERNELS
kernels::FusedDtype fused_dtype(at::ScalarType t) {
  return t == at::kBFloat16 ? kernels::FusedDtype::kBF16 : kernels::FusedDtype::kFP32;
}
void* stream() { return at::cuda::getCurrentCUDAStream().stream(); }
#endif

// ------------------------------------------------------------------ RMSNorm (+ residual)
// forward: h = x + residual (an empty tensor without residual: h is x, which the caller keeps),
// rstd = 1/sqrt(mean(h²) + eps) per row (fp32, fp64 for fp64), y = h · rstd · weight in y_dtype.

void check_rms_norm(const Tensor& x, const std::optional<Tensor>& residual, const Tensor& weight) {
  const Tensor none;
  check_one_device("rms_norm", {{"x", &x}, {"residual", residual ? &*residual : &none}, {"weight", &weight}});
  check_floating("rms_norm", "x", x);
  check_floating("rms_norm", "weight", weight);
  if (residual) check_floating("rms_norm", "residual", *residual);
  TORCH_CHECK(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1), "rms_norm: weight ", weight.sizes(),
              " must be (C) with C the last dim of x ", x.sizes());
  TORCH_CHECK(!residual || residual->sizes() == x.sizes(), "rms_norm: residual ", residual->sizes(), " and x ",
              x.sizes(), " must have one shape");
  TORCH_CHECK(!residual || at::promote_types(x.scalar_type(), residual->scalar_type()) == x.scalar_type(),
              "rms_norm: x (", x.scalar_type(), ") must be the wider of x and residual (", residual->scalar_type(),
              "): h = x + residual keeps x's dtype. Swap the two arguments.");
}

bool rms_norm_kernel_applies(const Tensor& x, const std::optional<Tensor>& residual, const Tensor& weight,
                             at::ScalarType y_dtype) {
#ifdef LMSCALE_HAS_KERNELS
  return x.is_cuda() && kernel_dtype(x.scalar_type()) && kernel_dtype(y_dtype) && x.numel() > 0 &&
         x.size(-1) <= kernels::kAddRmsNormMaxCols && weight.device() == x.device() &&
         weight.scalar_type() == at::kFloat && (!residual || kernel_dtype(residual->scalar_type()));
#else
  (void)x, (void)residual, (void)weight, (void)y_dtype;
  return false;
#endif
}

std::tuple<Tensor, Tensor, Tensor> rms_norm_forward(const Tensor& x_in, const std::optional<Tensor>& residual_in,
                                                    const Tensor& weight_in, double eps,
                                                    std::optional<at::ScalarType> out_dtype) {
  check_rms_norm(x_in, residual_in, weight_in);
  const auto y_dtype = out_dtype.value_or(x_in.scalar_type());
  const auto lead = x_in.sizes().slice(0, x_in.dim() - 1);
  if (!rms_norm_kernel_applies(x_in, residual_in, weight_in, y_dtype)) {
    const auto mt = math_dtype(x_in.scalar_type());
    Tensor h = residual_in ? x_in + *residual_in : x_in;
    auto hm = h.to(mt);
    auto rstd = at::rsqrt(hm.pow(2).mean(-1) + eps);
    auto y = (hm * rstd.unsqueeze(-1) * weight_in.to(mt)).to(y_dtype);
    return {residual_in ? h.contiguous() : at::empty({0}, x_in.options()), y.contiguous(), rstd.contiguous()};
  }
#ifdef LMSCALE_HAS_KERNELS
  c10::cuda::CUDAGuard guard(x_in.device());
  auto x = x_in.contiguous();
  auto weight = weight_in.contiguous();
  const int64_t C = x.size(-1), rows = x.numel() / C;
  kernels::AddRmsNormFwdParams p;
  p.x = x.data_ptr();
  p.gain = weight.data_ptr<float>();
  p.rows = rows;
  p.cols = static_cast<int>(C);
  p.eps = static_cast<float>(eps);
  p.x_dtype = fused_dtype(x.scalar_type());
  // One allocation for h either way (an allocation is host time on every call).
  Tensor h = residual_in ? at::empty_like(x) : at::empty({0}, x.options()), residual;
  if (residual_in) {
    residual = residual_in->contiguous();
    p.residual = residual.data_ptr();
    p.residual_dtype = fused_dtype(residual.scalar_type());
    p.h_out = h.data_ptr();
  }
  auto y = at::empty(x.sizes(), x.options().dtype(y_dtype));
  auto rstd = at::empty(lead, x.options().dtype(at::kFloat));
  p.y_out = y.data_ptr();
  p.y_dtype = fused_dtype(y_dtype);
  p.rstd_out = rstd.data_ptr<float>();
  kernels::run_add_rmsnorm_fwd(p, stream());
  return {h, y, rstd};
#else
  TORCH_CHECK(false, "unreachable");
#endif
}

// backward: dh = rstd·(w ⊙ dy) − h·rstd³·Σ(w ⊙ dy ⊙ h)/C (+ dh_in, h's gradient from its other reader);
// dx = dh (the residual's gradient too), dweight = Σ_rows dy ⊙ h·rstd. With a residual_dtype other than
// h's, dresidual is dx in that dtype, written by the same pass (the residual is the narrower sublayer
// output under autocast: a separate cast would be one more kernel per block); otherwise it is empty.
std::tuple<Tensor, Tensor, Tensor> rms_norm_backward(const Tensor& dy_in, const std::optional<Tensor>& dh_in,
                                                     const Tensor& h_in, const Tensor& weight_in, const Tensor& rstd,
                                                     std::optional<at::ScalarType> residual_dtype) {
  TORCH_CHECK(dy_in.sizes() == h_in.sizes() && (!dh_in || dh_in->sizes() == h_in.sizes()),
              "rms_norm_backward: dy ", dy_in.sizes(), " and dh must have h's shape ", h_in.sizes());
  const Tensor none;
  check_one_device("rms_norm_backward", {{"h", &h_in}, {"dy", &dy_in}, {"dh", dh_in ? &*dh_in : &none},
                                         {"weight", &weight_in}, {"rstd", &rstd}});
  if (residual_dtype == h_in.scalar_type()) residual_dtype.reset();
#ifdef LMSCALE_HAS_KERNELS
  const bool kernel = rms_norm_kernel_applies(h_in, std::nullopt, weight_in, dy_in.scalar_type()) &&
                      rstd.scalar_type() == at::kFloat && (!dh_in || dh_in->scalar_type() == h_in.scalar_type());
  if (kernel) {
    c10::cuda::CUDAGuard guard(h_in.device());
    auto h = h_in.contiguous(), dy = dy_in.contiguous(), weight = weight_in.contiguous(), rs = rstd.contiguous();
    Tensor dh = dh_in ? dh_in->contiguous() : Tensor();
    const int64_t C = h.size(-1), rows = h.numel() / C;
    auto dx = at::empty_like(h);
    const bool dres_by_kernel = residual_dtype && kernel_dtype(*residual_dtype);  // fp16: cast after
    auto dres = dres_by_kernel ? at::empty_like(h, h.options().dtype(*residual_dtype)) : at::empty({0}, h.options());
    auto partial = at::empty({kernels::add_rmsnorm_bwd_partial_rows(rows), C}, h.options().dtype(at::kFloat));
    auto dweight = at::empty({C}, h.options().dtype(at::kFloat));
    kernels::AddRmsNormBwdParams p;
    p.h = h.data_ptr();
    p.dy = dy.data_ptr();
    p.dh_in = dh.defined() ? dh.data_ptr() : nullptr;
    p.gain = weight.data_ptr<float>();
    p.rstd = rs.data_ptr<float>();
    p.dx_out = dx.data_ptr();
    p.dresidual_out = dres_by_kernel ? dres.data_ptr() : nullptr;
    p.dgain_partial = partial.data_ptr<float>();
    p.dgain_out = dweight.data_ptr<float>();
    p.rows = rows;
    p.cols = static_cast<int>(C);
    p.h_dtype = fused_dtype(h.scalar_type());
    p.residual_dtype = fused_dtype(dres_by_kernel ? *residual_dtype : h.scalar_type());
    p.y_dtype = fused_dtype(dy.scalar_type());
    kernels::run_add_rmsnorm_bwd(p, stream());
    if (residual_dtype && !dres_by_kernel) dres = dx.to(*residual_dtype);
    return {dx, dweight, dres};
  }
#endif
  const auto mt = math_dtype(h_in.scalar_type());
  auto h = h_in.to(mt), dy = dy_in.to(mt), r = rstd.to(mt).unsqueeze(-1);
  auto u = dy * weight_in.to(mt);
  auto dh = r * u - h * r.pow(3) * (u * h).mean(-1, /*keepdim=*/true);
  if (dh_in) dh = dh + dh_in->to(mt);
  auto dweight = (dy * h * r).reshape({-1, h.size(-1)}).sum(0);
  auto dx = dh.to(h_in.scalar_type()).contiguous();
  auto dres = residual_dtype ? dx.to(*residual_dtype) : at::empty({0}, h_in.options());
  return {dx, dweight.to(weight_in.scalar_type()), dres};
}

// ------------------------------------------------------------------ SwiGLU gate: silu(a) · b

void check_swiglu(const Tensor& a, const Tensor& b) {
  check_one_device("swiglu", {{"a", &a}, {"b", &b}});
  check_floating("swiglu", "a", a);
  TORCH_CHECK(a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() && a.device() == b.device(),
              "swiglu: a ", a.sizes(), " ", a.scalar_type(), " and b ", b.sizes(), " ", b.scalar_type(),
              " must have one shape, dtype and device");
}

bool swiglu_kernel_applies(const Tensor& a) {
#ifdef LMSCALE_HAS_KERNELS
  return a.is_cuda() && kernel_dtype(a.scalar_type()) && a.dim() >= 1 && a.numel() > 0;
#else
  (void)a;
  return false;
#endif
}

Tensor swiglu_forward(const Tensor& a_in, const Tensor& b_in) {
  check_swiglu(a_in, b_in);
  if (!swiglu_kernel_applies(a_in)) {
    const auto mt = math_dtype(a_in.scalar_type());
    return (at::silu(a_in.to(mt)) * b_in.to(mt)).to(a_in.scalar_type()).contiguous();
  }
#ifdef LMSCALE_HAS_KERNELS
  c10::cuda::CUDAGuard guard(a_in.device());
  auto a = a_in.contiguous(), b = b_in.contiguous();
  auto out = at::empty_like(a);
  kernels::SwiGluParams p;
  p.a = a.data_ptr();
  p.b = b.data_ptr();
  p.cols = a.size(-1);
  p.rows = a.numel() / p.cols;
  p.a_stride = p.b_stride = p.cols;
  p.out = out.data_ptr();
  p.dtype = fused_dtype(a.scalar_type());
  kernels::run_swiglu_fwd(p, stream());
  return out;
#else
  TORCH_CHECK(false, "unreachable");
#endif
}

// da = dout · b · σ(a) · (1 + a · (1 − σ(a))),  db = dout · silu(a)
std::tuple<Tensor, Tensor> swiglu_backward(const Tensor& dout_in, const Tensor& a_in, const Tensor& b_in) {
  check_swiglu(a_in, b_in);
  TORCH_CHECK(dout_in.sizes() == a_in.sizes(), "swiglu_backward: dout ", dout_in.sizes(), " must have a's shape ",
              a_in.sizes());
  check_one_device("swiglu_backward", {{"a", &a_in}, {"dout", &dout_in}});
  if (swiglu_kernel_applies(a_in) && dout_in.scalar_type() == a_in.scalar_type()) {
#ifdef LMSCALE_HAS_KERNELS
    c10::cuda::CUDAGuard guard(a_in.device());
    auto a = a_in.contiguous(), b = b_in.contiguous(), dout = dout_in.contiguous();
    auto da = at::empty_like(a), db = at::empty_like(a);
    kernels::SwiGluParams p;
    p.a = a.data_ptr();
    p.b = b.data_ptr();
    p.cols = a.size(-1);
    p.rows = a.numel() / p.cols;
    p.a_stride = p.b_stride = p.da_stride = p.db_stride = p.cols;
    p.dout = dout.data_ptr();
    p.da = da.data_ptr();
    p.db = db.data_ptr();
    p.dtype = fused_dtype(a.scalar_type());
    kernels::run_swiglu_bwd(p, stream());
    return {da, db};
#endif
  }
  const auto mt = math_dtype(a_in.scalar_type());
  auto a = a_in.to(mt), b = b_in.to(mt), dout = dout_in.to(mt);
  auto sig = at::sigmoid(a);
  auto da = dout * b * sig * (1 + a * (1 - sig));
  auto db = dout * a * sig;
  return {da.to(a_in.scalar_type()).contiguous(), db.to(a_in.scalar_type()).contiguous()};
}

// ------------------------------------------------------------------ QKV split + RoPE
// qkv (B, T, 3C) = [q | k | v] → q, k rotated by the (cos, sin) of rotation (≥T, D/2, 2) fp32, v as is,
// each (B, H, T, D) contiguous. Pair i of a head is (2i, 2i+1) (adjacent: the spec's, GPT-J's) or, with
// rotate_half, (i, i + D/2) (Hugging Face's Llama and GPT-NeoX: q·cos + rotate_half(q)·sin). The kernel
// serves the adjacent layout; rotate_half runs the ATen reference on every device.

void check_rope(const char* op, const char* name, const Tensor& t, const Tensor& rotation) {
  check_one_device(op, {{name, &t}, {"rotation", &rotation}});
  check_floating(op, name, t);
  check_floating(op, "rotation", rotation);
}

bool rope_kernel_applies(const Tensor& t, const Tensor& rotation) {
#ifdef LMSCALE_HAS_KERNELS
  return t.is_cuda() && kernel_dtype(t.scalar_type()) && t.numel() > 0 && rotation.device() == t.device() &&
         rotation.scalar_type() == at::kFloat;
#else
  (void)t, (void)rotation;
  return false;
#endif
}

// (cos, sin) of the first T positions in the math dtype, each (T, D/2).
std::pair<Tensor, Tensor> rope_table(const Tensor& rotation, int64_t T, at::ScalarType mt) {
  auto table = rotation.slice(0, 0, T).to(mt);
  return {table.select(-1, 0), table.select(-1, 1)};
}

#ifdef LMSCALE_HAS_KERNELS
kernels::RopeQkvParams rope_params(int64_t B, int64_t T, int64_t heads, int64_t D, const Tensor& rotation,
                                   at::ScalarType dtype) {
  kernels::RopeQkvParams p;
  p.batch = static_cast<int>(B);
  p.seqlen = static_cast<int>(T);
  p.heads = static_cast<int>(heads);
  p.head_dim = static_cast<int>(D);
  p.rotation = rotation.data_ptr<float>();
  p.dtype = dtype == at::kBFloat16 ? kernels::RopeDtype::kBF16 : kernels::RopeDtype::kFP32;
  return p;
}
#endif

std::tuple<Tensor, Tensor, Tensor> rope_qkv_forward(const Tensor& qkv_in, const Tensor& rotation_in, int64_t heads,
                                                     bool rotate_half) {
  check_rope("rope_qkv_forward", "qkv", qkv_in, rotation_in);
  check_rope_qkv_shapes(qkv_in, rotation_in, heads);
  const int64_t B = qkv_in.size(0), T = qkv_in.size(1), C = qkv_in.size(2) / 3, D = C / heads;
  if (rotate_half || !rope_kernel_applies(qkv_in, rotation_in)) {
    const auto mt = math_dtype(qkv_in.scalar_type());
    auto parts = qkv_in.reshape({B, T, 3, heads, D}).permute({2, 0, 3, 1, 4});  // (3, B, H, T, D)
    auto [cos, sin] = rope_table(rotation_in, T, mt);
    auto rotate = [&](const Tensor& x) {
      if (rotate_half) {
        auto xm = x.to(mt);
        auto x0 = xm.narrow(-1, 0, D / 2), x1 = xm.narrow(-1, D / 2, D / 2);
        return at::cat({x0 * cos - x1 * sin, x0 * sin + x1 * cos}, -1).to(qkv_in.scalar_type());
      }
      auto pairs = x.to(mt).unflatten(-1, {D / 2, 2});
      auto x0 = pairs.select(-1, 0), x1 = pairs.select(-1, 1);
      return at::stack({x0 * cos - x1 * sin, x0 * sin + x1 * cos}, -1).flatten(-2).to(qkv_in.scalar_type());
    };
    // v is copied even where its view happens to be contiguous: an op's output must not alias its input.
    return {rotate(parts[0]).contiguous(), rotate(parts[1]).contiguous(), parts[2].clone(at::MemoryFormat::Contiguous)};
  }
#ifdef LMSCALE_HAS_KERNELS
  c10::cuda::CUDAGuard guard(qkv_in.device());
  auto qkv = qkv_in.contiguous();
  auto rotation = rotation_in.contiguous();
  auto q = at::empty({B, heads, T, D}, qkv.options()), k = at::empty_like(q), v = at::empty_like(q);
  auto p = rope_params(B, T, heads, D, rotation, qkv.scalar_type());
  p.qkv_in = qkv.data_ptr();
  p.qkv_row_stride = 3 * C;
  p.q_out = q.data_ptr();
  p.k_out = k.data_ptr();
  p.v_out = v.data_ptr();
  kernels::run_rope_qkv_fwd(p, stream());
  return {q, k, v};
#else
  TORCH_CHECK(false, "unreachable");
#endif
}

// The transpose: dq, dk rotated back (x0 = y0·cos + y1·sin, x1 = −y0·sin + y1·cos), dv as is, into (B, T, 3C).
Tensor rope_qkv_backward(const Tensor& dq_in, const Tensor& dk_in, const Tensor& dv_in, const Tensor& rotation_in,
                         int64_t heads, bool rotate_half) {
  TORCH_CHECK(dq_in.dim() == 4 && dk_in.sizes() == dq_in.sizes() && dv_in.sizes() == dq_in.sizes() &&
                  dq_in.size(1) == heads,
              "rope_qkv_backward: dq, dk, dv must be one (B, H, T, D) shape with H = ", heads, "; got ", dq_in.sizes(),
              ", ", dk_in.sizes(), ", ", dv_in.sizes());
  check_rope("rope_qkv_backward", "dq", dq_in, rotation_in);
  check_one_device("rope_qkv_backward", {{"dq", &dq_in}, {"dk", &dk_in}, {"dv", &dv_in}});
  const int64_t B = dq_in.size(0), T = dq_in.size(2), D = dq_in.size(3), C = heads * D;
  const auto dt = dq_in.scalar_type();
  if (!rotate_half && rope_kernel_applies(dq_in, rotation_in) && dk_in.scalar_type() == dt &&
      dv_in.scalar_type() == dt) {
#ifdef LMSCALE_HAS_KERNELS
    c10::cuda::CUDAGuard guard(dq_in.device());
    auto dq = dq_in.contiguous(), dk = dk_in.contiguous(), dv = dv_in.contiguous();
    auto rotation = rotation_in.contiguous();
    auto dqkv = at::empty({B, T, 3 * C}, dq.options());
    auto p = rope_params(B, T, heads, D, rotation, dt);
    p.q = dq.data_ptr();
    p.k = dk.data_ptr();
    p.v = dv.data_ptr();
    p.qkv_grad = dqkv.data_ptr();
    kernels::run_rope_qkv_bwd(p, stream());
    return dqkv;
#endif
  }
  const auto mt = math_dtype(dt);
  auto [cos, sin] = rope_table(rotation_in, T, mt);
  auto unrotate = [&](const Tensor& y) {
    if (rotate_half) {
      auto ym = y.to(mt);
      auto y0 = ym.narrow(-1, 0, D / 2), y1 = ym.narrow(-1, D / 2, D / 2);
      return at::cat({y0 * cos + y1 * sin, y1 * cos - y0 * sin}, -1).to(dt);
    }
    auto pairs = y.to(mt).unflatten(-1, {D / 2, 2});
    auto y0 = pairs.select(-1, 0), y1 = pairs.select(-1, 1);
    return at::stack({y0 * cos + y1 * sin, y1 * cos - y0 * sin}, -1).flatten(-2).to(dt);
  };
  auto parts = at::stack({unrotate(dq_in), unrotate(dk_in), dv_in.to(dt)}, 0);  // (3, B, H, T, D)
  return parts.permute({1, 3, 0, 2, 4}).reshape({B, T, 3 * C});
}

// ------------------------------------------------------------------ cross-entropy
// F.cross_entropy with class-index targets: per row of logits (rows, V): m = max, l = log Σ exp(z − m),
// loss = l − (z_t − m); with label smoothing ε, (1 − ε)·that + ε·(l − (mean_j z_j − m)); a row whose
// target is ignore_index has loss 0 and gradient 0. reduction is PyTorch's at::Reduction: 0 none (the
// per-position losses, the targets' shape), 1 mean (over the rows not ignored: NaN when there are none,
// as PyTorch), 2 sum. The loss is fp32 (fp64 for fp64 logits); stats (2, rows) = (m, l) for the
// backward. No fp32 copy of the logits on the kernel path.

void check_cross_entropy_op(const char* op, const Tensor& logits, const Tensor& targets, int64_t reduction,
                            double label_smoothing) {
  TORCH_CHECK(logits.dim() >= 1 && targets.dim() == logits.dim() - 1 &&
                  targets.sizes() == logits.sizes().slice(0, logits.dim() - 1),
              "cross_entropy: logits ", logits.sizes(), " need targets of shape (…) = the logits' shape without "
              "its last (vocabulary) dim, got ", targets.sizes());
  TORCH_CHECK(targets.scalar_type() == at::kLong, "cross_entropy: targets must be int64 class indices, got ",
              targets.scalar_type());
  check_one_device(op, {{"logits", &logits}, {"targets", &targets}});
  check_floating(op, "logits", logits);
  TORCH_CHECK(logits.size(-1) > 0, "cross_entropy: the vocabulary (the last dim of logits ", logits.sizes(),
              ") is empty");
  TORCH_CHECK(reduction >= 0 && reduction <= 2, "cross_entropy: reduction must be 0 (none), 1 (mean) or 2 (sum), got ",
              reduction);
  TORCH_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
              "cross_entropy: label_smoothing must be between 0.0 and 1.0, got ", label_smoothing);
}

// The reference's check (the kernel makes such a row's loss NaN instead: checking would stall the GPU).
void check_targets_in_range(const Tensor& targets, int64_t V, int64_t ignore_index) {
  auto bad = (targets != ignore_index).logical_and_((targets < 0).logical_or_(targets >= V));
  if (!bad.any().item<bool>()) return;
  const int64_t at_pos = bad.nonzero()[0][0].item<int64_t>();
  TORCH_CHECK(false, "cross_entropy: target ", targets[at_pos].item<int64_t>(), " (position ", at_pos,
              " of the flattened targets) is outside the vocabulary [0, ", V, ") and is not ignore_index (",
              ignore_index, "). Targets are class indices below V = logits.shape[-1]; mark positions to skip "
              "(padding) with ignore_index");
}

// The reduction of the per-row losses (rows), given which rows count.
Tensor reduce_cross_entropy(const Tensor& losses, const Tensor& counted, int64_t reduction, at::IntArrayRef shape) {
  if (reduction == 0) return losses.view(shape);
  auto total = losses.sum();
  if (reduction == 2) return total;
  return total / counted.sum().to(total.scalar_type());  // 0/0 = NaN when every target is ignored, as PyTorch
}

bool cross_entropy_kernel_applies(const Tensor& logits, const Tensor& targets) {
#ifdef LMSCALE_HAS_KERNELS
  return logits.is_cuda() && kernel_dtype(logits.scalar_type()) && targets.device() == logits.device();
#else
  (void)logits, (void)targets;
  return false;
#endif
}

#ifdef LMSCALE_HAS_KERNELS
// z (rows, V) with a contiguous last dim, targets (rows) contiguous int64; stats (2, rows) fp32.
kernels::CrossEntropyParams cross_entropy_params(const Tensor& z, const Tensor& targets, const Tensor& stats,
                                                 int64_t ignore_index, double label_smoothing) {
  kernels::CrossEntropyParams p;
  p.logits = z.data_ptr();
  p.logits_stride = z.stride(0);
  p.targets = targets.data_ptr<int64_t>();
  p.rows = z.size(0);
  p.vocab = z.size(1);
  p.dtype = fused_dtype(z.scalar_type());
  p.row_max = stats[0].data_ptr<float>();
  p.row_log_sum = stats[1].data_ptr<float>();
  p.ignore_index = ignore_index;
  p.label_smoothing = static_cast<float>(label_smoothing);
  return p;
}
#endif

std::tuple<Tensor, Tensor> cross_entropy_forward(const Tensor& logits, const Tensor& targets_in, int64_t reduction,
                                                 int64_t ignore_index, double label_smoothing) {
  check_cross_entropy_op("cross_entropy_forward", logits, targets_in, reduction, label_smoothing);
  const int64_t V = logits.size(-1);
  auto z = logits.reshape({-1, V});
  auto targets = targets_in.reshape({-1});
  const auto counted = targets != ignore_index;
  if (!cross_entropy_kernel_applies(logits, targets_in)) {
    check_targets_in_range(targets, V, ignore_index);
    auto zm = z.to(math_dtype(logits.scalar_type()));
    auto m = std::get<0>(zm.max(-1, /*keepdim=*/true));
    auto l = (zm - m).exp().sum(-1).log();
    auto picked = zm.gather(-1, targets.masked_fill(counted.logical_not(), 0).unsqueeze(-1)).squeeze(-1);
    m = m.squeeze(-1);
    auto losses = l - (picked - m);
    if (label_smoothing != 0.0) losses = (1 - label_smoothing) * losses + label_smoothing * (l - (zm.mean(-1) - m));
    losses = losses.masked_fill(counted.logical_not(), 0);
    return {reduce_cross_entropy(losses, counted, reduction, targets_in.sizes()), at::stack({m, l}, 0)};
  }
#ifdef LMSCALE_HAS_KERNELS
  c10::cuda::CUDAGuard guard(logits.device());
  if (z.stride(-1) != 1) z = z.contiguous();
  targets = targets.contiguous();
  auto opts = z.options().dtype(at::kFloat);
  auto losses = at::empty({z.size(0)}, opts), stats = at::empty({2, z.size(0)}, opts);
  auto p = cross_entropy_params(z, targets, stats, ignore_index, label_smoothing);
  p.loss_out = losses.data_ptr<float>();
  kernels::run_cross_entropy_fwd(p, stream());
  return {reduce_cross_entropy(losses, counted, reduction, targets_in.sizes()), stats};
#else
  TORCH_CHECK(false, "unreachable");
#endif
}

// dz = g_row · (exp(z − m − l) − (1 − ε)·[j = t] − ε/V), 0 on ignored rows, in the logits' dtype and shape;
// g_row = grad_loss (sum), grad_loss / rows counted (mean), or grad_loss's entry for the row (none).
Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets_in,
                              const Tensor& stats, int64_t reduction, int64_t ignore_index, double label_smoothing) {
  check_cross_entropy_op("cross_entropy_backward", logits, targets_in, reduction, label_smoothing);
  const int64_t V = logits.size(-1);
  auto z = logits.reshape({-1, V});
  auto targets = targets_in.reshape({-1});
  const int64_t rows = z.size(0);
  TORCH_CHECK(stats.dim() == 2 && stats.size(0) == 2 && stats.size(1) == rows,
              "cross_entropy_backward: stats must be the forward's (2, rows); got ", stats.sizes());
  TORCH_CHECK(reduction == 0 ? grad_loss.sizes() == targets_in.sizes() : grad_loss.numel() == 1,
              "cross_entropy_backward: grad_loss ", grad_loss.sizes(), " must be ",
              reduction == 0 ? "the targets' shape (reduction none)" : "one number (a reduced loss)");
  check_one_device("cross_entropy_backward", {{"logits", &logits}, {"stats", &stats}});
  const auto counted = targets != ignore_index;
  if (cross_entropy_kernel_applies(logits, targets_in) && stats.scalar_type() == at::kFloat) {
#ifdef LMSCALE_HAS_KERNELS
    c10::cuda::CUDAGuard guard(logits.device());
    z = z.contiguous();
    targets = targets.contiguous();
    auto st = stats.contiguous();
    auto g = grad_loss.to(z.device(), at::kFloat);  // stays on the device: no sync
    if (reduction == 1) g = g / counted.sum();
    g = g.reshape({reduction == 0 ? rows : 1}).contiguous();
    auto dz = at::empty_like(z);
    auto p = cross_entropy_params(z, targets, st, ignore_index, label_smoothing);
    p.grad_loss = g.data_ptr<float>();
    p.grad_loss_stride = reduction == 0 ? 1 : 0;
    p.dlogits_out = dz.data_ptr();
    kernels::run_cross_entropy_bwd(p, stream());
    return dz.view(logits.sizes());
#endif
  }
  const auto mt = stats.scalar_type();
  auto zm = z.to(mt);
  auto probs = (zm - stats[0].unsqueeze(-1) - stats[1].unsqueeze(-1)).exp();
  if (label_smoothing != 0.0) probs = probs - label_smoothing / static_cast<double>(V);
  auto safe_targets = targets.masked_fill(counted.logical_not(), 0).unsqueeze(-1);
  auto dz = probs.scatter_add(-1, safe_targets, at::full({rows, 1}, label_smoothing - 1.0, probs.options()));
  auto g = grad_loss.to(z.device(), mt);
  if (reduction == 1) g = g / counted.sum().to(mt);
  dz = (dz * g.reshape({reduction == 0 ? rows : 1, 1})).masked_fill(counted.logical_not().unsqueeze(-1), 0);
  return dz.to(logits.scalar_type()).contiguous().view(logits.sizes());
}

// ------------------------------------------------------------------ autograd: calls that record no graph stay in C++
// The autograd formulas of the fused ops and of flash_attention_{forward,backward} are Python
// (torch.library.register_autograd in python/lmscale/nn/_ops.py and attention.py, on the Autograd alias key).
// A Python kernel costs every call a trip through the interpreter, even the calls it only passes on below
// autograd: every call of a torch.compile'd graph (its forward and backward run with grad off) and every
// backward op in eager (10-50 µs a call on a dev VM's CPU; tools/probes/drop_in/drop_in_host.py measures
// it on the CUDA path). This kernel, registered on AutogradCPU and AutogradCUDA (a kernel on a backend's
// autograd key comes before one on the alias), passes those calls below autograd itself, as the Python
// kernel would; a call that records a graph (grad on, an input requiring grad) goes to the Python formula
// through AutogradOther, which the alias also fills (and which, with no formula registered, gives the same
// not-implemented fallback as before).
bool any_requires_grad(const torch::jit::Stack& stack, size_t n_args) {
  for (size_t i = stack.size() - n_args; i < stack.size(); ++i) {
    const auto& v = stack[i];
    if (v.isTensor() && v.toTensor().requires_grad()) return true;
    if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorList().vec())
        if (t.requires_grad()) return true;
  }
  return false;
}

void autograd_without_python(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  if (at::GradMode::is_enabled() && any_requires_grad(*stack, op.schema().arguments().size())) {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::AutogradOther) | (keys & c10::after_autograd_keyset),
                       stack);
    return;
  }
  at::AutoDispatchBelowAutograd below;  // as the Python kernel's no-grad path: nested ATen calls skip autograd too
  op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
}

// Every op whose autograd formula is Python, flash_attention's two (src/ops/flash_attention.cpp) included, in
// one list.
void register_autograd_without_python(torch::Library& m) {
  for (const char* name : {"rms_norm_forward", "rms_norm_backward", "swiglu_forward", "swiglu_backward",
                           "rope_qkv_forward", "rope_qkv_backward", "cross_entropy_forward", "cross_entropy_backward",
                           "flash_attention_forward", "flash_attention_backward", "flash_attention_varlen_forward",
                           "flash_attention_varlen_backward"})
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&autograd_without_python>());
}

}  // namespace
}  // namespace lmscale::ops

TORCH_LIBRARY_FRAGMENT(lmscale, m) {
  m.def("rms_norm_forward(Tensor x, Tensor? residual, Tensor weight, float eps, ScalarType? out_dtype=None) "
        "-> (Tensor h, Tensor y, Tensor rstd)");
  m.def("rms_norm_backward(Tensor dy, Tensor? dh, Tensor h, Tensor weight, Tensor rstd, "
        "ScalarType? residual_dtype=None) -> (Tensor dx, Tensor dweight, Tensor dresidual)");
  m.def("swiglu_forward(Tensor a, Tensor b) -> Tensor");
  m.def("swiglu_backward(Tensor dout, Tensor a, Tensor b) -> (Tensor da, Tensor db)");
  m.def("rope_qkv_forward(Tensor qkv, Tensor rotation, int heads, bool rotate_half=False) "
        "-> (Tensor q, Tensor k, Tensor v)");
  m.def("rope_qkv_backward(Tensor dq, Tensor dk, Tensor dv, Tensor rotation, int heads, bool rotate_half=False) "
        "-> Tensor");
  m.def("cross_entropy_forward(Tensor logits, Tensor targets, int reduction=1, int ignore_index=-100, "
        "float label_smoothing=0.0) -> (Tensor loss, Tensor stats)");
  m.def("cross_entropy_backward(Tensor grad_loss, Tensor logits, Tensor targets, Tensor stats, int reduction=1, "
        "int ignore_index=-100, float label_smoothing=0.0) -> Tensor");
}

// One set of functions for both keys: each picks the kernel or the reference itself.
#define LMSCALE_FUSED_IMPLS(m)                                           \
  m.impl("rms_norm_forward", &lmscale::ops::rms_norm_forward);           \
  m.impl("rms_norm_backward", &lmscale::ops::rms_norm_backward);         \
  m.impl("swiglu_forward", &lmscale::ops::swiglu_forward);               \
  m.impl("swiglu_backward", &lmscale::ops::swiglu_backward);             \
  m.impl("rope_qkv_forward", &lmscale::ops::rope_qkv_forward);           \
  m.impl("rope_qkv_backward", &lmscale::ops::rope_qkv_backward);         \
  m.impl("cross_entropy_forward", &lmscale::ops::cross_entropy_forward); \
  m.impl("cross_entropy_backward", &lmscale::ops::cross_entropy_backward)

TORCH_LIBRARY_IMPL(lmscale, CPU, m) { LMSCALE_FUSED_IMPLS(m); }
TORCH_LIBRARY_IMPL(lmscale, CUDA, m) { LMSCALE_FUSED_IMPLS(m); }
#undef LMSCALE_FUSED_IMPLS

TORCH_LIBRARY_IMPL(lmscale, AutogradCPU, m) { lmscale::ops::register_autograd_without_python(m); }
TORCH_LIBRARY_IMPL(lmscale, AutogradCUDA, m) { lmscale::ops::register_autograd_without_python(m); }
