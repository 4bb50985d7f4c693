/* table: plain-text tables for a terminal, and the number formats every CLI figure uses.
 *
 * Decision: output is ASCII of our own making (no box drawing, "+-" for plus-minus):
 * cells are copied in with control characters replaced, widths counted in code points so
 * a UTF-8 name from a spec does not shift its column, over-long cells cut at a column's
 * max width with "...". Columns whose every cell is empty (or "-") can be dropped, so a
 * metric that no row has (no speed-up baseline, no test set) takes no room. */
#ifndef DDPB_CLI_TABLE_H
#define DDPB_CLI_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

#define TABLE_MAX_COLS 48

enum table_align { TABLE_LEFT, TABLE_RIGHT };

struct table_col {
    char *head; /* owned */
    enum table_align align;
    size_t max_width; /* 0 = unlimited */
    bool drop_if_empty;
};

struct table {
    struct table_col cols[TABLE_MAX_COLS];
    size_t ncols;
    char **cells; /* owned, nrows * ncols (NULL cells print as "") */
    size_t nrows, cap_rows;
    bool bare; /* render rows only: no heading line and no rule */
};

void table_init(struct table *t);
void table_free(struct table *t);
/* Adds a column (head copied). Returns its index or -1 (too many columns, no memory).
 * Columns must all be added before the first row. */
int table_add_col(struct table *t, const char *head, enum table_align align, size_t max_width,
                  bool drop_if_empty);
/* Starts a new row with empty cells. Returns 0 or -1. */
int table_add_row(struct table *t);
/* Sets a cell of the last row (text copied, sanitised). Returns 0 or -1. */
int table_set(struct table *t, size_t col, const char *text);
int table_setf(struct table *t, size_t col, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Appends the table (header, a dashed rule, the rows; two spaces between columns, no
 * trailing spaces) to out. Returns 0 or -1. */
int table_render(const struct table *t, struct buf *out);

/* Display width of UTF-8 text in code points. */
size_t table_width(const char *s);

/* Numbers with about four significant digits: 1234, 12.35, 0.01234, 1.2e-05; NaN/inf
 * as "-". out >= 32 bytes. Returns the number of decimals used (0.. 6; -1 for %g). */
int table_fmt_num(double v, char *out, size_t cap);
/* "mean +- ci" with the ci at the mean's decimals; ci < 0 or NaN: the mean alone. */
void table_fmt_mean_ci(double mean, double ci, char *out, size_t cap);
/* Bytes in binary units: 512, 4K, 64K, 1.5M, 2G. */
void table_fmt_bytes(int64_t bytes, char *out, size_t cap);
/* A duration: 850ms, 12.3s, 5m03s, 2h04m; negative or NaN: "-". */
void table_fmt_duration(double seconds, char *out, size_t cap);
/* A fraction as a percentage: 0.953 -> "95.3%"; NaN: "-". */
void table_fmt_pct(double v, char *out, size_t cap);
/* An ISO-8601 time as "2026-11-22 10:04:05" (the API's times are UTC); NULL: "-". */
void table_fmt_time(const char *iso, char *out, size_t cap);

#endif
