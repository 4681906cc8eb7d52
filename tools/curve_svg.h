/*
 * curve_svg.h - a small SVG line chart writer: series of (x, y) points
 * against one x axis and a left and a right y axis, with ticks at round
 * steps (1, 2 or 5 times a power of ten), axis labels, a title, and a legend
 * that gives each series' last value. dmlctl draws a job's training curve
 * with it (loss on the left, the evaluation metric on the right).
 *
 * Self-contained: plain C and stdio, no graphics library. Points whose x or
 * y is NaN or infinite are skipped: the line breaks there. Text is escaped
 * for XML; bytes outside printable ASCII become '?'.
 */
#ifndef DML_CURVE_SVG_H
#define DML_CURVE_SVG_H

#include <stddef.h>
#include <stdio.h>

/** The y axes a series can be drawn against. */
enum { DML_CURVE_LEFT = 0, DML_CURVE_RIGHT = 1, DML_CURVE_YAXES = 2 };

/** One line of the chart. Zero it, set name and axis, then add points. */
struct dml_curve_series {
	const char *name;           /* legend text; borrowed */
	int axis;                   /* DML_CURVE_LEFT or DML_CURVE_RIGHT */
	double *x, *y;              /* the points; owned, grown by _add */
	size_t n, cap;
};

/** An axis: its label and, optionally, the range it must show. */
struct dml_curve_axis {
	const char *label;          /* NULL or "": none */
	int fixed;                  /* show at least [min, max] (e.g. 0..1) */
	double min, max;
};

/** A chart: what dml_curve_svg_print() draws. Borrowed, never modified. */
struct dml_curve {
	const char *title;          /* NULL or "": none */
	struct dml_curve_axis x;
	struct dml_curve_axis y[DML_CURVE_YAXES];
	const struct dml_curve_series *series;
	size_t nseries;
	unsigned width, height;     /* pixels; 0 for the default 800 x 480 */
};

/** Append the point (x, y), NaN included; allocation failure is fatal. */
void dml_curve_series_add(struct dml_curve_series *s, double x, double y);

/** Free the points; the series may be used again (it is empty). */
void dml_curve_series_destroy(struct dml_curve_series *s);

/**
 * Write the chart as one SVG document to out. A chart without a single
 * point is drawn with empty axes over 0..1 and "no data". The right axis is
 * drawn only when a series uses it. Returns 0, DML_EINVAL (NULL, a series
 * on an axis that does not exist, or a size under 200 x 150 or over
 * 20000 x 20000) or DML_EIO (out reports a write error).
 */
int dml_curve_svg_print(FILE *out, const struct dml_curve *c);

/**
 * dml_curve_svg_print() into path.tmp, then renamed to path, so that path
 * is either the old file or the whole new one. On failure err gets "path:
 * reason" and path.tmp is removed. Returns 0, DML_EINVAL or DML_EIO.
 */
int dml_curve_svg_write(const char *path, const struct dml_curve *c, char *err,
			size_t errlen);

#endif
