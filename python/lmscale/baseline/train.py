"""PyTorch reference of ``lmscale train``: the spec's model (docs/spec.md §1, the ``LM`` of
``lmscale.baseline.e2e``) trained the way a PyTorch user trains it, on the batches ``lmscale train``
hands it, so that only the model code differs between the two curves.

    lmscale train --corpus DIR --impl lmscale,torch-eager      # runs this module for torch-eager

``lmscale train`` writes one JSON object (the run) to a file and runs

    python -m lmscale.baseline.train --run RUN.json

The run holds the model's shape, precision, device, seed, AdamW settings, gradient-clip norm, the two
token files (uint16 ids), and, computed by lmscale once: the window starts of every training step
(``train_starts``), the learning rate of every step (``lr``), the validation windows, the steps to
evaluate at (those in ``recorded`` are trained through, not evaluated), and lmscale's initial weights
(``init_weights``, src/train/initial_weights.h), so both runs start from the same model. With ``pack``
(``lmscale train --pack``) every row is cut into segments after each ``end_of_file_id`` and attention
stays causal within a segment (``segment_ids``; lmscale's rule in src/train_app/packing.h, made here
again so that a mistake in either shows as two curves apart). Each update is
forward + loss under autocast, ``loss.backward()``, ``clip_grad_norm_``, the step's learning rate,
``torch.optim.AdamW(fused=True on CUDA)``. Printed on stdout, flushed: one line
``{"eval": {"step", "train_loss", "val_loss", "grad_norm", "lr", "elapsed_s"}}`` per evaluation, and
``{"step": s}`` every few steps for the progress bar; lmscale turns them into records. A non-finite
training loss, gradient norm or validation loss ends the run with one line
``{"diverged": {"step", "what", "value"}}`` (lmscale's Note [divergence], src/train_app/trainer.h).

Only torch is imported: this module runs without lmscale's C++ library.
"""
import argparse
import contextlib
import json
import math
import re
import sys
import time

import torch

from .e2e import LM, loss_of

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def token_file(path, vocab):
    """The uint16 ids of a token file, memory-mapped; the checks lmscale makes at open (token_file.h)."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
    if size == 0 or size % 2:
        raise ValueError(f"token file {path} has {size} bytes: need a positive, even count (uint16 ids)")
    data = torch.from_file(path, shared=False, size=size // 2, dtype=torch.uint16)
    top = int(data.to(torch.int32).max())  # uint16 has no max kernel
    if top >= vocab:
        raise ValueError(f"token file {path} holds id {top}, beyond the model's vocabulary of {vocab}")
    return data


# lmscale's parameter names → this model's (src/model/: token_embeddings, layers.i.attn.q_proj, ffn.w1 ...).
RENAMES = [(r"^token_embeddings\.weight$", "emb"), (r"^layers\.", "blocks."), (r"\.attn\.(q|k|v)_proj\.", r".attn.\1."),
           (r"\.attn\.output_proj\.", ".attn.o."), (r"\.ffn\.", "."), (r"^ln_final\.", "ln."), (r"^lm_head\.", "head.")]


def load_lmscale_weights(model, path):
    """Copies lmscale's initial weights (src/train/initial_weights.h: fp32 values at `path`, an index
    of names, shapes and offsets in `path`.json) into the model; every parameter must be set once."""
    with open(path + ".json") as f:
        index = json.load(f)
    with open(path, "rb") as f:
        total = f.seek(0, 2) // 4
    values = torch.from_file(path, shared=False, size=total, dtype=torch.float32)
    params = dict(model.named_parameters())
    unset = set(params)
    for e in index:
        name = e["name"]
        for pattern, repl in RENAMES:
            name = re.sub(pattern, repl, name)
        if name not in params or tuple(params[name].shape) != tuple(e["shape"]):
            raise ValueError(f"lmscale parameter {e['name']} {e['shape']} has no match here (as {name})")
        n = math.prod(e["shape"])
        with torch.no_grad():
            params[name].copy_(values[e["offset"]:e["offset"] + n].view(e["shape"]))
        unset.discard(name)
    if unset:
        raise ValueError(f"lmscale's weights left these parameters unset: {sorted(unset)}")


def windows(data, starts, context, device):
    """(inputs, targets): (B, T) int64 on device, targets one token later (data_order.h's batch_of)."""
    rows = torch.stack([data[s:s + context + 1] for s in starts]).to(torch.int64)
    rows = rows.to(device)
    return rows[:, :-1], rows[:, 1:]


def segment_ids(x, end_of_file_id):
    """(B, T) int64: which segment of its row each token of x (B, T) lies in. A segment ends with an
    end-of-file id, which stays the last token of its document; the token after it starts the next."""
    ends = (x == end_of_file_id).to(torch.int64)
    return ends.cumsum(1) - ends


def train(run, out=sys.stdout):
    dev = torch.device(run["device"])
    cuda = dev.type == "cuda"
    dtype = DTYPES[run["precision"]]
    autocast = (lambda: torch.autocast(dev.type, dtype=dtype)) if dtype else contextlib.nullcontext
    train_data = token_file(run["train_path"], run["vocab"])
    val_data = token_file(run["val_path"], run["vocab"])
    torch.manual_seed(run["seed"])
    with torch.device(dev):
        model = LM(run["vocab"], run["d_model"], run["d_ff"], run["layers"], run["heads"], run["model_context"], "sdpa")
    if run.get("init_weights"):
        load_lmscale_weights(model, run["init_weights"])
    a = run["adamw"]
    opt = torch.optim.AdamW(model.parameters(), lr=a["lr"], betas=(a["beta1"], a["beta2"]), eps=a["eps"],
                            weight_decay=a["weight_decay"], fused=cuda)
    B, T = run["batch"], run["context"]
    end_id = run["end_of_file_id"] if run.get("pack") else None

    def forward(x):
        return model(x) if end_id is None else model(x, segment_ids(x, end_id))

    evals, recorded = set(run["eval_steps"]), set(run["recorded"])
    val_starts = run["val_starts"]
    start = time.perf_counter()
    loss_sum, losses, norm = torch.zeros((), device=dev), 0, None

    def emit(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    def diverged(step, what, value):
        """True (after saying so) when value is NaN or infinite: the run stops there."""
        if math.isfinite(value):
            return False
        emit({"diverged": {"step": step, "what": what, "value": str(value)}})
        return True

    def evaluate(step, lr):
        model.eval()
        total = torch.zeros((), device=dev)
        with torch.no_grad(), autocast():
            for i in range(run["eval_batches"]):
                x, y = windows(val_data, val_starts[i * B:(i + 1) * B], T, dev)
                total += loss_of(forward(x), y).float()
        model.train()
        val_loss = total.item() / run["eval_batches"]
        if diverged(step, "validation loss", val_loss):
            return False
        emit({"eval": {"step": step, "val_loss": val_loss,
                       "train_loss": loss_sum.item() / losses if losses else None,
                       "grad_norm": norm.item() if norm is not None else None, "lr": lr,
                       "elapsed_s": time.perf_counter() - start}})
        return True

    if 0 in evals and 0 not in recorded and not evaluate(0, 0.0):
        return
    progress_every = max(1, len(run["lr"]) // 200)
    for step, (starts, lr) in enumerate(zip(run["train_starts"], run["lr"]), 1):
        x, y = windows(train_data, starts, T, dev)
        with autocast():
            loss = loss_of(forward(x), y)
        loss.backward()  # outside autocast, as in lmscale
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), run["clip"] if run["clip"] > 0 else math.inf)
        # Checked before the update, as lmscale does: one copy to the host per step.
        seen_loss, seen_norm = torch.stack([loss.detach().float(), norm.float()]).tolist()
        if diverged(step, "training loss", seen_loss) or diverged(step, "gradient norm", seen_norm):
            return
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_sum += loss.detach().float()
        losses += 1
        if step in evals:
            if step not in recorded and not evaluate(step, lr):
                return
            loss_sum.zero_()
            losses = 0
        if step % progress_every == 0:
            emit({"step": step})


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m lmscale.baseline.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, metavar="FILE", help="the run, one JSON object (written by lmscale train)")
    a = p.parse_args(argv)
    with open(a.run) as f:
        run = json.load(f)
    train(run)


if __name__ == "__main__":
    main()
