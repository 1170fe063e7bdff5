/* The masked-upload journals of the aggregator (upload_journal.h): bytes
 * written in any pieces read back exactly from memory slots and from file
 * slots (across the write buffer's boundary), nothing left in the directory,
 * slots cleared and reused, writes that do not continue a slot refused, and
 * the memory budget deciding which slots stay in memory. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aggregator/upload_journal.h"

static size_t dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    size_t n = 0;
    assert_non_null(d);
    while ((e = readdir(d)) != NULL)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static void fill_pattern(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (uint8_t)(seed >> 24);
    }
}

/* Writes n bytes into slot in pieces of growing odd sizes, then reads them
 * back in other pieces. */
static void round_trip(fa_secagg_journal *j, uint32_t slot, const uint8_t *data, size_t n)
{
    uint8_t *back = malloc(n + 1);
    size_t off = 0, piece = 1;
    assert_non_null(back);
    while (off < n) {
        size_t k = piece < n - off ? piece : n - off;
        assert_int_equal(j->write(j->ctx, slot, off, data + off, k, NULL), 0);
        off += k;
        piece = piece * 3 + 1;
    }
    for (off = 0, piece = 7; off < n; off += piece, piece = piece * 2 + 5) {
        size_t k = piece < n - off ? piece : n - off;
        assert_int_equal(j->read(j->ctx, slot, off, back + off, k, NULL), 0);
    }
    assert_memory_equal(back, data, n);
    free(back);
}

static void test_file_and_memory_slots(void **state)
{
    char dir[] = "/tmp/fa_test_journal.XXXXXX";
    const size_t n = 3 * FA_UPLOAD_JOURNAL_BUF + 12345;
    uint8_t *data = malloc(n), byte;
    fa_upload_journal *uj = NULL;
    fa_secagg_journal j;
    fa_error err;
    (void)state;

    assert_non_null(data);
    assert_non_null(mkdtemp(dir));
    fill_pattern(data, n, 7);
    /* room for one whole journal in memory: slot 0; slots 1 and 2 in files */
    assert_int_equal(fa_upload_journal_new(&uj, dir, 3, n, n + n / 2, NULL), 0);
    assert_int_equal(fa_upload_journal_memory_slots(uj), 1);
    assert_int_equal(fa_upload_journal_memory_need(3, n, n + n / 2), n + 2 * FA_UPLOAD_JOURNAL_BUF);
    fa_upload_journal_iface(uj, &j);
    round_trip(&j, 0, data, n);
    round_trip(&j, 1, data, n);
    round_trip(&j, 2, data + 1, n - 1);
    assert_int_equal(fa_upload_journal_bytes(uj), n + n - 1); /* read back: all in the files */
    /* the files have no names */
    assert_int_equal(dir_entries(dir), 0);
    /* a write that does not continue the slot, a read past what it holds */
    fa_error_clear(&err);
    assert_int_equal(j.write(j.ctx, 1, 5, data, 1, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "slot 1"));
    assert_int_equal(j.read(j.ctx, 1, n - 1, &byte, 2, NULL), FA_ERR_INVAL);
    assert_int_equal(j.write(j.ctx, 3, 0, data, 1, NULL), FA_ERR_INVAL);
    /* more than a memory slot holds */
    assert_int_equal(j.write(j.ctx, 0, n, data, 1, NULL), FA_ERR_INVAL);
    /* cleared, a slot starts again at 0 (its old bytes gone) */
    j.clear(j.ctx, 1);
    assert_int_equal(fa_upload_journal_bytes(uj), n - 1);
    assert_int_equal(j.read(j.ctx, 1, 0, &byte, 1, NULL), FA_ERR_INVAL);
    round_trip(&j, 1, data + 100, 5000);
    /* a new upload at offset 0 replaces one never cleared */
    round_trip(&j, 2, data + 2, 777);
    fa_upload_journal_del(uj);
    fa_upload_journal_del(NULL);
    assert_int_equal(dir_entries(dir), 0);
    rmdir(dir);
    free(data);
}

static void test_budget(void **state)
{
    fa_upload_journal *uj = NULL;
    (void)state;

    /* nothing fits: every slot in a file */
    assert_int_equal(fa_upload_journal_new(&uj, "/tmp", 4, 1000, 999, NULL), 0);
    assert_int_equal(fa_upload_journal_memory_slots(uj), 0);
    fa_upload_journal_del(uj);
    /* all fit */
    assert_int_equal(fa_upload_journal_new(&uj, "/tmp", 4, 1000, 1u << 20, NULL), 0);
    assert_int_equal(fa_upload_journal_memory_slots(uj), 4);
    fa_upload_journal_del(uj);
    assert_int_equal(fa_upload_journal_new(&uj, "/tmp", 0, 1000, 0, NULL), FA_ERR_INVAL);
    assert_null(uj);
    assert_int_equal(fa_upload_journal_new(&uj, "/tmp", 1025, 1000, 0, NULL), FA_ERR_INVAL);
}

/* A directory where no file can be made: the first write says where. */
static void test_unwritable_dir(void **state)
{
    fa_upload_journal *uj = NULL;
    fa_secagg_journal j;
    fa_error err;
    uint8_t b = 1;
    (void)state;

    assert_int_equal(fa_upload_journal_new(&uj, "/nonexistent/journals", 1, 10, 0, NULL), 0);
    fa_upload_journal_iface(uj, &j);
    fa_error_clear(&err);
    assert_int_equal(j.write(j.ctx, 0, 0, &b, 1, &err), FA_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/journals"));
    fa_upload_journal_del(uj);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_and_memory_slots),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_unwritable_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
