"""The BPE half of `lmscale train corpus --tokenizer bpe|FILE.json` (src/train_app/corpus.cpp walks and splits the
files, then runs this module): trains a byte-level BPE with Hugging Face ``tokenizers`` on the training files
only (GPT-2's scheme: bytes mapped to printable characters, merges learned from the text, the special token
``<|endoftext|>``), or loads a given ``tokenizer.json``; writes it beside the token files as
``tokenizer.json`` (the corpus holds the tokenizer that made it), encodes every file, puts the end-of-text id
after each one, and writes ``train.bin`` and ``val.bin`` (uint16, through temporary files renamed into place).
Answers with one JSON line on stdout: the token counts, the vocabulary size, the end-of-text id and the
SHA-256 of tokenizer.json, which the manifest (corpus.json) records.

    python -m lmscale.corpus_bpe --files FILES.json --out DIR (--vocab N | --tokenizer FILE.json)

FILES.json: {"train": [paths], "val": [paths]}.
"""
from __future__ import annotations

import argparse
import array
import hashlib
import json
import os
import sys
import tempfile

END_OF_TEXT = "<|endoftext|>"
MAX_VOCAB = 65536  # ids are stored as uint16


def _tokenizers():
    try:
        import tokenizers
    except ImportError:
        sys.exit(f"lmscale train corpus --tokenizer needs the Python package tokenizers in {sys.executable}: "
                 "pip install -c constraints.txt tokenizers (./lmscale installs it into its .venv), or set "
                 "LMSCALE_PYTHON to an interpreter that has it")
    return tokenizers


def train_bpe(files: list[str], vocab: int):
    tk = _tokenizers()
    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=vocab, special_tokens=[END_OF_TEXT], show_progress=False,
                                     initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train(files, trainer)
    return tokenizer


def read_text(path: str) -> str:
    with open(path, "rb") as f:
        return f.read().decode("utf-8", errors="replace")  # byte-level: any text; bad UTF-8 as U+FFFD


def encode(tokenizer, files: list[str], eot: int | None) -> array.array:
    ids = array.array("H")
    for start in range(0, len(files), 64):
        batch = files[start:start + 64]
        for enc in tokenizer.encode_batch([read_text(p) for p in batch], add_special_tokens=False):
            ids.extend(enc.ids)
            if eot is not None:
                ids.append(eot)
    return ids


def write_atomically(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix="." + os.path.basename(path) + ".")
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m lmscale.corpus_bpe", description=__doc__.split("\n\n")[0])
    p.add_argument("--files", required=True, help='JSON file: {"train": [paths], "val": [paths]}')
    p.add_argument("--out", required=True, help="folder for tokenizer.json, train.bin, val.bin")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--vocab", type=int, help="train a byte-level BPE of this many ids")
    how.add_argument("--tokenizer", help="a tokenizer.json (Hugging Face tokenizers) to use as it is")
    a = p.parse_args(argv)
    with open(a.files) as f:
        files = json.load(f)
    if a.vocab is not None:
        if not 257 <= a.vocab <= MAX_VOCAB:
            sys.exit(f"--vocab must be between 257 (the 256 bytes and {END_OF_TEXT}) and {MAX_VOCAB} (uint16 ids), "
                     f"got {a.vocab}")
        tokenizer = train_bpe(files["train"], a.vocab)
        made_by = f"byte-level BPE trained on the training files (tokenizers {_tokenizers().__version__})"
    else:
        tokenizer = _tokenizers().Tokenizer.from_file(a.tokenizer)
        made_by = f"given: {os.path.basename(a.tokenizer)}"
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    if vocab > MAX_VOCAB:
        sys.exit(f"the tokenizer has {vocab} ids, more than a uint16 token file holds ({MAX_VOCAB})")
    eot = tokenizer.token_to_id(END_OF_TEXT)
    written = []
    try:
        tok_path = os.path.join(a.out, "tokenizer.json")
        if a.vocab is not None:
            write_atomically(tok_path, tokenizer.to_str(pretty=True).encode())
            written.append(tok_path)
        elif os.path.abspath(a.tokenizer) != os.path.abspath(tok_path):
            with open(a.tokenizer, "rb") as f:
                write_atomically(tok_path, f.read())
            written.append(tok_path)
        counts = {}
        for split in ("train", "val"):
            ids = encode(tokenizer, files[split], eot)
            if sys.byteorder != "little":
                ids.byteswap()
            path = os.path.join(a.out, f"{split}.bin")
            write_atomically(path, ids.tobytes())
            written.append(path)
            counts[split] = len(ids)
    except BaseException:
        for path in written:  # no half corpus: the files of it already written go too
            if os.path.exists(path):
                os.unlink(path)
        raise
    with open(tok_path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    print(json.dumps({"train_tokens": counts["train"], "val_tokens": counts["val"], "vocab_size": vocab,
                      "end_of_text_id": eot, "tokenizer_sha256": digest, "made_by": made_by}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
