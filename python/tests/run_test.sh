#!/bin/sh
# run_test.sh MODULE - runs python/tests/MODULE.py (unittest, verbose) with the
# first interpreter that imports both torch and numpy: $FEDAGG_PYTHON, then
# /usr/bin/python3 (Debian's python3-torch), then python3 on PATH.  With none,
# says so and exits 77, which ctest reports as skipped (SKIP_RETURN_CODE).
set -u
[ $# -eq 1 ] || { echo "usage: $0 TEST_MODULE" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
tried=""
for py in "${FEDAGG_PYTHON:-}" /usr/bin/python3 "$(command -v python3 2>/dev/null || true)"; do
    [ -n "$py" ] && [ -x "$py" ] || continue
    case " $tried " in *" $py "*) continue ;; esac
    tried="$tried $py"
    if versions=$("$py" -c 'import sys, torch, numpy; print("Python %d.%d, torch %s, numpy %s" % (sys.version_info[:2] + (torch.__version__, numpy.__version__)))' 2>/dev/null); then
        cd "$here" || exit 1
        PYTHONPATH="$here/..:$here${PYTHONPATH:+:$PYTHONPATH}"
        export PYTHONPATH
        echo "$1: $py ($versions)"
        exec "$py" -m unittest -v "$1"
    fi
done
echo "SKIPPED $1: no Python interpreter here imports torch and numpy (tried:${tried:- none});" \
     "install python3-torch and python3-numpy, or set FEDAGG_PYTHON to one that does" >&2
exit 77
