/*
 * Error values shared by every module.
 *
 * A fallible function returns 0 on success or a negative OW_E* code, and
 * fills an ow_error when the caller passed one. Callers branch on the error
 * *class*, never on a library's own codes: the store maps MySQL error numbers
 * to classes and the worker only asks "retry, give up, or reject the input?".
 */
#ifndef OW_ERROR_H
#define OW_ERROR_H

#include <stddef.h>

enum {
    OW_OK = 0,
    OW_EINVAL = -1,   /* bad argument or bad input */
    OW_ENOMEM = -2,   /* allocation failed */
    OW_ERETRY = -3,   /* transient failure; the same call may succeed later */
    OW_EFATAL = -4,   /* unrecoverable; the process should stop */
    OW_ENOTFOUND = -5 /* the looked-up thing does not exist */
};

typedef enum {
    OW_ERRCLASS_NONE = 0,
    OW_ERRCLASS_RETRIABLE,    /* back off, reconnect if needed, retry */
    OW_ERRCLASS_FATAL,        /* stop the process with a non-zero status */
    OW_ERRCLASS_INVALID_INPUT /* reject the input; retrying cannot help */
} ow_errclass;

typedef struct ow_error {
    ow_errclass cls;
    int code;      /* the library's own number (MySQL errno, rd_kafka_resp_err_t) or 0 */
    char msg[256]; /* one sentence without secrets, keys or payloads */
} ow_error;

void ow_error_clear(ow_error *err);

/* Fills err (when not NULL) and returns the OW_E* code that matches cls. */
int ow_error_set(ow_error *err, ow_errclass cls, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

const char *ow_errclass_name(ow_errclass cls);

#endif
