/*
 * Node lists: the nodes of one database cluster (the three nodes of a
 * Galera cluster, say), tried in order. mysql.host separates them with
 * commas; an entry of mysql.shards with '|', and gives one port and one
 * database after the last node. Every list is kept in one form, the
 * "joined" form: the names, trimmed, separated by commas. Pure: no I/O.
 */
#ifndef OW_NODES_H
#define OW_NODES_H

#include <stddef.h>

#include "ow/error.h"

#define OW_NODES_MAX 16        /* nodes of one cluster */
#define OW_NODE_NAME_MAX 255   /* one node's host name or address */
#define OW_NODES_TEXT_MAX 1023 /* a whole list in the joined form */

/* Checks text[0..len) as nodes separated by sep, each 1..OW_NODE_NAME_MAX
 * letters, digits and . - _ : (a bare IPv6 address), none listed twice,
 * and writes the joined form to out (cap bytes). what names the list in
 * errors ("mysql.host"); the error names the node by its position and text. */
int ow_nodes_join(const char *text, size_t len, char sep, const char *what, char *out, size_t cap,
                  ow_error *err);
/* The number of nodes of a joined list (at least 1 for a non-empty one). */
unsigned ow_nodes_count(const char *joined);
/* Node i of a joined list into buf (cap bytes, cut if longer). OW_ENOTFOUND
 * past the end. */
int ow_nodes_get(const char *joined, unsigned i, char *buf, size_t cap);

#endif
