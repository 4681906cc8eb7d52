/*
 * An SVG line chart of a few series against one x axis and two y axes (see
 * curve_svg.h). Each axis spans the range of its points widened to round
 * tick steps; a series becomes one polyline per run of plottable points (a
 * lone point becomes a dot), so NaN breaks the line instead of bending it.
 *
 * Must never: write a byte of a caller's text into the document unescaped,
 * print nan or inf as a coordinate, or leave a half-written file at the
 * path it was asked to write.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/curve_svg.h"
#include "proto/dml_error.h"
#include "proto/util.h"

#define DEFAULT_WIDTH 800
#define DEFAULT_HEIGHT 480
#define MIN_WIDTH 200
#define MIN_HEIGHT 150
#define MAX_SIDE 20000
/* Beyond this a value cannot be scaled without overflow: not plottable. */
#define MAX_ABS 1e300
#define TARGET_TICKS 5
#define MAX_TICKS 50
/* Series on the right axis are dashed: the legend and print tell them apart. */
#define DASHED " stroke-dasharray=\"6 3\""

static const char *const palette[] = {
	"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
};

/* An axis as drawn: its span in data units and in pixels. */
struct scale {
	double lo, hi, step;
	int decimals;               /* of the tick labels; -1: %g */
	double p0, p1;              /* pixels of lo and hi */
};

void dml_curve_series_add(struct dml_curve_series *s, double x, double y)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 64;
		s->x = dml_xrealloc(s->x, s->cap * sizeof(*s->x));
		s->y = dml_xrealloc(s->y, s->cap * sizeof(*s->y));
	}
	s->x[s->n] = x;
	s->y[s->n] = y;
	s->n++;
}

void dml_curve_series_destroy(struct dml_curve_series *s)
{
	free(s->x);
	free(s->y);
	s->x = s->y = NULL;
	s->n = s->cap = 0;
}

static int usable(double x, double y)
{
	return isfinite(x) && isfinite(y) && fabs(x) <= MAX_ABS && fabs(y) <= MAX_ABS;
}

/* Text content or attribute value: XML's five specials as entities, and
 * anything outside printable ASCII as '?' so the document stays valid. */
static void put_text(FILE *out, const char *s)
{
	for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
		switch (*p) {
		case '&': fputs("&amp;", out); break;
		case '<': fputs("&lt;", out); break;
		case '>': fputs("&gt;", out); break;
		case '"': fputs("&quot;", out); break;
		case '\'': fputs("&apos;", out); break;
		default:
			fputc(*p < 0x20 || *p > 0x7e ? '?' : *p, out);
		}
	}
}

/* 1, 2 or 5 times a power of ten, near raw (> 0). */
static double nice_step(double raw)
{
	double p = pow(10, floor(log10(raw))), f = raw / p;

	return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * p;
}

/* The scale of an axis showing [lo, hi] (any: there are points at all). */
static void scale_fit(struct scale *sc, const struct dml_curve_axis *ax, int any,
		      double lo, double hi)
{
	int fixed = ax->fixed && ax->min < ax->max && usable(ax->min, ax->max);

	if (!any) {
		lo = fixed ? ax->min : 0;
		hi = fixed ? ax->max : 1;
	} else if (fixed) {
		lo = fmin(lo, ax->min);
		hi = fmax(hi, ax->max);
	}
	/* One value, or values too close to tell apart: a span around them. */
	if (hi - lo <= fmax(fabs(lo), fabs(hi)) * 1e-9) {
		double d = fabs(lo) > 1e-200 ? fabs(lo) * 0.1 : 1;

		lo -= d;
		hi += d;
	}
	sc->step = nice_step((hi - lo) / TARGET_TICKS);
	sc->lo = floor(lo / sc->step) * sc->step;
	sc->hi = ceil(hi / sc->step) * sc->step;
	if (sc->hi <= sc->lo)
		sc->hi = sc->lo + sc->step;
	if (fmax(fabs(sc->lo), fabs(sc->hi)) >= 1e6 || sc->step < 1e-6)
		sc->decimals = -1;
	else
		sc->decimals = sc->step >= 1 ? 0 : (int)ceil(-log10(sc->step) - 1e-9);
}

static double scale_px(const struct scale *sc, double v)
{
	return sc->p0 + (v - sc->lo) / (sc->hi - sc->lo) * (sc->p1 - sc->p0);
}

static int scale_ticks(const struct scale *sc)
{
	double n = floor((sc->hi - sc->lo) / sc->step + 0.5);

	return n > MAX_TICKS ? MAX_TICKS : (int)n;
}

static void tick_label(const struct scale *sc, double v, char *buf, size_t len)
{
	/* No "-0" from a tick that is zero up to rounding. */
	if (fabs(v) < sc->step * 1e-6)
		v = 0;
	if (sc->decimals < 0)
		snprintf(buf, len, "%.4g", v);
	else
		snprintf(buf, len, "%.*f", sc->decimals, v);
}

/* The range of the plottable points of the series on one axis (y) or all (x). */
static int data_range(const struct dml_curve *c, int axis, int want_x, double *lo,
		      double *hi)
{
	int any = 0;

	*lo = INFINITY;
	*hi = -INFINITY;
	for (size_t i = 0; i < c->nseries; i++) {
		const struct dml_curve_series *s = &c->series[i];

		if (!want_x && s->axis != axis)
			continue;
		for (size_t k = 0; k < s->n; k++) {
			double v = want_x ? s->x[k] : s->y[k];

			if (!usable(s->x[k], s->y[k]))
				continue;
			*lo = fmin(*lo, v);
			*hi = fmax(*hi, v);
			any = 1;
		}
	}
	return any;
}

/* A line segment; attrs (may be "") goes into the tag as it is. */
static void put_line(FILE *out, double x1, double y1, double x2, double y2,
		     const char *attrs)
{
	fprintf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"%s/>\n",
		x1, y1, x2, y2, attrs);
}

static void axis_label(FILE *out, const char *label, double x, double y, int rotate)
{
	if (!label || !*label)
		return;
	fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\"", x, y);
	if (rotate)
		fprintf(out, " transform=\"rotate(-90 %.1f %.1f)\"", x, y);
	fputc('>', out);
	put_text(out, label);
	fputs("</text>\n", out);
}

static void draw_x_axis(FILE *out, const struct scale *sx,
			const struct dml_curve_axis *ax, double y_bottom)
{
	char lab[64];

	fprintf(out, "<g class=\"axis-x\" stroke=\"#000\">\n");
	put_line(out, sx->p0, y_bottom, sx->p1, y_bottom, "");
	for (int i = 0; i <= scale_ticks(sx); i++) {
		double v = sx->lo + i * sx->step, px = scale_px(sx, v);

		tick_label(sx, v, lab, sizeof(lab));
		put_line(out, px, y_bottom, px, y_bottom + 5, "");
		fprintf(out, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" stroke=\"none\" "
			"text-anchor=\"middle\">%s</text>\n", px, y_bottom + 18, lab);
	}
	fputs("</g>\n", out);
	axis_label(out, ax->label, (sx->p0 + sx->p1) / 2, y_bottom + 38, 0);
}

/* side 0: left (ticks and labels outward to the left), 1: right. */
static void draw_y_axis(FILE *out, const struct scale *sy,
			const struct dml_curve_axis *ax, int side, double x, double width)
{
	int dir = side == DML_CURVE_LEFT ? -1 : 1;
	char lab[64];

	fprintf(out, "<g class=\"axis-y%d\" stroke=\"#000\">\n", side);
	put_line(out, x, sy->p0, x, sy->p1, "");
	for (int i = 0; i <= scale_ticks(sy); i++) {
		double v = sy->lo + i * sy->step, py = scale_px(sy, v);

		tick_label(sy, v, lab, sizeof(lab));
		put_line(out, x, py, x + dir * 5, py, "");
		fprintf(out, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" stroke=\"none\" "
			"text-anchor=\"%s\">%s</text>\n", x + dir * 8, py + 4,
			side == DML_CURVE_LEFT ? "end" : "start", lab);
	}
	fputs("</g>\n", out);
	axis_label(out, ax->label, side == DML_CURVE_LEFT ? 16 : width - 12,
		   (sy->p0 + sy->p1) / 2, 1);
}

/* Light lines across the plot at the left axis' ticks (else the right's). */
static void draw_grid(FILE *out, const struct scale *sx, const struct scale *sy)
{
	fputs("<g class=\"grid\" stroke=\"#e4e4e4\">\n", out);
	for (int i = 0; i <= scale_ticks(sy); i++) {
		double py = scale_px(sy, sy->lo + i * sy->step);

		put_line(out, sx->p0, py, sx->p1, py, "");
	}
	fputs("</g>\n", out);
}

/* Points [i, end) of s, all plottable: a polyline, or a dot for one point. */
static void draw_run(FILE *out, const struct dml_curve_series *s, size_t i, size_t end,
		     const struct scale *sx, const struct scale *sy, const char *color)
{
	if (end - i == 1) {
		fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
			scale_px(sx, s->x[i]), scale_px(sy, s->y[i]), color);
		return;
	}
	fputs("<polyline points=\"", out);
	for (size_t k = i; k < end; k++)
		fprintf(out, "%s%.1f,%.1f", k > i ? " " : "", scale_px(sx, s->x[k]),
			scale_px(sy, s->y[k]));
	fputs("\"/>\n", out);
}

static void draw_series(FILE *out, const struct dml_curve_series *s, size_t idx,
			const struct scale *sx, const struct scale *sy)
{
	const char *color = palette[idx % DML_ARRAY_LEN(palette)];
	size_t i = 0, end;

	fprintf(out, "<g class=\"series\" id=\"s%zu\" stroke=\"%s\" fill=\"none\" "
		"stroke-width=\"2\"%s>\n", idx, color,
		s->axis == DML_CURVE_RIGHT ? DASHED : "");
	while (i < s->n) {
		if (!usable(s->x[i], s->y[i])) {
			i++;
			continue;
		}
		for (end = i; end < s->n && usable(s->x[end], s->y[end]); end++)
			;
		draw_run(out, s, i, end, sx, sy, color);
		i = end;
	}
	fputs("</g>\n", out);
}

/* One entry per series: a stroke of its line, its name and its last value. */
static void draw_legend(FILE *out, const struct dml_curve *c, double x, double y)
{
	fputs("<g class=\"legend\">\n", out);
	for (size_t i = 0; i < c->nseries; i++) {
		const struct dml_curve_series *s = &c->series[i];
		const char *name = s->name ? s->name : "";
		size_t k = s->n;
		char last[48], attrs[96];

		while (k > 0 && !usable(s->x[k - 1], s->y[k - 1]))
			k--;
		if (k)
			snprintf(last, sizeof(last), " %.4g", s->y[k - 1]);
		else
			snprintf(last, sizeof(last), " (no data)");
		snprintf(attrs, sizeof(attrs), " stroke=\"%s\" stroke-width=\"2\"%s",
			 palette[i % DML_ARRAY_LEN(palette)],
			 s->axis == DML_CURVE_RIGHT ? DASHED : "");
		put_line(out, x, y - 4, x + 24, y - 4, attrs);
		fprintf(out, "<text x=\"%.1f\" y=\"%.1f\">", x + 30, y);
		put_text(out, name);
		put_text(out, last);
		fputs("</text>\n", out);
		/* About 7 pixels a character at font-size 12. */
		x += 30 + 7.0 * (double)(strlen(name) + strlen(last)) + 24;
	}
	fputs("</g>\n", out);
}

/* 0 when c can be drawn: its size in *w, *h; *right: a series uses the right axis. */
static int chart_check(const struct dml_curve *c, unsigned *w, unsigned *h, int *right)
{
	if (!c || (c->nseries && !c->series))
		return DML_EINVAL;
	*w = c->width ? c->width : DEFAULT_WIDTH;
	*h = c->height ? c->height : DEFAULT_HEIGHT;
	if (*w < MIN_WIDTH || *h < MIN_HEIGHT || *w > MAX_SIDE || *h > MAX_SIDE)
		return DML_EINVAL;
	*right = 0;
	for (size_t i = 0; i < c->nseries; i++) {
		int axis = c->series[i].axis;

		if (axis != DML_CURVE_LEFT && axis != DML_CURVE_RIGHT)
			return DML_EINVAL;
		*right |= axis == DML_CURVE_RIGHT;
	}
	return 0;
}

/* The prolog, the root element, a white background and the title. */
static void put_header(FILE *out, unsigned w, unsigned h, const char *title)
{
	fprintf(out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%u\" height=\"%u\" "
		"viewBox=\"0 0 %u %u\" font-family=\"sans-serif\" font-size=\"12\">\n",
		w, h, w, h);
	fprintf(out, "<rect x=\"0\" y=\"0\" width=\"%u\" height=\"%u\" fill=\"#fff\"/>\n",
		w, h);
	if (!title || !*title)
		return;
	fprintf(out, "<text class=\"title\" x=\"%.1f\" y=\"26\" text-anchor=\"middle\" "
		"font-size=\"16\">", w / 2.0);
	put_text(out, title);
	fputs("</text>\n", out);
}

int dml_curve_svg_print(FILE *out, const struct dml_curve *c)
{
	const double top = 44;
	struct scale sx, sy[DML_CURVE_YAXES];
	int right, any_x, any_left = 0;
	double lo, hi, bottom;
	unsigned w, h;

	if (!out || chart_check(c, &w, &h, &right) != 0)
		return DML_EINVAL;
	bottom = h - 76.0;
	any_x = data_range(c, 0, 1, &lo, &hi);
	scale_fit(&sx, &c->x, any_x, lo, hi);
	sx.p0 = 72;
	sx.p1 = w - (right ? 72.0 : 24.0);
	for (int a = 0; a < DML_CURVE_YAXES; a++) {
		int any = data_range(c, a, 0, &lo, &hi);

		scale_fit(&sy[a], &c->y[a], any, lo, hi);
		sy[a].p0 = bottom;
		sy[a].p1 = top;
		any_left |= any && a == DML_CURVE_LEFT;
	}

	put_header(out, w, h, c->title);
	draw_grid(out, &sx, &sy[any_left || !right ? DML_CURVE_LEFT : DML_CURVE_RIGHT]);
	draw_x_axis(out, &sx, &c->x, bottom);
	draw_y_axis(out, &sy[0], &c->y[0], DML_CURVE_LEFT, sx.p0, w);
	if (right)
		draw_y_axis(out, &sy[1], &c->y[1], DML_CURVE_RIGHT, sx.p1, w);
	for (size_t i = 0; i < c->nseries; i++)
		draw_series(out, &c->series[i], i, &sx, &sy[c->series[i].axis]);
	if (!any_x)
		fprintf(out, "<text class=\"empty\" x=\"%.1f\" y=\"%.1f\" "
			"text-anchor=\"middle\" fill=\"#888\">no data</text>\n",
			(sx.p0 + sx.p1) / 2, (top + bottom) / 2);
	draw_legend(out, c, sx.p0, h - 12);
	fputs("</svg>\n", out);
	return ferror(out) ? DML_EIO : 0;
}

int dml_curve_svg_write(const char *path, const struct dml_curve *c, char *err,
			size_t errlen)
{
	size_t n = path ? strlen(path) : 0;
	char *tmp;
	FILE *f;
	int rc, e;

	if (n == 0 || !c) {
		snprintf(err, errlen, "%s: no file name or no chart",
			 path ? path : "(null)");
		return DML_EINVAL;
	}
	tmp = dml_xmalloc(n + 5);
	memcpy(tmp, path, n);
	memcpy(tmp + n, ".tmp", 5);
	f = fopen(tmp, "w");
	if (!f) {
		snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
		free(tmp);
		return DML_EIO;
	}
	rc = dml_curve_svg_print(f, c);
	e = rc == DML_EIO ? errno : 0;
	if (fflush(f) != 0 && rc == 0) {
		rc = DML_EIO;
		e = errno;
	}
	if (fclose(f) != 0 && rc == 0) {
		rc = DML_EIO;
		e = errno;
	}
	if (rc == 0 && rename(tmp, path) != 0) {
		rc = DML_EIO;
		e = errno;
	}
	if (rc) {
		if (rc == DML_EINVAL)
			snprintf(err, errlen, "%s: not a chart that can be drawn", path);
		else
			snprintf(err, errlen, "%s: %s", path,
				 e ? strerror(e) : "write error");
		unlink(tmp);
	}
	free(tmp);
	return rc;
}
