#!/bin/sh
# The table of docs/benchmarks.md section 1 (issue 11 item 9): one `kvq
# bench --json` run over the cache types and depths, then one markdown row
# per (type, depth): pp and tg t/s, the bytes a step reads, the bandwidth
# bound and the % of it reached, tg relative to the f16 cache at the same
# depth, and what the issue asks of that ratio (0.8 x f16's cache bytes /
# the type's cache bytes, exact rows included: the strict reading, the
# weights left out; "-" for f16 itself and at depth 0).
#   sh bench/depth_table.sh KVQ MODEL
#   (THREADS, DEPTHS, TYPES, REPS, NPROMPT, NGEN, OUT, EXTRA (more kvq bench
#    flags, e.g. --no-mmap) override)
# The load is printed before and after (uptime); the JSON lines stay in OUT.
set -eu
KVQ=$1
MODEL=$2
THREADS=${THREADS:-2}
DEPTHS=${DEPTHS:-0,4096,16384,32768}
TYPES=${TYPES:-f16,q8_0,q4_0,iq4_nl,q3_0,kvarn4,turbo4_tcq,turbo3_tcq}
REPS=${REPS:-3}
NPROMPT=${NPROMPT:-128}
NGEN=${NGEN:-32}
EXTRA=${EXTRA:-}
OUT=${OUT:-out/depth_table.jsonl}
mkdir -p "$(dirname "$OUT")"
echo "load before: $(uptime)"
echo "command: $KVQ bench -m $MODEL -t $THREADS -p $NPROMPT -n $NGEN -r $REPS -d $DEPTHS --types $TYPES $EXTRA --json"
# shellcheck disable=SC2086 # EXTRA is a list of flags
# stderr stays on the terminal: an error, or kvq bench's warning that the
# read bandwidth moved during the runs (every % of bound then uncertain)
"$KVQ" bench -m "$MODEL" -t "$THREADS" -p "$NPROMPT" -n "$NGEN" -r "$REPS" -d "$DEPTHS" --types "$TYPES" \
    $EXTRA --json > "$OUT"
echo "load after: $(uptime)"
awk '
    function num(k,   p) { p = index($0, "\"" k "\": "); if (!p) return ""; return substr($0, p + length(k) + 4) + 0 }
    function str(k,   p, s) { p = index($0, "\"" k "\": \""); s = substr($0, p + length(k) + 5); return substr(s, 1, index(s, "\"") - 1) }
    { t = str("cache_k"); if (str("cache_v") != t) t = t "/" str("cache_v"); d = num("depth"); key = t " " d
      if (!(key in seen)) { seen[key] = 1; order[++n] = key }
      pp[key] = num("pp_tps"); tg[key] = num("tg_tps"); bound[key] = num("tg_bound_tps")
      cache[key] = num("tg_cache_bytes"); step[key] = num("tg_bytes_per_token")
      if (!(d in bw)) depths[++nd] = d
      bw[d] = num("bandwidth_gbs"); before[d] = num("bandwidth_before_gbs"); after[d] = num("bandwidth_after_gbs") }
    END {
        printf "read bandwidth (measured by kvq bench, %s threads) before / after each depth'"'"'s runs; the bound uses the higher:\n", threads
        for (i = 1; i <= nd; i++) printf "  depth %d: %.1f / %.1f GB/s\n", depths[i], before[depths[i]], after[depths[i]]
        print ""
        print "| cache | depth | pp t/s | tg t/s | MB read / token | tg bound | % of bound | tg vs f16 | wanted (0.8 x bytes ratio) |"
        print "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        for (i = 1; i <= n; i++) {
            k = order[i]; split(k, kd, " "); f = "f16 " kd[2]
            vs = (f in tg && tg[f] > 0) ? sprintf("%.2fx", tg[k] / tg[f]) : "-"
            want = (kd[1] != "f16" && kd[2] > 0 && (f in cache) && cache[k] > 0) ? sprintf("%.2fx", 0.8 * cache[f] / cache[k]) : "-"
            printf "| %s | %d | %.1f | %.2f | %.0f | %.2f | %.0f%% | %s | %s |\n", kd[1], kd[2], pp[k], tg[k],
                   step[k] / 1e6, bound[k], (bound[k] > 0 ? 100 * tg[k] / bound[k] : 0), vs, want
        }
    }' threads="$THREADS" "$OUT"
