"""lmscale.nn's fused layers as torch.library ops: torch.library.opcheck of every forward and backward
op, values and gradients against the plain PyTorch layers they replace (in fp64 on the CPU reference,
and the CUDA kernels against them where a GPU is present), torch.compile(fullgraph=True) through the
modules, the chunked linear + cross-entropy, double backward refused, and calls that record no graph
(a compiled graph's) kept off the Python autograd kernel."""
import sys

import pytest
import torch
import torch.nn.functional as F

import lmscale
import lmscale.nn as lnn

ops = torch.ops.lmscale
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


# ------------------------------------------------------------------ what they replace (plain PyTorch)

def torch_rms_norm(x, weight, eps=1e-5):
    return F.rms_norm(x.double(), (x.shape[-1],), weight.double(), eps)


def torch_rope(x, cos, sin):  # (B, H, T, D), adjacent pairs, as the baseline model's Rope
    xe, xo = x[..., 0::2], x[..., 1::2]
    return torch.stack((xe * cos - xo * sin, xe * sin + xo * cos), -1).flatten(-2)


def torch_rope_qkv(qkv, rotation, heads):
    B, T, C3 = qkv.shape
    q, k, v = qkv.double().view(B, T, 3, heads, C3 // 3 // heads).permute(2, 0, 3, 1, 4)
    cos, sin = rotation[:T, :, 0].double(), rotation[:T, :, 1].double()
    return torch_rope(q, cos, sin), torch_rope(k, cos, sin), v


def sample(*shape, dtype=torch.float64, device="cpu"):
    return torch.randn(*shape, dtype=dtype, device=device, requires_grad=True)


def check_against(fn, ref, inputs, rtol, atol):
    """Values and gradients (for one random output gradient) of fn vs ref, on the same inputs."""
    outs, refs = fn(*inputs), ref(*inputs)
    outs, refs = (outs if isinstance(outs, tuple) else (outs,)), (refs if isinstance(refs, tuple) else (refs,))
    grads_out = [torch.randn_like(r) for r in refs]
    leaves = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    got = torch.autograd.grad(outs, leaves, [g.to(o.dtype) for g, o in zip(grads_out, outs)])
    want = torch.autograd.grad(refs, leaves, grads_out)
    for o, r in zip(outs, refs):
        torch.testing.assert_close(o.double(), r.double(), rtol=rtol, atol=atol)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.double(), w.double(), rtol=rtol, atol=atol)


# ------------------------------------------------------------------ opcheck: every op, both directions

def op_samples(device, dtype, grad=False):
    """(op, args) for every forward and backward op, backward ones fed their forward's real outputs;
    with grad, the forward ops' differentiable inputs require grad (opcheck then checks autograd too)."""
    g = lambda *s, d=dtype: torch.randn(*s, dtype=d, device=device)
    d = lambda t: t.detach().requires_grad_(grad)
    x, res, w = g(3, 5, 24), g(3, 5, 24), g(24, d=torch.float32 if dtype != torch.float64 else dtype)
    h, y, rstd = ops.rms_norm_forward(x, res, w, 1e-5, None)
    a, b = g(4, 7, 16), g(4, 7, 16)
    qkv, rot = g(2, 9, 3 * 16), lnn.rope_table(8, 12, device=device)
    q, k, v = ops.rope_qkv_forward(qkv, rot, 2)
    logits, targets = g(2, 6, 50), torch.randint(50, (2, 6), device=device)
    loss, stats = ops.cross_entropy_forward(logits, targets)
    padded = targets.clone()
    padded[0, :2] = -100  # PyTorch's ignore_index
    losses, stats_n = ops.cross_entropy_forward(logits, padded, 0, -100, 0.1)  # per position, label smoothing
    return [
        (ops.rms_norm_forward.default, (d(x), d(res), d(w), 1e-5, None)),
        (ops.rms_norm_forward.default, (d(x), None, d(w), 1e-6, torch.float32)),
        (ops.rms_norm_backward.default, (torch.randn_like(y), torch.randn_like(h), h, w, rstd)),
        (ops.rms_norm_backward.default, (torch.randn_like(y), None, x, w, rstd)),
        (ops.rms_norm_backward.default, (torch.randn_like(y), torch.randn_like(h), h, w, rstd, torch.bfloat16)),
        (ops.swiglu_forward.default, (d(a), d(b))),
        (ops.swiglu_backward.default, (torch.randn_like(a), a, b)),
        (ops.rope_qkv_forward.default, (d(qkv), rot, 2)),
        (ops.rope_qkv_backward.default, (torch.randn_like(q), torch.randn_like(k), torch.randn_like(v), rot, 2)),
        (ops.cross_entropy_forward.default, (d(logits), targets)),
        (ops.cross_entropy_backward.default, (torch.ones_like(loss), logits, targets, stats)),
        (ops.cross_entropy_forward.default, (d(logits), padded, 0, -100, 0.1)),
        (ops.cross_entropy_forward.default, (d(logits), targets, 2, 7, 0.0)),  # class 7 ignored
        (ops.cross_entropy_backward.default, (torch.randn_like(losses), logits, padded, stats_n, 0, -100, 0.1)),
        (ops.cross_entropy_backward.default, (torch.ones_like(loss), logits, padded, stats_n, 1, -100, 0.1)),
        (ops.rope_qkv_forward.default, (d(qkv), rot, 2, True)),
    ]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=["fp32", "fp64", "bf16"])
def test_opcheck_every_op(device, dtype):
    for op, args in op_samples(device, dtype, grad=True):
        torch.library.opcheck(op, args)


# ------------------------------------------------------------------ values and gradients vs PyTorch

def test_rms_norm_matches_torch():
    x, w = sample(4, 6, 32), sample(32)
    check_against(lambda x, w: lnn.rms_norm(x, w), torch_rms_norm, (x, w), 1e-10, 1e-10)
    r = sample(4, 6, 32)
    check_against(lambda x, r, w: lnn.add_rms_norm(x, r, w), lambda x, r, w: (x + r, torch_rms_norm(x + r, w)),
                  (x, r, w), 1e-10, 1e-10)


def test_rms_norm_module_mixed_dtypes_and_autocast():
    """The residual stream in fp32, a bf16 sublayer output: h stays fp32 whichever argument is which;
    under autocast the normed output is bf16, the dtype the next matmul reads."""
    norm = lnn.RMSNorm(16)
    x, r = torch.randn(2, 3, 16), torch.randn(2, 3, 16).bfloat16()
    for args in ((x, r), (r, x)):
        h, y = norm(args[0], residual=args[1])
        assert h.dtype == torch.float32 and y.dtype == torch.float32
        torch.testing.assert_close(h, x + r.float())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert norm(x).dtype == torch.bfloat16


@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_backward_writes_the_narrower_residuals_gradient(device):
    """With residual_dtype, rms_norm_backward also returns dx in that dtype, bit for bit dx's cast (on
    CUDA the kernel writes both in one pass: no cast kernel after it); the autograd formula uses it for a
    bf16 residual beside an fp32 h, and the gradients are those of the cast."""
    x = torch.randn(4, 6, 64, device=device)
    r, w = torch.randn(4, 6, 64, device=device).bfloat16(), torch.rand(64, device=device) + 0.5
    h, y, rstd = ops.rms_norm_forward(x, r, w, 1e-5, torch.bfloat16)
    dy, dh = torch.randn_like(y), torch.randn_like(h)
    dx, dw, dres = ops.rms_norm_backward(dy, dh, h, w, rstd, torch.bfloat16)
    assert dres.dtype == torch.bfloat16 and torch.equal(dres, dx.to(torch.bfloat16))
    dx2, dw2, empty = ops.rms_norm_backward(dy, dh, h, w, rstd)
    assert empty.numel() == 0 and torch.equal(dx2, dx) and torch.equal(dw2, dw)
    assert ops.rms_norm_backward(dy, dh, h, w, rstd, torch.float32)[2].numel() == 0  # h's own dtype: dx serves
    x, r = x.requires_grad_(), r.requires_grad_()
    h, y = lnn.add_rms_norm(x, r, w, out_dtype=torch.bfloat16)
    torch.autograd.backward((h, y), (dh, dy))
    assert r.grad.dtype == torch.bfloat16 and torch.equal(r.grad, x.grad.to(torch.bfloat16))


def test_swiglu_matches_torch():
    a, b = sample(3, 5, 40), sample(3, 5, 40)
    check_against(lnn.swiglu, lambda a, b: F.silu(a) * b, (a, b), 1e-10, 1e-10)
    ffn = lnn.SwiGLU(8, 24).double()
    x = sample(2, 8)
    check_against(ffn, lambda x: ffn.w2(F.silu(ffn.w1(x)) * ffn.w3(x)), (x,), 1e-10, 1e-10)


def test_rope_qkv_matches_torch():
    heads, d_head, T = 3, 8, 11
    qkv, rot = sample(2, T, 3 * heads * d_head), lnn.rope_table(d_head, 16)
    check_against(lambda t: lnn.rope_qkv(t, rot, heads), lambda t: torch_rope_qkv(t, rot, heads), (qkv,), 1e-6, 1e-6)
    module = lnn.RotaryQKV(heads, d_head, 16)
    torch.testing.assert_close(module.rotation, rot)


def test_cross_entropy_matches_torch():
    logits, targets = sample(3, 7, 30), torch.randint(30, (3, 7))
    check_against(lambda z: lnn.cross_entropy(z, targets),
                  lambda z: F.cross_entropy(z.flatten(0, 1), targets.flatten()), (logits,), 1e-10, 1e-10)
    bf16 = logits.detach().bfloat16()
    loss = lnn.CrossEntropyLoss()(bf16, targets)
    assert loss.dtype == torch.float32  # from bf16 logits, an fp32 loss (no fp32 copy of the logits)
    torch.testing.assert_close(loss, F.cross_entropy(bf16.float().flatten(0, 1), targets.flatten()))


@pytest.mark.parametrize("chunk_rows", [1, 4, 1000])
def test_linear_cross_entropy_matches_head_plus_loss(chunk_rows):
    x, w, targets = sample(2, 5, 12), sample(40, 12), torch.randint(40, (2, 5))
    check_against(lambda x, w: lnn.linear_cross_entropy(x, w, targets, chunk_rows),
                  lambda x, w: F.cross_entropy((x @ w.t()).flatten(0, 1), targets.flatten()), (x, w), 1e-10, 1e-10)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_cuda_kernels_match_the_cpu_reference(dtype):
    """The same ops on CUDA (the kernels, for bf16/fp32) against the CPU reference on the same inputs."""
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {"rtol": 1e-4, "atol": 1e-4}
    for op, args in op_samples("cpu", dtype):
        moved = tuple(t.cuda() if isinstance(t, torch.Tensor) else t for t in args)
        got, want = op(*moved), op(*args)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            torch.testing.assert_close(g.cpu().double(), w.double(), **tol, msg=lambda m: f"{op}: {m}")


# ------------------------------------------------------------------ compile, double backward

class Block(torch.nn.Module):
    """A pre-norm block built from lmscale.nn only, attention included."""

    def __init__(self, d=32, heads=2, max_len=64):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = lnn.RMSNorm(d), lnn.RMSNorm(d)
        self.qkv, self.out = torch.nn.Linear(d, 3 * d, bias=False), torch.nn.Linear(d, d, bias=False)
        self.rope = lnn.RotaryQKV(heads, d // heads, max_len)
        self.ffn = lnn.SwiGLU(d, 64)
        self.head = torch.nn.Linear(d, 50, bias=False)

    def forward(self, x, targets):
        B, T, C = x.shape
        q, k, v = self.rope(self.qkv(self.norm1(x)))
        attn = self.out(lmscale.flash_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C))
        h, y = self.norm2(attn, residual=x)
        return lnn.cross_entropy(self.head(h + self.ffn(y)), targets)


def test_compile_fullgraph_through_every_layer():
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Block()
    x, targets = torch.randn(2, 24, 32), torch.randint(50, (2, 24))
    eager = model(x, targets)
    eager_grads = torch.autograd.grad(eager, list(model.parameters()))
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    got = compiled(x, targets)
    got_grads = torch.autograd.grad(got, list(model.parameters()))
    torch.testing.assert_close(got, eager)
    for g, e in zip(got_grads, eager_grads):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("name", ["rms_norm", "swiglu", "cross_entropy"])
def test_double_backward_raises(name):
    x = sample(3, 8)
    out = {"rms_norm": lambda: lnn.rms_norm(x, torch.ones(8, dtype=torch.float64)).sum(),
           "swiglu": lambda: lnn.swiglu(x, x).sum(),
           "cross_entropy": lambda: lnn.cross_entropy(x, torch.zeros(3, dtype=torch.long))}[name]()
    (g,) = torch.autograd.grad(out, x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        g.sum().backward()


# ------------------------------------------------------------------ calls that record no graph stay in C++

def python_autograd_calls(fn):
    """The functions of torch/_library/autograd.py (register_autograd's kernel) that run while fn runs."""
    seen = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.replace("\\", "/").endswith("torch/_library/autograd.py"):
            seen.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


def every_op_with_python_autograd(device):
    q, k, v = (torch.randn(2, 3, 16, 16, device=device) for _ in range(3))  # head dim 16: the smallest with a CUDA kernel
    o, L = ops.flash_attention_forward(q, k, v, True)
    return op_samples(device, torch.float32) + [
        (ops.flash_attention_forward.default, (q, k, v, True)),
        (ops.flash_attention_backward.default, (q, k, v, o, L, torch.randn_like(o), True)),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_calls_that_record_no_graph_skip_the_python_autograd_kernel(device):
    """Grad off (every call of a torch.compile'd graph, every backward op), or no input requiring grad: the
    call goes below autograd in C++ (autograd_without_python, src/ops/fused_library.cpp), not through the
    Python kernel of register_autograd, which was about half of each call's host time (issue 28)."""
    for op, args in every_op_with_python_autograd(device):
        with torch.no_grad():
            assert python_autograd_calls(lambda: op(*args)) == [], op
        assert python_autograd_calls(lambda: op(*args)) == [], op
        outs = op(*args)
        assert not any(t.requires_grad for t in (outs if isinstance(outs, tuple) else (outs,))), op
    # A call that records a graph still runs the Python formula (setup_context, backward).
    x = torch.randn(3, 8, device=device, requires_grad=True)
    assert "autograd_impl" in python_autograd_calls(lambda: lnn.rms_norm(x, torch.ones(8, device=device)))
    q = torch.randn(1, 2, 4, 16, device=device, requires_grad=True)  # head dim 16: the smallest with a CUDA kernel
    # Attention's eager calls take the same formula as a plain autograd.Function (attention.py, _attend), whose
    # host time is a fraction of the register_autograd kernel's; under autocast the registered formula runs.
    o = lmscale.flash_attention(q, q, q, is_causal=True)
    assert type(o.grad_fn).__name__ == "_EagerAttentionBackward"
    with torch.autocast(device, dtype=torch.bfloat16):
        o = lmscale.flash_attention(q, q, q, is_causal=True)
    assert type(o.grad_fn).__name__.startswith("GeneratedBackwardFor_lmscale_flash_attention_forward")


def test_compiled_step_calls_no_python_autograd_kernel():
    """A compiled graph's forward and backward (grad off inside) call the ops with no Python between."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Block()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    x, targets = torch.randn(2, 24, 32), torch.randint(50, (2, 24))
    compiled(x, targets).backward()  # compiles (tracing runs the Python formulas)
    assert python_autograd_calls(lambda: compiled(x, targets).backward()) == []
