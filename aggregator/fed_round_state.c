/* fed_round_state.c - the durable round state (round.state) and the
 * secure-aggregation sum file next to it. */
#include "aggregator/federation_internal.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fa_crc32c.h"
#include "common/fa_endian.h"
#include "common/fa_file.h"
#include "common/fa_log.h"
#include "common/fa_sha256.h"
#include "common/fa_time.h"

/* ------------------------------------------------------------------------ */
/* Durable round state                                                       */
/* ------------------------------------------------------------------------ */

/* The round state is packed straight into its file: it holds the
 * secure-aggregation sum (4 bytes per parameter), and a packed copy of it in
 * memory would cost a malloc, page faults and a copy at every phase close
 * (and that much more peak memory). */
struct state_sink {
    ProtobufCBuffer base;
    fa_atomic_file *f;
    fa_error *err;
    int rc;
};

static void state_sink_append(ProtobufCBuffer *b, size_t len, const uint8_t *data)
{
    struct state_sink *s = (struct state_sink *)b;
    if (s->rc == 0 && len > 0)
        s->rc = fa_atomic_file_write(s->f, data, len, s->err);
}

/* The secure-aggregation sum lives in its own file, written only when it
 * changed (its generation), not at every phase close: after the masked
 * phase it stays the same (and unmasking is redone from the masked sum on
 * restart, see fa_secagg_server_save_meta), so a round writes its 4 bytes
 * per parameter once.  round.sum.<round>.<attempt>.<generation>:
 * "FASUM" 0 0 2, round u64, attempt u32, generation u64, words u64 (all
 * little-endian), the words (u32 little-endian), the CRC-32C of all before
 * it (u32 little-endian; common/fa_crc32c.h).  The file is this
 * aggregator's own state, next to round.state: the check is against damage
 * (a torn or flipped file), for which a CRC is enough and six times cheaper
 * than a SHA-256 (1 s less at 10^9 parameters while the masked phase
 * closes).  Version 1 ("FASUM" 0 0 1, a SHA-256 in place of the CRC), as
 * aggregators before wrote it, is still read.  A new generation goes to a
 * new file before round.state names it; the others are removed after, but
 * for one, renamed round.sum-spare: the next sum is written over it
 * (fa_atomic_file_open_spare), into pages still in the page cache, at
 * about a third of a new file's cost where we measured (at 8 x 10^7: 40 MB
 * while the masked phase closes); a spare that cannot be used is left, with
 * a warning, and a new file written.  The spare keeps 4 bytes per parameter
 * of disk between rounds that the sum file used to free; it is never read. */
static const uint8_t sum_magic[8] = {'F', 'A', 'S', 'U', 'M', 0, 0, 2};
#define SUM_MAGIC_V1 1 /* the last magic byte of version 1 */
#define SUM_HEADER 36

static void sum_path(const fa_fed *f, uint64_t round, uint32_t attempt, uint64_t gen, char *out,
                     size_t n)
{
    snprintf(out, n, "%s/round.sum.%" PRIu64 ".%u.%" PRIu64, f->storage_dir, round, attempt, gen);
}

void fa_fed_spare_sum_path(const fa_fed *f, char *out, size_t n)
{
    snprintf(out, n, "%s/round.sum-spare", f->storage_dir);
}

static void sum_header(uint8_t h[SUM_HEADER], uint64_t round, uint32_t attempt, uint64_t gen,
                       uint64_t n)
{
    memcpy(h, sum_magic, 8);
    fa_le_put_u64(h + 8, round);
    fa_le_put_u32(h + 16, attempt);
    fa_le_put_u64(h + 20, gen);
    fa_le_put_u64(h + 28, n);
}

/* The sum of generation gen of the round in flight is on disk. */
void fa_fed_sum_on_disk(fa_fed *f, uint64_t gen)
{
    f->have_sum = 1;
    f->sum_round = f->round;
    f->sum_attempt = f->attempt;
    f->sum_gen = gen;
}

static int write_sum(fa_fed *f, uint64_t gen, fa_error *err)
{
    const uint32_t *w = fa_secagg_server_sum_words(f->sa);
    const uint64_t n = f->sa_cfg.vector_len;
    uint8_t h[SUM_HEADER], tail[4], buf[1 << 16];
    fa_atomic_file *af = NULL;
    uint32_t crc;
    char path[4200], spare[4200];
    int rc;

    sum_path(f, f->round, f->attempt, gen, path, sizeof(path));
    fa_fed_spare_sum_path(f, spare, sizeof(spare));
    sum_header(h, f->round, f->attempt, gen, n);
    rc = fa_atomic_file_open_spare(&af, path, spare, 0600, err);
    if (rc == 0)
        rc = fa_atomic_file_write(af, h, sizeof(h), err);
    crc = fa_crc32c(0, h, sizeof(h));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    (void)buf; /* the words are little-endian already */
    for (uint64_t i = 0; i < n && rc == 0;) {
        size_t m = n - i < ((size_t)1 << 18) ? (size_t)(n - i) : (size_t)1 << 18;
        crc = fa_crc32c(crc, w + i, m * 4);
        rc = fa_atomic_file_write(af, w + i, m * 4, err);
        i += m;
    }
#else
    for (uint64_t i = 0; i < n && rc == 0;) {
        size_t m = n - i < sizeof(buf) / 4 ? (size_t)(n - i) : sizeof(buf) / 4;
        for (size_t j = 0; j < m; j++)
            fa_le_put_u32(buf + 4 * j, w[i + j]);
        crc = fa_crc32c(crc, buf, m * 4);
        rc = fa_atomic_file_write(af, buf, m * 4, err);
        i += m;
    }
#endif
    fa_le_put_u32(tail, crc);
    if (rc == 0)
        rc = fa_atomic_file_write(af, tail, sizeof(tail), err);
    if (rc == 0) {
        rc = fa_atomic_file_commit_nosync(af, err); /* as round.state (see fa_fed_save_state) */
        af = NULL;
    }
    fa_atomic_file_abort(af);
    if (rc == 0)
        fa_fed_sum_on_disk(f, gen);
    return rc;
}

/* The sum file of generation gen of the round in flight, read straight
 * into the secure-aggregation server's running sum (fa_secagg_server_
 * restore_meta_fill: no second copy of 4 bytes per coordinate); a file that
 * is not exactly it is refused, and then the restore fails. */
struct sum_reader {
    fa_fed *f;
    uint64_t gen;
};

static int read_sum(void *ctx, uint32_t *w, uint64_t n, fa_error *err)
{
    const struct sum_reader *sr = ctx;
    fa_fed *f = sr->f;
    uint8_t h[SUM_HEADER] = {0}, want[SUM_HEADER], md[32], got[32];
    fa_sha256_ctx sha = {0};
    uint32_t crc = 0;
    char path[4200];
    FILE *in;
    int rc = 0, c, v1 = 0;
    size_t tail;

    sum_path(f, f->round, f->attempt, sr->gen, path, sizeof(path));
    if (!(in = fopen(path, "rb")))
        return fa_errorf(err, errno == ENOENT ? FA_ERR_NOTFOUND : FA_ERR_IO,
                         "the round state's sum: %s: %s", path, strerror(errno));
    sum_header(want, f->round, f->attempt, sr->gen, n);
    if (fread(h, 1, sizeof(h), in) == sizeof(h) && h[7] == SUM_MAGIC_V1) {
        v1 = 1; /* an older aggregator's file: SHA-256 */
        want[7] = SUM_MAGIC_V1;
    }
    if (memcmp(h, want, SUM_HEADER) != 0)
        rc = fa_errorf(err, FA_ERR_CORRUPT,
                       "%s: not the sum of round %" PRIu64 " attempt %u generation %" PRIu64
                       " with %" PRIu64 " words",
                       path, f->round, f->attempt, sr->gen, n);
    if (rc == 0 && v1 && (fa_sha256_init(&sha) != 0 || fa_sha256_update(&sha, h, sizeof(h)) != 0))
        rc = fa_errorf(err, FA_ERR_CRYPTO, "%s: SHA-256 failed", path);
    if (rc == 0 && !v1)
        crc = fa_crc32c(0, h, sizeof(h));
    for (uint64_t i = 0; rc == 0 && i < n;) {
        size_t m = n - i < ((size_t)1 << 18) ? (size_t)(n - i) : (size_t)1 << 18;
        if (fread(w + i, 4, m, in) != m)
            rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: shorter than its %" PRIu64 " words", path, n);
        else if (v1 && fa_sha256_update(&sha, w + i, m * 4) != 0)
            rc = fa_errorf(err, FA_ERR_CRYPTO, "%s: SHA-256 failed", path);
        else if (!v1)
            crc = fa_crc32c(crc, w + i, m * 4);
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
        for (size_t j = 0; rc == 0 && j < m; j++)
            w[i + j] = fa_le_get_u32((const uint8_t *)&w[i + j]);
#endif
        i += m;
    }
    tail = v1 ? 32 : 4;
    if (rc == 0 && (fread(got, 1, tail, in) != tail || (c = fgetc(in)) != EOF))
        rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: not %" PRIu64 " words and a %s", path, n,
                       v1 ? "SHA-256" : "CRC-32C");
    if (rc == 0 && v1 && fa_sha256_final(&sha, md) != 0)
        rc = fa_errorf(err, FA_ERR_CRYPTO, "%s: SHA-256 failed", path);
    if (rc == 0 && v1 && memcmp(md, got, 32) != 0)
        rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: fails its SHA-256", path);
    if (rc == 0 && !v1 && fa_le_get_u32(got) != crc)
        rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: fails its CRC-32C", path);
    (void)c;
    fclose(in);
    fa_sha256_free(&sha);
    return rc;
}

/* The secure-aggregation server of round.state, with its sum read from the
 * file the state names straight into the server (or inside the state, as
 * older versions saved it). */
int fa_fed_restore_secagg(fa_fed *f, const Fedagg__RoundState *st, fa_error *err)
{
    struct sum_reader sr = {f, st->sum_generation};
    int rc;

    f->have_sum = 0;
    if (st->sum_generation != 0)
        rc = fa_secagg_server_restore_meta_fill(&f->sa, st->secagg_server.data,
                                                st->secagg_server.len, read_sum, &sr, &f->sa_cfg,
                                                f->members, f->n_regions, err);
    else
        rc = fa_secagg_server_restore_meta(&f->sa, st->secagg_server.data, st->secagg_server.len,
                                           NULL, 0, &f->sa_cfg, f->members, f->n_regions, err);
    if (rc == 0 && st->sum_generation != 0)
        fa_fed_sum_on_disk(f, st->sum_generation);
    if (rc == 0)
        rc = fa_fed_use_journal_files(f, err);
    return rc;
}

/* Removes every sum file but the one round.state names (keep = 0: all),
 * and leftovers of interrupted writes; one of the sums removed becomes the
 * spare the next one is written over. */
static void remove_stale_sums(fa_fed *f, uint64_t keep)
{
    char name[200], path[4200], spare[4200];
    struct dirent *e;
    DIR *d = opendir(f->storage_dir);
    int spared = 0;

    if (!d)
        return;
    fa_fed_spare_sum_path(f, spare, sizeof(spare));
    snprintf(name, sizeof(name), "round.sum.%" PRIu64 ".%u.%" PRIu64, f->round, f->attempt, keep);
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "round.sum.", 10) != 0 || (keep && !strcmp(e->d_name, name)))
            continue;
        snprintf(path, sizeof(path), "%s/%s", f->storage_dir, e->d_name);
        if (!spared && !strstr(e->d_name, ".tmp.") && rename(path, spare) == 0) {
            spared = 1;
            continue;
        }
        if (unlink(path) != 0)
            fa_log(FA_LOG_WARN, "cannot remove an old round sum", "file=%s", path);
    }
    closedir(d);
    if (!keep)
        f->have_sum = 0;
}

/* Writes round.state: called at every phase change, before any region can
 * learn of it.  Failing to save is fatal for the attempt (the caller aborts
 * it), never silently ignored. */
int fa_fed_save_state(fa_fed *f, fa_error *err)
{
    Fedagg__RoundState st = FEDAGG__ROUND_STATE__INIT;
    struct state_sink sink = {{state_sink_append}, NULL, err, 0};
    uint8_t *blob = NULL;
    size_t blob_len = 0;
    uint64_t t0 = fa_time_mono_ns();
    size_t ne = fa_eval_reports_count(f->feval);
    Fedagg__SignedEval *evs = calloc(ne ? ne : 1, sizeof(*evs));
    Fedagg__SignedEval **evp = calloc(ne ? ne : 1, sizeof(*evp));
    Fedagg__EvalSummary central;
    Fedagg__NamedValue nv[FA_EVAL_MAX_METRICS], *nvp[FA_EVAL_MAX_METRICS];
    int rc;

    if (!evs || !evp) {
        free(evs);
        free(evp);
        return fa_errorf(err, FA_ERR_NOMEM, "round state: out of memory");
    }
    for (size_t i = 0; i < ne; i++) {
        fa_eval_reports_at(f->feval, i, &evs[i]);
        evp[i] = &evs[i];
    }
    st.n_evaluations = ne;
    st.evaluations = evp;
    size_t np = fa_privacy_ledger_count(f->privacy);
    Fedagg__SignedPrivacy *pvs = calloc(np ? np : 1, sizeof(*pvs));
    Fedagg__SignedPrivacy **pvp = calloc(np ? np : 1, sizeof(*pvp));
    if (!pvs || !pvp) {
        free(pvs);
        free(pvp);
        free(evs);
        free(evp);
        return fa_errorf(err, FA_ERR_NOMEM, "round state: out of memory");
    }
    for (size_t i = 0; i < np; i++) {
        fa_privacy_ledger_at(f->privacy, i, &pvs[i], NULL);
        pvp[i] = &pvs[i];
    }
    st.n_privacy = np;
    st.privacy = pvp;
    Fedagg__SignedDataStatement *dss = NULL, **dsp = NULL;
    st.n_data_statements =
        fa_fed_gov_data_statements(f, f->cur.version, f->cur.model_sha256, NULL, 0, &dss, &dsp);
    st.data_statements = dsp;
    st.ranges_sha256.data = f->round_ranges_sha;
    st.ranges_sha256.len = 32;
    if (f->central.valid && f->central.version == f->cur.version) {
        fa_eval_summary_to_pb(&f->central, &central, nv, nvp);
        st.central_eval = &central;
    }
    st.round = f->round;
    st.attempt = f->attempt;
    st.phase = (Fedagg__Phase)f->phase;
    st.attempt_start_unix_ms = f->attempt_start_unix_ms;
    st.base_version = f->cur.version;
    st.rounds_completed = f->rounds_completed;
    st.rounds_aborted = f->rounds_aborted;
    if (f->phase != FEDAGG__PHASE__PHASE_ADVERTISE && f->sa) {
        uint64_t gen = 0;
        rc = fa_secagg_server_save_meta(f->sa, &blob, &blob_len, &gen, err);
        if (rc != 0) {
            free(evs);
            free(evp);
            free(pvs);
            free(pvp);
            free(dss);
            free(dsp);
            return rc;
        }
        if (gen != 0 && !(f->have_sum && f->sum_round == f->round && f->sum_attempt == f->attempt &&
                          f->sum_gen == gen)) {
            if (gen == fa_secagg_server_sum_generation(f->sa)) {
                rc = write_sum(f, gen, err);
            } else {
                /* The state needs a masked sum that is not on disk (restored
                 * from an older round.state): save the sum inside it. */
                free(blob);
                blob = NULL;
                gen = 0;
                rc = fa_secagg_server_save(f->sa, &blob, &blob_len, err);
            }
            if (rc != 0) {
                free(blob);
                free(evs);
                free(evp);
                free(pvs);
                free(pvp);
                free(dss);
                free(dsp);
                return rc;
            }
        }
        st.secagg_server.data = blob;
        st.secagg_server.len = blob_len;
        st.sum_generation = gen;
    }
    rc = fa_atomic_file_open(&sink.f, f->state_path, 0600, err);
    if (rc == 0) {
        fedagg__round_state__pack_to_buffer(&st, &sink.base);
        rc = sink.rc;
    }
    /* No fsync: a SIGKILL never loses it (page cache), and a machine crash
     * that does only rolls the round back to an earlier phase, which the
     * protocol tolerates (regions resend identical messages; a client refuses
     * a different survivor set) or, when it predates the last commit, is
     * dropped on restart (restore_round).  The model store and the audit log,
     * which must not be lost, are fsync'ed. */
    if (rc == 0)
        rc = fa_atomic_file_commit_nosync(sink.f, err);
    else
        fa_atomic_file_abort(sink.f);
    free(blob);
    free(evs);
    free(evp);
    free(pvs);
    free(pvp);
    free(dss);
    free(dsp);
    if (rc == 0) {
        remove_stale_sums(f, st.sum_generation);
        fa_log(FA_LOG_DEBUG, "round state saved",
               "round=%" PRIu64 " attempt=%u phase=%d bytes=%zu sum_generation=%" PRIu64
               " seconds=%.3f",
               f->round, f->attempt, (int)f->phase, blob_len, st.sum_generation,
               (double)(fa_time_mono_ns() - t0) / 1e9);
    }
    return rc;
}
