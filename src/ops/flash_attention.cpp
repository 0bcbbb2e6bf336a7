// The FlashAttention-2 ops (flash_attention.h): input checks, device dispatch (CPU → ATen reference,
// CUDA → src/kernels/), the autograd Function and the torch.ops.lmscale registrations. Each op keeps the
// order: validate, device guard, allocate outputs, fill params, take the current stream, launch, return.
#include "ops/flash_attention.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <atomic>
#include <sstream>

#include "core/device.h"
#include "ops/flash_reference.h"

#ifdef LMSCALE_HAS_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/flash_deterministic.h"
#include "kernels/flash_params.h"
#endif

namespace lmscale::ops {
namespace {

std::string shape_str(const at::Tensor& t) {
  std::ostringstream os;
  os << t.sizes();
  return os.str();
}

// The built variants (kernels/flash_variants.h, through the kernels' own list), for error messages.
std::string supported_head_dims() {
#ifdef LMSCALE_HAS_KERNELS
  return kernels::flash_supported_list();
#else
  return "none (this build has no CUDA kernels: configure it where nvcc is found)";
#endif
}

// Shapes, dtypes and devices shared by forward and backward. Layout: q (..., Nq, D), k/v (..., Nk, D).
void check_qkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool is_causal) {
  TORCH_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, "flash_attention: q, k, v must be (..., N, D); got q ",
              shape_str(q), ", k ", shape_str(k), ", v ", shape_str(v));
  for (const auto* t : {&k, &v}) {
    TORCH_CHECK(t->scalar_type() == q.scalar_type(), "flash_attention: q, k, v must share one dtype; got q ",
                q.scalar_type(), ", k ", k.scalar_type(), ", v ", v.scalar_type(), ". Cast them to one dtype first.");
    TORCH_CHECK(t->device() == q.device(), "flash_attention: q, k, v must be on one device; got q on ", q.device(),
                ", k on ", k.device(), ", v on ", v.device(), ". Move them with .to(q.device()).");
  }
  const auto st = q.scalar_type();
  TORCH_CHECK(st == at::kBFloat16 || st == at::kHalf || st == at::kFloat || st == at::kDouble,
              "flash_attention: dtype ", st, " is not supported; use bf16, fp16, fp32 (or fp64 for the reference)");
  TORCH_CHECK(k.sizes() == v.sizes(), "flash_attention: k and v must have the same shape (..., Nk, D); got k ",
              shape_str(k), ", v ", shape_str(v));
  TORCH_CHECK(q.dim() == k.dim() && q.sizes().slice(0, q.dim() - 2) == k.sizes().slice(0, k.dim() - 2),
              "flash_attention: q and k must share their leading (batch/head) dims; got q ", shape_str(q), ", k ",
              shape_str(k), ". Broadcast or repeat k/v heads before calling.");
  TORCH_CHECK(q.size(-1) == k.size(-1), "flash_attention: q and k must share the head dim D; got q ", shape_str(q),
              ", k ", shape_str(k));
  TORCH_CHECK(q.size(-2) >= 1 && k.size(-2) >= 1, "flash_attention: sequence lengths must be >= 1; got Nq = ",
              q.size(-2), ", Nk = ", k.size(-2));
  TORCH_CHECK(!is_causal || q.size(-2) == k.size(-2), "flash_attention: is_causal=true needs Nq == Nk; got Nq = ",
              q.size(-2), ", Nk = ", k.size(-2), ". Use is_causal=false for cross-attention.");
  if (q.is_cuda() && st != at::kDouble) {
    const int64_t d = q.size(-1);
    TORCH_CHECK(flash_kernel_available(st, d),
                "flash_attention: head dim D = ", d, " (dtype ", st, ") has no CUDA kernel in this build; supported: ",
                supported_head_dims(), ". Pad D to a supported size or run on CPU.");
  } else {
    TORCH_CHECK(q.is_cpu() || q.is_cuda(), "flash_attention: device ", q.device(), " is not supported; use cpu or cuda");
  }
}

void check_like(const char* name, const at::Tensor& t, const at::Tensor& like, at::ScalarType dtype) {
  TORCH_CHECK(t.sizes() == like.sizes(), "flash_attention_backward: ", name, " must have shape ", shape_str(like),
              "; got ", shape_str(t));
  TORCH_CHECK(t.scalar_type() == dtype, "flash_attention_backward: ", name, " must be ", dtype, "; got ",
              t.scalar_type());
  TORCH_CHECK(t.device() == like.device(), "flash_attention_backward: ", name, " must be on ", like.device(),
              "; got ", t.device());
}

#ifdef LMSCALE_HAS_KERNELS
// (..., N, D) -> (B, H, N, D) with H = size(-3) (1 for 2-D input): a view for the usual (B, H, T, D)
// tensors, even transposed ones (4-D ones as they are: a reshape is a dispatcher call and a new tensor,
// host time on every call). The kernels move 16-byte rows, so the last dim must be contiguous and every
// other stride and the base 16-byte aligned; anything else is copied to a contiguous tensor.
at::Tensor as_bhnd(const at::Tensor& t) {
  const int64_t H = t.dim() >= 3 ? t.size(-3) : 1;
  auto x = t.dim() == 4 ? t : t.reshape({-1, H, t.size(-2), t.size(-1)});
  const int64_t align = 16 / x.element_size();
  bool ok = x.stride(3) == 1 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
  for (int i = 0; i < 3; ++i) ok = ok && (x.stride(i) % align == 0);
  return ok ? x : x.contiguous();
}

// The kernel path (kernels::FlashPath) of this process's CUDA calls: set_flash_path sets it, make_params
// copies it into FlashParams::path, the one field the kernels read.
std::atomic<int> g_flash_path{static_cast<int>(kernels::FlashPath::kAuto)};
kernels::FlashPath flash_path() { return static_cast<kernels::FlashPath>(g_flash_path.load()); }

kernels::FlashDtype kernel_dtype(at::ScalarType t) {
  if (t == at::kFloat) return kernels::FlashDtype::kFP32;
  return t == at::kHalf ? kernels::FlashDtype::kFP16 : kernels::FlashDtype::kBF16;
}

#define LMSCALE_SET_STRIDES(params, prefix, t)  \
  params.prefix##_batch_stride = (t).stride(0); \
  params.prefix##_head_stride = (t).stride(1);  \
  params.prefix##_row_stride = (t).stride(2)

kernels::FlashParams make_params(const at::Tensor& q4, const at::Tensor& k4, const at::Tensor& v4, bool is_causal) {
  kernels::FlashParams p;
  p.path = flash_path();
  p.q = q4.data_ptr();
  p.k = k4.data_ptr();
  p.v = v4.data_ptr();
  LMSCALE_SET_STRIDES(p, q, q4);
  LMSCALE_SET_STRIDES(p, k, k4);
  LMSCALE_SET_STRIDES(p, v, v4);
  p.batch = static_cast<int>(q4.size(0));
  p.heads = static_cast<int>(q4.size(1));
  p.seqlen_q = static_cast<int>(q4.size(2));
  p.seqlen_k = static_cast<int>(k4.size(2));
  p.head_dim = static_cast<int>(q4.size(3));
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.head_dim)));
  p.is_causal = is_causal;
  p.dtype = kernel_dtype(q4.scalar_type());
  return p;
}

// Kernel forward on bf16/fp16/fp32 CUDA tensors of any leading dims.
std::tuple<at::Tensor, at::Tensor> kernel_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                  bool is_causal) {
  check_kernels_run_on(q.device());  // names the GPU and the fix instead of "no kernel image"
  c10::cuda::CUDAGuard guard(q.device());
  auto q4 = as_bhnd(q), k4 = as_bhnd(k), v4 = as_bhnd(v);
  auto o4 = at::empty(q4.sizes(), q4.options());
  auto L3 = at::empty({q4.size(0), q4.size(1), q4.size(2)}, q4.options().dtype(at::kFloat));
  auto p = make_params(q4, k4, v4, is_causal);
  p.o = o4.data_ptr();
  p.lse = L3.data_ptr<float>();
  LMSCALE_SET_STRIDES(p, o, o4);
  if (o4.numel() > 0) kernels::run_flash_fwd(p, at::cuda::getCurrentCUDAStream().stream());
  if (q.dim() == 4) return {o4, L3};  // already q's shape and (B, H, N)
  return {o4.view(q.sizes()), L3.view(q.sizes().slice(0, q.dim() - 1))};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> kernel_backward(const at::Tensor& q, const at::Tensor& k,
                                                               const at::Tensor& v, const at::Tensor& o,
                                                               const at::Tensor& L, const at::Tensor& dout,
                                                               bool is_causal) {
  check_kernels_run_on(q.device());
  c10::cuda::CUDAGuard guard(q.device());
  auto q4 = as_bhnd(q), k4 = as_bhnd(k), v4 = as_bhnd(v), o4 = as_bhnd(o), do4 = as_bhnd(dout);
  auto L3 = L.dim() == 3 && L.is_contiguous() ? L : L.reshape({q4.size(0), q4.size(1), q4.size(2)}).contiguous();
  auto dq4 = at::empty(q4.sizes(), q4.options());
  auto dk4 = at::empty(k4.sizes(), k4.options());
  auto dv4 = at::empty(v4.sizes(), v4.options());
  // Workspaces: the fp32 dQ accumulator (the fp32 kernels compute dQ without one), D = rowsum(dO ⊙ O), and
  // the Hopper backward's per-tile tickets, with which nothing zeroes dq_accum (FlashParams::dq_tile_ticket).
  // One allocation holds all three (one trip through the caching allocator instead of three), each part
  // starting on a 256-byte boundary (TMA wants dq_accum 16-byte aligned); none needs its contents kept.
  const bool fp32 = q4.scalar_type() == at::kFloat;
  const int64_t rows = q4.size(0) * q4.size(1) * q4.size(2), tiles64 = (q4.size(2) + 63) / 64;
  auto round_up = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  const int64_t accum_bytes = fp32 ? 0 : round_up(rows * q4.size(3) * 4), dsum_bytes = round_up(rows * 4);
  const int64_t ticket_bytes = fp32 ? 0 : round_up(q4.size(0) * q4.size(1) * tiles64 * 2 * 4);
  auto workspace = at::empty({accum_bytes + dsum_bytes + ticket_bytes}, q4.options().dtype(at::kByte));
  auto* base = static_cast<char*>(workspace.data_ptr());
  auto p = make_params(q4, k4, v4, is_causal);
  p.o = const_cast<void*>(o4.data_ptr());
  p.lse = L3.data_ptr<float>();
  p.dout = do4.data_ptr();
  p.dq = dq4.data_ptr();
  p.dk = dk4.data_ptr();
  p.dv = dv4.data_ptr();
  p.dq_accum = fp32 ? nullptr : reinterpret_cast<float*>(base);
  p.dsum = reinterpret_cast<float*>(base + accum_bytes);
  p.dq_tile_ticket = fp32 ? nullptr : reinterpret_cast<int*>(base + accum_bytes + dsum_bytes);
  LMSCALE_SET_STRIDES(p, o, o4);
  LMSCALE_SET_STRIDES(p, do, do4);
  LMSCALE_SET_STRIDES(p, dq, dq4);
  LMSCALE_SET_STRIDES(p, dk, dk4);
  LMSCALE_SET_STRIDES(p, dv, dv4);
  // torch.use_deterministic_algorithms(True): the Hopper backward adds dQ in key-block order through a
  // zeroed counter per 64-query tile (Note [deterministic dQ], flash_bwd_hopper.cuh); the fp32 kernels are
  // deterministic as they are; the mma.sync backward adds dQ with atomics, so PyTorch's alert raises
  // (or warns, with warn_only=True) there.
  at::Tensor dq_semaphore;
  if (at::globalContext().deterministicAlgorithms()) {
    if (!kernels::flash_bwd_can_be_deterministic(p)) {
      at::globalContext().alertNotDeterministic(
          "lmscale flash_attention backward on the mma.sync kernels (dQ is added with atomics; the Hopper kernels, "
          "sm_90 at head dims 64/80/128, and the fp32 kernels are deterministic)");
    } else if (!fp32) {
      dq_semaphore = at::zeros({q4.size(0) * q4.size(1), tiles64}, q4.options().dtype(at::kInt));
      p.dq_semaphore = dq_semaphore.data_ptr<int>();
    }
  }
  if (q4.numel() > 0) kernels::run_flash_bwd(p, at::cuda::getCurrentCUDAStream().stream());
  if (q.dim() == 4) return {dq4, dk4, dv4};  // already the shapes of q, k, v
  return {dq4.view(q.sizes()), dk4.view(k.sizes()), dv4.view(v.sizes())};
}
#undef LMSCALE_SET_STRIDES
#endif  // LMSCALE_HAS_KERNELS

// CUDA inputs the kernels serve (bf16, fp16 on tensor cores; fp32 by the fp32 SIMT kernels of
// src/kernels/flash_fp32.cu); fp64 and CPU go to the reference.
bool use_kernel(const at::Tensor& q) { return q.is_cuda() && q.scalar_type() != at::kDouble; }

// The dispatcher's flash_attention_forward / _backward ops. The autograd Function below calls them
// rather than the C++ functions, so that every dispatch key they have applies: under torch.compile
// and torch.library.opcheck, the fake kernels the Python package registers (python/lmscale/attention.py).
std::tuple<at::Tensor, at::Tensor> dispatch_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                    bool is_causal) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("lmscale::flash_attention_forward", "")
                             .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                       const at::Tensor&, bool)>();
  return op.call(q, k, v, is_causal);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> dispatch_backward(const at::Tensor& q, const at::Tensor& k,
                                                                 const at::Tensor& v, const at::Tensor& o,
                                                                 const at::Tensor& L, const at::Tensor& dout,
                                                                 bool is_causal) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("lmscale::flash_attention_backward", "")
          .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                                const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                                bool)>();
  return op.call(q, k, v, o, L, dout, is_causal);
}

#ifdef LMSCALE_HAS_KERNELS
// Sets the kernel path for one scope and restores the previous one.
struct FlashPathScope {
  int saved;
  explicit FlashPathScope(int path) : saved(g_flash_path.exchange(path)) {}
  ~FlashPathScope() { g_flash_path.store(saved); }
};
#endif

class FlashAttentionFunction : public torch::autograd::Function<FlashAttentionFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, bool is_causal) {
    auto [o, L] = dispatch_forward(q, k, v, is_causal);
    ctx->save_for_backward({q, k, v, o, L});
    ctx->saved_data["is_causal"] = is_causal;
#ifdef LMSCALE_HAS_KERNELS
    // The kernel path of the forward (set_flash_path) also runs its backward, which autograd calls later,
    // after a forced comparison (bench attention --impl) has restored the previous path.
    ctx->saved_data["path"] = static_cast<int64_t>(g_flash_path.load());
#endif
    return o;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const bool is_causal = ctx->saved_data["is_causal"].toBool();
#ifdef LMSCALE_HAS_KERNELS
    FlashPathScope path(static_cast<int>(ctx->saved_data["path"].toInt()));
#endif
    auto [dq, dk, dv] =
        dispatch_backward(saved[0], saved[1], saved[2], saved[3], saved[4], grad_outputs[0], is_causal);
    return {dq, dk, dv, at::Tensor()};
  }
};

}  // namespace

std::string set_flash_path(const std::string& path) {
#ifdef LMSCALE_HAS_KERNELS
  using kernels::FlashPath;
  auto name = [](FlashPath p) { return p == FlashPath::kHopper ? "hopper" : p == FlashPath::kMmaSync ? "mma-sync" : "auto"; };
  TORCH_CHECK(path == "auto" || path == "hopper" || path == "mma-sync", "set_flash_path: path '", path,
              "' is not one of auto, hopper, mma-sync");
  const FlashPath next =
      path == "hopper" ? FlashPath::kHopper : path == "mma-sync" ? FlashPath::kMmaSync : FlashPath::kAuto;
  return name(static_cast<FlashPath>(g_flash_path.exchange(static_cast<int>(next))));
#else
  TORCH_CHECK(false, "set_flash_path: choosing the kernel path needs the CUDA kernels, which this build does not have");
#endif
}

bool flash_kernel_available(at::ScalarType dtype, int64_t head_dim) {
#ifdef LMSCALE_HAS_KERNELS
  if (dtype != at::kBFloat16 && dtype != at::kHalf && dtype != at::kFloat) return false;
  return kernels::flash_supported(kernel_dtype(dtype), static_cast<int>(head_dim));
#else
  return false;
#endif
}

std::tuple<at::Tensor, at::Tensor> flash_attention_forward(const at::Tensor& q, const at::Tensor& k,
                                                          const at::Tensor& v, bool is_causal) {
  check_qkv(q, k, v, is_causal);
  if (!use_kernel(q)) {
    // Contiguous like the kernels' outputs, so one fake (meta) implementation describes both devices.
    auto [o, L] = flash_reference_forward(q, k, v, is_causal);
    return {o.contiguous(), L.contiguous()};
  }
#ifdef LMSCALE_HAS_KERNELS
  return kernel_forward(q, k, v, is_causal);
#else
  TORCH_CHECK(false, "flash_attention: this lmscale build has no CUDA kernels (built without nvcc); got CUDA "
                     "tensors. Rebuild with CUDA or move the inputs to CPU.");
#endif
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward(const at::Tensor& q, const at::Tensor& k,
                                                                        const at::Tensor& v, const at::Tensor& o,
                                                                        const at::Tensor& L, const at::Tensor& dout,
                                                                        bool is_causal) {
  check_qkv(q, k, v, is_causal);
  check_like("o", o, q, q.scalar_type());
  check_like("dout", dout, q, q.scalar_type());
  const auto lead = q.sizes().slice(0, q.dim() - 1);
  const auto l_dtype = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  TORCH_CHECK(L.sizes() == lead && L.scalar_type() == l_dtype && L.device() == q.device(),
              "flash_attention_backward: L must be the forward's logsumexp, ", l_dtype, " of shape ", lead, " on ",
              q.device(), "; got ", L.scalar_type(), " ", shape_str(L), " on ", L.device());
  if (!use_kernel(q)) {
    auto [dq, dk, dv] = flash_reference_backward(q, k, v, o, L, dout, is_causal);
    return {dq.contiguous(), dk.contiguous(), dv.contiguous()};  // as the kernels (see the forward)
  }
#ifdef LMSCALE_HAS_KERNELS
  return kernel_backward(q, k, v, o, L, dout, is_causal);
#else
  TORCH_CHECK(false, "flash_attention_backward: this lmscale build has no CUDA kernels; got CUDA tensors");
#endif
}

at::Tensor flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool is_causal) {
  return FlashAttentionFunction::apply(q, k, v, is_causal);
}

namespace {
// Forward only (below autograd): what the CPU/CUDA keys of torch.ops.lmscale.flash_attention run.
at::Tensor flash_attention_no_grad(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool is_causal) {
  return std::get<0>(flash_attention_forward(q, k, v, is_causal));
}

// The autocast rule, SDPA's: under torch.autocast(device), float inputs (not fp64) are cast to the
// autocast dtype, then the op runs below the autocast key. Registered for the forward ops only:
// backward runs outside autocast and takes the forward's dtypes.
template <c10::DeviceType Device>
std::tuple<at::Tensor, at::Tensor> flash_attention_forward_autocast(const at::Tensor& q, const at::Tensor& k,
                                                                    const at::Tensor& v, bool is_causal) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(at::autocast::get_autocast_dispatch_key_from_device_type(Device));
  const auto dtype = at::autocast::get_lower_precision_fp_from_device_type(Device);
  return dispatch_forward(at::autocast::cached_cast(dtype, q, Device), at::autocast::cached_cast(dtype, k, Device),
                          at::autocast::cached_cast(dtype, v, Device), is_causal);
}

template <c10::DeviceType Device>
at::Tensor flash_attention_autocast(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool is_causal) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(at::autocast::get_autocast_dispatch_key_from_device_type(Device));
  const auto dtype = at::autocast::get_lower_precision_fp_from_device_type(Device);
  return flash_attention(at::autocast::cached_cast(dtype, q, Device), at::autocast::cached_cast(dtype, k, Device),
                         at::autocast::cached_cast(dtype, v, Device), is_causal);
}

// What `python -m lmscale` prints: the kernels this library holds.
std::string flash_build_info() {
#ifdef LMSCALE_HAS_KERNELS
  return "cuda_kernels=" + kernels::flash_supported_list();
#else
  return "cuda_kernels=none (built without nvcc: CUDA tensors fail, CPU runs the reference)";
#endif
}
}  // namespace

}  // namespace lmscale::ops

// A fragment, not TORCH_LIBRARY: other lmscale files may add ops to the same namespace.
TORCH_LIBRARY_FRAGMENT(lmscale, m) {
  m.def("flash_attention_forward(Tensor q, Tensor k, Tensor v, bool is_causal=False) -> (Tensor, Tensor)");
  m.def(
      "flash_attention_backward(Tensor q, Tensor k, Tensor v, Tensor o, Tensor L, Tensor dout, "
      "bool is_causal=False) -> (Tensor, Tensor, Tensor)");
  m.def("flash_attention(Tensor q, Tensor k, Tensor v, bool is_causal=False) -> Tensor");
  m.def("flash_build_info() -> str", &lmscale::ops::flash_build_info);
}

TORCH_LIBRARY_IMPL(lmscale, CPU, m) {
  m.impl("flash_attention_forward", &lmscale::ops::flash_attention_forward);
  m.impl("flash_attention_backward", &lmscale::ops::flash_attention_backward);
  m.impl("flash_attention", &lmscale::ops::flash_attention_no_grad);
}

TORCH_LIBRARY_IMPL(lmscale, CUDA, m) {
  m.impl("flash_attention_forward", &lmscale::ops::flash_attention_forward);
  m.impl("flash_attention_backward", &lmscale::ops::flash_attention_backward);
  m.impl("flash_attention", &lmscale::ops::flash_attention_no_grad);
}

// Autograd: flash_attention (O only) has the C++ Function above, so C++ programs with no Python get
// gradients through the dispatcher too. flash_attention_forward's autograd formula and the fake
// kernels of all three ops are registered from Python (python/lmscale/attention.py, torch.library),
// where Python-visible autograd nodes (o.grad_fn.saved_tensors) and torch.compile need them; that is
// what lmscale.flash_attention calls. Calls of the forward and backward ops that record no graph (a
// torch.compile'd graph's, the backward's) skip that Python formula: src/ops/fused_library.cpp registers
// them on AutogradCPU/AutogradCUDA with the fused ops (autograd_without_python).
TORCH_LIBRARY_IMPL(lmscale, Autograd, m) { m.impl("flash_attention", &lmscale::ops::flash_attention); }

TORCH_LIBRARY_IMPL(lmscale, AutocastCPU, m) {
  m.impl("flash_attention_forward", &lmscale::ops::flash_attention_forward_autocast<c10::DeviceType::CPU>);
  m.impl("flash_attention", &lmscale::ops::flash_attention_autocast<c10::DeviceType::CPU>);
}

TORCH_LIBRARY_IMPL(lmscale, Autocast, m) {  // Autocast is CUDA's autocast key
  m.impl("flash_attention_forward", &lmscale::ops::flash_attention_forward_autocast<c10::DeviceType::CUDA>);
  m.impl("flash_attention", &lmscale::ops::flash_attention_autocast<c10::DeviceType::CUDA>);
}
