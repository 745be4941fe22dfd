#!/bin/sh
# check_layers.sh LAYER... - src/ is a stack of layers, given lowest first
# (the Makefile's LAYERS); a file may include headers of its own layer and
# of the layers below, never above, and the public headers (include/).
# tools/ (the kvq command) is built on the public API alone: a tools/ file
# may include include/*.h and the tools' own headers, never a src/ one.
# Prints each offending include and exits 1, or one summary line each.
set -u
i=0
for layer in "$@"; do
    eval "rank_$layer=$i"
    i=$((i + 1))
done
bad=0 n=0
for layer in "$@"; do
    eval "mine=\$rank_$layer"
    for f in src/"$layer"/*; do
        [ -f "$f" ] || continue
        for h in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
            n=$((n + 1))
            [ -f "include/$h" ] && continue
            found=""
            for other in "$@"; do
                if [ -f "src/$other/$h" ]; then found=$other; break; fi
            done
            if [ -z "$found" ]; then
                echo "check-layers: $f includes \"$h\", which is in no layer of src/"; bad=1; continue
            fi
            eval "theirs=\$rank_$found"
            if [ "$theirs" -gt "$mine" ]; then
                echo "check-layers: $f ($layer) includes $h from the higher layer $found"; bad=1
            fi
        done
    done
done
[ "$bad" = 0 ] && echo "check-layers: $n includes in src/, each from its own layer or below ($*)"
tbad=0 t=0
for f in tools/*.c tools/*.h; do
    [ -f "$f" ] || continue
    for h in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
        t=$((t + 1))
        case "$h" in */*) echo "check-layers: $f includes \"$h\" by a path (only include/*.h and tools/*.h)"; tbad=1; continue ;; esac
        [ -f "include/$h" ] && continue
        for layer in "$@"; do
            if [ -f "src/$layer/$h" ]; then
                echo "check-layers: $f includes $h from src/$layer (tools use the public API: include/)"; tbad=1
                continue 2
            fi
        done
        [ -f "tools/$h" ] || { echo "check-layers: $f includes \"$h\", which is in neither include/ nor tools/"; tbad=1; }
    done
done
[ "$tbad" = 0 ] && echo "check-layers: $t includes in tools/, each a public header or the tools' own"
[ "$bad" = 0 ] && [ "$tbad" = 0 ]
