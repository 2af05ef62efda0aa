/* The flags every pipeline stage shares (pipeline_internal.h). */
#include "ow/log.h"
#include "ow/util.h"
#include "pipeline_internal.h"

void ow_runstate_set_fatal(ow_runstate *rs, const char *why)
{
    if (atomic_exchange(&rs->fatal, 1) == 0)
        OW_LOG(OW_LOG_ERROR, "worker_fatal", OW_F_STR("reason", why));
    rs->stop_sleep = 1;
}

int ow_runstate_give_up(ow_runstate *rs)
{
    return atomic_load(&rs->fatal) ||
           (atomic_load(&rs->stopping) && ow_clock_mono_ms() > rs->deadline_ms);
}
