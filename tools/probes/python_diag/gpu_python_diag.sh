#!/usr/bin/env bash
# Diagnose why a C++ error raised into Python crashes on the GPU machines (docs/python.md,
# "Known issue"): which loaded library each of liblmscale's standard-library references binds to,
# which libraries define ostream's _M_insert<long>, and whether candidate fixes avoid the crash.
#   tools/probes/python_diag/gpu_python_diag.sh OUT      (after ./lmscale build; LMSCALE_BUILD_DIR default build-gpu)
set -uo pipefail
source "$(dirname "$0")/../../../scripts/gpu/script_init.sh" "$@"
B=${LMSCALE_BUILD_DIR:-$ROOT/build-gpu}
PY=${LMSCALE_PYTHON:-python3}
LOG=$OUT/python_diag.log
exec >>"$LOG" 2>&1
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
REPRO=$TMP/repro.py
cat >"$REPRO" <<'PYEOF'
import ctypes, os, sys
if os.environ.get("PRE_STDCXX"):
    ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)
import torch
torch.ops.load_library(sys.argv[1])
maps = open("/proc/self/maps").read().split("\n")
libs = sorted({l.split()[-1] for l in maps if ".so" in l})
if os.environ.get("SHOW_LIBS"):
    open(os.environ["SHOW_LIBS"], "w").write("\n".join(libs) + "\n")
q = torch.zeros(1, 1, 4, 8); k = torch.zeros(1, 1, 4, 16)
try:
    torch.ops.lmscale.flash_attention_forward(q, k, k, False)
    print("repro: no error raised (unexpected)")
except RuntimeError as e:
    print("repro: raised cleanly:", str(e).splitlines()[0][:200])
PYEOF
LIB=$B/liblmscale.so
echo "== $(date -u +%FT%TZ) commit ${LMSCALE_COMMIT:-unknown}; gcc: $(gcc --version | head -1)"
echo "== liblmscale NEEDED"; readelf -d "$LIB" | grep -E "NEEDED|RPATH|RUNPATH"
echo "== liblmscale undefined std refs (count)"; nm -D --undefined-only "$LIB" | grep -c " _ZN\?K\?S[tdoi]"
echo "== does liblmscale define _M_insert<long>?"; nm -D "$LIB" | grep "_ZNSo9_M_insertIlEERSoT_"
echo "== A: plain"; SHOW_LIBS=$TMP/libs.txt "$PY" "$REPRO" "$LIB"; echo "rc=$?"
echo "== definers of _ZNSo9_M_insertIlEERSoT_ / num_put id among loaded libs"
while read -r l; do
  [[ -f $l ]] || continue
  d=$(nm -D --defined-only "$l" 2>/dev/null | grep -E " (_ZNSo9_M_insertIlEERSoT_|_ZNSt7num_putIcSt19ostreambuf_iteratorIcSt11char_traitsIcEEE2idE|_ZNSt6locale7classicEv|_ZNSt8ios_base4InitC1Ev|_ZNSt7__cxx1119basic_ostringstreamIcSt11char_traitsIcESaIcEEC1Ev)(@.*)?$" | awk '{print $3}' | tr '\n' ' ')
  [[ -n $d ]] && echo "$l: $d"
done <"$TMP/libs.txt"
echo "== bindings of liblmscale's std:: references to non-libstdc++ objects"
LD_DEBUG=bindings LD_DEBUG_OUTPUT=$TMP/ld "$PY" "$REPRO" "$LIB" >/dev/null 2>&1
cat "$TMP"/ld.* | grep "binding file [^ ]*liblmscale" | grep -E "normal symbol \`_Z(N?K?S|St)" |
  grep -v -E "libstdc\+\+|to [^ ]*liblmscale" | sed 's/^ *[0-9]*://' | sort | uniq -c | sort -rn | head -40
cat "$TMP"/ld.* | grep "binding file [^ ]*liblmscale" | grep "_ZNSo9_M_insertIlEERSoT_"
echo "== B: LD_PRELOAD system libstdc++"
STDCXX=$(gcc -print-file-name=libstdc++.so.6); STDCXX=$(readlink -f "$STDCXX"); echo "$STDCXX"
LD_PRELOAD=$STDCXX "$PY" "$REPRO" "$LIB"; echo "rc=$?"
echo "== C: libstdc++ opened RTLD_GLOBAL before torch"; PRE_STDCXX=1 "$PY" "$REPRO" "$LIB"; echo "rc=$?"
echo "== D: relinked with -static-libstdc++ -Wl,--exclude-libs,ALL"
cmd=$(cd "$B" && ninja -t commands liblmscale.so | tail -1)
mkdir -p "$B/alt"
(cd "$B" && eval "${cmd/-o liblmscale.so/-o alt/liblmscale.so} -static-libstdc++ -Wl,--exclude-libs,ALL") && "$PY" "$REPRO" "$B/alt/liblmscale.so"; echo "rc=$?"
echo "== E: relinked with -Wl,-Bsymbolic"
(cd "$B" && eval "${cmd/-o liblmscale.so/-o alt/liblmscale_bs.so} -Wl,-Bsymbolic") && "$PY" "$REPRO" "$B/alt/liblmscale_bs.so"; echo "rc=$?"
echo "== link command"; echo "$cmd" | tr ' ' '\n' | grep -v "\.o$" | tr '\n' ' '; echo
