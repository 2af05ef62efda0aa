/* The schema migrations of sql/, embedded at build time. */
#ifndef OW_MIGRATIONS_H
#define OW_MIGRATIONS_H

typedef struct {
    int version;
    const char *name;
    const char *sql; /* statements separated by lines ending in ';' */
} ow_migration;

extern const ow_migration ow_migrations[];
extern const unsigned ow_migrations_count;

#endif
