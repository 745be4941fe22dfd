#!/bin/sh
# KLD against context length (docs/long-context.md): the same cache types at
# c = 512, 1024, 2048, 4096 on the 4k model over the held-out novel, each
# context over the same 8,192 positions (16, 8, 4, 2 chunks), with tail 0
# and tail 128, rotation on.  Prints one markdown table (type, then size %,
# mean / median / 99.9% KLD per context).
#   sh bench/long_context.sh            (KVQ, MODEL, TEXT, OUT, TYPES override)
set -eu
KVQ=${KVQ:-build/kvq}
MODEL=${MODEL:-models/austen-qwen3-h128-4k-q8_0.gguf}
TEXT=${TEXT:-models/northanger-120k.txt}
OUT=${OUT:-out/long-context}
TYPES=${TYPES:-q8_0,q5_0,q4_0,iq4_nl,kvarn4,kvarn3,turbo4_tcq,turbo3_tcq}
CTXS="512 1024 2048 4096"
mkdir -p "$OUT"
for c in $CTXS; do
    "$KVQ" sweep -m "$MODEL" -f "$TEXT" -c "$c" --chunks $((8192 / c)) --types "$TYPES" --pairs none \
        --tails 0,128 --rot on --jobs 2 -o "$OUT/c$c" >/dev/null
done
# One row per configuration: size % and mean / median / p99.9 KLD at each context.
for c in $CTXS; do
    awk -F, -v c="$c" 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        $col["is_reference"] == "0" {
            printf "%s\t%s\t%.1f\t%.3g\t%.3g\t%.3g\n", $col["label"], c, $col["size_pct"], $col["mean_kld"],
                   $col["median_kld"], $col["p99_9_kld"] }' "$OUT/c$c/results.csv"
done | awk -F'\t' -v ctxs="$CTXS" '
    { key = $1; if (!(key in seen)) { seen[key] = 1; order[++n] = key }
      cell[key, $2] = $3 "% | " $4 " | " $5 " | " $6 }
    END {
        nc = split(ctxs, cs, " ")
        printf "| cache |"; for (j = 1; j <= nc; j++) printf " c=%s size | mean | median | 99.9%% |", cs[j]; print ""
        printf "|---|"; for (j = 1; j <= nc; j++) printf "---:|---:|---:|---:|"; print ""
        for (i = 1; i <= n; i++) {
            printf "| %s |", order[i]
            for (j = 1; j <= nc; j++) printf " %s |", ((order[i], cs[j]) in cell) ? cell[order[i], cs[j]] : "- | - | - | -"
            print ""
        }
    }'
