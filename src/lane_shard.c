/*
 * A lane over user shards (issue 14). The lane keeps one connection per
 * shard and splits each micro-batch by the users' shards: one transaction
 * per shard, one after the other (measured best on this machine:
 * docs/performance.md, "Shards").
 *
 * A shard that fails with a lost connection is marked down; its messages
 * are parked (taken out of the batch, unanswered, offsets held back) while
 * the other shards' messages go on. The parked messages' keys stay blocked
 * in the lane, so nothing with the same key overtakes them and results for
 * one key still leave in consumption order. The lane probes a down shard
 * with backoff; when it answers, its parked messages go back to the front
 * of the queue, in their order, and are decided. Deadlocks and lock waits
 * are retried in place as in an unsharded lane.
 */
#include <stdlib.h>
#include <string.h>

#include "lane_internal.h"
#include "ow/log.h"
#include "ow/metrics.h"

/* key hash -> shard of a parked job; 0 marks an empty slot. */
typedef struct {
    uint64_t key;
    unsigned shard;
} parked_key;

struct ow_lane_shards {
    unsigned n;
    uint32_t buckets;
    ow_store *store[OW_SHARD_MAX];     /* [0] is the lane's own store, borrowed */
    int64_t retry_at_ms[OW_SHARD_MAX]; /* 0: up; else down, probe then */
    unsigned attempts[OW_SHARD_MAX];
    ow_job *parked_head, *parked_tail;
    size_t parked;
    size_t waiting[OW_SHARD_MAX]; /* parked jobs per shard */
    parked_key *keys;             /* open addressing, cap a power of two */
    size_t keys_cap;
    /* Scratch for one shard's part of a batch. */
    ow_store_item *items;
    size_t *index;
    size_t cap;
};

static uint64_t key_slot(uint64_t h)
{
    return h | 1;
}

static void keys_put(ow_lane_shards *ls, uint64_t h, unsigned shard)
{
    size_t i = (size_t)key_slot(h) & (ls->keys_cap - 1);

    while (ls->keys[i].key != 0 && ls->keys[i].key != key_slot(h))
        i = (i + 1) & (ls->keys_cap - 1);
    ls->keys[i].key = key_slot(h);
    ls->keys[i].shard = shard;
}

/* Rebuilds the parked-key index from the parked list, growing it to at
 * least twice the parked jobs. */
static int keys_rebuild(ow_lane_shards *ls)
{
    size_t cap = 64;

    while (cap < 2 * ls->parked + 2)
        cap *= 2;
    if (cap > ls->keys_cap) {
        parked_key *k = calloc(cap, sizeof(*k));

        if (k == NULL)
            return OW_ENOMEM;
        free(ls->keys);
        ls->keys = k;
        ls->keys_cap = cap;
    } else {
        /* All of it: lookups probe the whole table, and keys left in a
         * part once grown would block their jobs in a later outage. */
        memset(ls->keys, 0, ls->keys_cap * sizeof(*ls->keys));
    }
    for (ow_job *j = ls->parked_head; j != NULL; j = j->next)
        keys_put(ls, j->key_hash, j->shard);
    return OW_OK;
}

int ow_lane_shards_start(ow_lane *l, ow_error *err)
{
    const ow_config *cfg = l->env->cfg;
    ow_lane_shards *ls;

    if (cfg->shards.n == 0)
        return OW_OK;
    ls = calloc(1, sizeof(*ls));
    if (ls == NULL)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    l->shards = ls;
    ls->n = cfg->shards.n;
    ls->buckets = (uint32_t)cfg->mysql_shard_buckets;
    ls->cap = (size_t)cfg->batch_max_messages;
    ls->items = calloc(ls->cap, sizeof(*ls->items));
    ls->index = calloc(ls->cap, sizeof(*ls->index));
    if (ls->items == NULL || ls->index == NULL || keys_rebuild(ls) != OW_OK)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    ls->store[0] = l->store;
    for (unsigned i = 1; i < ls->n; i++) {
        ow_store_params p;

        ow_store_params_for_shard(cfg, i, &p);
        ls->store[i] = ow_store_new(&p, l->env->ids);
        if (ls->store[i] == NULL)
            return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    }
    atomic_store(&ow_stats.n_shards, ls->n);
    for (unsigned i = 0; i < ls->n; i++)
        atomic_store(&ow_stats.shard_up[i], 1);
    return OW_OK;
}

void ow_lane_shards_cancel(ow_lane *l)
{
    /* Read without the lane's lock: the stores live until
     * ow_lane_shards_free, which runs after the lane's thread ended. */
    for (unsigned i = 1; l->shards != NULL && i < l->shards->n; i++)
        ow_store_cancel(l->shards->store[i]);
}

void ow_lane_shards_free(ow_lane *l)
{
    ow_lane_shards *ls = l->shards;

    if (ls == NULL)
        return;
    for (unsigned i = 1; i < ls->n; i++)
        ow_store_free(&ls->store[i]);
    free(ls->keys);
    free(ls->items);
    free(ls->index);
    free(ls);
    l->shards = NULL;
}

static void set_db_ok(ow_lane *l)
{
    int all = 1;

    for (unsigned i = 0; i < l->shards->n; i++)
        all &= atomic_load(&ow_stats.shard_up[i]);
    atomic_store(&l->env->rs->db_ok, all);
}

static void shard_down(ow_lane *l, unsigned s, const ow_error *err)
{
    ow_lane_shards *ls = l->shards;
    const ow_config *cfg = l->env->cfg;

    if (ls->retry_at_ms[s] == 0)
        OW_LOG(OW_LOG_WARN, "shard_down", OW_F_INT("lane", l->index), OW_F_INT("shard", s),
               OW_F_INT("code", err->code), OW_F_STR("error", err->msg));
    ls->retry_at_ms[s] =
        ow_clock_mono_ms() +
        ow_backoff_ms(cfg->retry_backoff_ms, cfg->retry_backoff_max_ms, ls->attempts[s]++, &l->rng);
    atomic_store(&ow_stats.shard_up[s], 0);
    set_db_ok(l);
}

static void shard_up(ow_lane *l, unsigned s)
{
    ow_lane_shards *ls = l->shards;

    if (ls->retry_at_ms[s] != 0)
        OW_LOG(OW_LOG_INFO, "shard_up", OW_F_INT("lane", l->index), OW_F_INT("shard", s),
               OW_F_INT("attempts", ls->attempts[s]));
    ls->retry_at_ms[s] = 0;
    ls->attempts[s] = 0;
    atomic_store(&ow_stats.shard_up[s], 1);
    set_db_ok(l);
}

/* Decides one shard's part of the batch (ls->items[0..n)). Deadlocks and
 * lock waits are retried here after a backoff; a lost connection returns
 * OW_ERETRY (the caller parks the part); a fatal error stops the worker. */
static int decide_part(ow_lane *l, unsigned s, size_t n)
{
    ow_store *st = l->shards->store[s];
    int64_t t0 = ow_clock_mono_us();

    for (unsigned attempt = 0;; attempt++) {
        ow_error err;
        int rc = ow_lane_attempt(l, st, l->shards->items, n, (int)s, attempt, t0, &err);

        if (rc == OW_OK) {
            shard_up(l, s);
            OW_COUNT(shard_transactions[s], 1);
            return OW_OK;
        }
        if (rc == OW_EFATAL)
            return OW_EFATAL;
        if (!ow_store_connected(st)) {
            shard_down(l, s, &err);
            return OW_ERETRY;
        }
        if (ow_lane_backoff(l, (int)s, attempt, &err))
            return OW_EFATAL;
    }
}

/* Marks the part's jobs parked; ow_lane_shards_park moves them. */
static void mark_parked(ow_lane_shards *ls, ow_job **valid, size_t n, unsigned s)
{
    for (size_t k = 0; k < n; k++) {
        valid[ls->index[k]]->parked = 1;
        valid[ls->index[k]]->shard = s;
    }
}

int ow_lane_shards_decide(ow_lane *l, ow_job **valid, ow_store_item *items, size_t nv)
{
    ow_lane_shards *ls = l->shards;
    int64_t now = ow_clock_mono_ms();

    for (unsigned s = 0; s < ls->n; s++) {
        size_t n = 0;
        int rc;

        for (size_t i = 0; i < nv; i++) {
            if (ow_shard_of_user(valid[i]->req.user_id, ls->buckets, ls->n) != s)
                continue;
            ls->index[n] = i;
            ls->items[n++] = items[i];
        }
        if (n == 0)
            continue;
        /* A shard known to be down is not tried until its probe answers,
         * nor while stopping (its connect could not be cancelled). */
        if (ls->retry_at_ms[s] != 0 &&
            (ls->retry_at_ms[s] > now || atomic_load(&l->env->rs->stopping))) {
            mark_parked(ls, valid, n, s);
            continue;
        }
        rc = decide_part(l, s, n);
        /* Back in every case: a failed decide may have grown (moved) an
         * item's body buffer, and the item owns it. */
        for (size_t k = 0; k < n; k++)
            items[ls->index[k]] = ls->items[k];
        if (rc == OW_EFATAL)
            return OW_EFATAL;
        if (rc == OW_ERETRY)
            mark_parked(ls, valid, n, s);
    }
    return OW_OK;
}

void ow_lane_shards_park(ow_lane *l, ow_job **jobs, size_t *n)
{
    ow_lane_shards *ls = l->shards;
    size_t kept = 0;
    int grow = 0;

    pthread_mutex_lock(&l->mu);
    for (size_t i = 0; i < *n; i++) {
        ow_job *job = jobs[i];

        if (!job->parked) {
            jobs[kept++] = job;
            continue;
        }
        job->next = NULL;
        if (ls->parked_tail == NULL)
            ls->parked_head = job;
        else
            ls->parked_tail->next = job;
        ls->parked_tail = job;
        ls->parked++;
        ls->waiting[job->shard]++;
        atomic_fetch_add(&ow_stats.shard_waiting[job->shard], 1);
        if (2 * ls->parked + 2 > ls->keys_cap)
            grow = 1;
        else
            keys_put(ls, job->key_hash, job->shard);
    }
    *n = kept;
    if (grow && keys_rebuild(ls) != OW_OK)
        ow_runstate_set_fatal(l->env->rs, "out of memory");
    pthread_mutex_unlock(&l->mu);
}

int ow_lane_shards_blocked(const ow_lane *l, const ow_job *job, int64_t *wake)
{
    const ow_lane_shards *ls = l->shards;
    size_t i;

    if (ls->parked == 0)
        return 0;
    for (i = (size_t)key_slot(job->key_hash) & (ls->keys_cap - 1); ls->keys[i].key != 0;
         i = (i + 1) & (ls->keys_cap - 1)) {
        if (ls->keys[i].key == key_slot(job->key_hash)) {
            int64_t at = ls->retry_at_ms[ls->keys[i].shard];

            if (at > 0 && (*wake == 0 || at < *wake))
                *wake = at;
            return 1;
        }
    }
    return 0;
}

/* Takes the parked jobs that match (shard s, or partition p when s is
 * OW_SHARD_MAX) off the parked list, in order. Called with mu held. */
static ow_job *unpark(ow_lane_shards *ls, unsigned s, int32_t p, ow_job **last, size_t *count)
{
    ow_job *first = NULL, *prev = NULL;

    *last = NULL;
    *count = 0;
    for (ow_job *j = ls->parked_head; j != NULL;) {
        ow_job *next = j->next;

        if (s < OW_SHARD_MAX ? j->shard == s : j->t.partition == p) {
            if (prev == NULL)
                ls->parked_head = next;
            else
                prev->next = next;
            if (ls->parked_tail == j)
                ls->parked_tail = prev;
            j->next = NULL;
            j->parked = 0;
            atomic_fetch_sub(&ow_stats.shard_waiting[j->shard], 1);
            if (*last == NULL)
                first = j;
            else
                (*last)->next = j;
            *last = j;
            (*count)++;
            ls->parked--;
            ls->waiting[j->shard]--;
        } else {
            prev = j;
        }
        j = next;
    }
    keys_rebuild(ls); /* shrinking or same size: cannot fail */
    return first;
}

/* Probes shard s without holding mu; 1 when it answered. */
static int probe(ow_lane *l, unsigned s)
{
    ow_error err;
    int ok;

    /* Stopping: a connect to a down host would last mysql.connect_timeout_s,
     * past what a stop can cancel (issue 9). */
    if (l->stop || atomic_load(&l->env->rs->stopping))
        return 0;
    pthread_mutex_unlock(&l->mu);
    ok = ow_store_ping(l->shards->store[s], &err) == OW_OK;
    if (ok)
        shard_up(l, s);
    else
        shard_down(l, s, &err);
    pthread_mutex_lock(&l->mu);
    return ok;
}

int64_t ow_lane_shards_tick(ow_lane *l, int64_t wake)
{
    ow_lane_shards *ls = l->shards;

    for (unsigned s = 0; s < ls->n; s++) {
        ow_job *first, *last;
        size_t count;

        if (ls->waiting[s] == 0)
            continue;
        /* Down: probe when due. Up again (another batch got through): go. */
        if (ls->retry_at_ms[s] != 0 && (ls->retry_at_ms[s] > ow_clock_mono_ms() || !probe(l, s)))
            continue;
        first = unpark(ls, s, 0, &last, &count);
        if (first == NULL)
            continue;
        /* Back at the front, before anything consumed after them. */
        last->next = l->head;
        l->head = first;
        if (l->tail == NULL)
            l->tail = last;
        l->queued += count;
    }
    for (unsigned s = 0; s < ls->n; s++) {
        if (ls->retry_at_ms[s] != 0 && (wake == 0 || ls->retry_at_ms[s] < wake))
            wake = ls->retry_at_ms[s];
    }
    return wake;
}

ow_job *ow_lane_shards_take_partition(ow_lane *l, int32_t partition)
{
    ow_job *last;
    size_t count;

    return unpark(l->shards, OW_SHARD_MAX, partition, &last, &count);
}

ow_job *ow_lane_shards_take_all(ow_lane *l)
{
    ow_lane_shards *ls = l->shards;
    ow_job *all = ls->parked_head;

    for (ow_job *j = all; j != NULL; j = j->next) {
        j->parked = 0;
        atomic_fetch_sub(&ow_stats.shard_waiting[j->shard], 1);
    }
    ls->parked_head = ls->parked_tail = NULL;
    ls->parked = 0;
    memset(ls->waiting, 0, sizeof(ls->waiting));
    keys_rebuild(ls);
    return all;
}

void ow_lane_shards_ping(ow_lane *l)
{
    for (unsigned s = 0; s < l->shards->n; s++) {
        ow_error err;

        if (l->shards->retry_at_ms[s] != 0)
            continue; /* the tick probes down shards */
        if (ow_store_ping(l->shards->store[s], &err) == OW_OK)
            shard_up(l, s);
        else
            shard_down(l, s, &err);
    }
}
