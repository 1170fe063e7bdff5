#!/bin/sh
# fedagg-stage-files: copies ConfigMap and Secret volumes into the layout the fedagg
# daemons read (/etc/fedagg), with the modes they require.  Run by the `stage-files` init
# container of every fedagg pod (deploy/k8s); installed in the image as
# /usr/local/bin/fedagg-stage-files (deploy/Dockerfile).
#
#   fedagg-stage-files DEST KIND:SRC[:SUBDIR]...
#
# KIND is `public` (files become mode 0444) or `private` (0400, owned by the user running
# this, which is the daemon's user).  Every regular file directly in SRC (symbolic links
# followed, names starting with '.' skipped: kubelet's ..data bookkeeping) is copied to
# DEST/SUBDIR/.  A SRC without files, a subdirectory in SRC, or two sources giving the
# same file are errors.
#
# Why not mount the Secrets straight at /etc/fedagg/private: the daemons refuse key files
# that group or others can read, and the pods must set fsGroup so that their volumes are
# writable by the non-root user; kubelet then makes every file of a Secret volume group-
# readable (mode | 0440), whatever defaultMode says.  Without fsGroup the files belong to
# root and a 0400 key cannot be read by the daemon at all.  A copy owned by the daemon's
# user, mode 0400, on an in-memory emptyDir, is what both need.
set -eu

prog=fedagg-stage-files
die() {
    echo "$prog: $*" >&2
    exit 1
}

[ $# -ge 2 ] || die "usage: $prog DEST KIND:SRC[:SUBDIR]... (KIND: public or private)"
dest=$1
shift
[ -d "$dest" ] || die "destination $dest is not a directory (mount the emptyDir there)"
[ -w "$dest" ] || die "destination $dest is not writable by uid $(id -u)"
# The files staged so far, '|'-separated: kept in memory, since the container's root
# filesystem, /tmp included, is read-only.
seen="|"

for spec in "$@"; do
    kind=${spec%%:*}
    rest=${spec#*:}
    [ "$rest" != "$spec" ] || die "'$spec' is not KIND:SRC[:SUBDIR]"
    case $rest in
    *:*) src=${rest%%:*} sub=${rest#*:} ;;
    *) src=$rest sub= ;;
    esac
    case $kind in
    public) mode=0444 ;;
    private) mode=0400 ;;
    *) die "'$spec': kind must be public or private, not '$kind'" ;;
    esac
    case $sub in
    */.. | ../* | .. | */../* | /*) die "'$spec': SUBDIR must stay inside $dest" ;;
    esac
    [ -d "$src" ] || die "source $src ($kind) is not a directory: is its volume mounted?"
    out=$dest${sub:+/$sub}
    mkdir -p "$out"
    n=0
    for f in "$src"/*; do
        [ -e "$f" ] || continue # an empty directory leaves the glob as is
        name=${f##*/}
        if [ ! -f "$f" ]; then
            die "$f is not a regular file (a ConfigMap or Secret key with items.path in a subdirectory?)"
        fi
        case $seen in
        *"|$out/$name|"*) die "$out/$name comes from two sources; the second is $f" ;;
        esac
        seen="$seen$out/$name|"
        rm -f "$out/$name"
        # install(1): new file, this user's, the mode set before any byte is readable.
        install -m "$mode" "$f" "$out/$name" || die "cannot copy $f to $out/$name"
        echo "$prog: $kind $out/$name ($mode)"
        n=$((n + 1))
    done
    [ "$n" -gt 0 ] || die "source $src ($kind) holds no files: is the ConfigMap or Secret empty?"
done
