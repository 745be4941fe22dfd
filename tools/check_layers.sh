#!/bin/sh
# check_layers.sh LAYER... - src/ is a stack of layers, given lowest first
# (the Makefile's LAYERS); a file may include headers of its own layer and
# of the layers below, never above.  Prints each offending include and
# exits 1, or one summary line.
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
            [ "$h" = kvq.h ] && continue
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
exit "$bad"
