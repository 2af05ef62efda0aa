/* Test support: a loopback TCP port nobody listens on, for a worker's
 * metrics endpoint or a relay the test starts. */
#ifndef OW_TESTPORT_H
#define OW_TESTPORT_H

/* A port the kernel just gave a socket bound to 127.0.0.1 and closed:
 * free until someone else takes it. Fails the test when none is given. */
unsigned testport_free(void);

#endif
