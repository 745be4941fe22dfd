/* plot_drift.c - mean KLD vs generated position as an SVG (plot_drift.h). */
#include "plot_drift.h"
#include "plot_svg.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

enum { WIDTH = 960, LEGEND_W = 270, LEGEND_ROW = 17, MIN_HEIGHT = 520 };

/* Qualitative colours that stay apart on white (the sweep plot's tier
 * colours first, then others). */
static const char *const PALETTE[] = {
    "#1a9850", "#4575b4", "#d73027", "#e08214", "#762a83", "#35978f",
    "#8c510a", "#de77ae", "#222222", "#74add1", "#bf812d", "#5aae61",
};
static const char *const DASH[] = { "", "7 4", "2 3", "8 3 2 3" };

typedef struct frame {
    double left, right, top, bottom;
    double x_max;              /* log2 of the last position              */
    int dec_lo, dec_hi;        /* y: 10^dec_lo .. 10^dec_hi              */
    bool any_clamped;
} frame;

static bool below_floor(double y, int dec_lo) { return !(y > 0) || log10(y) < dec_lo - 1e-9; }

static double px_x(const frame *fr, double pos) {
    return fr->left + (fr->x_max > 0 ? log2(pos) / fr->x_max : 0.0) * (fr->right - fr->left);
}

static double px_y(const frame *fr, double y) {
    const double l = below_floor(y, fr->dec_lo) ? fr->dec_lo : fmin(log10(y), fr->dec_hi);
    return fr->bottom - (l - fr->dec_lo) / (fr->dec_hi - fr->dec_lo) * (fr->bottom - fr->top);
}

/* Where a bin is drawn: the geometric middle of its positions. */
static double bin_x(const kvq_drift_series *s, size_t k) { return sqrt((double)s->lo[k] * (double)s->hi[k]); }

static frame make_frame(const kvq_drift_series *s, size_t n, int n_gen, int height) {
    frame fr = { .left = 80, .right = WIDTH - LEGEND_W - 20, .top = 50, .bottom = height - 60 };
    fr.x_max = log2(n_gen > 1 ? n_gen : 2);
    double lo = INFINITY, hi = 0;
    bool nonpos = false;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < s[i].n; k++) {
            if (s[i].y[k] > 0 && isfinite(s[i].y[k])) { lo = fmin(lo, s[i].y[k]); hi = fmax(hi, s[i].y[k]); }
            else nonpos = true;
        }
    if (lo == INFINITY) { fr.dec_lo = -8; fr.dec_hi = -4; }
    else {
        fr.dec_lo = (int)floor(log10(lo)) - (nonpos ? 1 : 0);
        fr.dec_hi = (int)ceil(log10(hi));
        if (fr.dec_lo < -10) fr.dec_lo = -10;     /* below 1e-10 nats nothing is visible to anyone */
        if (fr.dec_hi <= fr.dec_lo) fr.dec_hi = fr.dec_lo + 1;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < s[i].n; k++) fr.any_clamped |= below_floor(s[i].y[k], fr.dec_lo);
    return fr;
}

static void decade_label(char *buf, size_t cap, int dec) {
    if (dec >= -3 && dec <= 3) snprintf(buf, cap, "%g", pow(10.0, dec));
    else snprintf(buf, cap, "1e%d", dec);
}

static void line(FILE *f, double x1, double y1, double x2, double y2, const char *stroke) {
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n", x1, y1, x2, y2, stroke);
}

static void write_axes(FILE *f, const frame *fr, int n_gen, int height) {
    const double w = fr->right - fr->left, h = fr->bottom - fr->top;
    fprintf(f, "<g class=\"axes\" font-family=\"sans-serif\" font-size=\"12\" fill=\"#222\">\n");
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n",
            fr->left, fr->top, w, h);
    /* x: a grid line at every power of two, labelled at powers of four
     * (the bucket edges), and the last position labelled at the right */
    for (int e = 0; (1 << e) <= n_gen && e < 31; e++) {
        const double px = px_x(fr, (double)(1 << e));
        line(f, px, fr->top, px, fr->bottom, e % 2 == 0 ? "#dcdcdc" : "#f0f0f0");
        line(f, px, fr->bottom, px, fr->bottom + (e % 2 == 0 ? 5 : 3), "#444");
        if (e % 2 == 0 && px < fr->right - 30)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>\n", px, fr->bottom + 19, 1 << e);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-weight=\"bold\">%d</text>\n", fr->right,
            fr->bottom + 19, n_gen);
    for (int d = fr->dec_lo; d <= fr->dec_hi; d++) {
        const double py = px_y(fr, pow(10.0, d));
        char lab[32];
        decade_label(lab, sizeof lab, d);
        line(f, fr->left, py, fr->right, py, "#e4e4e4");
        line(f, fr->left - 5, py, fr->left, py, "#444");
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s%s</text>\n", fr->left - 8, py + 4,
                d == fr->dec_lo && fr->any_clamped ? "&#8804;" : "", lab);
        for (int m = 2; m <= 9 && d < fr->dec_hi; m++) {
            const double pm = px_y(fr, m * pow(10.0, d));
            line(f, fr->left - 3, pm, fr->left, pm, "#444");
        }
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"13\">generated position "
               "(log scale; the first generated token is 1)</text>\n", fr->left + w / 2, height - 18);
    fprintf(f, "<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"13\" transform=\"rotate(-90 18 %.1f)\">"
               "mean KLD vs the exact cache (nats, log scale)</text>\n", fr->top + h / 2, fr->top + h / 2);
    fprintf(f, "</g>\n");
}

static bool first_of_key(const kvq_drift_series *s, size_t j) {
    for (size_t k = 0; k < j; k++)
        if (!strcmp(s[k].colour_key, s[j].colour_key)) return false;
    return true;
}

/* Colour of series i: one palette slot per distinct key, in order of
 * first appearance. */
static const char *colour_of(const kvq_drift_series *s, size_t i) {
    size_t first = i;
    for (size_t j = 0; j < i && first == i; j++)
        if (!strcmp(s[j].colour_key, s[i].colour_key)) first = j;
    size_t slot = 0;
    for (size_t j = 0; j < first; j++) slot += first_of_key(s, j);
    return PALETTE[slot % KVQ_ARRAY_LEN(PALETTE)];
}

/* The curve's y at position x (linear in log-log between bin middles). */
static double y_at(const kvq_drift_series *s, double x) {
    if (s->n == 0) return NAN;
    if (x <= bin_x(s, 0)) return s->y[0];
    for (size_t k = 1; k < s->n; k++) {
        const double x0 = bin_x(s, k - 1), x1 = bin_x(s, k);
        if (x > x1) continue;
        const double t = (log(x) - log(x0)) / (log(x1) - log(x0));
        const double y0 = s->y[k - 1], y1 = s->y[k];
        return y0 > 0 && y1 > 0 ? exp(log(y0) + t * (log(y1) - log(y0))) : y0 + t * (y1 - y0);
    }
    return s->y[s->n - 1];
}

static void write_series(FILE *f, const frame *fr, const kvq_drift_series *s, size_t i, const char *colour,
                         int n_gen) {
    fprintf(f, "<polyline class=\"series\" id=\"series-%zu\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\"",
            i, colour);
    if (s->dash != KVQ_DASH_SOLID) fprintf(f, " stroke-dasharray=\"%s\"", DASH[s->dash]);
    fprintf(f, " points=\"");
    for (size_t k = 0; k < s->n; k++) fprintf(f, "%s%.1f,%.1f", k ? " " : "", px_x(fr, bin_x(s, k)), px_y(fr, s->y[k]));
    fprintf(f, "\"><title>");
    kvq_xml_write_escaped(f, s->label);
    fprintf(f, "</title></polyline>\n");
    const double d = s->median_first_div;
    if (!(d >= 1 && d <= n_gen)) return;
    fprintf(f, "<circle class=\"first-divergence\" cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"%s\" stroke=\"#fff\">"
               "<title>", px_x(fr, d), px_y(fr, y_at(s, d)), colour);
    kvq_xml_write_escaped(f, s->label);
    fprintf(f, ": median first divergence at position %g</title></circle>\n", d);
}

static void write_legend(FILE *f, const frame *fr, const kvq_drift_series *s, size_t n, int n_gen) {
    const double x = fr->right + 18;
    double y = fr->top + 8;
    fprintf(f, "<g class=\"legend\" font-family=\"sans-serif\" font-size=\"11\" fill=\"#222\">\n");
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-weight=\"bold\">cache (median first divergence)</text>\n", x, y);
    for (size_t i = 0; i < n; i++) {
        y += LEGEND_ROW;
        const char *c = colour_of(s, i);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s%s%s/>",
                x, y - 4, x + 26, y - 4, c, s[i].dash ? " stroke-dasharray=\"" : "", s[i].dash ? DASH[s[i].dash] : "",
                s[i].dash ? "\"" : "");
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", x + 32, y);
        kvq_xml_write_escaped(f, s[i].label);
        if (s[i].median_first_div >= 1 && s[i].median_first_div <= n_gen) fprintf(f, " (%g)", s[i].median_first_div);
        else fprintf(f, " (none)");
        fprintf(f, "</text>\n");
    }
    y += LEGEND_ROW + 4;
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"#666\"/>", x + 13, y - 4);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">median first divergence</text>\n", x + 32, y);
    fprintf(f, "</g>\n");
}

kvq_status kvq_plot_drift_write(FILE *f, const kvq_drift_series *s, size_t n, int n_gen, const char *title,
                                kvq_error *err) {
    if (n_gen < 1) return kvq_fail(err, KVQ_ERR_ARG, "drift plot: %d generated positions", n_gen);
    const int height = (int)KVQ_MAX((size_t)MIN_HEIGHT, 110 + (n + 3) * LEGEND_ROW);
    const frame fr = make_frame(s, n, n_gen, height);
    const char *t = title ? title : "KLD against generated position";
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\">\n<title>", WIDTH, height, WIDTH, height);
    kvq_xml_write_escaped(f, t);
    fprintf(f, "</title>\n<desc>Mean KL divergence from the exact cache at each generated position (teacher-forced on "
               "the exact cache's greedy tokens), averaged over prompts in log-spaced bins; one line per cache "
               "configuration.</desc>\n");
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n");
    /* centred on the whole picture: a long title must not run off the left edge */
    fprintf(f, "<text x=\"%d\" y=\"28\" text-anchor=\"middle\" font-family=\"sans-serif\" font-size=\"15\" "
               "font-weight=\"bold\" fill=\"#111\">", WIDTH / 2);
    kvq_xml_write_escaped(f, t);
    fprintf(f, "</text>\n");
    write_axes(f, &fr, n_gen, height);
    fprintf(f, "<g class=\"lines\">\n");
    for (size_t i = 0; i < n; i++) write_series(f, &fr, &s[i], i, colour_of(s, i), n_gen);
    fprintf(f, "</g>\n");
    write_legend(f, &fr, s, n, n_gen);
    fprintf(f, "</svg>\n");
    if (ferror(f)) return kvq_fail(err, KVQ_ERR_IO, "cannot write the drift plot");
    return KVQ_OK;
}

kvq_status kvq_plot_drift_save(const char *path, const kvq_drift_series *s, size_t n, int n_gen, const char *title,
                               kvq_error *err) {
    FILE *f = fopen(path, "w");
    if (!f) return kvq_fail(err, KVQ_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    kvq_status st = kvq_plot_drift_write(f, s, n, n_gen, title, err);
    if (fclose(f) != 0 && st == KVQ_OK) st = kvq_fail(err, KVQ_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return st;
}
