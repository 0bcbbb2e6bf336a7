"""lmscale's attention as a PyTorch 2.x custom op: the Python-visible autograd graph (what forward
saved), torch.library.opcheck of both ops, torch.compile(fullgraph=True) forward and backward against
eager, dynamic shapes without recompiles, the autograd.Function form, and the lazy import."""
import os
import pathlib
import subprocess
import sys

import pytest
import torch

import lmscale

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def qkv(shape, dtype=torch.float32, device="cpu", requires_grad=True):
    return tuple(torch.randn(*shape, dtype=dtype, device=device, requires_grad=requires_grad) for _ in range(3))


@pytest.mark.parametrize("shape", [(2, 3, 40, 16), (4, 33, 32), (9, 16)], ids=["bhnd", "bnd", "nd"])
@pytest.mark.parametrize("use_function", [False, True], ids=["op", "autograd_function"])
def test_grad_fn_saves_qkv_o_and_one_logsumexp(shape, use_function):
    """o.grad_fn.saved_tensors is (q, k, v, O, L): L is the only one shaped (..., Nq), fp32."""
    q, k, v = qkv(shape)
    if use_function:
        o = lmscale.FlashAttentionFunction.apply(q, k, v, True)
    else:
        o = lmscale.flash_attention(q, k, v, is_causal=True)
    saved = o.grad_fn.saved_tensors
    assert len(saved) == 5
    like_L = [t for t in saved if t.shape == q.shape[:-1]]
    assert len(like_L) == 1 and like_L[0].dtype == torch.float32
    assert sum(t.shape == q.shape for t in saved) == 4
    for t, want in zip(saved[:3], (q, k, v)):
        assert t.data_ptr() == want.data_ptr()  # the inputs themselves, not copies
    assert saved[3].data_ptr() == o.data_ptr()
    # The saved L is the forward's logsumexp.
    _, L = lmscale.flash_attention_forward(q.detach(), k.detach(), v.detach(), True)
    torch.testing.assert_close(like_L[0], L)
    o.sum().backward()
    assert q.grad is not None and q.grad.shape == q.shape


def test_autograd_function_matches_op():
    q, k, v = qkv((2, 2, 19, 32))
    dout = torch.randn(2, 2, 19, 32)
    o1 = lmscale.flash_attention(q, k, v, is_causal=False)
    g1 = torch.autograd.grad(o1, (q, k, v), dout)
    o2 = lmscale.FlashAttentionFunction.apply(q, k, v, False)
    g2 = torch.autograd.grad(o2, (q, k, v), dout)
    torch.testing.assert_close(o1, o2, rtol=0, atol=0)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_opcheck_both_ops(device, dtype, causal):
    """Schema, fake (meta) implementation, autograd registration and AOT dispatch (static and
    dynamic shapes) of the forward op, and of the backward op fed real forward outputs."""
    q, k, v = qkv((2, 2, 37, 32), dtype, device)
    torch.library.opcheck(torch.ops.lmscale.flash_attention_forward.default, (q, k, v, causal))
    torch.library.opcheck(torch.ops.lmscale.flash_attention.default, (q, k, v, causal))
    with torch.no_grad():
        o, L = lmscale.flash_attention_forward(q, k, v, causal)
    dout = torch.randn_like(o)
    args = (q.detach(), k.detach(), v.detach(), o, L, dout, causal)
    torch.library.opcheck(torch.ops.lmscale.flash_attention_backward.default, args)


class TinyAttention(torch.nn.Module):
    """A small attention block: projections, lmscale.flash_attention over heads, output projection."""

    def __init__(self, dim=32, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        o = lmscale.flash_attention(q, k, v, is_causal=True)
        return self.out(o.transpose(1, 2).reshape(b, n, d))


def forward_backward(model, x):
    model.zero_grad()
    y = model(x)
    (y * y).sum().backward()
    return y.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_matches_eager(device):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = TinyAttention().to(device)
    x = torch.randn(2, 24, 32, device=device)
    y_eager, g_eager = forward_backward(model, x)
    compiled = torch.compile(model, fullgraph=True)  # fullgraph: any graph break raises
    y, g = forward_backward(compiled, x)
    torch.testing.assert_close(y, y_eager, rtol=1e-5, atol=1e-5)
    for a, b in zip(g, g_eager):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_compile_dynamic_new_length_does_not_recompile():
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = TinyAttention()
    frames = []
    backend = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(model, backend=backend, fullgraph=True, dynamic=True)
    for n in (24, 37, 130):
        x = torch.randn(2, n, 32)
        y, g = forward_backward(compiled, x)
        y_eager, g_eager = forward_backward(model, x)
        torch.testing.assert_close(y, y_eager, rtol=1e-5, atol=1e-5)
        frames.append(backend.frame_count)
    assert frames == [1, 1, 1], f"compiled frames after each length: {frames} (a recompile for a new length)"


def test_fake_shapes_and_dtypes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(3, 5, 7, 16, dtype=torch.bfloat16)
        k = torch.empty(3, 5, 9, 16, dtype=torch.bfloat16)
        o, L = torch.ops.lmscale.flash_attention_forward(q, k, k, False)
        assert o.shape == q.shape and o.dtype == torch.bfloat16
        assert L.shape == (3, 5, 7) and L.dtype == torch.float32
        q64 = torch.empty(4, 8, 16, dtype=torch.float64)
        assert torch.ops.lmscale.flash_attention_forward(q64, q64, q64, True)[1].dtype == torch.float64
        with pytest.raises(RuntimeError, match="share the head dim"):
            torch.ops.lmscale.flash_attention_forward(q, k[..., :8], k[..., :8], False)


def run_python(code, **env):
    """`code` in a fresh interpreter from the filesystem root (not this checkout), with lmscale's
    package folder on the path; returns (exit code, output)."""
    package = pathlib.Path(lmscale.__file__).resolve().parents[1]
    full_env = {**os.environ, "PYTHONPATH": str(package), **env}
    if "LMSCALE_BUILD_DIR" in full_env:  # the child runs elsewhere: make a relative folder absolute
        full_env["LMSCALE_BUILD_DIR"] = str(pathlib.Path(full_env["LMSCALE_BUILD_DIR"]).resolve())
    proc = subprocess.run([sys.executable, "-c", code], cwd="/", env=full_env, capture_output=True, text=True,
                          timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def test_import_without_a_build():
    """`import lmscale` (which pure-Python subpackages such as lmscale.plots trigger) must work with
    no build at all (with one, it registers the ops at import: test_attention_sdpa.py); the first op
    use then fails with a message naming the fix."""
    code = (
        "import lmscale\n"
        "maps = open('/proc/self/maps').read()\n"
        "assert 'liblmscale' not in maps and 'lmscale/_C' not in maps, 'library loaded at import'\n"
        "try:\n"
        "    lmscale.flash_attention\n"
        "except ImportError as e:\n"
        "    print('ERROR:', e)\n"
    )
    rc, out = run_python(code, LMSCALE_LIBRARY="/nonexistent/liblmscale.so")
    assert rc == 0, out
    assert "ERROR:" in out and "LMSCALE_LIBRARY" in out, out


def test_python_m_lmscale_reports_the_build():
    rc, out = run_python("import runpy; runpy.run_module('lmscale', run_name='__main__')")
    assert rc == 0, out
    for word in ("library", "CUDA", "head dims", "dtypes"):
        assert word in out, out
