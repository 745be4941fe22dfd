#!/bin/sh
# Paired ratios of decode speed between cache types on a shared host
# (docs/benchmarks.md section 3): ROUNDS invocations of `kvq bench --json`,
# each running every type of TYPES at one depth back to back (seconds
# apart), so each invocation gives one ratio per type against the first
# type, measured under the same load; then per (type, depth) the median of
# those ratios, their range, the median t/s and the median % of the
# bandwidth bound (each invocation's own bound: its bandwidth reading, whose
# range per depth is printed first).  A host whose speed
# drifts by 10-50 % between minutes moves both sides of a pair alike,
# which the separate medians of depth_table.sh do not undo.
# Two "wanted" columns give issue 11's per-type target, f16's speed x 0.8
# x (f16's bytes / the type's bytes), in its two readings: bytes read per
# generated token (weights + cache, what `kvq bench` bounds with) and the
# cache's bytes alone (the stricter one).
#   sh bench/type_ratio.sh KVQ MODEL
#   (THREADS, DEPTHS, TYPES (the first is the reference), ROUNDS, NPROMPT,
#    NGEN, OUT, EXTRA (more kvq bench flags, e.g. --no-mmap) override)
# The load is printed before and after (uptime); the JSON lines stay in OUT.
set -eu
KVQ=$1
MODEL=$2
THREADS=${THREADS:-2}
DEPTHS=${DEPTHS:-4096,16384}
TYPES=${TYPES:-f16,q4_0}
ROUNDS=${ROUNDS:-5}
NPROMPT=${NPROMPT:-8}
NGEN=${NGEN:-16}
EXTRA=${EXTRA:-}
OUT=${OUT:-out/type_ratio.jsonl}
mkdir -p "$(dirname "$OUT")"
: > "$OUT"
echo "load before: $(uptime)"
echo "command (x $ROUNDS per depth): $KVQ bench -m $MODEL -t $THREADS -p $NPROMPT -n $NGEN -r 1 -d DEPTH --types $TYPES $EXTRA --json"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for d in $(echo "$DEPTHS" | tr ',' ' '); do
        # shellcheck disable=SC2086 # EXTRA is a list of flags
        # through a file, not a pipe: a failed run stops the script (set -e),
        # and its error, or the warning that the bandwidth moved, shows
        "$KVQ" bench -m "$MODEL" -t "$THREADS" -p "$NPROMPT" -n "$NGEN" -r 1 -d "$d" --types "$TYPES" $EXTRA --json \
            > "$OUT.run"
        sed "s/^{/{\"round\": $r, /" "$OUT.run" >> "$OUT"
    done
    r=$((r + 1))
done
rm -f "$OUT.run"
echo "load after: $(uptime)"
REF=$(echo "$TYPES" | cut -d, -f1)
awk -v ref="$REF" '
    function num(k,   p) { p = index($0, "\"" k "\": "); if (!p) return ""; return substr($0, p + length(k) + 4) + 0 }
    function str(k,   p, s) { p = index($0, "\"" k "\": \""); s = substr($0, p + length(k) + 5); return substr(s, 1, index(s, "\"") - 1) }
    function median(a, n,   i, j, t) {
        for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j] < a[j - 1]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    /"tg_tps"/ {
        key = num("round") SUBSEP num("depth")
        tg[key, str("cache_k")] = num("tg_tps")
        frac[key, str("cache_k")] = num("tg_bound_fraction")
        tok[num("depth"), str("cache_k")] = num("tg_bytes_per_token")
        kv[num("depth"), str("cache_k")] = num("tg_cache_bytes")
        if (!((str("cache_k"), num("depth")) in seen)) { seen[str("cache_k"), num("depth")] = 1; order[++n_order] = str("cache_k") SUBSEP num("depth") }
        rounds[num("round")] = 1
        bw = num("bandwidth_gbs")
        if (!(num("depth") in bw_lo) || bw < bw_lo[num("depth")]) bw_lo[num("depth")] = bw
        if (bw > bw_hi[num("depth")]) bw_hi[num("depth")] = bw
    }
    END {
        for (d in bw_lo) printf "bandwidth of the bounds at depth %d: %.1f-%.1f GB/s (each invocation'"'"'s own: the higher of its readings before and after its runs)\n", d, bw_lo[d], bw_hi[d]
        print "| cache | depth | median tg t/s | median % of bound | median ratio vs " ref " | range of ratios | rounds | wanted: 0.8 x bytes/token ratio | wanted: 0.8 x cache bytes ratio |"
        print "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        for (o = 1; o <= n_order; o++) {
            split(order[o], td, SUBSEP)
            nr = 0; nt = 0
            for (r in rounds) {
                k = r SUBSEP td[2]
                if (!((k, td[1]) in tg)) continue
                t[++nt] = tg[k, td[1]]
                f[nt] = 100 * frac[k, td[1]]
                if ((k, ref) in tg && tg[k, ref] > 0) rat[++nr] = tg[k, td[1]] / tg[k, ref]
            }
            lo = 1e9; hi = 0
            for (i = 1; i <= nr; i++) { if (rat[i] < lo) lo = rat[i]; if (rat[i] > hi) hi = rat[i] }
            want_tok = tok[td[2], td[1]] > 0 && td[1] != ref ? sprintf("%.2fx", 0.8 * tok[td[2], ref] / tok[td[2], td[1]]) : "-"
            want_kv = kv[td[2], td[1]] > 0 && td[1] != ref ? sprintf("%.2fx", 0.8 * kv[td[2], ref] / kv[td[2], td[1]]) : "-"
            if (nr) printf "| %s | %d | %.2f | %.0f %% | %.2fx | %.2f-%.2fx | %d | %s | %s |\n", td[1], td[2], median(t, nt),
                           median(f, nt), median(rat, nr), lo, hi, nr, want_tok, want_kv
            else printf "| %s | %d | %.2f | %.0f %% | - | - | 0 | %s | %s |\n", td[1], td[2], median(t, nt), median(f, nt),
                        want_tok, want_kv
        }
    }' "$OUT"
