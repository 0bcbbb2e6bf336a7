"""Text to ids and back with a ``tokenizer.json`` (Hugging Face ``tokenizers``, the library that made the
corpus: ``lmscale.corpus_bpe``), for ``lmscale sample`` (src/train_app/sample_tokenizer.cpp runs this module).
Reads its input from stdin, answers with one JSON line on stdout:

    python -m lmscale.tokenize_text --tokenizer FILE.json encode < text.txt      # {"ids": [...]}
    python -m lmscale.tokenize_text --tokenizer FILE.json decode < ids.json      # {"text": "..."}
"""
from __future__ import annotations

import argparse
import json
import sys

from .corpus_bpe import _tokenizers


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m lmscale.tokenize_text", description=__doc__.split("\n\n")[0])
    p.add_argument("--tokenizer", required=True, metavar="FILE.json")
    p.add_argument("direction", choices=("encode", "decode"))
    a = p.parse_args(argv)
    tokenizer = _tokenizers().Tokenizer.from_file(a.tokenizer)
    data = sys.stdin.buffer.read()
    if a.direction == "encode":
        # As the corpus was encoded (corpus_bpe.encode): no special tokens added.
        answer = {"ids": tokenizer.encode(data.decode("utf-8", errors="replace"), add_special_tokens=False).ids}
    else:
        answer = {"text": tokenizer.decode(json.loads(data), skip_special_tokens=False)}
    sys.stdout.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
