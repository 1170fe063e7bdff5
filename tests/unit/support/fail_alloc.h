/* fail_alloc.h - allocation failures injected into the code under test,
 * one allocation at a time (as SQLite's test_malloc.c and curl's memdebug
 * do).
 *
 * A unit test named test_<module>_nomem is linked with -Wl,--wrap for
 * malloc, calloc, realloc, free, strdup, strndup and protobuf-c's
 * message unpack and free (tests/CMakeLists.txt), and jansson is given the
 * same allocator: every allocation of our code, of the messages protobuf-c
 * decodes for it and of the JSON values jansson builds for it goes through
 * here, is counted and is tracked until it is freed.
 *
 * fa_failalloc_check runs a function once with every allocation
 * succeeding, then once for each allocation that run made, with exactly
 * that one failing.  Each run must give back everything it allocated (a
 * pointer still live afterwards is a leak, named by the allocation that
 * failed), and each run in which an allocation failed must either succeed
 * anyway or return an error with a message: FA_ERR_NOMEM, or a code the
 * caller accepts for failures that the library underneath cannot tell
 * apart (protobuf-c reports a failed allocation as an undecodable
 * message). */
#ifndef FA_TEST_FAIL_ALLOC_H
#define FA_TEST_FAIL_ALLOC_H

#include <stddef.h>

#include "common/fa_err.h"

/* The function under test: 0, or an FA_ERR_* code with err filled.  It
 * frees whatever it made, success or not. */
typedef int (*fa_failalloc_fn)(void *arg, fa_error *err);

/* For a function whose input is refused even with nothing failing (a
 * malformed message): the outcome of its first run is the reference.
 * Returns 0 when a later run refuses it with the same code and a message
 * (the message may differ: a checker that could not sort its findings for
 * want of memory still reports them all), else the later code (with err
 * as it left it), or FA_ERR_INVAL when it accepted what the reference
 * refused. */
typedef struct fa_failalloc_ref {
    int set, rc;
    char msg[sizeof(((fa_error *)0)->msg)];
} fa_failalloc_ref;
int fa_failalloc_same(fa_failalloc_ref *ref, int rc, fa_error *err);

/* Runs fn as above.  also_ok: another code accepted after a failed
 * allocation (0: only FA_ERR_NOMEM).  Fails the cmocka test with what went
 * wrong; returns the number of allocations the successful run made. */
unsigned long fa_failalloc_check(const char *what, fa_failalloc_fn fn, void *arg, int also_ok);

#endif
