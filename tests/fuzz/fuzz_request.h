/*
 * The request fuzz target's entry point and input layout, shared by the
 * libFuzzer build (tests/fuzz/fuzz_request.c with -fsanitize=fuzzer) and the
 * corpus replay test (tests/fuzz/replay_main.c, any compiler).
 *
 * Input layout: byte 0 is the key length, FUZZ_NO_KEY for a message without
 * a key; the key bytes follow (fewer when the input is shorter), and the
 * rest of the input is the value.
 */
#ifndef OW_FUZZ_REQUEST_H
#define OW_FUZZ_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#define FUZZ_NO_KEY 0xFF

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
