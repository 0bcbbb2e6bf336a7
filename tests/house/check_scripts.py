#!/usr/bin/env python3
"""Fails when scripts/gpu/ drifts from its README or its convention, or a probe loses its question:

- every file of scripts/gpu/ has a row in the table under `## Scripts` of scripts/gpu/README.md, and
  every row names a file that exists; only shell scripts live there (a Python or CUDA experiment is a
  probe, tools/probes/<topic>/, or part of the package);
- each script opens with a comment saying what it does; one sourced by others says so (`# Sourced by`),
  one that runs on the development machine says so (`# Runs here`); every other one is a GPU script
  and follows the convention: `#!/usr/bin/env bash`, `set -uo pipefail` (or `-euo`), executable, its
  usage line `scripts/gpu/<name> OUT`, and `source "$(dirname "$0")/script_init.sh" "$@"` before its
  first command, which sets OUT (the first argument), ROOT and the one build folder; so it sets
  none of them itself (no `OUT=`, `ROOT=`, nor a default of its own for `LMSCALE_BUILD_DIR`);
- every folder of tools/probes/ has a README.md with a `Question:` line (what it answers) and a
  `Retire:` line (when to delete it).

Run by CTest (House.Scripts); no build needed.

    python3 tests/house/check_scripts.py [repo root]
    python3 tests/house/check_scripts.py --self-test   # it catches what it should, on a made-up tree
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import house_check

GPU = "scripts/gpu"
PROBES = "tools/probes"
INIT = re.compile(r'^source "\$\(dirname "\$0"\)/script_init\.sh" "\$@"')
OWN_SETTING = re.compile(r"^\s*(?:export\s+)?(OUT|ROOT)=|LMSCALE_BUILD_DIR=\$\{LMSCALE_BUILD_DIR:-")


def executable(root: Path, rel: str) -> bool:
    """Whether git records the file as executable (the file's own mode without git)."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-s", "--", rel], capture_output=True,
                             text=True, check=True).stdout
        if out:
            return out.split()[0] == "100755"
    except (OSError, subprocess.CalledProcessError):
        pass
    return os.access(root / rel, os.X_OK)


def header(lines):
    """The opening comment block (after the shebang), as one string."""
    body = lines[1:] if lines and lines[0].startswith("#!") else lines
    out = []
    for line in body:
        if not line.startswith("#"):
            break
        out.append(line.lstrip("# "))
    return " ".join(out)


def script_problems(root: Path, rel: str, text: str):
    name = rel.split("/")[-1]
    lines = text.splitlines()
    head = header(lines)
    if not head:
        yield f"{rel}: opens with no comment saying what it does"
        return
    if head.startswith(("Sourced by", "Runs here")):
        return
    if not lines[0].startswith("#!/usr/bin/env bash"):
        yield f"{rel}:1: a GPU script starts with #!/usr/bin/env bash"
    if not any(re.match(r"^set -e?uo pipefail", line) for line in lines):
        yield f"{rel}: a GPU script runs under `set -uo pipefail`"
    if not executable(root, rel):
        yield f"{rel}: not executable (chmod +x; git add)"
    if f"scripts/gpu/{name} OUT" not in head:
        yield f"{rel}: its header's usage line must read `scripts/gpu/{name} OUT ...` (OUT first)"
    commands = [(n, line) for n, line in enumerate(lines, 1) if line.strip() and not line.lstrip().startswith("#")]
    first = next(((n, line) for n, line in commands if not line.startswith("set ")), (0, ""))
    if not INIT.match(first[1]):
        yield (f"{rel}:{first[0]}: the first command must be `source \"$(dirname \"$0\")/script_init.sh\" \"$@\"` "
               "(OUT first, one build folder: scripts/gpu/README.md, The convention)")
    for n, line in commands:
        m = OWN_SETTING.search(line)
        if m:
            what = m.group(1) or "a LMSCALE_BUILD_DIR default"
            yield f"{rel}:{n}: sets {what} itself; script_init.sh sets it for every GPU script"


def problems(root: Path):
    readme = root / GPU / "README.md"
    rows = house_check.table_names(readme, "Scripts") if readme.is_file() else {}
    if not rows:
        yield f"{GPU}/README.md has no table under '## Scripts' (rows start with | `script.sh` |)"
    files = {p.relative_to(root).as_posix(): p for p in house_check.tree_files(root)}
    here = sorted(rel for rel in files if rel.startswith(GPU + "/") and rel != f"{GPU}/README.md")
    names = {rel.split("/")[-1]: rel for rel in here}
    for rel in here:
        name = rel.split("/")[-1]
        if "/" in rel[len(GPU) + 1:]:
            yield f"{rel}: scripts/gpu/ holds no folders; a probe's files go to {PROBES}/<topic>/"
            continue
        if not name.endswith(".sh"):
            yield f"{rel}: only shell scripts live in {GPU}/; an experiment goes to {PROBES}/<topic>/ (with its question)"
        if name not in rows:
            yield f"{rel}: no row in {GPU}/README.md's table; add one (job, usage), or move a probe to {PROBES}/<topic>/"
        if name.endswith(".sh"):
            yield from script_problems(root, rel, files[rel].read_text())
    for name, line in sorted(rows.items()):
        if name not in names:
            yield f"{GPU}/README.md:{line}: the row names `{name}`, which is not in {GPU}/"
    topics = sorted({rel.split("/")[2] for rel in files if rel.startswith(PROBES + "/") and rel.count("/") >= 3})
    for topic in topics:
        page = root / PROBES / topic / "README.md"
        text = page.read_text() if page.is_file() else ""
        for word in ("Question:", "Retire:"):
            if not re.search(rf"^{word}", text, re.M):
                yield (f"{PROBES}/{topic}/: its README.md needs a line starting `{word}` "
                       "(what the probe answers, and when to delete it)")


def self_test() -> int:
    """A made-up tree: a script with no row, a row with no script, a Python file, a script that sets its
    own build folder and takes OUT from the environment, one not executable, a probe with no Retire."""
    import tempfile
    good = ('#!/usr/bin/env bash\n# Does a thing.\n#   scripts/gpu/{n} OUT\nset -uo pipefail\n'
            'source "$(dirname "$0")/script_init.sh" "$@"\necho hi\n')
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = {
            f"{GPU}/README.md": "# x\n## Scripts\n| script | job |\n|---|---|\n| `good.sh` | x |\n| `own.sh` | x |\n"
                                "| `gone.sh` | x |\n| `helper.sh` | x |\n| `plain.sh` | x |\n",
            f"{GPU}/good.sh": good.format(n="good.sh"),
            f"{GPU}/norow.sh": good.format(n="norow.sh"),
            f"{GPU}/plain.sh": good.format(n="plain.sh"),
            f"{GPU}/own.sh": "#!/usr/bin/env bash\n# Does a thing.\n#   OUT=x scripts/gpu/own.sh\nset -uo pipefail\n"
                             "OUT=${OUT:-/tmp/x}\nexport LMSCALE_BUILD_DIR=${LMSCALE_BUILD_DIR:-/tmp/b}\n",
            f"{GPU}/helper.sh": "# Sourced by good.sh: helpers.\nf() { :; }\n",
            f"{GPU}/probe.py": "print(1)\n",
            f"{PROBES}/a/README.md": "# a\nQuestion: is it?\nRetire: when it is.\n",
            f"{PROBES}/a/x.cu": "\n",
            f"{PROBES}/b/README.md": "# b\nQuestion: is it?\n",
            f"{PROBES}/b/y.py": "\n",
        }
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
            if name.endswith(".sh") and not name.endswith(("plain.sh", "helper.sh")):
                os.chmod(root / name, 0o755)
        found = list(problems(root))
    expected = [f"{GPU}/norow.sh: no row", f"{GPU}/README.md:7: the row names `gone.sh`",
                f"{GPU}/probe.py: only shell scripts", f"{GPU}/probe.py: no row",
                f"{GPU}/own.sh: its header's usage line", f"{GPU}/own.sh:5: the first command",
                f"{GPU}/own.sh:5: sets OUT itself", f"{GPU}/own.sh:6: sets a LMSCALE_BUILD_DIR default",
                f"{GPU}/plain.sh: not executable", f"{PROBES}/b/: its README.md needs a line starting `Retire:`"]
    return house_check.expect_found(found, expected)


if __name__ == "__main__":
    sys.exit(house_check.main("check_scripts", problems, self_test))
