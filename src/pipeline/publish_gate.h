/*
 * The publish gate (publish_gate.c). Private to the pipeline.
 *
 * Lanes publish only inside the gate: a lane enters before it produces
 * the outputs of a batch and leaves after the last, so a batch is never
 * split. The consumer thread closes the gate whenever the producer must be
 * still: to commit a Kafka transaction (exactly-once), whose outputs and
 * offsets must match, and to replace a producer that failed
 * (at-least-once). Closing waits for the lanes inside to leave and holds
 * the others at the door until it opens again.
 *
 * A stop that gives up on a transaction seals the gate: from then on
 * nothing is produced and lanes abandon what they hold, so that the
 * outputs of the given-up transaction are never joined by others.
 */
#ifndef OW_PUBLISH_GATE_H
#define OW_PUBLISH_GATE_H

#include <pthread.h>

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int inside;  /* lanes publishing */
    int closing; /* the consumer thread holds the gate closed */
    int sealed;  /* nothing is produced any more */
} ow_publish_gate;

void ow_publish_gate_init(ow_publish_gate *g);
void ow_publish_gate_destroy(ow_publish_gate *g);

/* Around a lane's publication of a batch: waits while the gate is closed.
 * Returns 0, without entering, when the gate is sealed: the caller
 * produces nothing, abandons what it holds and does not leave. */
int ow_publish_gate_enter(ow_publish_gate *g);
void ow_publish_gate_leave(ow_publish_gate *g);
/* Closes the gate and waits until no lane is inside; opening it lets the
 * waiting lanes in. Consumer thread. */
void ow_publish_gate_close(ow_publish_gate *g);
void ow_publish_gate_open(ow_publish_gate *g);
/* Seals the gate for good and wakes the lanes waiting at it. */
void ow_publish_gate_seal(ow_publish_gate *g);

#endif
