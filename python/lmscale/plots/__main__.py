"""`python -m lmscale.plots`: see the package docstring."""
import argparse
import json
import pathlib
import sys

from . import attention, comm, distributed, e2e, memory, train

# Each draws every figure its records allow and returns the paths written (an empty list: none).
DRAWERS = [e2e.plot_step_times, e2e.plot_compare, comm.plot, distributed.plot_ddp, distributed.plot_zero,
           attention.plot, memory.plot_folder, train.plot]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m lmscale.plots", description=__doc__)
    sub = parser.add_subparsers(dest="what", required=True)
    report = sub.add_parser("report", help="draw every plot the records of a results folder allow")
    report.add_argument("folder", type=pathlib.Path)
    mem = sub.add_parser("memory", help="draw one `lmscale memory` timeline")
    mem.add_argument("timeline", type=pathlib.Path)
    mem.add_argument("png", type=pathlib.Path)
    args = parser.parse_args(argv)
    if args.what == "memory":
        memory.plot(json.loads(args.timeline.read_text()), args.png)
        return 0
    if not args.folder.is_dir():
        parser.error(f"{args.folder} is not a folder: pass the --out folder of `lmscale report`")
    drawn = [path for draw in DRAWERS for path in draw(args.folder)]
    print(f"{len(drawn)} plots from the records in {args.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
