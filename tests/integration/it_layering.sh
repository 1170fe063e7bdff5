#!/usr/bin/env bash
# The layering, enforced: a module's sources include headers only of the
# modules its CMakeLists.txt links (fa_library(fa_<m> <m> fa_<dep>...)) and
# its own; generated protobuf headers (*.pb-c.h) count as proto's.  And no
# module links one that the top CMakeLists.txt adds after it, so the
# dependencies form the layers it lists: common includes nothing of ours,
# proto only common, crypto common and proto, transport common, netconfig
# proto and transport, and so on up to worker, aggregator and the tools.
# Needs the source tree (FA_SRC) and, for the compiler's half, the build
# (FA_BUILD); fails with one line per offence.
set -euo pipefail

: "${FA_SRC:?FA_SRC must be set}"
cd "$FA_SRC"

order=$(sed -n 's/^foreach(mod \(.*\))$/\1/p' CMakeLists.txt)
[ -n "$order" ] || { echo "FAIL: no 'foreach(mod ...)' module list in CMakeLists.txt" >&2; exit 1; }
bad=0
pos=0
declare -A rank
for m in $order; do rank[$m]=$pos; pos=$((pos + 1)); done

for m in $order; do
    [ -f "$m/CMakeLists.txt" ] || continue
    decl=$(tr '\n' ' ' < "$m/CMakeLists.txt" | grep -o "fa_library(fa_$m $m[^)]*)" || true)
    # tools/ is a dispatch binary over every library: above all of them
    [ -n "$decl" ] || continue
    allowed=" $m "
    # the tokens after fa_library( and the library's own name
    for d in $(echo "$decl" | grep -o '\bfa_[a-z0-9_]*' | sed 1,2d); do
        case $d in
        fa_proto_gen) dep=proto ;; # the generated code, part of proto
        *) dep=${d#fa_} ;;
        esac
        [ "$dep" != "$m" ] || continue
        allowed+="$dep "
        if [ -z "${rank[$dep]+x}" ]; then
            echo "FAIL: $m/CMakeLists.txt links $d, which is no module of the top CMakeLists.txt" >&2
            bad=1
        elif [ "${rank[$dep]}" -ge "${rank[$m]}" ]; then
            echo "FAIL: $m/CMakeLists.txt links $d, a module at or above it (order: $order)" >&2
            bad=1
        fi
    done
    while IFS=: read -r file line inc; do
        hdr=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]+"([^"]+)".*/\1/' <<<"$inc")
        case $hdr in
        *.pb-c.h) dep=proto ;;
        */*) dep=${hdr%%/*} ;;
        *) continue ;; # a header of the same directory
        esac
        [ -n "${rank[$dep]+x}" ] || continue # tests/..., benchmarks/...: not a module
        case "$allowed" in
        *" $dep "*) ;;
        *)
            echo "FAIL: $file:$line includes \"$hdr\" ($dep), but $m links only:$allowed" >&2
            bad=1
            ;;
        esac
    done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "$m" \
        --include='*.c' --include='*.h' --include='*.cu' || true)
done

# The compiler's half (CMakeLists.txt, fa_library): a module's include path
# is its view, which holds only the modules it links; so an include of a
# module above it cannot compile.  Probed on the views of this build.
if [ -n "${FA_BUILD:-}" ] && [ -d "$FA_BUILD/include-view/common" ]; then
    probe() { # view header -> 0 when it compiles (from /: no source tree beside stdin)
        (cd / && printf '#include "%s"\n' "$2" |
            cc -fsyntax-only -I"$FA_BUILD/include-view/$1" -x c - 2>/dev/null)
    }
    probe common common/fa_err.h || { echo "FAIL: common's view cannot include its own common/fa_err.h" >&2; bad=1; }
    if probe common transport/h3.h; then
        echo "FAIL: common's include view reaches transport/h3.h (a module above it)" >&2
        bad=1
    fi
    for m in $order; do
        [ -d "$FA_BUILD/include-view/$m" ] || continue
        n=$(find "$FA_BUILD/include-view/$m" -mindepth 1 -maxdepth 1 | wc -l)
        [ "$n" = 1 ] || { echo "FAIL: the include view of $m holds $n entries, not only $m" >&2; bad=1; }
    done
else
    echo "it_layering: no include views under FA_BUILD (${FA_BUILD:-unset}): the compiler's half not probed"
fi

if [ "$bad" != 0 ]; then
    echo "it_layering: a module includes a header of a module it does not link (above it or beside it);" >&2
    echo "  move the code to the layer that may know both, or declare the dependency if the layers allow it" >&2
    exit 1
fi
echo "it_layering: every module includes only what it links, in the order $order"
