/* plot_svg.h - the sweep's plot (docs/spec/eval.md §4): median KLD (log scale)
 * against size % (linear), one marker per configuration, the ladder's
 * Pareto frontier as a polyline with labelled points, axis titles and a
 * legend.  The SVG is self-contained (no scripts, fonts or links) and
 * reads well at its default 800x500.
 *
 * Markers: each plotted row is one element of class "marker" with id
 * "cfg-I" (I = the row's index) and a <title> naming it; frontier rows are
 * filled with their tier's colour, the others grey.  Median KLD values
 * below the axis floor (including 0 and negative wobbles) are drawn ON
 * the floor as a downward triangle (class "marker clamped") and the floor
 * tick is labelled "<=".  Rows without a size or a median KLD are not
 * drawn; they are named in the SVG's <desc>. */
#ifndef KVQ_PLOT_SVG_H
#define KVQ_PLOT_SVG_H

#include "eval_row.h"
#include "ladder.h"
#include "kvq_eval.h"

/* The declarations are public: include/kvq_eval.h. */

#endif
