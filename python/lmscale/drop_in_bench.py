"""A PyTorch user's model with lmscale dropped in: the PyTorch reference model of the baselines
(lmscale.baseline.e2e.LM: RMSNorm, RoPE, SDPA, SwiGLU, cross-entropy over fp32 logits) timed for one
training step (forward + loss, backward, fused AdamW; bf16 autocast, fp32 weights) as it is, with its
layers swapped for lmscale.nn + lmscale.flash_attention, and with them swapped for Liger-Kernel's,
each eager and under torch.compile. Peak memory is measured beside each time.

Impls (``--impls``; the default runs all five at every size, in one process):

- ``torch-eager``          the reference model as written
- ``torch-compile``        the same, each block and the head + loss compiled (torch.compile, default mode)
- ``liger``                Liger-Kernel's layers: LigerRMSNorm, LigerFusedAddRMSNorm, its SwiGLU gate,
                           its RoPE (HF's half-split layout), LigerFusedLinearCrossEntropyLoss; SDPA
- ``lmscale-nn``           lmscale.nn.RMSNorm (+ the residual add), one QKV projection read by
                           lmscale.nn.RotaryQKV, lmscale.flash_attention, lmscale.nn swiglu,
                           lmscale.nn.cross_entropy on the bf16 logits
- ``lmscale-nn-compile``   the lmscale-nn model, compiled as torch-compile is (the ops trace as one graph)

Both compiled impls compile per block (every block reuses one graph) plus the head and loss: whole-model
compiles of xl and 2.7B take minutes each. Every swapped model starts from the same weights as the
reference (copied from it: the fused QKV weight is the three projections stacked).

    python -m lmscale.drop_in_bench --sizes small xl 2.7B --out docs/results/drop_in.jsonl

Records: docs/results/SCHEMA.md (bench ``e2e``, ``model_code`` ``pytorch``), one line per metric,
appended to --out and echoed as a table on stdout.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import records as result_records
from .baseline import e2e

SIZES = {"small": (768, 3072, 12, 12), "medium": (1024, 4096, 24, 16), "large": (1280, 5120, 36, 20),
         "xl": (1600, 6400, 48, 25), "2.7B": (2560, 10240, 32, 32), "tiny": (64, 256, 2, 4)}
IMPLS = ("torch-eager", "torch-compile", "liger", "lmscale-nn", "lmscale-nn-compile")
STARTED = result_records.utc_now()


# ------------------------------------------------------------------ lmscale.nn swapped in

class LmscaleAttention(nn.Module):
    """The reference Attention with one QKV projection (its three weights stacked) read by the fused
    split + RoPE, and lmscale.flash_attention in place of SDPA."""

    def __init__(self, attn: e2e.Attention, max_len: int):
        super().__init__()
        import lmscale.nn as lnn

        self.heads = attn.heads
        self.qkv = nn.Parameter(torch.cat([attn.q.weight, attn.k.weight, attn.v.weight]).detach().clone())
        self.o = attn.o
        d_head = attn.q.weight.shape[0] // attn.heads
        self.rope = lnn.RotaryQKV(attn.heads, d_head, max_len, device=attn.q.weight.device)

    def forward(self, x):
        import lmscale

        B, T, C = x.shape
        q, k, v = self.rope(F.linear(x, self.qkv))
        return self.o(lmscale.flash_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C))


class LmscaleBlock(nn.Module):
    def __init__(self, block: e2e.Block, max_len: int):
        super().__init__()
        import lmscale.nn as lnn

        self.ln1, self.ln2 = (self._norm(lnn, n) for n in (block.ln1, block.ln2))
        self.attn = LmscaleAttention(block.attn, max_len)
        self.w1, self.w2, self.w3 = block.w1, block.w2, block.w3

    @staticmethod
    def _norm(lnn, norm):
        new = lnn.RMSNorm(norm.weight.shape[0], norm.eps, device=norm.weight.device)
        new.weight = norm.weight
        return new

    def forward(self, x):
        import lmscale.nn as lnn

        h, y = self.ln2(self.attn(self.ln1(x)), residual=x)  # the residual add fused with the norm
        return h + self.w2(lnn.swiglu(self.w1(y), self.w3(y)))


def lmscale_model(ref: e2e.LM, max_len: int) -> nn.Module:
    import lmscale.nn as lnn

    model = nn.Module()
    model.emb = ref.emb
    model.blocks = nn.ModuleList(LmscaleBlock(b, max_len) for b in ref.blocks)
    model.ln = LmscaleBlock._norm(lnn, ref.ln)
    model.head = ref.head
    return model


# ------------------------------------------------------------------ Liger-Kernel swapped in

class LigerAttention(nn.Module):
    def __init__(self, attn: e2e.Attention, max_len: int):
        super().__init__()
        self.q, self.k, self.v, self.o, self.heads = attn.q, attn.k, attn.v, attn.o, attn.heads
        d_head = attn.q.weight.shape[0] // attn.heads
        # HF's layout (what Liger's RoPE implements): cos/sin of width D, the two halves repeated.
        freqs = torch.outer(torch.arange(max_len, dtype=torch.float64),
                            10000.0 ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head))
        emb = torch.cat((freqs, freqs), -1).to(attn.q.weight.device)
        self.register_buffer("cos", emb.cos().float()[None], persistent=False)
        self.register_buffer("sin", emb.sin().float()[None], persistent=False)

    def forward(self, x):
        from liger_kernel.transformers.rope import liger_rotary_pos_emb

        B, T, C = x.shape
        split = lambda t: t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        q, k = liger_rotary_pos_emb(q, k, self.cos[:, :T].to(q.dtype), self.sin[:, :T].to(q.dtype))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(o.transpose(1, 2).reshape(B, T, C))


class LigerBlock(nn.Module):
    def __init__(self, block: e2e.Block, max_len: int):
        super().__init__()
        from liger_kernel.transformers.fused_add_rms_norm import LigerFusedAddRMSNorm
        from liger_kernel.transformers.rms_norm import LigerRMSNorm

        d = block.ln1.weight.shape[0]
        self.ln1 = LigerRMSNorm(d, eps=block.ln1.eps, in_place=False).to(block.ln1.weight.device)
        self.ln1.weight = block.ln1.weight
        self.ln2 = LigerFusedAddRMSNorm(d, eps=block.ln2.eps).to(block.ln2.weight.device)
        self.ln2.weight = block.ln2.weight
        self.attn = LigerAttention(block.attn, max_len)
        self.w1, self.w2, self.w3 = block.w1, block.w2, block.w3

    def forward(self, x):
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction

        y, h = self.ln2(self.attn(self.ln1(x)).to(x.dtype), x)  # (normed, x + attention)
        return h + self.w2(LigerSiLUMulFunction.apply(self.w1(y), self.w3(y)))


def liger_model(ref: e2e.LM, max_len: int) -> nn.Module:
    from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss
    from liger_kernel.transformers.rms_norm import LigerRMSNorm

    model = nn.Module()
    model.emb = ref.emb
    model.blocks = nn.ModuleList(LigerBlock(b, max_len) for b in ref.blocks)
    model.ln = LigerRMSNorm(ref.ln.weight.shape[0], eps=ref.ln.eps, in_place=False).to(ref.ln.weight.device)
    model.ln.weight = ref.ln.weight
    model.head = ref.head
    model.flce = LigerFusedLinearCrossEntropyLoss()
    return model


# ------------------------------------------------------------------ the step, timed

def build(impl, size, c, device):
    """(model, loss_fn(ids, targets)) for one impl, from the reference model's initial weights."""
    d, d_ff, layers, heads = SIZES[size]
    torch.manual_seed(0)
    with torch.device(device):
        ref = e2e.LM(c["vocab"], d, d_ff, layers, heads, c["context"], "sdpa")
    if impl.startswith("torch"):
        model = ref
    elif impl == "liger":
        model = liger_model(ref, c["context"])
    else:
        model = lmscale_model(ref, c["context"])
    blocks = list(model.blocks)
    tail = lambda x, t: _head_loss(impl, model, x, t)  # noqa: E731
    if impl.endswith("compile"):
        blocks = [torch.compile(b) for b in blocks]  # one graph, reused by every block
        tail = torch.compile(tail)

    def loss_fn(ids, targets):
        x = F.embedding(ids, model.emb)
        for block in blocks:
            x = block(x)
        return tail(x, targets)

    return model, loss_fn


def _head_loss(impl, model, x, targets):
    if impl.startswith("torch"):
        return e2e.loss_of(model.head(model.ln(x)), targets)
    if impl == "liger":
        return model.flce(model.head.weight, model.ln(x).flatten(0, 1), targets.flatten())
    import lmscale.nn as lnn

    return lnn.cross_entropy(model.head(model.ln(x)), targets)


def make_step(impl, size, c, device):
    """(model, step): step() runs one bf16-autocast training step (forward, backward, fused AdamW) on fixed
    random tokens and returns the loss."""
    model, loss_fn = build(impl, size, c, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)
    ids = torch.randint(c["vocab"], (c["batch"], c["context"]), device=device)
    targets = torch.randint(c["vocab"], (c["batch"], c["context"]), device=device)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(ids, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return model, step


def measure(impl, size, c, device):
    model, step = make_step(impl, size, c, device)
    times, losses = [], []
    compile_started = time.perf_counter()
    torch.cuda.reset_peak_memory_stats(device)
    for i in range(c["warmup"] + c["steps"]):
        if i == c["warmup"]:
            warm_s = time.perf_counter() - compile_started
            torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = step()
        end.record()
        torch.cuda.synchronize(device)
        if i >= c["warmup"]:
            times.append(start.elapsed_time(end))
        losses.append(loss.item())
    peak = torch.cuda.max_memory_allocated(device)
    del model, step
    return {"step_ms": e2e.summary(times), "tokens_per_s": c["batch"] * c["context"] / (statistics.fmean(times) / 1e3),
            "peak_memory_bytes": peak, "first_loss": losses[0], "warmup_s": warm_s}


def measure_cell(impl, size, c, device):
    """{"status", "reason", "metrics"} of one cell; a failure is an outcome, not the end of the run."""
    try:
        return {"status": "ok", "reason": "", "metrics": measure(impl, size, c, device)}
    except Exception as e:
        status = "oom" if e2e.is_out_of_memory(e) else "error"
        return {"status": status, "reason": f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"[:500],
                "metrics": {}}
    finally:
        torch._dynamo.reset()
        gc.collect()
        torch.cuda.empty_cache()


def argv_without(argv, option):
    """argv with `option` taken out: `--option=v`, or `--option` with the values after it (up to the next
    `--` flag); for re-running this command with that option set otherwise."""
    out, skipping = [], False
    for a in argv:
        if a == option or a.startswith(option + "="):
            skipping = a == option
            continue
        if skipping and not a.startswith("--"):
            continue
        skipping = False
        out.append(a)
    return out


def run_cell(impl, size, argv):
    """measure_cell in a fresh Python process (the same options, this one cell): its output lines pass through
    to stderr; a child that dies is an error cell with its last line as the reason."""
    args = argv_without(list(sys.argv[1:] if argv is None else argv), "--out")
    cmd = [sys.executable, "-m", "lmscale.drop_in_bench", *args, "--sizes", size, "--impls", impl, "--cell-json",
           "--in-process"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    last = ""
    for line in proc.stdout:
        if line.startswith("CELL "):
            proc.wait()
            return json.loads(line[5:])
        sys.stderr.write("    " + line)
        last = line.strip() or last
    proc.wait()
    return {"status": "error", "reason": f"the cell's process exited with code {proc.returncode}: {last}"[:500],
            "metrics": {}}


UNITS = {"step_ms": "ms", "tokens_per_s": "tokens/s", "peak_memory_bytes": "bytes", "first_loss": "nats",
         "warmup_s": "s"}


def records(impl, size, c, device, status, reason, metrics):
    d, d_ff, layers, heads = SIZES[size]
    config = {"model_code": "pytorch", "size": size, "d_model": d, "d_ff": d_ff, "layers": layers, "heads": heads,
              "vocab": c["vocab"], "context": c["context"], "batch": c["batch"], "precision": "bf16",
              "mode": "train-step", "device": str(device), "warmup": c["warmup"], "steps": c["steps"],
              "params": e2e.param_count({"vocab": c["vocab"], "d_model": d, "d_ff": d_ff, "layers": layers})}
    base = result_records.record_base("e2e", impl, status, config, gpu=result_records.gpu_name(device),
                                      commit=result_records.commit(), date=STARTED,
                                      command="python -m lmscale.drop_in_bench " + " ".join(sys.argv[1:]))
    return result_records.metric_records(base, metrics, UNITS, reason)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["small", "xl", "2.7B"], choices=list(SIZES))
    parser.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=10000)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", default=None, help="JSONL file the records are appended to")
    parser.add_argument("--in-process", action="store_true",
                        help="measure every cell in this process. By default each (size, impl) runs in a fresh Python "
                             "process: in one process the impl timed second lost 7-12 ms per xl step on an H100, "
                             "whichever impl it was (docs/python.md, The drop-in benchmark)")
    parser.add_argument("--cell-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA device: this benchmark times GPU training steps")
    device = torch.device("cuda", torch.cuda.current_device())
    c = {"context": args.context, "batch": args.batch, "vocab": args.vocab, "warmup": args.warmup, "steps": args.steps}
    torch._dynamo.config.cache_size_limit = 64
    if args.cell_json:  # the child of run_cell: one cell, its outcome as one line
        print("CELL " + json.dumps(measure_cell(args.impls[0], args.sizes[0], c, device)), flush=True)
        return 0
    print(f"{'size':6} {'impl':20} {'step ms':>9} {'tokens/s':>10} {'peak GB':>8} {'loss0':>7} {'warm s':>7}", flush=True)
    for size in args.sizes:
        for impl in args.impls:
            cell = measure_cell(impl, size, c, device) if args.in_process else run_cell(impl, size, argv)
            m = cell["metrics"]
            out = records(impl, size, c, device, cell["status"], cell["reason"], m)
            if cell["status"] == "ok":
                print(f"{size:6} {impl:20} {m['step_ms']['value']:9.2f} {m['tokens_per_s']:10.0f} "
                      f"{m['peak_memory_bytes'] / 1e9:8.2f} {m['first_loss']:7.3f} {m['warmup_s']:7.1f}", flush=True)
            else:
                print(f"{size:6} {impl:20} {cell['status']}: {cell['reason']}", flush=True)
            if args.out:
                result_records.append(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
