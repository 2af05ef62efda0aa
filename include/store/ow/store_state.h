/* What the watch of a database last found (ow/store_watch.h). Its own
 * header, so that the store's gate, below the connection code, and the
 * watch, above it, both name it. */
#ifndef OW_STORE_STATE_H
#define OW_STORE_STATE_H

typedef enum {
    OW_WATCH_UNKNOWN = 0, /* no ping has finished yet */
    OW_WATCH_UP,
    OW_WATCH_DOWN,   /* unreachable, lost or not answering: retry */
    OW_WATCH_REFUSED /* an error that retrying cannot fix */
} ow_watch_state;

#endif
