/* test_plot_svg.c - the sweep's SVG plot (src/eval/plot_svg.c), read back by a
 * small strict XML well-formedness checker written here (balanced tags,
 * quoted unique attributes, valid entities, one root), then inspected:
 * exactly one marker per configuration, one frontier, labels, decades. */
#include "test.h"
#include "plot_svg.h"
#include "../tools/svg_png.h"

#include <ctype.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------- strict XML checker */

enum { XML_MAX_DEPTH = 64, XML_MAX_ATTRS = 32, XML_NAME = 64, XML_VALUE = 512 };

typedef struct xml_attr { char name[XML_NAME], value[XML_VALUE]; } xml_attr;
/* Called for each start tag with its name and raw attribute values. */
typedef void (*xml_visit_fn)(void *ctx, const char *name, const xml_attr *attrs, int n_attrs);

typedef struct xml_parser {
    const char *p;
    char why[160];
    xml_visit_fn visit;
    void *ctx;
} xml_parser;

static bool xml_fail(xml_parser *x, const char *what) {
    snprintf(x->why, sizeof x->why, "%s at \"%.30s\"", what, x->p);
    return false;
}

static bool name_start(char c) { return isalpha((unsigned char)c) || c == '_' || c == ':'; }
static bool name_char(char c) { return name_start(c) || isdigit((unsigned char)c) || c == '-' || c == '.'; }

static bool xml_name(xml_parser *x, char *out) {
    if (!name_start(*x->p)) return xml_fail(x, "bad name");
    size_t k = 0;
    while (name_char(*x->p)) {
        if (k + 1 >= XML_NAME) return xml_fail(x, "name too long");
        out[k++] = *x->p++;
    }
    out[k] = 0;
    return true;
}

/* An entity reference starting at '&': the five predefined or numeric. */
static bool xml_entity(xml_parser *x) {
    const char *s = x->p + 1;
    static const char *const named[] = { "amp;", "lt;", "gt;", "quot;", "apos;" };
    for (int k = 0; k < 5; k++)
        if (!strncmp(s, named[k], strlen(named[k]))) { x->p = s + strlen(named[k]); return true; }
    if (*s != '#') return xml_fail(x, "unknown entity");
    s++;
    bool hex = *s == 'x';
    if (hex) s++;
    const char *d = s;
    while (hex ? isxdigit((unsigned char)*s) : isdigit((unsigned char)*s)) s++;
    if (s == d || *s != ';') return xml_fail(x, "bad character reference");
    x->p = s + 1;
    return true;
}

static void skip_ws(xml_parser *x) { while (*x->p && isspace((unsigned char)*x->p)) x->p++; }

/* Character data up to the next '<'; returns false on a bad '&'. */
static bool xml_text(xml_parser *x, bool only_space) {
    while (*x->p && *x->p != '<') {
        if (only_space && !isspace((unsigned char)*x->p)) return xml_fail(x, "text outside the root");
        if (*x->p == '&') { if (!xml_entity(x)) return false; }
        else x->p++;
    }
    return true;
}

static bool xml_comment(xml_parser *x) {
    const char *end = strstr(x->p + 4, "-->");
    if (!end) return xml_fail(x, "unterminated comment");
    for (const char *s = x->p + 4; s < end; s++)
        if (s[0] == '-' && s[1] == '-') return xml_fail(x, "'--' inside a comment");
    x->p = end + 3;
    return true;
}

static bool xml_attr_value(xml_parser *x, char *out) {
    char q = *x->p;
    if (q != '"' && q != '\'') return xml_fail(x, "unquoted attribute");
    x->p++;
    size_t k = 0;
    while (*x->p != q) {
        if (!*x->p || *x->p == '<') return xml_fail(x, "bad attribute value");
        const char *from = x->p;
        if (*x->p == '&') { if (!xml_entity(x)) return false; }
        else x->p++;
        for (; from < x->p; from++)
            if (k + 1 < XML_VALUE) out[k++] = *from;
    }
    out[k] = 0;
    x->p++;
    return true;
}

/* A start tag after '<'; *empty set for '/>'. */
static bool xml_start_tag(xml_parser *x, char *name, bool *empty) {
    xml_attr attrs[XML_MAX_ATTRS];
    int n = 0;
    if (!xml_name(x, name)) return false;
    for (;;) {
        const char *before = x->p;
        skip_ws(x);
        if (*x->p == '>') { x->p++; *empty = false; break; }
        if (x->p[0] == '/' && x->p[1] == '>') { x->p += 2; *empty = true; break; }
        if (x->p == before) return xml_fail(x, "no space before attribute");
        if (n == XML_MAX_ATTRS) return xml_fail(x, "too many attributes");
        if (!xml_name(x, attrs[n].name)) return false;
        for (int k = 0; k < n; k++)
            if (!strcmp(attrs[k].name, attrs[n].name)) return xml_fail(x, "duplicate attribute");
        if (*x->p != '=') return xml_fail(x, "attribute without '='");
        x->p++;
        if (!xml_attr_value(x, attrs[n].value)) return false;
        n++;
    }
    if (x->visit) x->visit(x->ctx, name, attrs, n);
    return true;
}

static bool xml_check(xml_parser *x) {
    char stack[XML_MAX_DEPTH][XML_NAME];
    int depth = 0, roots = 0;
    if (!strncmp(x->p, "<?xml", 5)) {
        const char *end = strstr(x->p, "?>");
        if (!end) return xml_fail(x, "unterminated declaration");
        x->p = end + 2;
    }
    for (;;) {
        if (!xml_text(x, depth == 0)) return false;
        if (!*x->p) break;
        if (!strncmp(x->p, "<!--", 4)) { if (!xml_comment(x)) return false; continue; }
        if (x->p[1] == '!' || x->p[1] == '?') { x->p++; return xml_fail(x, "unexpected markup"); }
        if (x->p[1] == '/') {
            char name[XML_NAME];
            x->p += 2;
            if (!xml_name(x, name)) return false;
            skip_ws(x);
            if (*x->p != '>') return xml_fail(x, "bad end tag");
            x->p++;
            if (depth == 0 || strcmp(stack[depth - 1], name)) return xml_fail(x, "mismatched end tag");
            depth--;
            continue;
        }
        x->p++;
        if (depth == 0 && roots++) return xml_fail(x, "second root element");
        bool empty = false;
        char name[XML_NAME];
        if (!xml_start_tag(x, name, &empty)) return false;
        if (!empty) {
            if (depth == XML_MAX_DEPTH) return xml_fail(x, "nesting too deep");
            memcpy(stack[depth++], name, XML_NAME);
        }
    }
    if (depth) return xml_fail(x, "unclosed element");
    if (roots != 1) return xml_fail(x, "no root element");
    return true;
}

static bool xml_ok(const char *doc, xml_visit_fn visit, void *ctx, char *why, size_t cap) {
    xml_parser x = { .p = doc, .visit = visit, .ctx = ctx };
    bool ok = xml_check(&x);
    snprintf(why, cap, "%s", x.why);
    return ok;
}

/* The checker must reject what it claims to check, or it proves nothing. */
TEST(xml_checker_rejects_malformed) {
    static const char *const bad[] = {
        "<a><b></a></b>", "<a x=1/>", "<a x=\"1\" x=\"2\"/>", "<a>&nbsp;</a>", "<a>&#;</a>",
        "<a>x & y</a>", "<a/><b/>", "<a>", "<a y=\"<\"/>", "<a><!-- a -- b --></a>", "text<a/>",
        "<a x=\"1\"y=\"2\"/>", "",
    };
    static const char *const good[] = {
        "<?xml version=\"1.0\"?>\n<a x='1' y=\"&amp;&#8804;&#x41;\"><b/>t &lt; &gt;<!-- c --></a>\n",
    };
    char why[160];
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        CHECK(!xml_ok(bad[k], NULL, NULL, why, sizeof why), "accepted malformed \"%s\"", bad[k]);
    for (size_t k = 0; k < sizeof good / sizeof good[0]; k++)
        CHECK(xml_ok(good[k], NULL, NULL, why, sizeof why), "rejected \"%s\": %s", good[k], why);
}

/* ----------------------------------------------------------- the plot */

typedef struct svg_census {
    int markers, clamped, polylines, frontier_labels_group, circles_total;
    int marker_count_by_id[64];
    int bad_ids;
} svg_census;

static const char *attr(const xml_attr *a, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (!strcmp(a[k].name, name)) return a[k].value;
    return NULL;
}

/* A class list contains word w. */
static bool has_class(const char *cls, const char *w) {
    size_t lw = strlen(w);
    for (const char *s = cls; s && (s = strstr(s, w)) != NULL; s += lw)
        if ((s == cls || s[-1] == ' ') && (s[lw] == 0 || s[lw] == ' ')) return true;
    return false;
}

static void census_visit(void *ctx, const char *name, const xml_attr *a, int n) {
    svg_census *c = ctx;
    const char *cls = attr(a, n, "class");
    if (!strcmp(name, "circle")) c->circles_total++;
    if (!strcmp(name, "polyline") && cls && has_class(cls, "frontier")) c->polylines++;
    if (cls && has_class(cls, "marker")) {
        c->markers++;
        if (has_class(cls, "clamped")) c->clamped++;
        const char *id = attr(a, n, "id");
        int i;
        if (id && sscanf(id, "cfg-%d", &i) == 1 && i >= 0 && i < 64) c->marker_count_by_id[i]++;
        else c->bad_ids++;
    }
}

static kvq_eval_row row(const char *label, double size, double median, bool ref) {
    kvq_eval_row r;
    kvq_eval_row_init(&r);
    kvq_eval_copy_str(r.label, sizeof r.label, label);
    r.size_pct = size;
    r.median_kld = median;
    r.is_reference = ref;
    return r;
}

/* 12 configurations: a zero-KLD reference and a negative wobble (both
 * clamped to the floor), a label full of XML specials, one failed row. */
static size_t sweep_rows(kvq_eval_row *r) {
    size_t n = 0;
    r[n++] = row("f32/f32", 200.0, 0.0, true);
    r[n++] = row("f16/f16", 100.0, -1e-12, false);
    r[n++] = row("q8_0/q8_0", 53.1, 0.00031, false);
    r[n++] = row("q8_0/q4_0", 40.6, 0.0021, false);
    r[n++] = row("q6_0/q6_0", 40.6, 0.004, false);
    r[n++] = row("q4_0/q4_0", 28.1, 0.008, false);
    r[n++] = row("q4_1/q4_1", 31.2, 0.009, false);
    r[n++] = row("q3_0 <\"&'> tail", 21.9, 0.03, false);
    r[n++] = row("kvarn3/kvarn3", 20.0, 0.05, false);
    r[n++] = row("q2_0/q2_0", 15.6, 0.21, false);
    r[n++] = row("turbo3/turbo3", 19.0, 0.00002, false);
    r[n++] = row("failed & gone", 30.0, NAN, false);
    return n;
}

static char *render(const kvq_eval_row *rows, size_t n, kvq_status *st, kvq_error *err) {
    kvq_ladder_thresholds th = kvq_ladder_default_thresholds();
    kvq_plot_opts o;
    kvq_plot_opts_default(&o);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    *st = kvq_plot_svg_write(f, rows, n, &th, &o, err);
    fclose(f);
    return buf;
}

TEST(plot_svg_well_formed_one_marker_per_config) {
    kvq_eval_row rows[16];
    size_t n = sweep_rows(rows), idx[16];
    kvq_error err = { 0 };
    kvq_status st = KVQ_OK;
    char *svg = render(rows, n, &st, &err);
    CHECK(svg, "no memory stream");
    svg_census c = { 0 };
    char why[160];
    bool ok = xml_ok(svg, census_visit, &c, why, sizeof why);
    size_t m = kvq_ladder_frontier(rows, n, idx);
    int labels = 0;
    for (const char *p = svg; (p = strstr(p, "class=\"frontier-label\"")) != NULL; p++) labels++;
    bool escaped = strstr(svg, "q3_0 &lt;&quot;&amp;&apos;&gt; tail") != NULL;
    bool desc_names_failed = strstr(svg, "Not plotted (no size or median KLD): failed &amp; gone") != NULL;
    bool floor_marked = strstr(svg, "&#8804;1e-6") != NULL;    /* turbo3 at 2e-5: floor a decade lower */
    bool decades = strstr(svg, ">1e-5</text>") && strstr(svg, ">0.001</text>") && strstr(svg, ">0.1</text>") &&
                   strstr(svg, ">1</text>");
    bool titles = strstr(svg, "median KLD (nats, log scale)") && strstr(svg, "KV cache size (% of a bf16 cache)");
    free(svg);
    CHECK(st == KVQ_OK, "plot failed: %s", err.msg);
    CHECK(ok, "SVG not well-formed: %s", why);
    CHECK(c.markers == 11, "%d markers for 11 plottable configurations", c.markers);
    CHECK(c.bad_ids == 0, "%d markers without a cfg-N id", c.bad_ids);
    for (size_t i = 0; i < n; i++)
        CHECK(c.marker_count_by_id[i] == (i == 11 ? 0 : 1), "configuration %zu has %d markers", i,
              c.marker_count_by_id[i]);
    CHECK(c.clamped == 2, "%d clamped markers, want 2 (zero and negative KLD)", c.clamped);
    CHECK(c.polylines == 1, "%d frontier polylines", c.polylines);
    CHECK(labels == (int)m, "%d frontier labels for %zu frontier points", labels, m);
    CHECK(escaped, "special characters of a label not escaped");
    CHECK(desc_names_failed, "the unplottable row is not named");
    CHECK(floor_marked, "floor tick not marked as clamped");
    CHECK(decades, "decade tick labels missing");
    CHECK(titles, "axis titles missing");
}

/* Marker count scales with N and the plot survives odd inputs: one row,
 * all rows at zero KLD, identical points. */
TEST(plot_svg_varied_sizes) {
    kvq_eval_row rows[40];
    for (size_t n = 1; n <= 40; n += 13) {
        for (size_t i = 0; i < n; i++) {
            char label[32];
            snprintf(label, sizeof label, "cfg %zu", i);
            rows[i] = row(label, 10.0 + 5.0 * (double)(i % 7), n == 14 ? 0.0 : 0.001 * (double)(i % 5 + 1), i == 0);
        }
        kvq_error err = { 0 };
        kvq_status st = KVQ_OK;
        char *svg = render(rows, n, &st, &err);
        CHECK(svg, "no memory stream");
        svg_census c = { 0 };
        char why[160];
        bool ok = xml_ok(svg, census_visit, &c, why, sizeof why);
        bool has_nan = strstr(svg, "nan") || strstr(svg, "inf");
        free(svg);
        CHECK(st == KVQ_OK && ok, "n=%zu: %s %s", n, err.msg, why);
        CHECK(c.markers == (int)n, "n=%zu: %d markers", n, c.markers);
        CHECK(!has_nan, "n=%zu: a coordinate is nan/inf", n);
    }
}

TEST(plot_svg_png_when_converter_exists) {
    kvq_eval_row rows[16];
    size_t n = sweep_rows(rows);
    char dir[] = "/tmp/kvq_plot_XXXXXX";
    CHECK(mkdtemp(dir), "mkdtemp failed");
    char svg[64], png[64];
    snprintf(svg, sizeof svg, "%s/plot.svg", dir);
    snprintf(png, sizeof png, "%s/plot.png", dir);
    kvq_ladder_thresholds th = kvq_ladder_default_thresholds();
    kvq_plot_opts o;
    kvq_plot_opts_default(&o);
    kvq_error err = { 0 };
    CHECK(kvq_plot_svg_save(svg, rows, n, &th, &o, &err) == KVQ_OK, "save failed: %s", err.msg);

    /* without the converter on PATH: a clear "unsupported", not a failure */
    char *path = getenv("PATH") ? strdup(getenv("PATH")) : NULL;
    setenv("PATH", "/nonexistent-kvq-test", 1);
    kvq_status missing = cli_svg_to_png(svg, png, &err);
    if (path) { setenv("PATH", path, 1); free(path); }
    else unsetenv("PATH");
    bool msg_ok = strstr(err.msg, "rsvg-convert") != NULL;

    kvq_status st = cli_svg_to_png(svg, png, &err);
    unsigned char sig[8] = { 0 };
    FILE *f = st == KVQ_OK ? fopen(png, "rb") : NULL;
    size_t got = f ? fread(sig, 1, 8, f) : 0;
    if (f) fclose(f);
    unlink(png);
    unlink(svg);
    rmdir(dir);
    CHECK(missing == KVQ_ERR_UNSUPPORTED && msg_ok, "missing converter gave %d: %s", (int)missing, err.msg);
    if (st == KVQ_ERR_UNSUPPORTED) SKIP("rsvg-convert not installed: PNG not checked");
    CHECK(st == KVQ_OK, "rsvg-convert failed: %s", err.msg);
    CHECK(got == 8 && !memcmp(sig, "\x89PNG\r\n\x1a\n", 8), "output is not a PNG");
}

/* A crowded sweep (many configurations within a few % of size, as at long
 * context): q8_0/q8_0 and q4_0/q4_0, off the frontier, are labelled all the
 * same, and no two labels stack (their boxes, estimated as the plot does
 * it, 6.2 px a character, do not overlap). */
TEST(plot_svg_landmark_labels_and_no_stacked_labels) {
    kvq_eval_row rows[40];
    size_t n = 0;
    rows[n++] = row("f32/f32", 200.0, 0.0, true);
    rows[n++] = row("q8_0/q8_0", 53.1, 0.0004, false);          /* beaten below by a tail row */
    rows[n++] = row("q8_0/q8_0 tail128", 56.0, 0.00001, false);
    rows[n++] = row("q4_0/q4_0", 28.1, 0.004, false);
    rows[n++] = row("q4_0/q4_0 tail128", 28.2, 0.00002, false);
    char labels[30][40];   /* room for any int in %02d: gcc -O1 checks the worst case */
    for (int i = 0; i < 30; i++) {                               /* a dense cloud around 25-33% */
        snprintf(labels[i], sizeof labels[i], "t%02d/t%02d tail128", i, i);
        rows[n++] = row(labels[i], 25.0 + 0.27 * i, 3e-5 * (1.0 + 0.9 * (i % 7)) / (1.0 + 0.02 * i), false);
    }
    kvq_error err = { 0 };
    kvq_status st = KVQ_OK;
    char *svg = render(rows, n, &st, &err);
    CHECK(svg && st == KVQ_OK, "plot failed: %s", err.msg);
    typedef struct { double x0, y0, x1, y1; char text[64]; } box;
    box b[64];
    int nb = 0, landmarks_q8 = 0, landmarks_q4 = 0;
    for (const char *p = svg; (p = strstr(p, "<text class=\"")) != NULL && nb < 64; p++) {
        char cls[32], anchor[16], text[64];
        double x, y;
        if (sscanf(p, "<text class=\"%31[a-z-]\" x=\"%lf\" y=\"%lf\" text-anchor=\"%15[a-z]\">%63[^<]", cls, &x, &y,
                   anchor, text) != 5 || (strcmp(cls, "frontier-label") && strcmp(cls, "landmark-label")))
            continue;
        if (!strcmp(cls, "landmark-label")) {
            landmarks_q8 += !strcmp(text, "q8_0/q8_0");
            landmarks_q4 += !strcmp(text, "q4_0/q4_0");
        }
        const double w = 6.2 * (double)strlen(text);
        b[nb] = (box){ strcmp(anchor, "end") ? x : x - w, y - 10, strcmp(anchor, "end") ? x + w : x, y + 3, "" };
        snprintf(b[nb].text, sizeof b[nb].text, "%s", text);
        nb++;
    }
    free(svg);
    CHECK(landmarks_q8 == 1 && landmarks_q4 == 1, "landmark labels q8_0 %d q4_0 %d", landmarks_q8, landmarks_q4);
    CHECK(nb >= 5, "only %d labels", nb);
    for (int i = 0; i < nb; i++)
        for (int j = 0; j < i; j++)
            CHECK(!(b[i].x0 < b[j].x1 && b[j].x0 < b[i].x1 && b[i].y0 < b[j].y1 && b[j].y0 < b[i].y1),
                  "labels '%s' and '%s' overlap", b[i].text, b[j].text);
}
