/* plot_svg.c - median KLD vs size % as a self-contained SVG (see
 * plot_svg.h); the CLI turns it into a PNG (tools/svg_png.c). */
#include "plot_svg.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

void kvq_plot_opts_default(kvq_plot_opts *o) {
    o->width = 800;
    o->height = 500;
    o->title = NULL;
    o->kld_floor = 1e-8;
}

void kvq_xml_write_escaped(FILE *f, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            /* XML 1.0 allows only tab, LF and CR below 0x20 */
            fputc(c < 0x20 && c != '\t' && c != '\n' && c != '\r' ? '?' : c, f);
        }
    }
}

/* ------------------------------------------------------------ geometry */

typedef struct plot_frame {
    double left, right, top, bottom;   /* pixel box of the plotting area     */
    double x_max, x_step;              /* size axis: 0 .. x_max, tick step   */
    int dec_lo, dec_hi;                /* KLD axis: 10^dec_lo .. 10^dec_hi   */
    bool any_clamped;
} plot_frame;

static bool row_plottable(const kvq_eval_row *r) {
    return !isnan(r->size_pct) && !isnan(r->median_kld) && isfinite(r->size_pct) && r->size_pct >= 0 &&
           r->median_kld < INFINITY;
}

/* 1, 2, 2.5 or 5 times a power of ten, near range/target. */
static double nice_step(double range, int target) {
    double raw = range / target;
    double mag = pow(10.0, floor(log10(raw)));
    double f = raw / mag;
    double m = f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10;
    return m * mag;
}

static bool below_floor(double kld, int dec_lo) {
    return !(kld > 0) || log10(kld) < dec_lo - 1e-9;
}

static plot_frame make_frame(const kvq_eval_row *rows, size_t n, const kvq_plot_opts *o) {
    plot_frame fr = {
        .left = 80, .right = o->width - 200, .top = 50, .bottom = o->height - 60,
    };
    double max_size = 0, min_pos = INFINITY, max_kld = 0;
    bool any_nonpos = false;
    for (size_t i = 0; i < n; i++) {
        if (!row_plottable(&rows[i])) continue;
        max_size = fmax(max_size, rows[i].size_pct);
        if (rows[i].median_kld > 0) {
            min_pos = fmin(min_pos, rows[i].median_kld);
            max_kld = fmax(max_kld, rows[i].median_kld);
        } else {
            any_nonpos = true;
        }
    }
    if (!(max_size > 0)) max_size = 100;
    fr.x_step = nice_step(max_size, 6);
    /* a little room right of the largest point, in half steps */
    fr.x_max = ceil(max_size * 1.04 / (fr.x_step / 2)) * (fr.x_step / 2);

    if (min_pos == INFINITY) {           /* nothing positive: show a default span */
        fr.dec_lo = -4;
        fr.dec_hi = 0;
    } else {
        fr.dec_lo = (int)floor(log10(min_pos));
        fr.dec_hi = (int)ceil(log10(max_kld));
        /* headroom for labels above the worst point */
        if (log10(max_kld) > fr.dec_hi - 0.6) fr.dec_hi++;
        /* zeros sit a decade below the smallest real value, never on it */
        if (any_nonpos) fr.dec_lo--;
    }
    int lo_limit = (int)ceil(log10(o->kld_floor > 0 ? o->kld_floor : 1e-8) - 1e-9);
    if (fr.dec_lo < lo_limit) fr.dec_lo = lo_limit;
    if (fr.dec_hi <= fr.dec_lo) fr.dec_hi = fr.dec_lo + 1;
    for (size_t i = 0; i < n; i++)
        if (row_plottable(&rows[i]) && below_floor(rows[i].median_kld, fr.dec_lo)) fr.any_clamped = true;
    return fr;
}

static double px_x(const plot_frame *fr, double size) {
    return fr->left + size / fr->x_max * (fr->right - fr->left);
}

static double px_y(const plot_frame *fr, double kld) {
    double l = below_floor(kld, fr->dec_lo) ? fr->dec_lo : log10(kld);
    return fr->bottom - (l - fr->dec_lo) / (fr->dec_hi - fr->dec_lo) * (fr->bottom - fr->top);
}

/* ------------------------------------------------------------- drawing */

static const char *const tier_colour[KVQ_TIER_COUNT] = {
    "#222222", "#1a9850", "#4575b4", "#e08214", "#d73027",
};
static const char *const tier_class[KVQ_TIER_COUNT] = {
    "tier-reference", "tier-high-fidelity", "tier-balanced", "tier-compact", "tier-emergency",
};
static const char *const other_colour = "#a0a4a8";

static void decade_label(char *buf, size_t cap, int dec) {
    if (dec >= -3 && dec <= 3) snprintf(buf, cap, "%g", pow(10.0, dec));
    else snprintf(buf, cap, "1e%d", dec);
}

static void write_axes(FILE *f, const plot_frame *fr, int width, int height) {
    double w = fr->right - fr->left, h = fr->bottom - fr->top;
    fprintf(f, "<g class=\"axes\" font-family=\"sans-serif\" font-size=\"12\" fill=\"#222\">\n");
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n",
            fr->left, fr->top, w, h);
    /* size axis: linear, ticks every x_step */
    for (double x = 0; x <= fr->x_max + 1e-9 * fr->x_max; x += fr->x_step) {
        double px = px_x(fr, x);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n",
                px, fr->top, px, fr->bottom);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n",
                px, fr->bottom, px, fr->bottom + 5);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", px, fr->bottom + 19, x);
    }
    /* KLD axis: one labelled tick per decade, minor ticks at 2..9 */
    for (int d = fr->dec_lo; d <= fr->dec_hi; d++) {
        double py = px_y(fr, pow(10.0, d));
        char lab[32];
        decade_label(lab, sizeof lab, d);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n",
                fr->left, py, fr->right, py);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n",
                fr->left - 5, py, fr->left, py);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s%s</text>\n", fr->left - 8, py + 4,
                d == fr->dec_lo && fr->any_clamped ? "&#8804;" : "", lab);
        for (int m = 2; m <= 9 && d < fr->dec_hi; m++) {
            double pm = px_y(fr, m * pow(10.0, d));
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n",
                    fr->left - 3, pm, fr->left, pm);
        }
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"13\">"
               "KV cache size (%% of a bf16 cache)</text>\n", fr->left + w / 2, height - 18);
    fprintf(f, "<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"13\" "
               "transform=\"rotate(-90 18 %.1f)\">median KLD (nats, log scale)</text>\n",
            fr->top + h / 2, fr->top + h / 2);
    (void)width;
    fprintf(f, "</g>\n");
}

/* Dashed lines at the tier thresholds that fall inside the KLD axis. */
static void write_threshold_lines(FILE *f, const plot_frame *fr, const kvq_ladder_thresholds *th) {
    const double lim[3] = { th->high_fidelity, th->balanced, th->compact };
    const kvq_tier tier[3] = { KVQ_TIER_HIGH_FIDELITY, KVQ_TIER_BALANCED, KVQ_TIER_COMPACT };
    fprintf(f, "<g class=\"thresholds\" font-family=\"sans-serif\" font-size=\"10\">\n");
    for (int k = 0; k < 3; k++) {
        if (!(lim[k] > 0) || log10(lim[k]) < fr->dec_lo || log10(lim[k]) > fr->dec_hi) continue;
        double py = px_y(fr, lim[k]);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                   "stroke-dasharray=\"4 4\" stroke-opacity=\"0.7\"/>\n",
                fr->left, py, fr->right, py, tier_colour[tier[k]]);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"%s\">%s &#8804; %g</text>\n",
                fr->right - 4, py - 3, tier_colour[tier[k]], kvq_tier_name(tier[k]), lim[k]);
    }
    fprintf(f, "</g>\n");
}

static void write_marker(FILE *f, const plot_frame *fr, const kvq_eval_row *r, size_t i,
                         const char *colour, const char *tier_class, bool on_frontier) {
    double px = px_x(fr, r->size_pct), py = px_y(fr, r->median_kld);
    double rad = on_frontier ? 5.5 : 4.0;
    bool clamped = below_floor(r->median_kld, fr->dec_lo);
    if (clamped)
        fprintf(f, "<path class=\"marker clamped %s\" id=\"cfg-%zu\" d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fZ\"",
                tier_class, i, px - rad, py - rad, px + rad, py - rad, px, py + rad);
    else
        fprintf(f, "<circle class=\"marker %s\" id=\"cfg-%zu\" cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\"",
                tier_class, i, px, py, rad);
    fprintf(f, " fill=\"%s\" stroke=\"#ffffff\" stroke-width=\"1\"><title>", colour);
    kvq_xml_write_escaped(f, r->label);
    fprintf(f, ": size %.2f%%, median KLD %.3g%s</title></%s>\n", r->size_pct, r->median_kld,
            clamped ? " (below the axis floor)" : "", clamped ? "path" : "circle");
}

static void write_frontier(FILE *f, const plot_frame *fr, const kvq_eval_row *rows,
                           const size_t *idx, size_t m) {
    if (m == 0) return;
    fprintf(f, "<polyline class=\"frontier\" fill=\"none\" stroke=\"#333\" stroke-width=\"1.5\" points=\"");
    for (size_t k = 0; k < m; k++)
        fprintf(f, "%s%.1f,%.1f", k ? " " : "", px_x(fr, rows[idx[k]].size_pct), px_y(fr, rows[idx[k]].median_kld));
    fprintf(f, "\"/>\n");
}

/* Label placement.  Candidate positions spiral out from the point: the
 * close ones first, then rings further away (joined to the point by a
 * leader line).  Each candidate is scored: overlapping an earlier label
 * 100 (labels must not stack), leaving the plot 50, each marker covered 1;
 * the first of the lowest score wins.  The box is estimated from the text
 * length.  Sweeps have few labels, so O(labels x markers) is fine. */
typedef struct label_box { double x0, y0, x1, y1; } label_box;

static bool boxes_overlap(const label_box *a, const label_box *b) {
    return a->x0 < b->x1 && b->x0 < a->x1 && a->y0 < b->y1 && b->y0 < a->y1;
}

static label_box label_box_at(double px, double py, double dx, double dy, double text_w) {
    double x = px + dx, y = py + dy;             /* text baseline anchor; dx < 0: anchored at its end */
    label_box b = { dx < 0 ? x - text_w : x, y - 10, dx < 0 ? x : x + text_w, y + 3 };
    return b;
}

enum { NEAR_CANDIDATES = 14, RINGS = 8, PER_RING = 6 };

/* Offset of candidate c (0 .. NEAR_CANDIDATES + RINGS * PER_RING - 1). */
static void label_offset(int c, double *dx, double *dy) {
    static const double near[NEAR_CANDIDATES][2] = {
        { 8, -8 }, { 8, 16 }, { -8, -8 }, { -8, 16 }, { 8, 4 }, { -8, 4 }, { 8, -20 }, { -8, -20 },
        { 8, 28 }, { -8, 28 }, { 14, -32 }, { -14, -32 }, { 14, 40 }, { -14, 40 },
    };
    if (c < NEAR_CANDIDATES) { *dx = near[c][0]; *dy = near[c][1]; return; }
    const int ring = 1 + (c - NEAR_CANDIDATES) / PER_RING, k = (c - NEAR_CANDIDATES) % PER_RING;
    static const double dir[PER_RING][2] = { { 1, -1 }, { 1, 1 }, { -1, -1 }, { -1, 1 }, { 1, 0 }, { -1, 0 } };
    *dx = dir[k][0] * (14 + 24 * ring);
    *dy = dir[k][1] * (20 + 16 * ring) + 4;
}

static int label_clutter(const label_box *b, const label_box *placed, size_t n_placed,
                         const plot_frame *fr, const double *mx, const double *my, size_t n_dots) {
    int score = 0;
    if (b->x0 < fr->left || b->x1 > fr->right || b->y0 < fr->top || b->y1 > fr->bottom) score += 50;
    for (size_t k = 0; k < n_placed; k++) score += 100 * boxes_overlap(b, &placed[k]);
    for (size_t k = 0; k < n_dots; k++) {
        label_box dot = { mx[k] - 6, my[k] - 6, mx[k] + 6, my[k] + 6 };
        score += boxes_overlap(b, &dot);
    }
    return score;
}

/* Labels of the rows idx[0..m): frontier points, then the landmarks. */
typedef struct label_set {
    const size_t *idx;
    size_t m;
    const char *cls, *fill;
} label_set;

static kvq_status write_labels(FILE *f, const plot_frame *fr, const kvq_eval_row *rows, size_t n,
                               const label_set *sets, size_t n_sets, kvq_error *err) {
    size_t total = 0;
    for (size_t s = 0; s < n_sets; s++) total += sets[s].m;
    double *mx = kvq_malloc_n(n ? n : 1, sizeof *mx), *my = kvq_malloc_n(n ? n : 1, sizeof *my);
    label_box *placed = kvq_malloc_n(total ? total : 1, sizeof *placed);
    if (!mx || !my || !placed) {       /* no labels piled up unplaced: an error */
        free(mx);
        free(my);
        free(placed);
        return kvq_fail(err, KVQ_ERR_NOMEM, "out of memory placing the plot's labels");
    }
    size_t n_dots = 0, n_placed = 0;
    for (size_t i = 0; i < n; i++) {       /* every marker is an obstacle */
        if (!row_plottable(&rows[i])) continue;
        mx[n_dots] = px_x(fr, rows[i].size_pct);
        my[n_dots++] = px_y(fr, rows[i].median_kld);
    }
    for (size_t s = 0; s < n_sets; s++) {
        fprintf(f, "<g class=\"%ss\" font-family=\"sans-serif\" font-size=\"11\" fill=\"%s\">\n", sets[s].cls,
                sets[s].fill);
        for (size_t k = 0; k < sets[s].m; k++) {
            const kvq_eval_row *r = &rows[sets[s].idx[k]];
            const double px = px_x(fr, r->size_pct), py = px_y(fr, r->median_kld);
            const double text_w = 6.2 * (double)strlen(r->label);
            int pick = 0, best = -1;
            double dx = 8, dy = -8;
            for (int c = 0; c < NEAR_CANDIDATES + RINGS * PER_RING && best != 0; c++) {
                label_offset(c, &dx, &dy);
                label_box b = label_box_at(px, py, dx, dy, text_w);
                int score = label_clutter(&b, placed, n_placed, fr, mx, my, n_dots);
                if (best < 0 || score < best) { best = score; pick = c; }
            }
            label_offset(pick, &dx, &dy);
            placed[n_placed++] = label_box_at(px, py, dx, dy, text_w);
            if (pick >= NEAR_CANDIDATES)       /* far from its point: a leader line */
                fprintf(f, "<line class=\"leader\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\" "
                        "stroke-width=\"0.8\"/>\n", px, py, px + dx, py + dy - 3);
            fprintf(f, "<text class=\"%s\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\">", sets[s].cls, px + dx, py + dy,
                    dx < 0 ? "end" : "start");
            kvq_xml_write_escaped(f, r->label);
            fprintf(f, "</text>\n");
        }
        fprintf(f, "</g>\n");
    }
    free(mx);
    free(my);
    free(placed);
    return KVQ_OK;
}

/* The formats a llama.cpp user looks for, labelled even off the frontier:
 * same-type pairs without a tail, rotated as llama.cpp rotates them. */
static const char *const landmark_labels[] = { "q8_0/q8_0", "q5_0/q5_0", "q4_0/q4_0", "iq4_nl/iq4_nl", "f16/f16" };

static size_t find_landmarks(const kvq_eval_row *rows, size_t n, const bool *on_frontier, size_t *out) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (on_frontier[i] || !row_plottable(&rows[i])) continue;
        for (size_t k = 0; k < KVQ_ARRAY_LEN(landmark_labels); k++)
            if (!strcmp(rows[i].label, landmark_labels[k])) out[m++] = i;
    }
    return m;
}

static void write_legend(FILE *f, const plot_frame *fr, const kvq_ladder_thresholds *th) {
    double x = fr->right + 20, y = fr->top + 8;
    char tier_text[KVQ_TIER_COUNT][64];
    snprintf(tier_text[KVQ_TIER_REFERENCE], 64, "reference (exact cache)");
    snprintf(tier_text[KVQ_TIER_HIGH_FIDELITY], 64, "high fidelity (&#8804; %g)", th->high_fidelity);
    snprintf(tier_text[KVQ_TIER_BALANCED], 64, "balanced (&#8804; %g)", th->balanced);
    snprintf(tier_text[KVQ_TIER_COMPACT], 64, "compact (&#8804; %g)", th->compact);
    snprintf(tier_text[KVQ_TIER_EMERGENCY], 64, "emergency (&gt; %g)", th->compact);

    fprintf(f, "<g class=\"legend\" font-family=\"sans-serif\" font-size=\"11\" fill=\"#222\">\n");
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-weight=\"bold\">frontier tier (median KLD)</text>\n", x, y);
    for (int t = 0; t < KVQ_TIER_COUNT; t++) {
        y += 18;
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5.5\" fill=\"%s\"/>", x + 6, y - 4, tier_colour[t]);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", x + 18, y, tier_text[t]);
    }
    y += 18;
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"/>", x + 6, y - 4, other_colour);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">not on the frontier</text>\n", x + 18, y);
    y += 18;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\" stroke-width=\"1.5\"/>",
            x, y - 4, x + 12, y - 4);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">Pareto frontier</text>\n", x + 18, y);
    if (fr->any_clamped) {
        y += 18;
        fprintf(f, "<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"%s\"/>", x + 1, y - 9, x + 11, y - 9,
                x + 6, y + 1, other_colour);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">at or below the floor</text>\n", x + 18, y);
    }
    fprintf(f, "</g>\n");
}

/* Rows that cannot be drawn are named, so nothing disappears silently. */
static void write_desc(FILE *f, const kvq_eval_row *rows, size_t n) {
    fprintf(f, "<desc>Median KL divergence against KV-cache size, one marker per configuration.");
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        if (row_plottable(&rows[i])) continue;
        fputs(first ? " Not plotted (no size or median KLD): " : ", ", f);
        kvq_xml_write_escaped(f, rows[i].label);
        first = false;
    }
    fprintf(f, "</desc>\n");
}

kvq_status kvq_plot_svg_write(FILE *f, const kvq_eval_row *rows, size_t n,
                              const kvq_ladder_thresholds *th, const kvq_plot_opts *o,
                              kvq_error *err) {
    if (o->width < 400 || o->height < 300 || o->width > 10000 || o->height > 10000)
        return kvq_fail(err, KVQ_ERR_ARG, "plot size %dx%d out of range (400x300 .. 10000x10000)", o->width, o->height);
    size_t *idx = kvq_malloc_n(n ? n : 1, sizeof *idx), *marks = kvq_malloc_n(n ? n : 1, sizeof *marks);
    bool *on = kvq_calloc(n ? n : 1, sizeof *on);
    if (!idx || !on || !marks) {
        free(idx);
        free(marks);
        free(on);
        return kvq_fail(err, KVQ_ERR_NOMEM, "out of memory for the plot of %zu rows", n);
    }
    size_t m = kvq_ladder_frontier(rows, n, idx);
    for (size_t k = 0; k < m; k++) on[idx[k]] = true;
    plot_frame fr = make_frame(rows, n, o);

    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\">\n", o->width, o->height, o->width, o->height);
    fprintf(f, "<title>");
    kvq_xml_write_escaped(f, o->title ? o->title : "KV-cache quality vs size");
    fprintf(f, "</title>\n");
    write_desc(f, rows, n);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n");
    fprintf(f, "<text x=\"%.1f\" y=\"28\" text-anchor=\"middle\" font-family=\"sans-serif\" "
               "font-size=\"16\" font-weight=\"bold\" fill=\"#111\">", (fr.left + fr.right) / 2);
    kvq_xml_write_escaped(f, o->title ? o->title : "KV-cache quality vs size");
    fprintf(f, "</text>\n");
    write_axes(f, &fr, o->width, o->height);
    write_threshold_lines(f, &fr, th);
    write_frontier(f, &fr, rows, idx, m);
    fprintf(f, "<g class=\"markers\">\n");
    for (size_t i = 0; i < n; i++) {       /* frontier last, so it is drawn on top */
        if (!row_plottable(&rows[i]) || on[i]) continue;
        write_marker(f, &fr, &rows[i], i, other_colour, "off-frontier", false);
    }
    for (size_t k = m; k-- > 0;) {
        kvq_tier t = kvq_tier_of(&rows[idx[k]], th);
        char cls[48];
        snprintf(cls, sizeof cls, "frontier %s", tier_class[t]);
        write_marker(f, &fr, &rows[idx[k]], idx[k], tier_colour[t], cls, true);
    }
    fprintf(f, "</g>\n");
    const label_set sets[2] = { { idx, m, "frontier-label", "#111" },
                                { marks, find_landmarks(rows, n, on, marks), "landmark-label", "#555" } };
    kvq_status st = write_labels(f, &fr, rows, n, sets, 2, err);
    write_legend(f, &fr, th);
    fprintf(f, "</svg>\n");
    free(idx);
    free(marks);
    free(on);
    if (st != KVQ_OK) return st;
    if (ferror(f)) return kvq_fail(err, KVQ_ERR_IO, "cannot write the SVG plot");
    return KVQ_OK;
}

kvq_status kvq_plot_svg_save(const char *path, const kvq_eval_row *rows, size_t n,
                             const kvq_ladder_thresholds *th, const kvq_plot_opts *o,
                             kvq_error *err) {
    FILE *f = fopen(path, "w");
    if (!f) return kvq_fail(err, KVQ_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    kvq_status st = kvq_plot_svg_write(f, rows, n, th, o, err);
    if (fclose(f) != 0 && st == KVQ_OK) st = kvq_fail(err, KVQ_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return st;
}
