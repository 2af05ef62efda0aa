#include "ow/idgen.h"

void ow_idgen_init(ow_idgen *g, unsigned node, int64_t (*clock_ms)(void))
{
    atomic_init(&g->tick, 0);
    atomic_init(&g->node, node & ((1u << OW_IDGEN_NODE_BITS) - 1));
    g->clock_ms = clock_ms;
}

void ow_idgen_set_node(ow_idgen *g, unsigned node)
{
    atomic_store(&g->node, node & ((1u << OW_IDGEN_NODE_BITS) - 1));
}

int64_t ow_idgen_next(ow_idgen *g)
{
    int64_t ms = g->clock_ms() - OW_IDGEN_EPOCH_MS;
    uint64_t now = (uint64_t)(ms > 0 ? ms : 0) << OW_IDGEN_SEQ_BITS;
    uint64_t prev = atomic_load(&g->tick);
    uint64_t next;

    /* Take max(now, prev + 1): a burst of more than 4096 ids in one ms, or a
     * clock that steps back, borrows from the following milliseconds instead
     * of repeating an id. */
    do {
        next = now > prev ? now : prev + 1;
    } while (!atomic_compare_exchange_weak(&g->tick, &prev, next));
    return (int64_t)(((next >> OW_IDGEN_SEQ_BITS) << (OW_IDGEN_NODE_BITS + OW_IDGEN_SEQ_BITS)) |
                     ((uint64_t)atomic_load(&g->node) << OW_IDGEN_SEQ_BITS) |
                     (next & ((1u << OW_IDGEN_SEQ_BITS) - 1)));
}

void ow_order_no_format(int64_t id, char *out)
{
    static const char digits[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    uint64_t v = (uint64_t)id;

    out[0] = 'O';
    out[1] = 'W';
    out[2] = '-';
    for (int i = 12; i >= 0; i--) {
        out[3 + i] = digits[v & 31];
        v >>= 5;
    }
    out[OW_ORDER_NO_LEN] = '\0';
}
