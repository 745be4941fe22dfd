#!/bin/sh
# Side-by-side speed of two kvq builds (docs/benchmarks.md): `kvq bench
# --json` of BASE and NEW alternately, depth by depth, ROUNDS rounds (base,
# new, base, new, ...: a minute or two apart), so that both see the same
# machine load; every JSON line is tagged with its build and round.  Then one markdown table: per cache type and
# depth, each build's pp and tg t/s (the best round's median of -r runs),
# the tg bound and % of it, and new / base.
#   sh bench/speed_compare.sh BASE_KVQ NEW_KVQ MODEL
#   (THREADS, DEPTHS, TYPES, ROUNDS, REPS, NPROMPT, NGEN, OUT override;
#    EXTRA: more kvq bench flags for both, e.g. --no-mmap; BASE_FLAGS and
#    NEW_FLAGS: flags for one side each, so that one build can be compared
#    with itself under two settings, e.g. BASE_FLAGS="--act f32"
#    NEW_FLAGS="--act query8" with the same KVQ twice)
# The machine's load is printed before and after (uptime).
set -eu
BASE=$1
NEW=$2
MODEL=$3
THREADS=${THREADS:-2}
DEPTHS=${DEPTHS:-0,4096,16384}
TYPES=${TYPES:-f16,q8_0,q4_0}
ROUNDS=${ROUNDS:-2}
REPS=${REPS:-3}
NPROMPT=${NPROMPT:-128}
NGEN=${NGEN:-32}
OUT=${OUT:-out/speed_compare.jsonl}
EXTRA=${EXTRA:-}
BASE_FLAGS=${BASE_FLAGS:-}
NEW_FLAGS=${NEW_FLAGS:-}
mkdir -p "$(dirname "$OUT")"
: > "$OUT"
echo "load before: $(uptime)"
echo "command (x $ROUNDS per depth and side): KVQ bench -m $MODEL -t $THREADS -p $NPROMPT -n $NGEN -r $REPS -d DEPTH --types $TYPES $EXTRA FLAGS --json"
echo "  base: KVQ = $BASE, FLAGS = $BASE_FLAGS"
echo "  new:  KVQ = $NEW, FLAGS = $NEW_FLAGS"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for d in $(echo "$DEPTHS" | tr ',' ' '); do
        for b in base new; do
            if [ "$b" = base ]; then bin=$BASE; flags=$BASE_FLAGS; else bin=$NEW; flags=$NEW_FLAGS; fi
            # shellcheck disable=SC2086 # EXTRA and the flags are lists of flags
            # through a file, not a pipe: a failed run stops the script (set -e),
            # and its error, or the warning that the bandwidth moved, shows
            nice -n 5 "$bin" bench -m "$MODEL" -t "$THREADS" -p "$NPROMPT" -n "$NGEN" -r "$REPS" -d "$d" \
                --types "$TYPES" $EXTRA $flags --json > "$OUT.run"
            sed "s/^{/{\"build\": \"$b\", \"round\": $r, /" "$OUT.run" >> "$OUT"
        done
    done
    r=$((r + 1))
done
rm -f "$OUT.run"
echo "load after: $(uptime)"
# The best round per (build, cache, depth): highest tg t/s; its pp and bound.
awk '
    function num(k,   p) { p = index($0, "\"" k "\": "); if (!p) return ""; return substr($0, p + length(k) + 4) + 0 }
    function str(k,   p, s) { p = index($0, "\"" k "\": \""); s = substr($0, p + length(k) + 5); return substr(s, 1, index(s, "\"") - 1) }
    { key = str("cache_k") "/" str("cache_v") " " num("depth"); bk = str("build") " " key
      if (!(key in seen)) { seen[key] = 1; order[++n] = key }
      tg = num("tg_tps")
      if (!(bk in best) || tg > best[bk]) {
          best[bk] = tg; pp[bk] = num("pp_tps"); bound[bk] = num("tg_bound_tps"); bw[bk] = num("bandwidth_gbs")
      } }
    END {
        print "| cache K/V | depth | pp base | pp new | pp new/base | tg base | tg new | tg new/base | tg bound | new % of bound | GB/s (base, new) |"
        print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        for (i = 1; i <= n; i++) {
            k = order[i]; split(k, kd, " "); b0 = "base " k; b1 = "new " k
            printf "| %s | %d | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f | %.1f | %.0f%% | %.1f, %.1f |\n", kd[1], kd[2],
                   pp[b0], pp[b1], (pp[b0] > 0 ? pp[b1] / pp[b0] : 0), best[b0], best[b1],
                   (best[b0] > 0 ? best[b1] / best[b0] : 0), bound[b1], (bound[b1] > 0 ? 100 * best[b1] / bound[b1] : 0),
                   bw[b0], bw[b1]
        }
    }' "$OUT"
