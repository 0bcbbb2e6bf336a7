"""lmscale.nn against PyTorch where users rely on it (issue 42 item 4, issue 41 rows 9-12): cross-entropy's
ignore_index, reduction and label_smoothing (values and gradients in fp64 against F.cross_entropy, the
all-ignored and empty cases included), linear_cross_entropy doing no gradient work when none is wanted,
RMSNorm with torch.nn.RMSNorm's constructor, RoPE in both pair layouts, lmscale.nn.apply_to on the
reference model and on Hugging Face Llama-style layers, and the refusals PyTorch makes: inputs on two
devices (one on ``meta``), integer inputs, targets outside the vocabulary; meta-device init."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import lmscale
import lmscale.nn as lnn
from lmscale.baseline import e2e

ops = torch.ops.lmscale


def sample(*shape, dtype=torch.float64):
    return torch.randn(*shape, dtype=dtype, requires_grad=True)


def values_and_grads(fn, ref, inputs, tol=1e-10):
    """fn and ref on the same inputs: outputs equal, and the gradients for one random output gradient."""
    out, want = fn(*inputs), ref(*inputs)
    torch.testing.assert_close(out.double(), want.double(), rtol=tol, atol=tol, equal_nan=True)
    if not want.requires_grad:
        return
    g = torch.randn_like(want) if want.dim() else torch.tensor(1.7, dtype=want.dtype)
    leaves = [t for t in inputs if t.requires_grad]
    got = torch.autograd.grad(out, leaves, g.to(out.dtype))
    expected = torch.autograd.grad(want, leaves, g)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a.double(), b.double(), rtol=tol, atol=tol)


class OpLog(TorchDispatchMode):
    """The names of the ops that run below autograd while it is active."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func.overloadpacket).split(".")[-1] if "lmscale" in str(func) else str(func))
        return func(*args, **(kwargs or {}))


# ------------------------------------------------------------------ cross-entropy: ignore_index, reduction, label_smoothing

def targets_with_ignored(shape, V, ignore_index):
    t = torch.randint(V, shape)
    t.view(-1)[::3] = ignore_index  # every third position ignored
    return t


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
@pytest.mark.parametrize("ignore_index", [-100, 3])
def test_cross_entropy_options_match_torch(reduction, label_smoothing, ignore_index):
    torch.manual_seed(0)
    logits, targets = sample(3, 5, 20), targets_with_ignored((3, 5), 20, ignore_index)
    kw = {"ignore_index": ignore_index, "reduction": reduction, "label_smoothing": label_smoothing}
    values_and_grads(lambda z: lnn.cross_entropy(z, targets, **kw),
                     lambda z: F.cross_entropy(z.flatten(0, 1), targets.flatten(), **kw).reshape(
                         targets.shape if reduction == "none" else ()), (logits,))
    module = lnn.CrossEntropyLoss(**kw)
    torch.testing.assert_close(module(logits, targets).double(),
                               torch.nn.CrossEntropyLoss(**kw)(logits.flatten(0, 1), targets.flatten()).reshape(
                                   targets.shape if reduction == "none" else ()))


def test_cross_entropy_ignore_index_in_low_precision_has_no_nan():
    """-100 in the targets (Hugging Face's padding label): an error on the CPU and NaN on CUDA before."""
    torch.manual_seed(1)
    logits = (3 * torch.randn(4, 50)).bfloat16().requires_grad_()
    targets = torch.tensor([1, -100, 7, -100])
    loss = lnn.cross_entropy(logits, targets)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()
    assert (logits.grad[1] == 0).all() and (logits.grad[3] == 0).all()
    torch.testing.assert_close(loss, F.cross_entropy(logits.detach().float(), targets))


def test_cross_entropy_every_target_ignored_and_no_rows_agree_with_torch():
    """As PyTorch: the mean over no counted position is NaN with zero gradients; the sum is 0."""
    z, t = sample(3, 5), torch.full((3,), -100)
    for reduction in ("mean", "sum"):
        values_and_grads(lambda z: lnn.cross_entropy(z, t, reduction=reduction),
                         lambda z: F.cross_entropy(z, t, reduction=reduction), (z,))
    empty_z, empty_t = torch.randn(0, 5), torch.zeros(0, dtype=torch.long)
    w = torch.randn(5, 4)
    for reduction in ("mean", "sum", "none"):
        want = F.cross_entropy(empty_z, empty_t, reduction=reduction)
        got = lnn.cross_entropy(empty_z, empty_t, reduction=reduction)
        torch.testing.assert_close(got, want, equal_nan=True)
        with torch.no_grad():
            lce = lnn.linear_cross_entropy(torch.randn(0, 4), w, empty_t, reduction=reduction)
        torch.testing.assert_close(lce, want, equal_nan=True)
    lce = lnn.linear_cross_entropy(torch.randn(0, 4, requires_grad=True), w, empty_t)  # the gradient path too
    torch.testing.assert_close(lce, torch.tensor(float("nan")), equal_nan=True)


@pytest.mark.parametrize("bad", [57, -1, -100])
def test_cross_entropy_target_outside_the_vocabulary_is_named(bad):
    """Issue 41 row 11: a raw index error naming neither op nor cause before; -100 is now ignored."""
    logits, targets = torch.randn(2, 3, 50), torch.tensor([[1, 2, 3], [4, bad, 6]])
    if bad == -100:
        torch.testing.assert_close(lnn.cross_entropy(logits, targets),
                                   F.cross_entropy(logits.flatten(0, 1), targets.flatten()))
        return
    with pytest.raises(RuntimeError, match=rf"cross_entropy: target {bad} \(position 4 .*outside the vocabulary "
                                           r"\[0, 50\) and is not ignore_index \(-100\)"):
        lnn.cross_entropy(logits, targets)
    with pytest.raises(RuntimeError, match="outside the vocabulary"):
        lnn.linear_cross_entropy(torch.randn(2, 3, 8), torch.randn(50, 8), targets)


def test_cross_entropy_refuses_what_torch_refuses():
    with pytest.raises(ValueError, match="reduction must be"):
        lnn.cross_entropy(torch.randn(2, 5), torch.zeros(2, dtype=torch.long), reduction="avg")
    with pytest.raises(RuntimeError, match="label_smoothing must be between 0.0 and 1.0"):
        lnn.cross_entropy(torch.randn(2, 5), torch.zeros(2, dtype=torch.long), label_smoothing=1.5)
    with pytest.raises(ValueError, match="class-probability targets"):
        lnn.cross_entropy(torch.randn(2, 5), torch.rand(2, 5).softmax(-1)[:, 0])
    with pytest.raises(NotImplementedError, match="weight"):
        lnn.CrossEntropyLoss(weight=torch.ones(5))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_cross_entropy_kernel_options_match_torch(dtype):
    """The CUDA kernels with ignore_index, label smoothing and each reduction against F.cross_entropy in fp64,
    at vocabularies that are no multiple of a vector (1001: bf16 rows at every 16-byte offset) or a block (37)."""
    for V in (1001, 37):
        for reduction in ("mean", "sum", "none"):
            for eps in (0.0, 0.1):
                torch.manual_seed(V)
                z = (3 * torch.randn(4, 9, V, device="cuda") + 100).to(dtype).requires_grad_()
                t = targets_with_ignored((4, 9), V, -100).cuda()
                kw = {"reduction": reduction, "label_smoothing": eps}
                loss = lnn.cross_entropy(z, t, **kw)
                z64 = z.detach().double().requires_grad_()
                want = F.cross_entropy(z64.flatten(0, 1), t.flatten(), **kw).reshape(loss.shape)
                assert loss.dtype == torch.float32
                torch.testing.assert_close(loss.double(), want, rtol=1e-5, atol=1e-5)
                g = torch.randn_like(want)
                got, = torch.autograd.grad(loss, z, g.float())
                ref, = torch.autograd.grad(want, z64, g)
                assert got.dtype == dtype and (got[t == -100] == 0).all()
                tol = 1e-5 if dtype == torch.float32 else 1e-2
                assert ((got.double() - ref).abs().max() / ref.abs().max()).item() < tol, (V, reduction, eps)
    z = torch.randn(3, 50, device="cuda")
    assert lnn.cross_entropy(z, torch.tensor([-100, -100, -100], device="cuda")).isnan()  # as PyTorch's 0/0


# ------------------------------------------------------------------ linear_cross_entropy

@pytest.mark.parametrize("chunk_rows", [1, 4, 1000])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_linear_cross_entropy_options_match_torch(chunk_rows, reduction):
    torch.manual_seed(2)
    x, w, t = sample(2, 5, 12), sample(40, 12), targets_with_ignored((2, 5), 40, -100)
    kw = {"reduction": reduction, "label_smoothing": 0.1}
    values_and_grads(lambda x, w: lnn.linear_cross_entropy(x, w, t, chunk_rows, **kw),
                     lambda x, w: F.cross_entropy((x @ w.t()).flatten(0, 1), t.flatten(), **kw), (x, w))


def test_linear_cross_entropy_does_no_gradient_work_when_none_is_wanted():
    """Issue 42: under no_grad it computed both gradients anyway (4.7x the time of the loss). Counted by the
    ops that run: per chunk one matmul and one loss without gradient; one more matmul for each gradient
    that is wanted (a frozen head: dx only)."""
    torch.manual_seed(3)
    x, w, t = torch.randn(10, 8), torch.randn(30, 8), targets_with_ignored((10,), 30, -100)
    want = F.cross_entropy(x @ w.t(), t)
    for ctx, xg, wg, backwards, matmuls in ((torch.no_grad(), True, True, 0, 3),
                                            (torch.enable_grad(), False, False, 0, 3),
                                            (torch.enable_grad(), True, False, 3, 6),
                                            (torch.enable_grad(), True, True, 3, 9)):
        xi, wi = x.clone().requires_grad_(xg), w.clone().requires_grad_(wg)
        with ctx, OpLog() as log:
            loss = lnn.linear_cross_entropy(xi, wi, t, chunk_rows=4)
        torch.testing.assert_close(loss, want)
        assert log.names.count("cross_entropy_backward") == backwards, (xg, wg, log.names)
        assert sum(n in ("aten.mm.default", "aten.matmul.default") for n in log.names) == matmuls, (xg, wg, log.names)
    with torch.no_grad():  # per-position losses for evaluation
        per = lnn.linear_cross_entropy(x.view(2, 5, 8), w, t.view(2, 5), chunk_rows=3, reduction="none")
    torch.testing.assert_close(per, F.cross_entropy(x @ w.t(), t, reduction="none").view(2, 5))
    with pytest.raises(NotImplementedError, match="reduction='none' is for evaluation"):
        lnn.linear_cross_entropy(x.requires_grad_(), w, t, reduction="none")


# ------------------------------------------------------------------ RMSNorm with torch.nn.RMSNorm's constructor

@pytest.mark.parametrize("kwargs", [{}, {"eps": 1e-6}, {"elementwise_affine": False}, {"eps": None}],
                         ids=["default", "eps", "no-affine", "eps-None"])
@pytest.mark.parametrize("shape", [8, (3, 8)], ids=["1d", "2d"])
def test_rms_norm_module_takes_torchs_constructor(kwargs, shape):
    torch.manual_seed(4)
    ref = torch.nn.RMSNorm(shape, dtype=torch.float64, **kwargs)
    ours = lnn.RMSNorm(shape, dtype=torch.float64, **kwargs)
    assert ours.state_dict().keys() == ref.state_dict().keys()
    assert (ours.weight is None) == (ref.weight is None) and ours.eps == ref.eps
    if ref.weight is not None:
        with torch.no_grad():
            ref.weight.copy_(torch.rand_like(ref.weight) + 0.5)
        ours.load_state_dict(ref.state_dict())
    x = sample(2, 3, 8) * 1e-4  # small: eps=None (the dtype's epsilon) differs from 1e-5 here
    params = [p for p in ours.parameters()]
    out = ours(x)
    torch.testing.assert_close(out, ref(x), rtol=1e-12, atol=1e-12)
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, [x] + params, g)
    want = torch.autograd.grad(ref(x), [x] + list(ref.parameters()), g)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert repr(ours).replace("RMSNorm", "") == repr(ref).replace("RMSNorm", "")
    x32 = torch.randn(4, 3, 8)  # fp32: eps=None is float32's epsilon, as PyTorch's
    torch.testing.assert_close(ours.float()(x32), ref.float()(x32))


# ------------------------------------------------------------------ RoPE, both pair layouts

def hf_rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def hf_rope(qkv, heads, theta=10000.0):
    """Hugging Face Llama's RoPE (LlamaRotaryEmbedding + apply_rotary_pos_emb), written out."""
    B, T, C3 = qkv.shape
    D = C3 // 3 // heads
    q, k, v = qkv.view(B, T, 3, heads, D).permute(2, 0, 3, 1, 4)
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    return q * cos + hf_rotate_half(q) * sin, k * cos + hf_rotate_half(k) * sin, v


def gptj_rope(qkv, heads, theta=10000.0):
    """Adjacent pairs (GPT-J, the spec's): (x_2i, x_2i+1) turned by position · theta^(-2i/D)."""
    B, T, C3 = qkv.shape
    D = C3 // 3 // heads
    q, k, v = qkv.view(B, T, 3, heads, D).permute(2, 0, 3, 1, 4)
    angle = torch.outer(torch.arange(T, dtype=torch.float64), theta ** (-torch.arange(0, D, 2, dtype=torch.float64) / D))
    turn = lambda x: torch.stack((x[..., 0::2] * angle.cos() - x[..., 1::2] * angle.sin(),  # noqa: E731
                                  x[..., 0::2] * angle.sin() + x[..., 1::2] * angle.cos()), -1).flatten(-2)
    return turn(q), turn(k), v


@pytest.mark.parametrize("layout,ref", [("adjacent", gptj_rope), ("rotate_half", hf_rope)])
def test_rope_layouts_match_their_reference(layout, ref):
    heads, d_head, T = 2, 8, 7
    qkv = sample(2, T, 3 * heads * d_head)
    module = lnn.RotaryQKV(heads, d_head, 16, layout=layout)
    rot = lnn.rope_table(d_head, 16)
    for fn in (lambda t: module(t), lambda t: lnn.rope_qkv(t, rot, heads, layout)):
        out, want = fn(qkv), ref(qkv, heads)
        g = [torch.randn_like(w) for w in want]
        for o, w in zip(out, want):
            torch.testing.assert_close(o, w, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(torch.autograd.grad(out, qkv, g)[0], torch.autograd.grad(want, qkv, g)[0],
                                   rtol=1e-6, atol=1e-6)
    assert f"layout={layout!r}" in repr(module)
    torch.library.opcheck(ops.rope_qkv_forward.default, (qkv.detach().requires_grad_(), rot, heads, True))
    q, k, v = ops.rope_qkv_forward(qkv.detach(), rot, heads, True)
    torch.library.opcheck(ops.rope_qkv_backward.default, (q, k, v, rot, heads, True))


def test_rope_layout_is_named_or_refused():
    with pytest.raises(ValueError, match="'adjacent'.*'rotate_half'"):
        lnn.RotaryQKV(2, 8, 16, layout="half")
    assert lnn.ROPE_LAYOUTS == ("adjacent", "rotate_half")


# ------------------------------------------------------------------ lmscale.nn.apply_to

def tiny_reference_lm(attention="naive"):
    torch.manual_seed(5)
    return e2e.LM(vocab=50, d_model=32, d_ff=64, layers=2, heads=2, max_len=16, attention=attention)


def test_apply_to_swaps_the_reference_model_in_place_and_keeps_its_parameters():
    model = tiny_reference_lm()
    ref = copy.deepcopy(model)
    params_before = dict(model.named_parameters())
    report = lnn.apply_to(model)
    text = str(report)
    assert "swapped 9 modules" in text, text  # 2 blocks: 2 norms, attention, the block; the final norm
    assert "2 x Block -> " in text and "2 x Attention -> " in text and "5 x RMSNorm -> lmscale.nn.RMSNorm" in text
    assert [s.path for s in report if s.was == "Block"] == ["blocks.0", "blocks.1"]
    assert isinstance(model.ln, lnn.RMSNorm) and isinstance(model.blocks[0].attn.rope, lnn.RotaryQKV)
    assert dict(model.named_parameters()).keys() == params_before.keys()
    assert all(p is params_before[n] for n, p in model.named_parameters())  # the same Parameter objects
    assert model.state_dict().keys() == ref.state_dict().keys()
    ids = torch.randint(50, (2, 12))
    out, want = model(ids), ref(ids)
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
    g = torch.randn_like(want)
    for a, b in zip(torch.autograd.grad(out, list(model.parameters()), g),
                    torch.autograd.grad(want, list(ref.parameters()), g)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert len(lnn.apply_to(model)) == 0  # nothing left to swap
    assert "swapped nothing" in str(lnn.apply_to(torch.nn.Linear(2, 2)))


def test_apply_to_can_leave_a_kind_alone():
    model = tiny_reference_lm()
    report = lnn.apply_to(model, attention=False)
    assert {s.was for s in report} == {"Block", "RMSNorm"}
    assert isinstance(model.blocks[0].attn, e2e.Attention)
    model = tiny_reference_lm()
    report = lnn.apply_to(model, swiglu=False)  # norms alone (the block's inline SwiGLU stays) and attention
    assert {s.was for s in report} == {"RMSNorm", "Attention"} and isinstance(model.blocks[0], e2e.Block)


class LlamaRMSNorm(torch.nn.Module):
    """Hugging Face's LlamaRMSNorm (transformers/models/llama/modeling_llama.py), as written there."""

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaMLP(torch.nn.Module):
    """Hugging Face's LlamaMLP, as written there (ACT2FN["silu"] is torch.nn.SiLU)."""

    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = torch.nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = torch.nn.Linear(intermediate, hidden, bias=False)
        self.act_fn = torch.nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class LlamaLikeLayer(torch.nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = LlamaRMSNorm(d), LlamaRMSNorm(d)
        self.mlp = LlamaMLP(d, 40)
        self.norm = torch.nn.RMSNorm(d)

    def forward(self, x):
        h = x + self.mlp(self.post_attention_layernorm(self.input_layernorm(x)))
        return self.norm(h)


def test_apply_to_swaps_hugging_face_llama_layers():
    torch.manual_seed(6)
    model = LlamaLikeLayer()
    with torch.no_grad():
        for n in (model.input_layernorm, model.post_attention_layernorm, model.norm):
            n.weight.copy_(torch.rand_like(n.weight) + 0.5)
    ref = copy.deepcopy(model)
    report = lnn.apply_to(model)
    assert {(s.path, s.was) for s in report} == {("input_layernorm", "LlamaRMSNorm"), ("norm", "RMSNorm"),
                                                 ("post_attention_layernorm", "LlamaRMSNorm"), ("mlp", "LlamaMLP")}
    assert model.state_dict().keys() == ref.state_dict().keys()
    assert model.input_layernorm.eps == 1e-6
    x = torch.randn(2, 5, 16, requires_grad=True)
    out, want = model(x), ref(x)
    torch.testing.assert_close(out, want)
    g = torch.randn_like(out)
    torch.testing.assert_close(torch.autograd.grad(out, x, g)[0], torch.autograd.grad(want, x, g)[0])


def test_apply_to_a_transformers_llama():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(7)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ref = copy.deepcopy(model)
    report = lnn.apply_to(model)
    assert sum(s.was == "LlamaRMSNorm" for s in report) == 5 and sum(s.was == "LlamaMLP" for s in report) == 2
    ids = torch.randint(64, (2, 10))
    torch.testing.assert_close(model(ids).logits, ref(ids).logits, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ refusals PyTorch makes (issue 41 rows 9, 10)

def one_input_on_meta():
    """(name, call) for each op, forward and backward, with one input moved to `meta`."""
    m = lambda t: t.to("meta")  # noqa: E731
    x, w = torch.randn(2, 8), torch.ones(8)
    a = torch.randn(2, 8)
    qkv, rot = torch.randn(1, 4, 3 * 8), lnn.rope_table(4, 8)
    z, t = torch.randn(3, 10), torch.randint(10, (3,))
    h, y, rstd = ops.rms_norm_forward(x, None, w, 1e-5, None)
    loss, stats = ops.cross_entropy_forward(z, t)
    q, k, v = (torch.randn(1, 2, 4, 16) for _ in range(3))
    o, L = ops.flash_attention_forward(q, k, v, True)
    return [
        ("rms_norm", lambda: lnn.rms_norm(x, m(w))),
        ("rms_norm_backward", lambda: ops.rms_norm_backward(torch.randn(2, 8), None, x, m(w), rstd)),
        ("swiglu", lambda: lnn.swiglu(a, m(a))),
        ("swiglu_backward", lambda: ops.swiglu_backward(m(a), a, a)),
        ("rope_qkv", lambda: lnn.rope_qkv(qkv, m(rot), 2)),
        ("rope_qkv_backward", lambda: ops.rope_qkv_backward(*(torch.randn(1, 2, 4, 4) for _ in range(3)), m(rot), 2)),
        ("cross_entropy", lambda: lnn.cross_entropy(z, m(t))),
        ("cross_entropy_backward", lambda: ops.cross_entropy_backward(torch.ones(()), z, t, m(stats))),
        ("flash_attention", lambda: lmscale.flash_attention(q, m(k), v, is_causal=True)),
        ("flash_attention_backward", lambda: ops.flash_attention_backward(q, k, v, o, L, m(o), True)),
    ]


@pytest.mark.parametrize("name", [n for n, _ in one_input_on_meta()])
def test_an_input_on_meta_is_refused(name):
    """Issue 41 row 9: uninitialised memory came back (the fake kernel answers calls with a meta input)."""
    call = dict(one_input_on_meta())[name]
    with pytest.raises(RuntimeError, match="device"):
        call()


def test_every_input_on_meta_still_gives_shapes():
    x, w = torch.randn(2, 8, device="meta"), torch.ones(8, device="meta")
    assert lnn.rms_norm(x, w).shape == (2, 8) and lnn.rms_norm(x, w).is_meta
    z, t = torch.randn(3, 10, device="meta"), torch.zeros(3, dtype=torch.long, device="meta")
    assert lnn.cross_entropy(z, t, reduction="none").shape == (3,)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_integer_inputs_are_refused_as_torch_does(dtype):
    """Issue 41 row 10: RMSNorm and swiglu returned 0/1 or zeros for integer input."""
    x = torch.ones(2, 8, dtype=dtype)
    with pytest.raises((RuntimeError, NotImplementedError)):
        torch.nn.RMSNorm(8)(x)
    with pytest.raises(RuntimeError, match="rms_norm: x must be a floating-point tensor"):
        lnn.RMSNorm(8)(x)
    with pytest.raises(RuntimeError, match="swiglu: a must be a floating-point tensor"):
        lnn.swiglu(x, x)
    with pytest.raises(RuntimeError, match="floating-point"):
        lnn.cross_entropy(x, torch.zeros(2, dtype=torch.long))


# ------------------------------------------------------------------ meta-device init (issue 41 row 12)

class TinyModel(torch.nn.Module):
    def __init__(self, d=32, heads=2, max_len=32, vocab=40):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.norm = lnn.RMSNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.rope = lnn.RotaryQKV(heads, d // heads, max_len)
        self.out = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, ids, targets):
        B, T = ids.shape
        q, k, v = self.rope(self.qkv(self.norm(self.emb(ids))))
        o = lmscale.flash_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, -1)
        return lnn.cross_entropy(self.out(o), targets)


def test_meta_device_init_then_to_empty_and_load_state_dict_gives_the_real_loss():
    """Issue 41 row 12: the RoPE table (a non-persistent buffer) stayed uninitialised: NaN loss."""
    torch.manual_seed(8)
    real = TinyModel()
    with torch.device("meta"):
        model = TinyModel()
    model.to_empty(device="cpu")
    model.load_state_dict(real.state_dict())
    ids, targets = torch.randint(40, (2, 16)), torch.randint(40, (2, 16))
    torch.testing.assert_close(model(ids, targets), real(ids, targets), rtol=0, atol=0)


def test_reset_parameters_as_torch_nn_layers_have():
    rope, norm = lnn.RotaryQKV(2, 8, 16, layout="rotate_half"), lnn.RMSNorm(8)
    with torch.no_grad():
        rope.rotation.fill_(float("nan"))
        norm.weight.fill_(3.0)
    rope.reset_parameters()
    norm.reset_parameters()
    torch.testing.assert_close(rope.rotation, lnn.rope_table(8, 16))
    assert (norm.weight == 1).all()
    lnn.RMSNorm(8, elementwise_affine=False).reset_parameters()  # no weight: nothing to do


def test_fsdp2_meta_init_recipe():
    """torchtitan's recipe with FSDP2 (one process, gloo): build on meta, fully_shard, to_empty, then
    reset_parameters on every module that has it; with the weights of a model built directly, it computes
    the same loss."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    if not dist.is_available() or dist.is_initialized():
        pytest.skip("needs torch.distributed, not yet initialised")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(9)
        real = TinyModel()
        with torch.device("meta"):
            model = TinyModel()
        fully_shard(model)
        model.to_empty(device="cpu")
        for m in model.modules():
            if hasattr(m, "reset_parameters"):
                m.reset_parameters()
        torch.testing.assert_close(model.rope.rotation, real.rope.rotation, rtol=0, atol=0)
        assert (model.norm.weight.full_tensor() == 1).all()
        with torch.no_grad():  # one rank: each parameter's local shard is the whole of it
            for mine, theirs in zip(model.parameters(), real.parameters()):
                mine.to_local().copy_(theirs)
        ids, targets = torch.randint(40, (2, 16)), torch.randint(40, (2, 16))
        loss = model(ids, targets)
        torch.testing.assert_close(loss, real(ids, targets))
        loss.backward()
    finally:
        dist.destroy_process_group()
