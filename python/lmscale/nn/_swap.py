"""lmscale.nn.apply_to(model): swaps, in place, the layers of a PyTorch model that lmscale.nn has a fused
version of, and says what it swapped (Liger-Kernel's ``apply_liger_kernel_to_llama`` and torchao's
``convert_to_float8_training(model)`` are the same kind of entry point).

What is recognised, by type (never by a guess from a layer's name alone):

- RMSNorm: ``torch.nn.RMSNorm``, the reference model's (``lmscale.baseline.e2e.RMSNorm``) and Hugging
  Face's Llama-family ones (``LlamaRMSNorm``, ``MistralRMSNorm``, ``MixtralRMSNorm``, ``Qwen2RMSNorm``,
  ``Qwen3RMSNorm``: ``weight · x / rms(x)``; Gemma's ``(1 + weight)`` form is not one of them) become
  ``lmscale.nn.RMSNorm`` holding the same ``weight`` Parameter;
- the gated SwiGLU MLP of Hugging Face's Llama family (``gate_proj``, ``up_proj``, ``down_proj`` and a
  SiLU ``act_fn``) gets the fused gate between its GEMMs, keeping its three Linear layers;
- the reference model's blocks (``lmscale.baseline.e2e.Block``): the residual add fused with the second
  norm, the fused SwiGLU gate, and in its attention the QKV split + RoPE (adjacent pairs) in one pass and
  ``lmscale.flash_attention`` in place of SDPA (or the written-out attention).

Every swapped module keeps the original's parameters (the same Parameter objects, under the same names),
so the state_dict, an optimizer built before the swap and a checkpoint loaded after it are unaffected.
Hugging Face attention layers are left as they are (their RoPE and attention run inside
``LlamaAttention.forward`` with the KV cache and masks); a GPT-NeoX model (LayerNorm, a GELU MLP) has
nothing of these kinds, and the report says so.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Optional

import torch
import torch.nn.functional as F

_HF_RMS_NORMS = ("LlamaRMSNorm", "MistralRMSNorm", "MixtralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm")


@dataclasses.dataclass(frozen=True)
class Swap:
    path: str  # the module's name in the model ("model.layers.0.mlp"; "" for the model itself)
    was: str   # its class
    now: str   # what replaced it


class SwapReport(list):
    """The swaps apply_to made, one ``Swap(path, was, now)`` each, in model order; ``str()`` summarises
    them by kind."""

    def __str__(self) -> str:
        if not self:
            return ("lmscale.nn.apply_to: swapped nothing (no torch.nn.RMSNorm, Hugging Face Llama-family RMSNorm or "
                    "SwiGLU MLP, or lmscale reference-model block in this model)")
        counts = collections.Counter((s.was, s.now) for s in self)
        lines = [f"lmscale.nn.apply_to: swapped {len(self)} module{'s' if len(self) != 1 else ''}:"]
        lines += [f"  {n} x {was} -> {now}" for (was, now), n in counts.items()]
        return "\n".join(lines)


# ------------------------------------------------------------------ the replacements


def _rms_norm_like(module: torch.nn.Module):
    """(normalized_shape, eps, weight) of a recognised RMSNorm, else None."""
    from ..baseline import e2e

    if isinstance(module, torch.nn.RMSNorm):
        return tuple(module.normalized_shape), module.eps, module.weight
    if isinstance(module, e2e.RMSNorm):
        return tuple(module.weight.shape), module.eps, module.weight
    if type(module).__name__ in _HF_RMS_NORMS and isinstance(getattr(module, "weight", None), torch.nn.Parameter):
        return tuple(module.weight.shape), getattr(module, "variance_epsilon", getattr(module, "eps", 1e-6)), module.weight
    return None


def _lmscale_rms_norm(shape: tuple, eps: Optional[float], weight: Optional[torch.nn.Parameter]) -> torch.nn.Module:
    from . import RMSNorm

    with torch.device("meta"):  # no throwaway allocation: the original's weight is put in
        new = RMSNorm(shape, eps=eps, elementwise_affine=weight is not None)
    if weight is not None:
        new.weight = weight
    return new


class GatedMLP(torch.nn.Module):
    """Hugging Face's Llama MLP, ``down_proj(silu(gate_proj x) · up_proj x)``, with lmscale's fused gate;
    the same three Linear modules under the same names."""

    def __init__(self, mlp: torch.nn.Module) -> None:
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = mlp.gate_proj, mlp.up_proj, mlp.down_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from .functional import swiglu

        return self.down_proj(swiglu(self.gate_proj(x), self.up_proj(x)))


def _is_swiglu_mlp(module: torch.nn.Module) -> bool:
    linear = lambda name: isinstance(getattr(module, name, None), torch.nn.Linear)  # noqa: E731
    act = getattr(module, "act_fn", None)
    return (linear("gate_proj") and linear("up_proj") and linear("down_proj") and
            (isinstance(act, torch.nn.SiLU) or type(act).__name__ == "SiLUActivation"))


class ReferenceAttention(torch.nn.Module):
    """The reference model's attention (lmscale.baseline.e2e.Attention) on lmscale's ops: the q, k, v
    projections as one GEMM (their weights concatenated per call, so the three Parameters stay as they
    are), the QKV split + RoPE (adjacent pairs) in one pass, lmscale.flash_attention (causal)."""

    def __init__(self, attn: torch.nn.Module) -> None:
        super().__init__()
        from . import RotaryQKV

        self.q, self.k, self.v, self.o, self.heads = attn.q, attn.k, attn.v, attn.o, attn.heads
        rope = attn.rope  # the reference's Rope: theta 10000, adjacent pairs, (max_len, D/2) cos and sin tables
        self.rope = RotaryQKV(self.heads, rope.cos.shape[1] * 2, rope.cos.shape[0], 10000.0, device=rope.cos.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from .. import flash_attention

        B, T, C = x.shape
        qkv = F.linear(x, torch.cat([self.q.weight, self.k.weight, self.v.weight]))
        q, k, v = self.rope(qkv)
        return self.o(flash_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C))


class ReferenceBlock(torch.nn.Module):
    """The reference model's pre-norm block on lmscale's ops: ``h, y = ln2(attn(ln1 x), residual=x)`` (the
    residual add fused with the second norm), ``h + w2(swiglu(w1 y, w3 y))``; the same submodule names."""

    def __init__(self, block: torch.nn.Module, ln1: torch.nn.Module, ln2: torch.nn.Module,
                 attn: torch.nn.Module) -> None:
        super().__init__()
        self.ln1, self.ln2, self.attn = ln1, ln2, attn
        self.w1, self.w2, self.w3 = block.w1, block.w2, block.w3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from .functional import swiglu

        h, y = self.ln2(self.attn(self.ln1(x)), residual=x)
        return h + self.w2(swiglu(self.w1(y), self.w3(y)))


# ------------------------------------------------------------------ the walk


def apply_to(model: torch.nn.Module, *, rms_norm: bool = True, swiglu: bool = True, attention: bool = True,
             verbose: bool = False) -> SwapReport:
    """Swaps, in place, every layer of ``model`` that lmscale.nn has a fused version of (see this module's
    docstring for what is recognised), keeping the original parameters, and returns what it swapped as a
    SwapReport (``print(report)`` summarises it; ``verbose=True`` prints that too). ``rms_norm``,
    ``swiglu`` and ``attention`` (the reference model's attention) turn each kind off. Call it before
    ``torch.compile`` and before wrapping the model for data parallelism; a second call swaps nothing.
    A model that is itself one recognised layer is not replaced (there is no parent to put it in): apply
    it to the model around it."""
    from ..baseline import e2e

    report = SwapReport()

    def visit(parent: torch.nn.Module, prefix: str) -> None:
        for name, child in list(parent.named_children()):
            path = f"{prefix}{name}"
            new = replace(child, path)
            if new is not None:
                setattr(parent, name, new)
            else:
                visit(child, path + ".")

    def norm_of(module: torch.nn.Module, path: str) -> torch.nn.Module:
        found = _rms_norm_like(module) if rms_norm else None
        if found is None:
            return module
        report.append(Swap(path, type(module).__name__, "lmscale.nn.RMSNorm"))
        return _lmscale_rms_norm(*found)

    def replace(module: torch.nn.Module, path: str) -> Optional[torch.nn.Module]:
        if isinstance(module, e2e.Block) and rms_norm and swiglu:
            ln1, ln2 = norm_of(module.ln1, path + ".ln1"), norm_of(module.ln2, path + ".ln2")
            attn = replace(module.attn, path + ".attn") or module.attn
            report.append(Swap(path, "Block", "residual add + RMSNorm in one op, lmscale.nn swiglu gate"))
            return ReferenceBlock(module, ln1, ln2, attn)
        if attention and isinstance(module, e2e.Attention):
            report.append(Swap(path, "Attention", "QKV split + RoPE (adjacent) in one op, lmscale.flash_attention"))
            return ReferenceAttention(module)
        if rms_norm and _rms_norm_like(module) is not None:
            return norm_of(module, path)
        if swiglu and _is_swiglu_mlp(module):
            report.append(Swap(path, type(module).__name__, "lmscale.nn GatedMLP (fused SwiGLU gate)"))
            return GatedMLP(module)
        return None

    visit(model, "")
    if verbose:
        print(report)
    return report
