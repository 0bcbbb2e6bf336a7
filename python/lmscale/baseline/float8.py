"""The ``torch-float8`` baselines of ``lmscale bench``: the PyTorch model of ``e2e.py`` with torchao's
float8 training (the tensorwise recipe: dynamic per-tensor scales, e4m3 forward, e5m2 gradients, fast
accumulation in the forward GEMM only; the recipe closest to lmscale's ``--precision fp8``), then
``torch.compile`` as ``torch-compile`` / ``torch-compile-ro`` do. The layers converted are the ones
lmscale runs in FP8 by default: every block Linear whose smaller side is at least ``min_dim`` wide,
never the LM head (``head``), so both sides make the same per-layer choice.

Needs ``torchao`` (pinned: 0.18.0, the version the issue names); imported only when asked for, so
the other baselines run with torch alone.
"""
import torch.nn as nn

TORCHAO_VERSION = "0.18.0"
MIN_DIM = 1024  # lmscale's kFp8MinDim (src/model/transformer.h)


def as_nn_linear(model, linear_type):
    """Every ``linear_type`` module (e2e.py's bias-free Linear) replaced by an ``nn.Linear`` holding the
    same weight tensor, the class torchao's conversion looks for. Parameters keep their identity."""
    for name, child in list(model.named_children()):
        if isinstance(child, linear_type):
            out_f, in_f = child.weight.shape
            lin = nn.Linear(in_f, out_f, bias=False, device="meta")
            lin.weight = child.weight
            setattr(model, name, lin)
        else:
            as_nn_linear(child, linear_type)
    return model


def convert(model, linear_type, min_dim=MIN_DIM):
    """The model with its block Linears swapped for torchao's Float8Linear (tensorwise recipe)."""
    try:
        import torchao
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError as e:
        raise RuntimeError(f"--impl torch-float8 needs torchao=={TORCHAO_VERSION} (pip install "
                           f"torchao=={TORCHAO_VERSION}): {e}") from e
    if torchao.__version__.split("+")[0] != TORCHAO_VERSION:
        raise RuntimeError(f"--impl torch-float8 is pinned to torchao=={TORCHAO_VERSION}, found "
                           f"{torchao.__version__}: install the pinned version")
    as_nn_linear(model, linear_type)

    def wanted(mod, fqn):
        return fqn != "head" and min(mod.in_features, mod.out_features) >= min_dim

    return convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name("tensorwise"),
                                      module_filter_fn=wanted)
