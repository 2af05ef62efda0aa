/* The publish gate (publish_gate.h). */
#include "publish_gate.h"

void ow_publish_gate_init(ow_publish_gate *g)
{
    *g = (ow_publish_gate){.inside = 0};
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
}

void ow_publish_gate_destroy(ow_publish_gate *g)
{
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
}

int ow_publish_gate_enter(ow_publish_gate *g)
{
    int sealed;

    pthread_mutex_lock(&g->mu);
    while (g->closing && !g->sealed)
        pthread_cond_wait(&g->cv, &g->mu);
    sealed = g->sealed;
    if (!sealed)
        g->inside++;
    pthread_mutex_unlock(&g->mu);
    return !sealed;
}

void ow_publish_gate_leave(ow_publish_gate *g)
{
    pthread_mutex_lock(&g->mu);
    if (--g->inside == 0)
        pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void ow_publish_gate_close(ow_publish_gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->closing = 1;
    while (g->inside > 0)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

void ow_publish_gate_open(ow_publish_gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->closing = 0;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void ow_publish_gate_seal(ow_publish_gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->sealed = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}
