// The FlashAttention-2 ops (flash_attention.h): input checks, device dispatch (CPU → ATen reference,
// CUDA → src/kernels/, every mask and layout), the autograd Functions and the
// torch.ops.lmscale registrations. Each op keeps the order: validate, device guard, allocate outputs, fill
// params, take the current stream, launch, return.
#include "ops/flash_attention.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <atomic>
#include <limits>
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

// Shapes, dtypes and devices shared by forward and backward. Layout: q (..., Hq, Nq, D), k/v (..., Hkv, Nk, D).
void check_qkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
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
  TORCH_CHECK(k.sizes() == v.sizes(), "flash_attention: k and v must have the same shape (..., Hkv, Nk, D); got k ",
              shape_str(k), ", v ", shape_str(v));
  // Leading dims: the batch dims equal; the heads (dim -3) grouped, each K/V head serving Hq / Hkv query heads.
  const int64_t lead = q.dim() - 3;  // batch dims before the heads (negative for 2-D inputs: none, no heads)
  TORCH_CHECK(q.dim() == k.dim() && (lead <= 0 || q.sizes().slice(0, lead) == k.sizes().slice(0, lead)),
              "flash_attention: q and k must share their leading (batch) dims; got q ", shape_str(q), ", k ",
              shape_str(k), " (layout (..., H, N, D))");
  TORCH_CHECK(lead < 0 || (k.size(-3) >= 1 && q.size(-3) % k.size(-3) == 0), "flash_attention: q has ",
              q.size(-3), " heads (dim -3) and k, v have ", k.size(-3),
              "; grouped-query attention needs q's heads to be a multiple of k's (each K/V head serves Hq / Hkv "
              "consecutive query heads). Check the layout is (..., H, N, D).");
  TORCH_CHECK(q.size(-1) == k.size(-1), "flash_attention: q and k must share the head dim D; got q ", shape_str(q),
              ", k ", shape_str(k));
  TORCH_CHECK(q.size(-2) >= 1 && k.size(-2) >= 1, "flash_attention: sequence lengths must be >= 1; got Nq = ",
              q.size(-2), ", Nk = ", k.size(-2));
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

// Note [output layout]. A 4-D O takes q's order of dimensions, dense (at::empty_like: q's strides when q is dense,
// else dense strides in q's stride order), as SDPA's outputs do: for the (B, H, N, D) views of (B, N, H, D) tensors
// that a model's projections give (and flash-attn's layout), O is such a view too, and the (B, N, H * D) rows the
// output projection reads are a free reshape instead of a copy per layer. Other ranks are contiguous.
at::Tensor output_like(const at::Tensor& q) { return at::empty_like(q, at::MemoryFormat::Preserve); }

// t (q's shape) in output_like(q)'s layout: t itself when it already is, else a copy.
at::Tensor in_layout_of(const at::Tensor& t, const at::Tensor& q) {
  auto out = at::empty_like(q, t.options(), at::MemoryFormat::Preserve);
  if (out.strides() == t.strides()) return t;
  out.copy_(t);
  return out;
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

// A window side the kernels take: one at least as wide as any query's distance to any key (|shift| < nq + nk)
// hides nothing and is unbounded, which also keeps the kernels' int arithmetic of the bounds from overflowing.
int kernel_window(int64_t side, int64_t nq, int64_t nk) { return side < 0 || side >= nq + nk ? -1 : static_cast<int>(side); }

void set_mask(kernels::FlashParams& p, const FlashMask& mask, int64_t nq, int64_t nk) {
  p.is_causal = mask.causal;
  p.bottom_right = mask.bottom_right;
  p.window_left = kernel_window(mask.window_left, nq, nk);
  p.window_right = mask.causal ? 0 : kernel_window(mask.window_right, nq, nk);
}

// What every call fills alike: the kernel path, q/k/v, the head dim, the scale, the dtype. The heads, lengths and
// strides come from set_dense_shape or set_packed_shape.
kernels::FlashParams make_params(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale) {
  kernels::FlashParams p;
  p.path = flash_path();
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.head_dim = static_cast<int>(q.size(-1));
  p.scale = static_cast<float>(scale);
  p.dtype = kernel_dtype(q.scalar_type());
  return p;
}

void set_dense_shape(kernels::FlashParams& p, const at::Tensor& q4, const at::Tensor& k4, const at::Tensor& v4,
                     const FlashMask& mask) {
  LMSCALE_SET_STRIDES(p, q, q4);
  LMSCALE_SET_STRIDES(p, k, k4);
  LMSCALE_SET_STRIDES(p, v, v4);
  p.batch = static_cast<int>(q4.size(0));
  p.heads = static_cast<int>(q4.size(1));
  p.heads_k = static_cast<int>(k4.size(1));
  p.seqlen_q = static_cast<int>(q4.size(2));
  p.seqlen_k = static_cast<int>(k4.size(2));
  set_mask(p, mask, p.seqlen_q, p.seqlen_k);
}

// Kernel forward on bf16/fp16/fp32 CUDA tensors of any leading dims, every mask, grouped K/V heads.
std::tuple<at::Tensor, at::Tensor> kernel_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                  const FlashMask& mask, double scale) {
  check_kernels_run_on(q.device());  // names the GPU and the fix instead of "no kernel image"
  c10::cuda::CUDAGuard guard(q.device());
  auto q4 = as_bhnd(q), k4 = as_bhnd(k), v4 = as_bhnd(v);
  auto o4 = q.dim() == 4 ? output_like(q4) : at::empty(q4.sizes(), q4.options());
  auto L3 = at::empty({q4.size(0), q4.size(1), q4.size(2)}, q4.options().dtype(at::kFloat));
  auto p = make_params(q4, k4, v4, scale);
  set_dense_shape(p, q4, k4, v4, mask);
  p.o = o4.data_ptr();
  p.lse = L3.data_ptr<float>();
  auto tile_counter = at::empty({1}, q4.options().dtype(at::kInt));  // the Hopper forward's tile order
  p.fwd_tile_counter = tile_counter.data_ptr<int>();
  LMSCALE_SET_STRIDES(p, o, o4);
  if (o4.numel() > 0) kernels::run_flash_fwd(p, at::cuda::getCurrentCUDAStream().stream());
  if (q.dim() == 4) return {o4, L3};  // already q's shape and (B, H, N)
  return {o4.view(q.sizes()), L3.view(q.sizes().slice(0, q.dim() - 1))};
}

// The backward's workspaces in one allocation (one trip through the caching allocator instead of three), each part
// on a 256-byte boundary (TMA wants dq_accum 16-byte aligned): the fp32 dQ accumulator (the fp32 kernels compute dQ
// without one), D = rowsum(dO ⊙ O), and the Hopper backward's per-tile tickets, with which nothing zeroes dq_accum
// (FlashParams::dq_tile_ticket).
at::Tensor set_workspaces(kernels::FlashParams& p, const at::Tensor& like, int64_t stat_rows, int64_t tile_planes) {
  const bool fp32 = like.scalar_type() == at::kFloat;
  const int64_t tiles64 = (p.seqlen_q + 63) / 64;
  auto round_up = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  const int64_t accum_bytes = fp32 ? 0 : round_up(stat_rows * p.head_dim * 4), dsum_bytes = round_up(stat_rows * 4);
  const int64_t ticket_bytes = fp32 ? 0 : round_up(tile_planes * tiles64 * 2 * 4);
  auto workspace = at::empty({accum_bytes + dsum_bytes + ticket_bytes}, like.options().dtype(at::kByte));
  auto* base = static_cast<char*>(workspace.data_ptr());
  p.dq_accum = fp32 ? nullptr : reinterpret_cast<float*>(base);
  p.dsum = reinterpret_cast<float*>(base + accum_bytes);
  p.dq_tile_ticket = ticket_bytes ? reinterpret_cast<int*>(base + accum_bytes + dsum_bytes) : nullptr;
  return workspace;
}

// deterministic=True or torch.use_deterministic_algorithms(True): the Hopper backward adds dQ in key-block order
// through a zeroed counter per 64-query tile (Note [deterministic dQ], flash_bwd_hopper.cuh); the fp32 kernels are
// deterministic as they are; the mma.sync backward adds dQ with atomics, so an explicit deterministic=True is refused
// there and PyTorch's alert raises (or warns, with warn_only=True). Returns the counters (kept alive by the caller).
at::Tensor set_deterministic(kernels::FlashParams& p, const at::Tensor& like, bool deterministic, int64_t tile_planes) {
  if (!deterministic && !at::globalContext().deterministicAlgorithms()) return {};
  TORCH_CHECK(!deterministic || kernels::flash_bwd_can_be_deterministic(p),
              "flash_attention_backward: deterministic=True, but this call runs the mma.sync backward, which adds "
              "dQ with atomics; the deterministic backward runs on sm_90 (the Hopper kernels, head dims 64/80/128, "
              "bf16/fp16), in fp32 and on CPU. Pass deterministic=False here.");
  if (!kernels::flash_bwd_can_be_deterministic(p)) {
    at::globalContext().alertNotDeterministic(
        "lmscale flash_attention backward on the mma.sync kernels (dQ is added with atomics; the Hopper kernels, "
        "sm_90 at head dims 64/80/128, and the fp32 kernels are deterministic)");
    return {};
  }
  if (like.scalar_type() == at::kFloat) return {};
  auto semaphore = at::zeros({tile_planes, (p.seqlen_q + 63) / 64}, like.options().dtype(at::kInt));
  p.dq_semaphore = semaphore.data_ptr<int>();
  return semaphore;
}

// Grouped K/V heads whose groups the Hopper backward splits over blocks (kernels::flash_bwd_group_split; Note [group
// split], flash_api.cu): the zeroed fp32 sums of dK and dV they add into (kv_rows: K/V rows times heads, all planes).
// Called after set_deterministic, which rules the split out. Returns the sums (kept alive by the caller).
at::Tensor set_group_split(kernels::FlashParams& p, const at::Tensor& k, int64_t kv_rows) {
  p.group_split = kernels::flash_bwd_group_split(p);
  if (p.group_split <= 1) return {};
  auto sums = at::zeros({2, kv_rows, p.head_dim}, k.options().dtype(at::kFloat));
  p.dkv_accum = sums.data_ptr<float>();
  return sums;
}

// The backward's inputs beyond q, k, v and its outputs (the strides are the layout's: dense or packed).
void set_backward_pointers(kernels::FlashParams& p, const at::Tensor& o, const at::Tensor& L, const at::Tensor& dout,
                           const at::Tensor& dq, const at::Tensor& dk, const at::Tensor& dv) {
  p.o = const_cast<void*>(o.data_ptr());
  p.lse = L.data_ptr<float>();
  p.dout = dout.data_ptr();
  p.dq = dq.data_ptr();
  p.dk = dk.data_ptr();
  p.dv = dv.data_ptr();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> kernel_backward(const at::Tensor& q, const at::Tensor& k,
                                                               const at::Tensor& v, const at::Tensor& o,
                                                               const at::Tensor& L, const at::Tensor& dout,
                                                               const FlashMask& mask, double scale, bool deterministic) {
  check_kernels_run_on(q.device());
  c10::cuda::CUDAGuard guard(q.device());
  auto q4 = as_bhnd(q), k4 = as_bhnd(k), v4 = as_bhnd(v), o4 = as_bhnd(o), do4 = as_bhnd(dout);
  auto L3 = L.dim() == 3 && L.is_contiguous() ? L : L.reshape({q4.size(0), q4.size(1), q4.size(2)}).contiguous();
  auto dq4 = at::empty(q4.sizes(), q4.options());
  auto dk4 = at::empty(k4.sizes(), k4.options());
  auto dv4 = at::empty(v4.sizes(), v4.options());
  auto p = make_params(q4, k4, v4, scale);
  set_dense_shape(p, q4, k4, v4, mask);
  const int64_t planes = q4.size(0) * q4.size(1);
  auto workspace = set_workspaces(p, q4, planes * q4.size(2), planes);
  set_backward_pointers(p, o4, L3, do4, dq4, dk4, dv4);
  LMSCALE_SET_STRIDES(p, o, o4);
  LMSCALE_SET_STRIDES(p, do, do4);
  LMSCALE_SET_STRIDES(p, dq, dq4);
  LMSCALE_SET_STRIDES(p, dk, dk4);
  LMSCALE_SET_STRIDES(p, dv, dv4);
  auto semaphore = set_deterministic(p, q4, deterministic, planes);
  auto dkv_sums = set_group_split(p, k4, k4.size(0) * k4.size(1) * k4.size(2));
  if (q4.numel() > 0) kernels::run_flash_bwd(p, at::cuda::getCurrentCUDAStream().stream());
  if (q.dim() == 4) return {dq4, dk4, dv4};  // already the shapes of q, k, v
  return {dq4.view(q.sizes()), dk4.view(k.sizes()), dv4.view(v.sizes())};
}

// Packed (total, H, D) tensors: the last dim contiguous, the other strides and the base 16-byte aligned, else copied.
at::Tensor as_packed(const at::Tensor& t) {
  const int64_t align = 16 / t.element_size();
  const bool ok = t.stride(2) == 1 && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && t.stride(0) % align == 0 &&
                  t.stride(1) % align == 0;
  return ok ? t : t.contiguous();
}

#define LMSCALE_SET_PACKED_STRIDES(params, prefix, t) \
  params.prefix##_batch_stride = 0;                  \
  params.prefix##_head_stride = (t).stride(1);       \
  params.prefix##_row_stride = (t).stride(0)

// What a packed call shares between forward and backward: offsets, longest lengths, rows, the mask.
void set_packed_shape(kernels::FlashParams& p, const at::Tensor& q3, const at::Tensor& k3, const at::Tensor& v3,
                      const at::Tensor& cu_q, const at::Tensor& cu_k, int64_t max_q, int64_t max_k,
                      const FlashMask& mask) {
  LMSCALE_SET_PACKED_STRIDES(p, q, q3);
  LMSCALE_SET_PACKED_STRIDES(p, k, k3);
  LMSCALE_SET_PACKED_STRIDES(p, v, v3);
  p.batch = static_cast<int>(cu_q.numel() - 1);
  p.heads = static_cast<int>(q3.size(1));
  p.heads_k = static_cast<int>(k3.size(1));
  p.seqlen_q = static_cast<int>(max_q);
  p.seqlen_k = static_cast<int>(max_k);
  p.total_q = static_cast<int>(q3.size(0));
  p.total_k = static_cast<int>(k3.size(0));
  p.cu_seqlens_q = cu_q.data_ptr<int>();
  p.cu_seqlens_k = cu_k.data_ptr<int>();
  set_mask(p, mask, max_q, max_k);
}

// Packed forward: (O (total_q, Hq, D), L (Hq, total_q)). Rows in no sequence (past the last offset) get O = 0 and
// L = +inf: from the kernels where they write every row (kernels::flash_fwd_writes_every_row: the Hopper forward),
// else filled here first (the offsets stay on the device: reading the last one would synchronise every call); a
// batch whose longest sequence has no query or no key launches nothing.
std::tuple<at::Tensor, at::Tensor> kernel_varlen_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                         const at::Tensor& cu_q, const at::Tensor& cu_k, int64_t max_q,
                                                         int64_t max_k, const FlashMask& mask, double scale) {
  check_kernels_run_on(q.device());
  c10::cuda::CUDAGuard guard(q.device());
  auto q3 = as_packed(q), k3 = as_packed(k), v3 = as_packed(v);
  auto cu_q32 = cu_q.contiguous(), cu_k32 = cu_k.contiguous();
  const bool launch = max_q > 0 && max_k > 0;
  auto p = make_params(q3, k3, v3, scale);
  set_packed_shape(p, q3, k3, v3, cu_q32, cu_k32, max_q, max_k, mask);
  const bool filled_by_kernel = launch && kernels::flash_fwd_writes_every_row(p);
  auto o3 = filled_by_kernel ? at::empty(q3.sizes(), q3.options()) : at::zeros(q3.sizes(), q3.options());
  auto L2 = filled_by_kernel ? at::empty({q3.size(1), q3.size(0)}, q3.options().dtype(at::kFloat))
                             : at::full({q3.size(1), q3.size(0)}, std::numeric_limits<float>::infinity(),
                                        q3.options().dtype(at::kFloat));
  if (!launch) return {o3, L2};
  p.o = o3.data_ptr();
  p.lse = L2.data_ptr<float>();
  auto tile_counter = at::empty({1}, q3.options().dtype(at::kInt));  // the Hopper forward's tile order
  p.fwd_tile_counter = tile_counter.data_ptr<int>();
  LMSCALE_SET_PACKED_STRIDES(p, o, o3);
  kernels::run_flash_fwd(p, at::cuda::getCurrentCUDAStream().stream());
  return {o3, L2};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> kernel_varlen_backward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o, const at::Tensor& L,
    const at::Tensor& dout, const at::Tensor& cu_q, const at::Tensor& cu_k, int64_t max_q, int64_t max_k,
    const FlashMask& mask, double scale, bool deterministic) {
  check_kernels_run_on(q.device());
  c10::cuda::CUDAGuard guard(q.device());
  auto q3 = as_packed(q), k3 = as_packed(k), v3 = as_packed(v), o3 = as_packed(o), do3 = as_packed(dout);
  auto L2 = L.contiguous();
  auto cu_q32 = cu_q.contiguous(), cu_k32 = cu_k.contiguous();
  const bool launch = max_q > 0 && max_k > 0;
  auto p = make_params(q3, k3, v3, scale);
  set_packed_shape(p, q3, k3, v3, cu_q32, cu_k32, max_q, max_k, mask);
  // Rows in no sequence start at 0 where the kernels do not write them (dQ of the tensor-core paths is written
  // everywhere: their conversion covers every row, 0 where L is +inf; the fp32 kernels write it per sequence; dK and
  // dV everywhere by the Hopper backward: kernels::flash_bwd_writes_every_key_row).
  const bool fp32 = q3.scalar_type() == at::kFloat;
  const bool kv_filled = launch && kernels::flash_bwd_writes_every_key_row(p);
  auto dq3 = !launch || fp32 ? at::zeros(q3.sizes(), q3.options()) : at::empty(q3.sizes(), q3.options());
  auto dk3 = kv_filled ? at::empty(k3.sizes(), k3.options()) : at::zeros(k3.sizes(), k3.options());
  auto dv3 = kv_filled ? at::empty(v3.sizes(), v3.options()) : at::zeros(v3.sizes(), v3.options());
  if (!launch) return {dq3, dk3, dv3};
  const int64_t heads = q3.size(1);
  auto workspace = set_workspaces(p, q3, heads * q3.size(0), p.batch * heads);
  set_backward_pointers(p, o3, L2, do3, dq3, dk3, dv3);
  LMSCALE_SET_PACKED_STRIDES(p, o, o3);
  LMSCALE_SET_PACKED_STRIDES(p, do, do3);
  LMSCALE_SET_PACKED_STRIDES(p, dq, dq3);
  LMSCALE_SET_PACKED_STRIDES(p, dk, dk3);
  LMSCALE_SET_PACKED_STRIDES(p, dv, dv3);
  auto semaphore = set_deterministic(p, q3, deterministic, p.batch * heads);
  auto dkv_sums = set_group_split(p, k3, k3.size(0) * k3.size(1));
  kernels::run_flash_bwd(p, at::cuda::getCurrentCUDAStream().stream());
  return {dq3, dk3, dv3};
}
#undef LMSCALE_SET_PACKED_STRIDES
#undef LMSCALE_SET_STRIDES
#endif  // LMSCALE_HAS_KERNELS

// CUDA inputs the kernels serve (bf16, fp16 on tensor cores; fp32 by the fp32 SIMT kernels of
// src/kernels/flash_fp32.cu); fp64 and CPU go to the reference.
bool use_kernel(const at::Tensor& q) { return q.is_cuda() && q.scalar_type() != at::kDouble; }

FlashMask make_mask(bool is_causal, bool bottom_right, int64_t window_left, int64_t window_right) {
  return FlashMask{is_causal, bottom_right, window_left, window_right};
}

#ifdef LMSCALE_HAS_KERNELS
double scale_or_default(const at::Tensor& q, std::optional<double> scale) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
}

#endif

// ---------------------------------------------------------------- the dispatcher's ops, as C++ calls them
// The autograd Functions below call the ops rather than the C++ functions, so that every dispatch key they
// have applies: under torch.compile and torch.library.opcheck, the fake kernels the Python package registers
// (python/lmscale/attention.py).
using ForwardSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, const at::Tensor&, bool,
                                                      std::optional<double>, bool, int64_t, int64_t, bool);
using BackwardSig = std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                   const at::Tensor&, const at::Tensor&,
                                                                   const at::Tensor&, const at::Tensor&, bool,
                                                                   std::optional<double>, bool, int64_t, int64_t, bool);
using VarlenForwardSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                            const at::Tensor&, const at::Tensor&, c10::SymInt,
                                                            c10::SymInt, bool, std::optional<double>, bool, int64_t,
                                                            int64_t, bool);
using VarlenBackwardSig = std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
    const at::Tensor&, const at::Tensor&, c10::SymInt, c10::SymInt, bool, std::optional<double>, bool, int64_t,
    int64_t, bool);

template <typename Sig>
c10::TypedOperatorHandle<Sig> find_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

// What an autograd Function keeps of its call besides tensors.
struct CallArgs {
  FlashMask mask;
  std::optional<double> scale;
  bool deterministic;
};

void save_args(torch::autograd::AutogradContext* ctx, const CallArgs& a) {
  ctx->saved_data["is_causal"] = a.mask.causal;
  ctx->saved_data["bottom_right"] = a.mask.bottom_right;
  ctx->saved_data["window_left"] = a.mask.window_left;
  ctx->saved_data["window_right"] = a.mask.window_right;
  ctx->saved_data["scale"] = a.scale ? c10::IValue(*a.scale) : c10::IValue();
  ctx->saved_data["deterministic"] = a.deterministic;
#ifdef LMSCALE_HAS_KERNELS
  // The kernel path of the forward (set_flash_path) also runs its backward, which autograd calls later,
  // after a forced comparison (bench attention --impl) has restored the previous path.
  ctx->saved_data["path"] = static_cast<int64_t>(g_flash_path.load());
#endif
}

CallArgs saved_args(torch::autograd::AutogradContext* ctx) {
  auto& d = ctx->saved_data;
  const auto& scale = d["scale"];
  return {make_mask(d["is_causal"].toBool(), d["bottom_right"].toBool(), d["window_left"].toInt(),
                    d["window_right"].toInt()),
          scale.isNone() ? std::nullopt : std::optional<double>(scale.toDouble()), d["deterministic"].toBool()};
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
                            const at::Tensor& v, const CallArgs& a) {
    static const auto op = find_op<ForwardSig>("lmscale::flash_attention_forward");
    const auto& m = a.mask;
    auto [o, L] = op.call(q, k, v, m.causal, a.scale, m.bottom_right, m.window_left, m.window_right, a.deterministic);
    ctx->save_for_backward({q, k, v, o, L});
    save_args(ctx, a);
    return o;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    static const auto op = find_op<BackwardSig>("lmscale::flash_attention_backward");
    const auto saved = ctx->get_saved_variables();
    const auto a = saved_args(ctx);
    const auto& m = a.mask;
#ifdef LMSCALE_HAS_KERNELS
    FlashPathScope path(static_cast<int>(ctx->saved_data["path"].toInt()));
#endif
    auto [dq, dk, dv] = op.call(saved[0], saved[1], saved[2], saved[3], saved[4], grad_outputs[0], m.causal, a.scale,
                                m.bottom_right, m.window_left, m.window_right, a.deterministic);
    return {dq, dk, dv, at::Tensor()};
  }
};

class FlashAttentionVarlenFunction : public torch::autograd::Function<FlashAttentionVarlenFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const at::Tensor& cu_q, const at::Tensor& cu_k, int64_t max_q,
                            int64_t max_k, const CallArgs& a) {
    static const auto op = find_op<VarlenForwardSig>("lmscale::flash_attention_varlen_forward");
    const auto& m = a.mask;
    auto [o, L] = op.call(q, k, v, cu_q, cu_k, max_q, max_k, m.causal, a.scale, m.bottom_right, m.window_left,
                          m.window_right, a.deterministic);
    ctx->save_for_backward({q, k, v, o, L, cu_q, cu_k});
    ctx->saved_data["max_seqlen_q"] = max_q;
    ctx->saved_data["max_seqlen_k"] = max_k;
    save_args(ctx, a);
    return o;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    static const auto op = find_op<VarlenBackwardSig>("lmscale::flash_attention_varlen_backward");
    const auto s = ctx->get_saved_variables();
    const auto a = saved_args(ctx);
    const auto& m = a.mask;
#ifdef LMSCALE_HAS_KERNELS
    FlashPathScope path(static_cast<int>(ctx->saved_data["path"].toInt()));
#endif
    auto [dq, dk, dv] = op.call(s[0], s[1], s[2], s[3], s[4], grad_outputs[0], s[5], s[6],
                                ctx->saved_data["max_seqlen_q"].toInt(), ctx->saved_data["max_seqlen_k"].toInt(),
                                m.causal, a.scale, m.bottom_right, m.window_left, m.window_right, a.deterministic);
    return {dq, dk, dv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// ---------------------------------------------------------------- packed variable-length batches
// Shapes, dtypes and devices of a varlen call: q (total_q, Hq, D), k/v (total_k, Hkv, D), int32 cu_seqlens.
void check_varlen(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cu_q,
                  const at::Tensor& cu_k, int64_t max_q, int64_t max_k) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3 && k.sizes() == v.sizes(),
              "flash_attention_varlen: q must be (total_q, Hq, D), k and v (total_k, Hkv, D) with one shape; got q ",
              shape_str(q), ", k ", shape_str(k), ", v ", shape_str(v));
  TORCH_CHECK(k.size(1) >= 1 && q.size(1) % k.size(1) == 0, "flash_attention_varlen: q has ", q.size(1),
              " heads (dim 1) and k, v have ", k.size(1),
              "; grouped-query attention needs q's heads to be a multiple of k's");
  TORCH_CHECK(q.size(2) == k.size(2), "flash_attention_varlen: q and k must share the head dim D; got q ",
              shape_str(q), ", k ", shape_str(k));
  TORCH_CHECK(q.size(0) >= 1 && k.size(0) >= 1, "flash_attention_varlen: q and k need at least one token; got ",
              "total_q = ", q.size(0), ", total_k = ", k.size(0));
  for (const auto* cu : {&cu_q, &cu_k}) {
    TORCH_CHECK(cu->scalar_type() == at::kInt && cu->dim() == 1 && cu->numel() >= 1,
                "flash_attention_varlen: cu_seqlens_q and cu_seqlens_k must be int32 of shape (B + 1,); got ",
                cu_q.scalar_type(), " ", shape_str(cu_q), " and ", cu_k.scalar_type(), " ", shape_str(cu_k),
                ". From lengths: torch.nn.functional.pad(lengths.cumsum(0), (1, 0)).to(torch.int32).");
    TORCH_CHECK(cu->device() == q.device(), "flash_attention_varlen: cu_seqlens must be on q's device (", q.device(),
                "); got cu_seqlens_q on ", cu_q.device(), ", cu_seqlens_k on ", cu_k.device());
  }
  TORCH_CHECK(cu_q.numel() == cu_k.numel(), "flash_attention_varlen: cu_seqlens_q and cu_seqlens_k must count the ",
              "same sequences; got ", cu_q.numel() - 1, " and ", cu_k.numel() - 1);
  TORCH_CHECK(max_q >= 0 && max_k >= 0, "flash_attention_varlen: max_seqlen_q and max_seqlen_k must be >= 0; got ",
              max_q, ", ", max_k);
  check_qkv(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1));  // dtypes and devices (shapes hold)
}

// The offsets' values on CPU: from 0, non-decreasing, within the tensor, no sequence past its max_seqlen. On CUDA they
// are not read on the host (it would synchronise every call): there, as with flash-attn, they must be valid, and a
// max_seqlen below a sequence's length leaves that sequence's rows past it unwritten.
void check_offsets(const char* name, const at::Tensor& cu, int64_t total, const char* max_name, int64_t max_seqlen) {
  auto c = cu.to(at::kCPU, at::kLong).contiguous();
  const int64_t* x = c.data_ptr<int64_t>();
  TORCH_CHECK(x[0] == 0, "flash_attention_varlen: ", name, " must start at 0; got ", x[0]);
  for (int64_t b = 0; b + 1 < c.numel(); ++b) {
    TORCH_CHECK(x[b + 1] >= x[b], "flash_attention_varlen: ", name, " must be non-decreasing; got ", x[b], " then ",
                x[b + 1], " at sequence ", b);
    TORCH_CHECK(x[b + 1] - x[b] <= max_seqlen, "flash_attention_varlen: sequence ", b, " has ", x[b + 1] - x[b],
                " rows (", name, "), more than ", max_name, " = ", max_seqlen);
  }
  TORCH_CHECK(x[c.numel() - 1] <= total, "flash_attention_varlen: ", name, " ends at ", x[c.numel() - 1],
              ", past the ", total, " packed rows");
}

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
                                                          const at::Tensor& v, const FlashMask& mask,
                                                          std::optional<double> scale) {
  check_qkv(q, k, v);
  if (!use_kernel(q)) {
    // O laid out as the kernels write it (output_like) and L contiguous, so one fake (meta) implementation
    // describes both devices.
    auto [o, L] = flash_reference_forward(q, k, v, mask, scale);
    return {q.dim() == 4 ? in_layout_of(o, q) : o.contiguous(), L.contiguous()};
  }
#ifdef LMSCALE_HAS_KERNELS
  return kernel_forward(q, k, v, mask, scale_or_default(q, scale));
#else
  TORCH_CHECK(false, "flash_attention: this lmscale build has no CUDA kernels (built without nvcc); got CUDA "
                     "tensors. Rebuild with CUDA or move the inputs to CPU.");
#endif
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o, const at::Tensor& L,
    const at::Tensor& dout, const FlashMask& mask, std::optional<double> scale, bool deterministic) {
  check_qkv(q, k, v);
  check_like("o", o, q, q.scalar_type());
  check_like("dout", dout, q, q.scalar_type());
  const auto lead = q.sizes().slice(0, q.dim() - 1);
  const auto l_dtype = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  TORCH_CHECK(L.sizes() == lead && L.scalar_type() == l_dtype && L.device() == q.device(),
              "flash_attention_backward: L must be the forward's logsumexp, ", l_dtype, " of shape ", lead, " on ",
              q.device(), "; got ", L.scalar_type(), " ", shape_str(L), " on ", L.device());
  if (!use_kernel(q)) {
    auto [dq, dk, dv] = flash_reference_backward(q, k, v, o, L, dout, mask, scale);
    return {dq.contiguous(), dk.contiguous(), dv.contiguous()};  // as the kernels (see the forward)
  }
#ifdef LMSCALE_HAS_KERNELS
  return kernel_backward(q, k, v, o, L, dout, mask, scale_or_default(q, scale), deterministic);
#else
  (void)deterministic;
  TORCH_CHECK(false, "flash_attention_backward: this lmscale build has no CUDA kernels; got CUDA tensors");
#endif
}

at::Tensor flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const FlashMask& mask,
                           std::optional<double> scale, bool deterministic) {
  return FlashAttentionFunction::apply(q, k, v, CallArgs{mask, scale, deterministic});
}

std::tuple<at::Tensor, at::Tensor> flash_attention_forward(const at::Tensor& q, const at::Tensor& k,
                                                          const at::Tensor& v, bool is_causal) {
  return flash_attention_forward(q, k, v, FlashMask{is_causal});
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward(const at::Tensor& q, const at::Tensor& k,
                                                                        const at::Tensor& v, const at::Tensor& o,
                                                                        const at::Tensor& L, const at::Tensor& dout,
                                                                        bool is_causal) {
  return flash_attention_backward(q, k, v, o, L, dout, FlashMask{is_causal});
}

at::Tensor flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool is_causal) {
  return flash_attention(q, k, v, FlashMask{is_causal});
}

std::tuple<at::Tensor, at::Tensor> flash_attention_varlen_forward(const at::Tensor& q, const at::Tensor& k,
                                                                 const at::Tensor& v, const at::Tensor& cu_seqlens_q,
                                                                 const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q,
                                                                 int64_t max_seqlen_k, const FlashMask& mask,
                                                                 std::optional<double> scale) {
  check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k);
  if (!use_kernel(q)) {
    check_offsets("cu_seqlens_q", cu_seqlens_q, q.size(0), "max_seqlen_q", max_seqlen_q);
    check_offsets("cu_seqlens_k", cu_seqlens_k, k.size(0), "max_seqlen_k", max_seqlen_k);
    return flash_reference_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, mask, scale);
  }
#ifdef LMSCALE_HAS_KERNELS
  return kernel_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, mask,
                               scale_or_default(q, scale));
#else
  TORCH_CHECK(false, "flash_attention_varlen: this lmscale build has no CUDA kernels; got CUDA tensors");
#endif
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_varlen_backward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o, const at::Tensor& L,
    const at::Tensor& dout, const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q,
    int64_t max_seqlen_k, const FlashMask& mask, std::optional<double> scale, bool deterministic) {
  check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k);
  check_like("o", o, q, q.scalar_type());
  check_like("dout", dout, q, q.scalar_type());
  const auto l_dtype = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  TORCH_CHECK(L.dim() == 2 && L.size(0) == q.size(1) && L.size(1) == q.size(0) && L.scalar_type() == l_dtype &&
                  L.device() == q.device(),
              "flash_attention_varlen_backward: L must be the forward's logsumexp, ", l_dtype,
              " of shape (Hq, total_q) = (", q.size(1), ", ", q.size(0), ") on ", q.device(), "; got ", L.scalar_type(),
              " ", shape_str(L), " on ", L.device());
  if (!use_kernel(q)) {  // the reference is deterministic as it is
    check_offsets("cu_seqlens_q", cu_seqlens_q, q.size(0), "max_seqlen_q", max_seqlen_q);
    check_offsets("cu_seqlens_k", cu_seqlens_k, k.size(0), "max_seqlen_k", max_seqlen_k);
    return flash_reference_varlen_backward(q, k, v, o, L, dout, cu_seqlens_q, cu_seqlens_k, mask, scale);
  }
#ifdef LMSCALE_HAS_KERNELS
  return kernel_varlen_backward(q, k, v, o, L, dout, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, mask,
                                scale_or_default(q, scale), deterministic);
#else
  (void)deterministic;
  TORCH_CHECK(false, "flash_attention_varlen_backward: this lmscale build has no CUDA kernels; got CUDA tensors");
#endif
}

at::Tensor flash_attention_varlen(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q,
                                  int64_t max_seqlen_k, const FlashMask& mask, std::optional<double> scale,
                                  bool deterministic) {
  return FlashAttentionVarlenFunction::apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                             CallArgs{mask, scale, deterministic});
}

namespace {
// ---------------------------------------------------------------- the registered kernels
// The ops' flat signatures (the schemas below) over the C++ functions. `deterministic` is the backward's; the
// forward ops take it so that their autograd formulas can pass it on.
std::tuple<at::Tensor, at::Tensor> forward_op(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                              bool is_causal, std::optional<double> scale, bool bottom_right,
                                              int64_t window_left, int64_t window_right, bool /*deterministic*/) {
  return flash_attention_forward(q, k, v, make_mask(is_causal, bottom_right, window_left, window_right), scale);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_op(const at::Tensor& q, const at::Tensor& k,
                                                           const at::Tensor& v, const at::Tensor& o,
                                                           const at::Tensor& L, const at::Tensor& dout, bool is_causal,
                                                           std::optional<double> scale, bool bottom_right,
                                                           int64_t window_left, int64_t window_right,
                                                           bool deterministic) {
  return flash_attention_backward(q, k, v, o, L, dout, make_mask(is_causal, bottom_right, window_left, window_right),
                                  scale, deterministic);
}

// Forward only (below autograd): what the CPU/CUDA keys of torch.ops.lmscale.flash_attention run.
at::Tensor attention_op_no_grad(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool is_causal,
                                std::optional<double> scale, bool bottom_right, int64_t window_left,
                                int64_t window_right, bool deterministic) {
  return std::get<0>(forward_op(q, k, v, is_causal, scale, bottom_right, window_left, window_right, deterministic));
}

// The Autograd key of torch.ops.lmscale.flash_attention: the C++ Function.
at::Tensor attention_op(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool is_causal,
                        std::optional<double> scale, bool bottom_right, int64_t window_left, int64_t window_right,
                        bool deterministic) {
  return flash_attention(q, k, v, make_mask(is_causal, bottom_right, window_left, window_right), scale,
                         deterministic);
}

std::tuple<at::Tensor, at::Tensor> varlen_forward_op(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                     const at::Tensor& cu_q, const at::Tensor& cu_k, int64_t max_q,
                                                     int64_t max_k, bool is_causal, std::optional<double> scale,
                                                     bool bottom_right, int64_t window_left, int64_t window_right,
                                                     bool /*deterministic*/) {
  return flash_attention_varlen_forward(q, k, v, cu_q, cu_k, max_q, max_k,
                                        make_mask(is_causal, bottom_right, window_left, window_right), scale);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> varlen_backward_op(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o, const at::Tensor& L,
    const at::Tensor& dout, const at::Tensor& cu_q, const at::Tensor& cu_k, int64_t max_q, int64_t max_k,
    bool is_causal, std::optional<double> scale, bool bottom_right, int64_t window_left, int64_t window_right,
    bool deterministic) {
  return flash_attention_varlen_backward(q, k, v, o, L, dout, cu_q, cu_k, max_q, max_k,
                                         make_mask(is_causal, bottom_right, window_left, window_right), scale,
                                         deterministic);
}

// The autocast rule, SDPA's: under torch.autocast(device), float inputs (not fp64) are cast to the
// autocast dtype, then the op runs below the autocast key. Registered for the forward ops only:
// backward runs outside autocast and takes the forward's dtypes.
template <c10::DeviceType Device>
at::Tensor autocast_cast(const at::Tensor& t) {
  return at::autocast::cached_cast(at::autocast::get_lower_precision_fp_from_device_type(Device), t, Device);
}

template <c10::DeviceType Device>
std::tuple<at::Tensor, at::Tensor> forward_autocast(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                    bool is_causal, std::optional<double> scale, bool bottom_right,
                                                    int64_t window_left, int64_t window_right, bool deterministic) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(at::autocast::get_autocast_dispatch_key_from_device_type(Device));
  static const auto op = find_op<ForwardSig>("lmscale::flash_attention_forward");
  return op.call(autocast_cast<Device>(q), autocast_cast<Device>(k), autocast_cast<Device>(v), is_causal, scale,
                 bottom_right, window_left, window_right, deterministic);
}

template <c10::DeviceType Device>
at::Tensor attention_autocast(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool is_causal,
                              std::optional<double> scale, bool bottom_right, int64_t window_left,
                              int64_t window_right, bool deterministic) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(at::autocast::get_autocast_dispatch_key_from_device_type(Device));
  return attention_op(autocast_cast<Device>(q), autocast_cast<Device>(k), autocast_cast<Device>(v), is_causal, scale,
                      bottom_right, window_left, window_right, deterministic);
}

template <c10::DeviceType Device>
std::tuple<at::Tensor, at::Tensor> varlen_forward_autocast(const at::Tensor& q, const at::Tensor& k,
                                                           const at::Tensor& v, const at::Tensor& cu_q,
                                                           const at::Tensor& cu_k, int64_t max_q, int64_t max_k,
                                                           bool is_causal, std::optional<double> scale,
                                                           bool bottom_right, int64_t window_left,
                                                           int64_t window_right, bool deterministic) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(at::autocast::get_autocast_dispatch_key_from_device_type(Device));
  static const auto op = find_op<VarlenForwardSig>("lmscale::flash_attention_varlen_forward");
  return op.call(autocast_cast<Device>(q), autocast_cast<Device>(k), autocast_cast<Device>(v), cu_q, cu_k, max_q,
                 max_k, is_causal, scale, bottom_right, window_left, window_right, deterministic);
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

// The mask and scale arguments every op shares (FlashMask, flash_reference.h; docs/spec.md §3.6), keyword-only.
#define LMSCALE_FLASH_ARGS                                                                                     \
  "bool is_causal=False, *, float? scale=None, bool bottom_right=False, int window_left=-1, int window_right=-1, " \
  "bool deterministic=False"

// A fragment, not TORCH_LIBRARY: other lmscale files may add ops to the same namespace.
TORCH_LIBRARY_FRAGMENT(lmscale, m) {
  m.def("flash_attention_forward(Tensor q, Tensor k, Tensor v, " LMSCALE_FLASH_ARGS ") -> (Tensor, Tensor)");
  m.def("flash_attention_backward(Tensor q, Tensor k, Tensor v, Tensor o, Tensor L, Tensor dout, " LMSCALE_FLASH_ARGS
        ") -> (Tensor, Tensor, Tensor)");
  m.def("flash_attention(Tensor q, Tensor k, Tensor v, " LMSCALE_FLASH_ARGS ") -> Tensor");
  m.def("flash_attention_varlen_forward(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
        "SymInt max_seqlen_q, SymInt max_seqlen_k, " LMSCALE_FLASH_ARGS ") -> (Tensor, Tensor)");
  m.def("flash_attention_varlen_backward(Tensor q, Tensor k, Tensor v, Tensor o, Tensor L, Tensor dout, "
        "Tensor cu_seqlens_q, Tensor cu_seqlens_k, SymInt max_seqlen_q, SymInt max_seqlen_k, " LMSCALE_FLASH_ARGS
        ") -> (Tensor, Tensor, Tensor)");
  m.def("flash_build_info() -> str", &lmscale::ops::flash_build_info);
}
#undef LMSCALE_FLASH_ARGS

TORCH_LIBRARY_IMPL(lmscale, CPU, m) {
  m.impl("flash_attention_forward", &lmscale::ops::forward_op);
  m.impl("flash_attention_backward", &lmscale::ops::backward_op);
  m.impl("flash_attention", &lmscale::ops::attention_op_no_grad);
  m.impl("flash_attention_varlen_forward", &lmscale::ops::varlen_forward_op);
  m.impl("flash_attention_varlen_backward", &lmscale::ops::varlen_backward_op);
}

TORCH_LIBRARY_IMPL(lmscale, CUDA, m) {
  m.impl("flash_attention_forward", &lmscale::ops::forward_op);
  m.impl("flash_attention_backward", &lmscale::ops::backward_op);
  m.impl("flash_attention", &lmscale::ops::attention_op_no_grad);
  m.impl("flash_attention_varlen_forward", &lmscale::ops::varlen_forward_op);
  m.impl("flash_attention_varlen_backward", &lmscale::ops::varlen_backward_op);
}

// Autograd: flash_attention (O only) has the C++ Function above, so C++ programs with no Python get
// gradients through the dispatcher too. The forward ops' autograd formulas (dense and varlen) and the fake
// kernels of all five ops are registered from Python (python/lmscale/attention.py, torch.library), where
// Python-visible autograd nodes (o.grad_fn.saved_tensors) and torch.compile need them; that is what
// lmscale.flash_attention and lmscale.flash_attn call. Calls of the dense forward and backward ops that record
// no graph (a torch.compile'd graph's, the backward's) skip that Python formula: src/ops/fused_library.cpp
// registers them on AutogradCPU/AutogradCUDA with the fused ops (autograd_without_python).
TORCH_LIBRARY_IMPL(lmscale, Autograd, m) { m.impl("flash_attention", &lmscale::ops::attention_op); }

TORCH_LIBRARY_IMPL(lmscale, AutocastCPU, m) {
  m.impl("flash_attention_forward", &lmscale::ops::forward_autocast<c10::DeviceType::CPU>);
  m.impl("flash_attention", &lmscale::ops::attention_autocast<c10::DeviceType::CPU>);
  m.impl("flash_attention_varlen_forward", &lmscale::ops::varlen_forward_autocast<c10::DeviceType::CPU>);
}

TORCH_LIBRARY_IMPL(lmscale, Autocast, m) {  // Autocast is CUDA's autocast key
  m.impl("flash_attention_forward", &lmscale::ops::forward_autocast<c10::DeviceType::CUDA>);
  m.impl("flash_attention", &lmscale::ops::attention_autocast<c10::DeviceType::CUDA>);
  m.impl("flash_attention_varlen_forward", &lmscale::ops::varlen_forward_autocast<c10::DeviceType::CUDA>);
}
