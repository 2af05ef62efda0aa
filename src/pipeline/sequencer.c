/* The release order of exactly-once mode (sequencer.h): per partition, a
 * queue of the jobs of its current epoch in the order they were tracked. */
#include "sequencer.h"

#include <stdlib.h>
#include <string.h>

#include "ow/error.h"
#include "ow/util.h"

typedef struct {
    int open;        /* an epoch is under way */
    int releasing;   /* a thread is producing released jobs: it takes the next ones too */
    uint32_t epoch;  /* the ledger's epoch of the queued jobs */
    int64_t barrier; /* no job after this offset is released (INT64_MAX: none) */
    ow_job *head, *tail;
} seq_part;

struct ow_sequencer {
    pthread_mutex_t mu;
    seq_part *parts;
    size_t n_parts;
};

ow_sequencer *ow_sequencer_new(void)
{
    ow_sequencer *s = calloc(1, sizeof(*s));

    if (s != NULL)
        pthread_mutex_init(&s->mu, NULL);
    return s;
}

void ow_sequencer_free(ow_sequencer **sp)
{
    ow_sequencer *s = *sp;

    if (s == NULL)
        return;
    pthread_mutex_destroy(&s->mu);
    free(s->parts);
    free(s);
    *sp = NULL;
}

static void push(ow_job **list, ow_job *job)
{
    job->seq_next = *list;
    *list = job;
}

/* The partition's state, growing the table when needed; mu held. */
static seq_part *part_get(ow_sequencer *s, int32_t partition)
{
    if (partition < 0 || ow_grow_zeroed((void **)&s->parts, &s->n_parts, (size_t)partition + 1,
                                        sizeof(*s->parts)) != OW_OK)
        return NULL;
    return &s->parts[partition];
}

/* Ends the partition's epoch: ready jobs are dropped, jobs still being
 * decided forgotten. */
static void close_part(seq_part *p, ow_job **drop)
{
    ow_job *job = p->head;

    while (job != NULL) {
        ow_job *next = job->seq_next;

        job->seq_queued = 0;
        job->seq_next = NULL;
        if (job->seq_ready)
            push(drop, job);
        job = next;
    }
    p->head = p->tail = NULL;
    p->open = 0;
    p->releasing = 0;
}

int ow_sequencer_append(ow_sequencer *s, ow_job *job, ow_job **drop)
{
    seq_part *p;

    pthread_mutex_lock(&s->mu);
    p = part_get(s, job->t.partition);
    if (p != NULL && (!p->open || p->epoch != job->t.epoch)) {
        close_part(p, drop);
        p->open = 1;
        p->epoch = job->t.epoch;
        p->barrier = INT64_MAX;
    }
    job->seq_next = NULL;
    job->seq_ready = 0;
    job->seq_queued = p != NULL;
    if (p != NULL) {
        if (p->tail != NULL)
            p->tail->seq_next = job;
        else
            p->head = job;
        p->tail = job;
    }
    pthread_mutex_unlock(&s->mu);
    return p != NULL ? OW_OK : OW_ENOMEM;
}

/* Takes job out of its partition's queue; mu held. */
static void unlink_job(seq_part *p, ow_job *job)
{
    ow_job *prev = NULL;

    for (ow_job *j = p->head; j != NULL; prev = j, j = j->seq_next) {
        if (j != job)
            continue;
        if (prev != NULL)
            prev->seq_next = j->seq_next;
        else
            p->head = j->seq_next;
        if (p->tail == j)
            p->tail = prev;
        break;
    }
    job->seq_next = NULL;
    job->seq_queued = 0;
}

/* Drops the ready jobs behind the barrier; mu held. */
static void drop_behind(seq_part *p, ow_job **drop)
{
    ow_job *j = p->head;

    while (j != NULL) {
        ow_job *next = j->seq_next;

        if (j->seq_ready && j->t.offset > p->barrier) {
            unlink_job(p, j);
            push(drop, j);
        }
        j = next;
    }
}

/* Moves the ready jobs at the head of the queue to *release, in order. */
static void pop_ready(seq_part *p, ow_job **release)
{
    ow_job **end = release;

    while (*end != NULL)
        end = &(*end)->seq_next;
    while (p->head != NULL && p->head->seq_ready && p->head->t.offset <= p->barrier) {
        ow_job *job = p->head;

        p->head = job->seq_next;
        if (p->head == NULL)
            p->tail = NULL;
        job->seq_queued = 0;
        job->seq_next = NULL;
        *end = job;
        end = &job->seq_next;
    }
}

/* Takes the partition's ready head for the caller, unless another thread
 * is producing that partition's jobs: it will take them in turn, so that
 * one partition's outputs are produced in order. mu held. */
static void take_turn(seq_part *p, ow_job **release)
{
    if (p->releasing)
        return;
    pop_ready(p, release);
    p->releasing = *release != NULL;
}

void ow_sequencer_ready(ow_sequencer *s, ow_job *job, ow_job **release, ow_job **drop)
{
    seq_part *p;

    pthread_mutex_lock(&s->mu);
    if (!job->seq_queued) {
        push(drop, job);
    } else {
        p = &s->parts[job->t.partition];
        job->seq_ready = 1;
        if (job->t.offset > p->barrier) {
            unlink_job(p, job);
            push(drop, job);
        } else {
            take_turn(p, release);
        }
    }
    pthread_mutex_unlock(&s->mu);
}

void ow_sequencer_next(ow_sequencer *s, int32_t partition, ow_job **release)
{
    seq_part *p;

    pthread_mutex_lock(&s->mu);
    p = &s->parts[partition];
    p->releasing = 0;
    if (p->open)
        take_turn(p, release);
    pthread_mutex_unlock(&s->mu);
}

void ow_sequencer_abandon(ow_sequencer *s, ow_job *job, ow_job **drop)
{
    seq_part *p;

    pthread_mutex_lock(&s->mu);
    if (job->seq_queued) {
        p = &s->parts[job->t.partition];
        unlink_job(p, job);
        if (job->t.offset < p->barrier)
            p->barrier = job->t.offset;
        drop_behind(p, drop);
    }
    pthread_mutex_unlock(&s->mu);
}

void ow_sequencer_close(ow_sequencer *s, int32_t partition, ow_job **drop)
{
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->n_parts; i++) {
        if (partition < 0 || (size_t)partition == i)
            close_part(&s->parts[i], drop);
    }
    pthread_mutex_unlock(&s->mu);
}
