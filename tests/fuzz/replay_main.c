/*
 * Corpus replay: the fuzz target's entry point run, without libFuzzer, over
 * every file of the seed corpus and every row of the hostile input table,
 * so that CI replays them as an ordinary test with any compiler. An
 * invariant failure aborts (see fuzz_request.c).
 *
 *   fuzz_replay [DIR|FILE]...       replay these (default: OW_FUZZ_CORPUS_DIR)
 *   fuzz_replay --write-hostile DIR write the hostile rows of up to
 *                                   SEED_MAX bytes as seed files into DIR
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_request.h"
#include "hostile_cases.h"

#define SEED_MAX 4096

/* Reads a whole file into a buffer of exactly its size (plus none), so
 * that AddressSanitizer sees a read past its end. */
static unsigned char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    unsigned char *buf = NULL;

    if (f == NULL)
        return NULL;
    if (fstat(fileno(f), &st) == 0 && st.st_size >= 0) {
        *len = (size_t)st.st_size;
        buf = malloc(*len > 0 ? *len : 1);
        if (buf != NULL && fread(buf, 1, *len, f) != *len) {
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    return buf;
}

static int replay_file(const char *path)
{
    size_t len = 0;
    unsigned char *buf = read_file(path, &len);

    if (buf == NULL) {
        fprintf(stderr, "fuzz_replay: cannot read %s: %s\n", path, strerror(errno));
        return -1;
    }
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 1;
}

/* Replays a file, or every regular file of a directory; returns the count
 * or -1. */
static int replay_path(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    char file[4096];
    int n = 0;

    if (d == NULL)
        return replay_file(path);
    while (n >= 0 && (e = readdir(d)) != NULL) {
        struct stat st;

        snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
        if (stat(file, &st) == 0 && S_ISREG(st.st_mode))
            n = replay_file(file) < 0 ? -1 : n + 1;
    }
    closedir(d);
    return n;
}

/* A hostile row in the fuzz input layout, in a new buffer of *len bytes. */
static unsigned char *encode_row(const hostile_case *c, size_t *len)
{
    size_t vlen = 0;
    /* The layout has one byte for the key's length: longer keys (the
     * generated ones, all invalid) are cut, and stay invalid. */
    size_t klen = c->key_len < FUZZ_NO_KEY ? c->key_len : FUZZ_NO_KEY - 1;
    unsigned char *key = hostile_key(c);
    unsigned char *value = hostile_value(c, &vlen);
    unsigned char *buf = value != NULL && key != NULL ? malloc(1 + klen + vlen) : NULL;

    if (buf != NULL) {
        buf[0] = c->has_key ? (unsigned char)klen : FUZZ_NO_KEY;
        memcpy(buf + 1, key, klen);
        memcpy(buf + 1 + klen, value, vlen);
        *len = 1 + klen + vlen;
    }
    free(key);
    free(value);
    return buf;
}

static int replay_hostile(void)
{
    for (size_t i = 0; i < hostile_count; i++) {
        size_t len = 0;
        unsigned char *buf = encode_row(&hostile_cases[i], &len);

        if (buf == NULL)
            return -1;
        LLVMFuzzerTestOneInput(buf, len);
        free(buf);
    }
    return (int)hostile_count;
}

static int write_hostile(const char *dir)
{
    int n = 0;

    for (size_t i = 0; i < hostile_count; i++) {
        char path[4096];
        size_t len = 0;
        unsigned char *buf = encode_row(&hostile_cases[i], &len);
        FILE *f;

        if (buf == NULL)
            return 1;
        snprintf(path, sizeof(path), "%s/hostile-%s", dir, hostile_cases[i].name);
        f = len <= SEED_MAX ? fopen(path, "wb") : NULL;
        if (f != NULL) {
            n += fwrite(buf, 1, len, f) == len;
            fclose(f);
        }
        free(buf);
    }
    printf("fuzz_replay: wrote %d seeds to %s\n", n, dir);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0;
    int rows;

    if (argc == 3 && strcmp(argv[1], "--write-hostile") == 0)
        return write_hostile(argv[2]);
    for (int i = 1; i < argc && files >= 0; i++) {
        int n = replay_path(argv[i]);

        files = n < 0 ? -1 : files + n;
    }
#ifdef OW_FUZZ_CORPUS_DIR
    if (argc == 1)
        files = replay_path(OW_FUZZ_CORPUS_DIR);
#endif
    rows = replay_hostile();
    printf("fuzz_replay: %d corpus files and %d hostile rows replayed\n", files, rows);
    /* An empty or unreadable corpus is a failure: the test would prove nothing. */
    return files > 0 && rows > 0 ? 0 : 1;
}
