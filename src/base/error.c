#include "ow/error.h"

#include <stdarg.h>
#include <stdio.h>

void ow_error_clear(ow_error *err)
{
    if (err == NULL)
        return;
    err->cls = OW_ERRCLASS_NONE;
    err->code = 0;
    err->msg[0] = '\0';
}

static int code_for_class(ow_errclass cls)
{
    switch (cls) {
    case OW_ERRCLASS_NONE:
        return OW_OK;
    case OW_ERRCLASS_RETRIABLE:
        return OW_ERETRY;
    case OW_ERRCLASS_INVALID_INPUT:
        return OW_EINVAL;
    case OW_ERRCLASS_FATAL:
    default:
        return OW_EFATAL;
    }
}

int ow_error_set(ow_error *err, ow_errclass cls, int code, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;

        err->cls = cls;
        err->code = code;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
    }
    return code_for_class(cls);
}

const char *ow_errclass_name(ow_errclass cls)
{
    static const char *const names[] = {[OW_ERRCLASS_NONE] = "none",
                                        [OW_ERRCLASS_RETRIABLE] = "retriable",
                                        [OW_ERRCLASS_FATAL] = "fatal",
                                        [OW_ERRCLASS_INVALID_INPUT] = "invalid_input"};

    return (unsigned)cls < sizeof(names) / sizeof(names[0]) ? names[cls] : "unknown";
}
