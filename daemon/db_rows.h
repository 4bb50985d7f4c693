/* db_rows: typed rows out of SQLite statements, for readers that need figures rather than
 * JSON (daemon/results.c through db_get_experiment_data).
 *
 * Decision: a struct's reader is a table of columns {name, kind, member} written next to
 * the SQL it reads (daemon/db.c), and the pairing of the statement's result columns (SQL
 * aliases such as "min(step_ms) AS fastest_ms") with the members they fill is checked by
 * name, with sqlite3_column_name, once per statement (db_open checks every reader), so an
 * alias and its reader that disagree stop the database from opening and fail every test
 * that opens one, instead of silently reading zeros. Rows are then read by column index. */
#ifndef DDPB_DB_ROWS_H
#define DDPB_DB_ROWS_H

#include <sqlite3.h>
#include <stddef.h>

#include "common/err.h"

enum db_col_kind {
    DB_COL_INT,          /* int */
    DB_COL_INT64,        /* int64_t */
    DB_COL_REAL,         /* double */
    DB_COL_REAL_OR_NEG1, /* double; NULL reads -1 (a figure that was not measured) */
    DB_COL_BOOL,         /* bool */
    DB_COL_TEXT,         /* char[size]; NULL reads "", longer text is an error */
    DB_COL_JSON,         /* json_t *, owned by the row (db_rows_free); decoded from text */
};

struct db_col {
    const char *name; /* the statement's result column name (its alias) */
    enum db_col_kind kind;
    size_t off, size; /* the struct member it fills */
};

/* A column filling member m of struct type t. */
#define DB_COL(name, kind, t, m)                                                               \
    {                                                                                          \
        name, kind, offsetof(t, m), sizeof(((t *)0)->m)                                        \
    }

struct db_reader {
    const char *sql; /* the statement (a static string of db.c: the statement cache key) */
    const struct db_col *cols;
    size_t ncols;
    size_t row_size; /* sizeof the struct a row fills */
};

/* ERR_INTERNAL naming the column when st's result columns are not exactly r's, in order. */
int db_rows_check(sqlite3_stmt *st, const struct db_reader *r, struct err *e);
/* Steps a bound statement (already checked against r) to the end and returns its rows as
 * an owned array of r->row_size structs in *rows (db_rows_free; NULL when none). */
int db_rows_read(sqlite3_stmt *st, const struct db_reader *r, void **rows, size_t *n,
                 struct err *e);
/* Frees n rows of r and what they own. */
void db_rows_free(const struct db_reader *r, void *rows, size_t n);

#endif
