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
#include "kvq_eval.h"

/* The declarations are public: include/kvq_eval.h. */

#endif
