/* migrations: the schema/NNN_name.sql files, embedded at build time
 * (schema/embed.py). db_open applies those above the database's
 * PRAGMA user_version, each in its own transaction. */
#ifndef DDPB_MIGRATIONS_H
#define DDPB_MIGRATIONS_H

struct db_migration {
    int version;
    const char *name;
    const char *sql;
};

extern const struct db_migration db_migrations[];
extern const int db_migration_count;

#endif
