/* fail_alloc.c - allocation failures injected one at a time; see
 * fail_alloc.h.  The __wrap_* functions replace the allocator for the
 * objects linked statically into a test_<module>_nomem binary (-Wl,--wrap,
 * tests/CMakeLists.txt); the bookkeeping itself allocates with
 * __real_malloc, which is never counted. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/support/fail_alloc.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
ProtobufCMessage *__real_protobuf_c_message_unpack(const ProtobufCMessageDescriptor *desc,
                                                   ProtobufCAllocator *allocator, size_t len,
                                                   const uint8_t *data);
void __real_protobuf_c_message_free_unpacked(ProtobufCMessage *message,
                                             ProtobufCAllocator *allocator);

/* The run in progress: allocations counted from 1; the one numbered
 * fail_at (0: none) fails. */
static int recording;
static unsigned long count, fail_at;
static int injected;

/* The pointers allocated while recording and not freed yet: open
 * addressing over a power-of-two table, TOMB marks a removed entry. */
#define TOMB ((void *)1)
static void **live;
static size_t live_cap, live_n, live_used;

static size_t slot_of(const void *p)
{
    uintptr_t h = (uintptr_t)p;
    h ^= h >> 17;
    h *= (uintptr_t)0x9e3779b97f4a7c15u;
    return (size_t)(h >> 7) & (live_cap - 1);
}

static void live_add(void *p);

static void live_grow(void)
{
    void **old = live;
    size_t old_cap = live_cap;

    live_cap = live_cap ? live_cap * 2 : 1024;
    live = __real_calloc(live_cap, sizeof(void *));
    if (!live) {
        fprintf(stderr, "fail_alloc: out of memory for the bookkeeping\n");
        abort();
    }
    live_n = live_used = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i] && old[i] != TOMB)
            live_add(old[i]);
    __real_free(old);
}

static void live_add(void *p)
{
    size_t i;
    if ((live_used + 1) * 2 > live_cap)
        live_grow();
    for (i = slot_of(p); live[i] && live[i] != TOMB; i = (i + 1) & (live_cap - 1))
        ;
    if (!live[i])
        live_used++;
    live[i] = p;
    live_n++;
}

static void live_remove(void *p)
{
    if (!live_cap || !p)
        return;
    for (size_t i = slot_of(p); live[i]; i = (i + 1) & (live_cap - 1))
        if (live[i] == p) {
            live[i] = TOMB;
            live_n--;
            return;
        }
}

static void live_clear(void)
{
    if (live)
        memset(live, 0, live_cap * sizeof(void *));
    live_n = live_used = 0;
}

/* Whether this allocation is the one to fail. */
static int must_fail(void)
{
    if (!recording)
        return 0;
    if (++count == fail_at) {
        injected = 1;
        return 1;
    }
    return 0;
}

static void *tracked(void *p)
{
    if (p && recording)
        live_add(p);
    return p;
}

void *__wrap_malloc(size_t n)
{
    return must_fail() ? NULL : tracked(__real_malloc(n));
}

void *__wrap_calloc(size_t n, size_t size)
{
    return must_fail() ? NULL : tracked(__real_calloc(n, size));
}

void *__wrap_realloc(void *p, size_t n)
{
    void *q;
    if (must_fail())
        return NULL; /* p stays valid, and the caller's */
    q = __real_realloc(p, n);
    if (q) {
        live_remove(p);
        tracked(q);
    }
    return q;
}

void __wrap_free(void *p)
{
    live_remove(p);
    __real_free(p);
}

char *__wrap_strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *d = __wrap_malloc(len + 1);
    if (d) {
        memcpy(d, s, len);
        d[len] = '\0';
    }
    return d;
}

char *__wrap_strdup(const char *s)
{
    return __wrap_strndup(s, strlen(s));
}

/* protobuf-c and jansson allocate inside their shared libraries, where
 * --wrap does not reach: they are handed the same functions. */
static void *pb_alloc(void *ctx, size_t n)
{
    (void)ctx;
    return __wrap_malloc(n);
}

static void pb_free(void *ctx, void *p)
{
    (void)ctx;
    __wrap_free(p);
}

static ProtobufCAllocator pb_allocator = {pb_alloc, pb_free, NULL};

ProtobufCMessage *__wrap_protobuf_c_message_unpack(const ProtobufCMessageDescriptor *desc,
                                                   ProtobufCAllocator *allocator, size_t len,
                                                   const uint8_t *data)
{
    return __real_protobuf_c_message_unpack(desc, allocator ? allocator : &pb_allocator, len, data);
}

void __wrap_protobuf_c_message_free_unpacked(ProtobufCMessage *message,
                                             ProtobufCAllocator *allocator)
{
    __real_protobuf_c_message_free_unpacked(message, allocator ? allocator : &pb_allocator);
}

int fa_failalloc_same(fa_failalloc_ref *ref, int rc, fa_error *err)
{
    if (!ref->set) {
        ref->set = 1;
        ref->rc = rc;
        snprintf(ref->msg, sizeof(ref->msg), "%s", err->msg);
    }
    if (rc == ref->rc && err->msg[0])
        return 0;
    if (rc == 0)
        return fa_errorf(err, FA_ERR_INVAL, "accepted what the reference run refused (%s)",
                         ref->msg);
    return rc;
}

static int run(fa_failalloc_fn fn, void *arg, unsigned long fail, fa_error *err)
{
    int rc;
    fa_error_clear(err);
    live_clear();
    count = 0;
    fail_at = fail;
    injected = 0;
    recording = 1;
    rc = fn(arg, err);
    recording = 0;
    return rc;
}

unsigned long fa_failalloc_check(const char *what, fa_failalloc_fn fn, void *arg, int also_ok)
{
    unsigned long total, k;
    fa_error err;
    int rc;

    json_set_alloc_funcs(__wrap_malloc, __wrap_free);
    rc = run(fn, arg, 0, &err);
    if (rc != 0)
        fail_msg("%s: fails with no allocation failing: %s", what, fa_error_msg(&err, rc));
    if (live_n != 0)
        fail_msg("%s: %zu allocations not freed", what, live_n);
    total = count;
    if (total == 0)
        fail_msg("%s: allocates nothing: no failure to inject", what);
    for (k = 1; k <= total; k++) {
        rc = run(fn, arg, k, &err);
        if (!injected)
            fail_msg("%s: the run with allocation %lu failing made fewer allocations", what, k);
        if (live_n != 0)
            fail_msg("%s: with allocation %lu of %lu failing, %zu allocations leaked", what, k,
                     total, live_n);
        if (rc != 0 && rc != FA_ERR_NOMEM && rc != also_ok)
            fail_msg("%s: with allocation %lu of %lu failing: %s (%s), not out of memory", what, k,
                     total, fa_strerror(rc), err.msg);
        if (rc != 0 && !err.msg[0])
            fail_msg("%s: with allocation %lu of %lu failing: %s without a message", what, k, total,
                     fa_strerror(rc));
    }
    json_set_alloc_funcs(malloc, free);
    return total;
}
