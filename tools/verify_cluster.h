/*
 * ow-verify's view of a database given as a list of nodes of one cluster
 * (mysql.host syntax, comma-separated): which node it reads, and whether
 * the nodes hold the same rows.
 */
#ifndef OW_VERIFY_CLUSTER_H
#define OW_VERIFY_CLUSTER_H

#include <mysql.h>
#include <stddef.h>

typedef struct {
    const char *hosts; /* one host or a comma-separated list */
    unsigned port;
    const char *user, *password, *database;
} vc_target;

/* Connects to the first node of t->hosts that answers and, when it is a
 * Galera node, is Synced and ready in the Primary component; its reads
 * then wait for every write the cluster committed (wsrep_sync_wait), and
 * one such read is made before returning, so that other sessions on the
 * node see them too once writing has stopped. The node's name goes to
 * chosen. Returns a new connection, or NULL after printing why each node
 * was passed over. */
MYSQL *vc_connect(const vc_target *t, char *chosen, size_t chosen_size);

/* With more than one node: compares CHECKSUM TABLE of the worker's tables
 * on every node with the chosen one's, each read after the node applied
 * every committed write. Prints one line per node; returns the number of
 * nodes that differ, do not answer or are not Synced, or -1 for a single
 * host (nothing to compare). */
long long vc_compare_nodes(const vc_target *t, const char *chosen);

#endif
