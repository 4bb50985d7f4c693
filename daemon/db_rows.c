/* db_rows: see db_rows.h. */
#include "daemon/db_rows.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int db_rows_check(sqlite3_stmt *st, const struct db_reader *r, struct err *e)
{
    int n = sqlite3_column_count(st);
    if ((size_t)n != r->ncols)
        return err_set(e, ERR_INTERNAL, NULL,
                       "database: a statement returns %d columns, its reader reads %zu (%.60s)",
                       n, r->ncols, r->sql);
    for (int i = 0; i < n; i++) {
        const char *name = sqlite3_column_name(st, i);
        if (!name || strcmp(name, r->cols[i].name) != 0)
            return err_set(e, ERR_INTERNAL, NULL,
                           "database: column %d is '%s' but its reader expects '%s' (%.60s)", i,
                           name ? name : "?", r->cols[i].name, r->sql);
    }
    return 0;
}

/* Fills one member from column i of the current row. */
static int db_rows_fill_col(sqlite3_stmt *st, int i, const struct db_col *c, char *row,
                            struct err *e)
{
    char *dst = row + c->off;
    bool null = sqlite3_column_type(st, i) == SQLITE_NULL;
    switch (c->kind) {
    case DB_COL_INT: {
        int v = sqlite3_column_int(st, i);
        memcpy(dst, &v, sizeof v);
        return 0;
    }
    case DB_COL_INT64: {
        int64_t v = sqlite3_column_int64(st, i);
        memcpy(dst, &v, sizeof v);
        return 0;
    }
    case DB_COL_REAL:
    case DB_COL_REAL_OR_NEG1: {
        double v = null && c->kind == DB_COL_REAL_OR_NEG1 ? -1.0 : sqlite3_column_double(st, i);
        memcpy(dst, &v, sizeof v);
        return 0;
    }
    case DB_COL_BOOL: {
        bool v = sqlite3_column_int(st, i) != 0;
        memcpy(dst, &v, sizeof v);
        return 0;
    }
    case DB_COL_TEXT: {
        const char *text = (const char *)sqlite3_column_text(st, i);
        size_t len = text ? strlen(text) : 0;
        if (len >= c->size)
            return err_set(e, ERR_INTERNAL, NULL, "database: %s '%.40s' is longer than %zu",
                           c->name, text, c->size - 1);
        memcpy(dst, text ? text : "", len + 1);
        return 0;
    }
    case DB_COL_JSON: {
        const char *text = (const char *)sqlite3_column_text(st, i);
        json_t *v = json_loads(text ? text : "null", JSON_DECODE_ANY, NULL); /* owned */
        if (!v)
            return err_set(e, ERR_INTERNAL, NULL, "database: %s is not JSON", c->name);
        memcpy(dst, &v, sizeof v);
        return 0;
    }
    }
    return err_set(e, ERR_INTERNAL, NULL, "database: %s: unknown column kind", c->name);
}

void db_rows_free(const struct db_reader *r, void *rows, size_t n)
{
    for (size_t k = 0; rows && k < n; k++)
        for (size_t i = 0; i < r->ncols; i++)
            if (r->cols[i].kind == DB_COL_JSON) {
                json_t *v;
                memcpy(&v, (char *)rows + k * r->row_size + r->cols[i].off, sizeof v);
                json_decref(v);
            }
    free(rows);
}

int db_rows_read(sqlite3_stmt *st, const struct db_reader *r, void **rows, size_t *n,
                 struct err *e)
{
    char *out = NULL;
    size_t k = 0, cap = 0;
    int rc;
    *rows = NULL;
    *n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (k == cap) {
            size_t ncap = cap ? 2 * cap : 16;
            char *grown = realloc(out, ncap * r->row_size);
            if (!grown) {
                rc = SQLITE_NOMEM;
                break;
            }
            out = grown;
            cap = ncap;
        }
        char *row = out + k * r->row_size;
        memset(row, 0, r->row_size); /* JSON members NULL until filled */
        k++;
        for (size_t i = 0; i < r->ncols; i++)
            if (db_rows_fill_col(st, (int)i, &r->cols[i], row, e) < 0) {
                sqlite3_reset(st);
                db_rows_free(r, out, k);
                return -1;
            }
    }
    if (rc != SQLITE_DONE) {
        const char *msg = rc == SQLITE_NOMEM ? "out of memory"
                                             : sqlite3_errmsg(sqlite3_db_handle(st));
        err_set(e, rc == SQLITE_NOMEM ? ERR_NOMEM : ERR_IO, NULL, "database: query: %s", msg);
        sqlite3_reset(st);
        db_rows_free(r, out, k);
        return -1;
    }
    sqlite3_reset(st);
    *rows = out;
    *n = k;
    return 0;
}
