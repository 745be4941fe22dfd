/* plot_drift.h - kvq drift's plot: mean KLD against generated position,
 * one line per cache configuration, both axes logarithmic (x in powers of
 * two, labelled at the bucket edges 1, 4, 16, 64, ...; y one labelled tick
 * per decade), the median first divergence marked on each line, and a
 * legend naming every line.  Self-contained SVG in the style of the
 * sweep's plot (plot_svg.h); it grows taller with the number of lines so
 * the legend never overflows.
 *
 * Series with the same colour_key (e.g. "q4_0/q4_0") share a colour and
 * differ by dash: the caller says which.  KLD values at or below the
 * lowest decade (0 included: an exact cache) are drawn on it, and its tick
 * reads "<="; elements: one <polyline class="series" id="series-I"> with
 * a <title> per line. */
#ifndef KVQ_PLOT_DRIFT_H
#define KVQ_PLOT_DRIFT_H

#include "kvq_internal.h"

typedef enum kvq_dash { KVQ_DASH_SOLID = 0, KVQ_DASH_DASHED, KVQ_DASH_DOTTED, KVQ_DASH_DASHDOT } kvq_dash;

typedef struct kvq_drift_series {
    const char *label;            /* legend text                           */
    const char *colour_key;       /* lines with equal keys share a colour  */
    kvq_dash dash;
    const int *lo, *hi;           /* bins of generated positions (1-based) */
    const double *y;              /* mean KLD of each bin, nats            */
    size_t n;
    double median_first_div;      /* marked when within 1..n_gen           */
} kvq_drift_series;

kvq_status kvq_plot_drift_write(FILE *f, const kvq_drift_series *s, size_t n, int n_gen, const char *title,
                                kvq_error *err);
kvq_status kvq_plot_drift_save(const char *path, const kvq_drift_series *s, size_t n, int n_gen, const char *title,
                               kvq_error *err);

#endif
