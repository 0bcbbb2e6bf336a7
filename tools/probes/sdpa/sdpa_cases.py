"""PyTorch SDPA attention cases shared by the timing scripts (sdpa_attention_time.py, sustained_floor.py): for each
(B, H, N, D) shape, causal bf16 inputs with grad and, per backend (cuDNN, flash), the forward and the forward +
o.sum() + backward as callables to run inside `sdpa_kernel(backend)`."""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

BACKENDS = (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION))


def causal_fwd_flop(b, h, n, d):
    """Causal forward FLOPs by the FlashAttention convention (the backward counts 2.5x)."""
    return 4 * b * h * n * n * d / 2


def sdpa_cases(shapes):
    """Yields (b, h, n, d, backend name, backend, fwd, fwd_bwd) for every shape and backend."""
    for b, h, n, d in shapes:
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))

        def fwd():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def fwd_bwd():
            fwd().sum().backward()

        for name, backend in BACKENDS:
            yield b, h, n, d, name, backend, fwd, fwd_bwd
        del q, k, v
