/* table: see table.h. Widths are decided at render time over the kept columns only. */
#include "cli/table.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void table_init(struct table *t)
{
    memset(t, 0, sizeof *t);
}

void table_free(struct table *t)
{
    for (size_t i = 0; i < t->ncols; i++)
        free(t->cols[i].head);
    for (size_t i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    table_init(t);
}

/* Owned copy with control characters (terminal escapes included) replaced by '?'. */
static char *table_clean(const char *s)
{
    char *c = strdup(s ? s : "");
    for (char *p = c; p && *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    return c;
}

int table_add_col(struct table *t, const char *head, enum table_align align, size_t max_width,
                  bool drop_if_empty)
{
    if (t->ncols == TABLE_MAX_COLS || t->nrows > 0)
        return -1;
    struct table_col *c = &t->cols[t->ncols];
    if (!(c->head = table_clean(head)))
        return -1;
    c->align = align;
    c->max_width = max_width;
    c->drop_if_empty = drop_if_empty;
    return (int)t->ncols++;
}

int table_add_row(struct table *t)
{
    if (t->nrows == t->cap_rows) {
        size_t cap = t->cap_rows ? t->cap_rows * 2 : 16;
        char **p = realloc(t->cells, cap * (t->ncols ? t->ncols : 1) * sizeof *p);
        if (!p)
            return -1;
        t->cells = p;
        t->cap_rows = cap;
    }
    memset(&t->cells[t->nrows * t->ncols], 0, t->ncols * sizeof *t->cells);
    t->nrows++;
    return 0;
}

int table_set(struct table *t, size_t col, const char *text)
{
    if (t->nrows == 0 || col >= t->ncols)
        return -1;
    char **cell = &t->cells[(t->nrows - 1) * t->ncols + col];
    free(*cell);
    *cell = table_clean(text);
    return *cell ? 0 : -1;
}

int table_setf(struct table *t, size_t col, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return table_set(t, col, text);
}

size_t table_width(const char *s)
{
    size_t n = 0;
    for (; s && *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* Bytes of s that fit in w code points. */
static size_t table_prefix_bytes(const char *s, size_t w)
{
    size_t i = 0, n = 0;
    while (s[i]) {
        if (((unsigned char)s[i] & 0xC0) != 0x80 && n++ == w)
            break;
        i++;
    }
    return i;
}

static const char *table_cell(const struct table *t, size_t r, size_t c)
{
    const char *s = t->cells[r * t->ncols + c];
    return s ? s : "";
}

static bool table_col_empty(const struct table *t, size_t c)
{
    for (size_t r = 0; r < t->nrows; r++) {
        const char *s = table_cell(t, r, c);
        if (s[0] && strcmp(s, "-") != 0)
            return false;
    }
    return true;
}

/* Appends text padded (or cut with "...") to width w. */
static int table_put(struct buf *out, const char *s, size_t w, enum table_align align,
                     bool last)
{
    size_t sw = table_width(s);
    size_t bytes = strlen(s);
    bool cut = sw > w;
    if (cut) {
        bytes = table_prefix_bytes(s, w >= 3 ? w - 3 : 0);
        sw = w;
    }
    static const char spaces[] = "                                                      ";
    size_t pad = w - sw;
    int rc = 0;
    for (size_t p = pad; align == TABLE_RIGHT && p > 0 && rc == 0;) {
        size_t k = p < sizeof spaces - 1 ? p : sizeof spaces - 1;
        rc = buf_append(out, spaces, k);
        p -= k;
    }
    if (rc == 0)
        rc = buf_append(out, s, bytes);
    if (rc == 0 && cut)
        rc = buf_append(out, "...", w >= 3 ? 3 : w);
    for (size_t p = pad; align == TABLE_LEFT && !last && p > 0 && rc == 0;) {
        size_t k = p < sizeof spaces - 1 ? p : sizeof spaces - 1;
        rc = buf_append(out, spaces, k);
        p -= k;
    }
    return rc;
}

struct table_layout {
    size_t width[TABLE_MAX_COLS];
    bool keep[TABLE_MAX_COLS];
    size_t last; /* index of the last kept column */
};

static void table_layout(const struct table *t, struct table_layout *l)
{
    for (size_t c = 0; c < t->ncols; c++) {
        l->keep[c] = !(t->cols[c].drop_if_empty && table_col_empty(t, c));
        size_t w = t->bare ? 0 : table_width(t->cols[c].head);
        for (size_t r = 0; r < t->nrows; r++) {
            size_t cw = table_width(table_cell(t, r, c));
            w = cw > w ? cw : w;
        }
        if (t->cols[c].max_width && w > t->cols[c].max_width)
            w = t->cols[c].max_width;
        l->width[c] = w;
        if (l->keep[c])
            l->last = c;
    }
}

/* One line: row r, or the header (r == SIZE_MAX), or the rule (r == SIZE_MAX - 1). */
static int table_line(const struct table *t, const struct table_layout *l, size_t r,
                      struct buf *out)
{
    static const char dashes[] = "--------------------------------------------------------";
    bool first = true;
    int rc = 0;
    size_t start = out->len;
    for (size_t c = 0; c < t->ncols && rc == 0; c++) {
        if (!l->keep[c])
            continue;
        if (!first)
            rc = buf_append(out, "  ", 2);
        first = false;
        if (rc == 0 && r == SIZE_MAX - 1) {
            for (size_t w = l->width[c]; w > 0 && rc == 0;) {
                size_t k = w < sizeof dashes - 1 ? w : sizeof dashes - 1;
                rc = buf_append(out, dashes, k);
                w -= k;
            }
        } else if (rc == 0) {
            const char *s = r == SIZE_MAX ? t->cols[c].head : table_cell(t, r, c);
            rc = table_put(out, s, l->width[c], t->cols[c].align, c == l->last);
        }
    }
    while (rc == 0 && out->len > start && out->data[out->len - 1] == ' ')
        out->len--; /* an empty last cell leaves none behind */
    return rc == 0 ? buf_append(out, "\n", 1) : rc;
}

int table_render(const struct table *t, struct buf *out)
{
    struct table_layout l = {0};
    table_layout(t, &l);
    int rc = t->bare ? 0 : table_line(t, &l, SIZE_MAX, out);
    if (rc == 0 && !t->bare)
        rc = table_line(t, &l, SIZE_MAX - 1, out);
    for (size_t r = 0; r < t->nrows && rc == 0; r++)
        rc = table_line(t, &l, r, out);
    return rc;
}

int table_fmt_num(double v, char *out, size_t cap)
{
    if (!isfinite(v)) {
        snprintf(out, cap, "-");
        return 0;
    }
    double a = fabs(v);
    if (a == 0) {
        snprintf(out, cap, "0");
        return 0;
    }
    if (a < 1e-3) {
        snprintf(out, cap, "%.2g", v);
        return -1;
    }
    int dec = a >= 1000 ? 0 : 3 - (int)floor(log10(a));
    dec = dec > 6 ? 6 : dec;
    snprintf(out, cap, "%.*f", dec, v);
    return dec;
}

void table_fmt_mean_ci(double mean, double ci, char *out, size_t cap)
{
    char m[48];
    int dec = table_fmt_num(mean, m, sizeof m);
    if (!isfinite(mean) || !isfinite(ci) || ci < 0)
        snprintf(out, cap, "%s", m);
    else if (dec < 0)
        snprintf(out, cap, "%s +- %.2g", m, ci);
    else
        snprintf(out, cap, "%s +- %.*f", m, dec, ci);
}

void table_fmt_bytes(int64_t bytes, char *out, size_t cap)
{
    static const char units[] = "KMGTPE";
    if (bytes < 1024) {
        snprintf(out, cap, "%lld", (long long)bytes);
        return;
    }
    double v = (double)bytes;
    int u = -1;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    if (v == floor(v))
        snprintf(out, cap, "%.0f%c", v, units[u]);
    else
        snprintf(out, cap, "%.1f%c", v, units[u]);
}

void table_fmt_duration(double s, char *out, size_t cap)
{
    if (!isfinite(s) || s < 0)
        snprintf(out, cap, "-");
    else if (s < 1)
        snprintf(out, cap, "%.0fms", s * 1000);
    else if (s < 60)
        snprintf(out, cap, "%.1fs", s);
    else if (s < 3600)
        snprintf(out, cap, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else
        snprintf(out, cap, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

void table_fmt_pct(double v, char *out, size_t cap)
{
    if (!isfinite(v))
        snprintf(out, cap, "-");
    else
        snprintf(out, cap, "%.1f%%", v * 100);
}

void table_fmt_time(const char *iso, char *out, size_t cap)
{
    if (!iso || !*iso) {
        snprintf(out, cap, "-");
        return;
    }
    /* "2026-11-22T10:04:05.123Z" -> "2026-11-22 10:04:05" */
    size_t n = strcspn(iso, ".Z+");
    snprintf(out, cap, "%.*s", (int)(n < 19 ? n : 19), iso);
    char *t = strchr(out, 'T');
    if (t)
        *t = ' ';
}
