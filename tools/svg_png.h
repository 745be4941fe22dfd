/* svg_png.h - the sweep plot's PNG: an external converter run by the CLI.
 * Spawning programs is the tool's business, not the library's, so this
 * lives in tools/ (libkvq only writes the SVG, src/eval/plot_svg.h). */
#ifndef KVQ_SVG_PNG_H
#define KVQ_SVG_PNG_H

#include "kvq.h"

/* Render svg_path to png_path with rsvg-convert (librsvg2-bin).  Returns
 * KVQ_ERR_UNSUPPORTED when the converter is not installed (the caller
 * notes it and carries on), KVQ_ERR_IO when it ran and failed. */
kvq_status cli_svg_to_png(const char *svg_path, const char *png_path, kvq_error *err);

#endif
