/* bench_audit.c - `fedagg-bench audit`: the verifiable audit log
 * (docs/architecture.md).  Each line measures our code and an anchor on the same bytes
 * in the same run:
 *
 *   audit_append fsync    appends/s, each committed (record fsync'ed, checkpoint
 *                         signed and fsync'ed) vs write+fdatasync of the same
 *                         record bytes
 *   audit_append nofsync  appends/s without fsync vs write of the record plus
 *                         one Ed25519 signature (the irreducible work of an append)
 *   audit_build           a log of --records (default 10^6) records appended in
 *                         batches of 1000 (one checkpoint each), no fsync, vs
 *                         SHA-256 + write of the same bytes
 *   audit_verify          fedagg audit verify's throughput: on the big log (no
 *                         region keys) vs read + SHA-256 of the file; on the
 *                         per-append log with region keys vs the Ed25519
 *                         verifications alone
 *   audit_open            opening the big log (every record re-hashed, tree and
 *                         latest checkpoint checked) vs read + SHA-256
 *   audit_proof           inclusion proof bundles and consistency proofs of the
 *                         big log: size, time to make and to verify, vs one
 *                         Ed25519 verification / the bare node hashes
 *
 * Records look like real ones: three regions with their upload commitments
 * (~700 bytes).  Options: --records N, --quick (N = 20000, smaller phases),
 * --dir DIR (default $TMPDIR or /tmp), --keep. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <sodium.h>

#include "audit/audit_log.h"
#include "crypto/secagg.h"
#include "benchmarks/measure.h"
#include "common/fa_log.h"
#include "common/fa_time.h"
#include "crypto/checkpoint.h"
#include "crypto/merkle.h"

const char fa_bench_audit_help[] =
    "audit log: appends/s (fsync and not), verify records/s, 10^6-record build, proof size/time";

#define NREG 3
static const char *const regions[NREG] = {"ap-south-1", "eu-west-1", "us-east-1"};
static const char origin[] = "fedagg.bench/audit";

struct gen {
    uint64_t round, version;
    uint8_t model[32];
    uint8_t rseed[NREG][32];
    fa_audit_region_key keys[NREG];
};

/* Encodes the next round's record into *out (malloc'ed).  sign: real
 * commitment signatures (else fixed bytes: the big log is verified without
 * region keys, and 3 x 10^6 signatures would dominate the build). */
static size_t gen_record(struct gen *g, int sign, uint8_t **out)
{
    Fedagg__AuditRecord r = FEDAGG__AUDIT_RECORD__INIT;
    Fedagg__RegionCommitment c[NREG], *cp[NREG];
    Fedagg__OptimizerSettings opt = FEDAGG__OPTIMIZER_SETTINGS__INIT;
    Fedagg__QuantizationSettings q = FEDAGG__QUANTIZATION_SETTINGS__INIT;
    char *parts[NREG];
    uint8_t cfg[32], next[32], up[NREG][32], sig[NREG][64];
    size_t len;

    g->round++;
    r.version = 1;
    r.federation_id = "bench-federation";
    r.round = g->round;
    r.start_unix_ms = 1767225600000ull + g->round * 60000;
    r.commit_unix_ms = r.start_unix_ms + 41234;
    memset(cfg, 0x5c, 32);
    r.config_digest.data = cfg;
    r.config_digest.len = 32;
    r.prev_model_sha256.data = g->model;
    r.prev_model_sha256.len = 32;
    crypto_hash_sha256(next, g->model, 32);
    r.new_model_sha256.data = next;
    r.new_model_sha256.len = 32;
    r.prev_version = g->version;
    r.new_version = g->version + 1;
    for (int i = 0; i < NREG; i++) {
        Fedagg__RegionCommitment ci = FEDAGG__REGION_COMMITMENT__INIT;
        c[i] = ci;
        c[i].region = (char *)regions[i];
        memcpy(up[i], next, 32);
        up[i][0] ^= (uint8_t)(i + 1);
        if (sign)
            fa_secagg_commitment_sign(g->rseed[i], r.federation_id, r.round, 0, regions[i],
                                      FA_SECAGG_UPLOAD_BLAKE3, up[i], sig[i]);
        else
            memset(sig[i], 0xa5, 64);
        c[i].upload_digest.data = up[i];
        c[i].upload_digest.len = 32;
        c[i].upload_digest_alg = FEDAGG__UPLOAD_DIGEST__UPLOAD_DIGEST_BLAKE3;
        c[i].signature.data = sig[i];
        c[i].signature.len = 64;
        c[i].upload_bytes = 470584;
        cp[i] = &c[i];
        parts[i] = (char *)regions[i];
    }
    r.n_participants = r.n_commitments = NREG;
    r.participants = parts;
    r.commitments = cp;
    opt.kind = "fedadam";
    opt.learning_rate = 0.01;
    opt.beta1 = 0.9;
    opt.beta2 = 0.99;
    opt.tau = 0.001;
    r.optimizer = &opt;
    q.bits = 16;
    q.ring_bits = 18;
    q.clip_mode = "l2";
    q.clip_l2_norm = 10.0;
    q.clip_value = 1.0;
    q.max_examples = 60000;
    r.quantization = &q;
    r.threshold = 2;
    r.num_params = 235146;
    r.software_version = FA_VERSION;
    len = fedagg__audit_record__get_packed_size(&r);
    *out = malloc(len);
    if (!*out)
        abort();
    fedagg__audit_record__pack(&r, *out);
    g->version++;
    memcpy(g->model, next, 32);
    return len;
}

static void gen_init(struct gen *g)
{
    memset(g, 0, sizeof(*g));
    for (int i = 0; i < NREG; i++) {
        uint8_t sk[64];
        memset(g->rseed[i], 0x31 + i, 32);
        crypto_sign_seed_keypair(g->keys[i].pk, sk, g->rseed[i]);
        g->keys[i].region = regions[i];
    }
}

static void die(const char *what, const fa_error *err)
{
    fprintf(stderr, "fedagg-bench audit: %s: %s\n", what, err ? err->msg : "");
    exit(1);
}

static void rm_log(const char *path)
{
    char p[600];
    unlink(path);
    snprintf(p, sizeof(p), "%s.checkpoints", path);
    unlink(p);
    snprintf(p, sizeof(p), "%s.tree", path);
    unlink(p);
}

static uint64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* read + SHA-256 of a file in 1 MiB chunks: seconds. */
static double sha256_file(const char *path)
{
    static uint8_t buf[1 << 20];
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    uint8_t md[32];
    int fd = open(path, O_RDONLY);
    double t0 = fa_bench_now_s();
    ssize_t n;
    if (fd < 0 || !ctx)
        abort();
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    while ((n = read(fd, buf, sizeof(buf))) > 0)
        EVP_DigestUpdate(ctx, buf, (size_t)n);
    EVP_DigestFinal_ex(ctx, md, NULL);
    close(fd);
    EVP_MD_CTX_free(ctx);
    return fa_bench_now_s() - t0;
}

static void frame(uint8_t *out, const uint8_t *rec, size_t len)
{
    out[0] = (uint8_t)(len >> 24);
    out[1] = (uint8_t)(len >> 16);
    out[2] = (uint8_t)(len >> 8);
    out[3] = (uint8_t)len;
    memcpy(out + 4, rec, len);
    memset(out + 4 + len, 0, 4);
}

/* ---- appends, one at a time ---- */
static void bench_append(const char *dir, fa_note_signer *signer, struct gen *g, uint64_t n,
                         int sync, const char *keep_path)
{
    char path[512], ref[512];
    uint8_t **recs = malloc(n * sizeof(*recs)), buf[4096], apk[32], ask[64];
    size_t *lens = malloc(n * sizeof(*lens));
    fa_audit_log *log;
    fa_error err;
    double t0, ours, anchor;
    int fd;

    snprintf(path, sizeof(path), "%s/%s", dir, keep_path);
    snprintf(ref, sizeof(ref), "%s/anchor.bin", dir);
    rm_log(path);
    for (uint64_t i = 0; i < n; i++)
        lens[i] = gen_record(g, !sync, &recs[i]); /* regions' work: outside the timing */
    if (fa_audit_log_open(&log, path, signer, origin, sync ? 0 : FA_AUDIT_LOG_NOSYNC, NULL, &err))
        die("open", &err);
    t0 = fa_bench_now_s();
    for (uint64_t i = 0; i < n; i++)
        if (fa_audit_log_append_encoded(log, (const uint8_t *const *)&recs[i], &lens[i], 1, NULL,
                                        &err) != 0)
            die("append", &err);
    ours = fa_bench_now_s() - t0;
    fa_audit_log_close(log);

    crypto_sign_keypair(apk, ask);
    fd = open(ref, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    t0 = fa_bench_now_s();
    for (uint64_t i = 0; i < n; i++) {
        frame(buf, recs[i], lens[i]);
        if (write(fd, buf, lens[i] + 8) != (ssize_t)(lens[i] + 8))
            abort();
        if (sync) {
            fdatasync(fd);
        } else {
            /* the signature an append must make, over a checkpoint-sized body */
            uint8_t sig[64];
            crypto_sign_detached(sig, NULL, buf, 100, ask);
        }
    }
    anchor = fa_bench_now_s() - t0;
    close(fd);
    unlink(ref);
    printf("{\"bench\":\"audit_append\",\"fsync\":%s,\"records\":%" PRIu64
           ",\"record_bytes\":%zu,\"appends_per_s\":%.1f,\"us_per_append\":%.1f,\"ref\":\"%s\","
           "\"ref_per_s\":%.1f,\"ratio\":%.3f}\n",
           sync ? "true" : "false", n, lens[0], (double)n / ours, ours / (double)n * 1e6,
           sync ? "write_fdatasync" : "write_ed25519_sign", (double)n / anchor, anchor / ours);
    fflush(stdout);
    for (uint64_t i = 0; i < n; i++)
        free(recs[i]);
    free(recs);
    free(lens);
}

/* ---- verify ---- */
static void bench_verify(const char *path, const fa_note_verifier *key, struct gen *g,
                         int with_keys, uint64_t ed25519_per_record, double ed_us)
{
    fa_audit_verify_opts o;
    fa_audit_verify_result res;
    fa_error err;
    double t0 = fa_bench_now_s(), ours, anchor;
    uint64_t bytes = file_size(path);

    memset(&o, 0, sizeof(o));
    o.key = key;
    if (with_keys) {
        o.region_keys = g->keys;
        o.nregion_keys = NREG;
    }
    if (fa_audit_verify(path, &o, &res, &err) != 0)
        die("verify", &err);
    ours = fa_bench_now_s() - t0;
    if (with_keys) {
        /* the signatures alone: one checkpoint and NREG commitments per record */
        anchor = (double)(res.checkpoints + res.region_signatures) * ed_us * 1e-6;
        printf("{\"bench\":\"audit_verify\",\"records\":%" PRIu64 ",\"checkpoints\":%" PRIu64
               ",\"region_keys\":true,\"region_signatures\":%" PRIu64
               ",\"records_per_s\":%.1f,\"seconds\":%.3f,\"ref\":\"ed25519_verify_x%" PRIu64
               "\",\"ref_records_per_s\":%.1f,\"ratio\":%.3f}\n",
               res.records, res.checkpoints, res.region_signatures, (double)res.records / ours,
               ours, ed25519_per_record, (double)res.records / anchor, anchor / ours);
    } else {
        anchor = sha256_file(path);
        printf(
            "{\"bench\":\"audit_verify\",\"records\":%" PRIu64 ",\"checkpoints\":%" PRIu64
            ",\"region_keys\":false,\"records_per_s\":%.1f,\"mbytes_per_s\":%.1f,"
            "\"seconds\":%.3f,\"ref\":\"read_sha256\",\"ref_mbytes_per_s\":%.1f,\"ratio\":%.3f}\n",
            res.records, res.checkpoints, (double)res.records / ours, (double)bytes / ours / 1e6,
            ours, (double)bytes / anchor / 1e6, anchor / ours);
    }
    fflush(stdout);
}

/* ---- the big log ---- */
static void bench_build(const char *path, fa_note_signer *signer, struct gen *g, uint64_t n)
{
    enum { BATCH = 1000 };
    uint8_t *recs[BATCH];
    size_t lens[BATCH];
    fa_audit_log *log;
    fa_error err;
    double ours = 0, anchor = 0, t0;
    uint64_t done = 0, tree_bytes;
    char ref[600];
    int fd;
    uint8_t *fbuf = malloc((size_t)BATCH * 1024);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();

    snprintf(ref, sizeof(ref), "%s.anchor", path);
    rm_log(path);
    if (fa_audit_log_open(&log, path, signer, origin, FA_AUDIT_LOG_NOSYNC, NULL, &err) != 0)
        die("open", &err);
    fd = open(ref, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    while (done < n) {
        size_t k = n - done < BATCH ? (size_t)(n - done) : BATCH, fl = 0;
        uint8_t md[32];
        for (size_t i = 0; i < k; i++)
            lens[i] = gen_record(g, 0, &recs[i]);
        t0 = fa_bench_now_s();
        if (fa_audit_log_append_encoded(log, (const uint8_t *const *)recs, lens, k, NULL, &err))
            die("append", &err);
        ours += fa_bench_now_s() - t0;
        /* anchor: the same frames hashed (one SHA-256 each, as leaves) and written */
        t0 = fa_bench_now_s();
        for (size_t i = 0; i < k; i++) {
            frame(fbuf + fl, recs[i], lens[i]);
            EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
            EVP_DigestUpdate(ctx, fbuf + fl, lens[i] + 8);
            EVP_DigestFinal_ex(ctx, md, NULL);
            fl += lens[i] + 8;
        }
        if (write(fd, fbuf, fl) != (ssize_t)fl)
            abort();
        anchor += fa_bench_now_s() - t0;
        for (size_t i = 0; i < k; i++)
            free(recs[i]);
        done += k;
    }
    fa_audit_log_close(log);
    close(fd);
    unlink(ref);
    EVP_MD_CTX_free(ctx);
    free(fbuf);
    snprintf(ref, sizeof(ref), "%s.tree", path);
    tree_bytes = file_size(ref);
    snprintf(ref, sizeof(ref), "%s.checkpoints", path);
    printf("{\"bench\":\"audit_build\",\"records\":%" PRIu64 ",\"batch\":%d,\"log_bytes\":%" PRIu64
           ",\"tree_bytes\":%" PRIu64 ",\"checkpoints_bytes\":%" PRIu64
           ",\"seconds\":%.3f,\"records_per_s\":%.1f,\"ref\":\"sha256_write\","
           "\"ref_records_per_s\":%.1f,\"ratio\":%.3f}\n",
           n, BATCH, file_size(path), tree_bytes, file_size(ref), ours, (double)n / ours,
           (double)n / anchor, anchor / ours);
    fflush(stdout);
}

static void bench_open(const char *path, const fa_note_verifier *key)
{
    fa_audit_log *log;
    fa_error err;
    double t0 = fa_bench_now_s(), ours, anchor;
    if (fa_audit_log_open_readonly(&log, path, key, NULL, &err) != 0)
        die("open", &err);
    ours = fa_bench_now_s() - t0;
    fa_audit_log_close(log);
    anchor = sha256_file(path);
    printf("{\"bench\":\"audit_open\",\"bytes\":%" PRIu64
           ",\"seconds\":%.3f,\"ref\":\"read_sha256\",\"ref_seconds\":%.3f,\"ratio\":%.3f}\n",
           file_size(path), ours, anchor, anchor / ours);
    fflush(stdout);
}

static void bench_proofs(const char *path, const fa_note_verifier *key, uint64_t probes,
                         double ed_us)
{
    fa_audit_log *log;
    fa_error err;
    uint64_t n, hashes = 0, bytes = 0, chashes = 0;
    double t_prove = 0, t_verify = 0, t_cprove = 0, t_cverify = 0, t0, node_us;
    uint8_t root[32], oldroot[32], proof[FA_MERKLE_MAX_PROOF * 32], h[32] = {0};

    if (fa_audit_log_open_readonly(&log, path, key, NULL, &err) != 0)
        die("open", &err);
    n = fa_audit_log_signed_size(log);
    fa_audit_log_root(log, n, root, &err);
    for (uint64_t k = 0; k < probes; k++) {
        uint64_t i = randombytes_uniform((uint32_t)(n < UINT32_MAX ? n : UINT32_MAX));
        char *bundle;
        size_t blen, plen = 0;
        fa_proof_bundle b;
        fa_checkpoint cp;

        t0 = fa_bench_now_s();
        if (fa_audit_log_prove(log, i, &bundle, &blen, &err) != 0)
            die("prove", &err);
        t_prove += fa_bench_now_s() - t0;
        t0 = fa_bench_now_s();
        if (fa_proof_bundle_parse(bundle, blen, &b, &err) != 0 ||
            fa_proof_bundle_verify(&b, key, &cp, &err) != 0)
            die("check proof", &err);
        t_verify += fa_bench_now_s() - t0;
        hashes += b.proof_len;
        bytes += blen;
        fa_proof_bundle_free(&b);
        free(bundle);

        /* consistency from a random earlier size */
        i = 1 + randombytes_uniform((uint32_t)(n - 1));
        t0 = fa_bench_now_s();
        if (fa_audit_log_root(log, i, oldroot, &err) != 0 ||
            fa_audit_log_consistency_proof(log, i, n, proof, &plen, &err) != 0)
            die("consistency", &err);
        t_cprove += fa_bench_now_s() - t0;
        t0 = fa_bench_now_s();
        if (fa_merkle_verify_consistency(i, n, oldroot, root, proof, plen) != 0)
            die("consistency verify", NULL);
        t_cverify += fa_bench_now_s() - t0;
        chashes += plen;
    }
    fa_audit_log_close(log);
    t0 = fa_bench_now_s();
    for (int i = 0; i < 100000; i++)
        fa_merkle_node_hash(h, root, h);
    node_us = (fa_bench_now_s() - t0) / 100000 * 1e6;
    printf("{\"bench\":\"audit_proof\",\"kind\":\"inclusion\",\"records\":%" PRIu64
           ",\"probes\":%" PRIu64 ",\"hashes\":%.1f,\"proof_bytes\":%.0f,\"bundle_bytes\":%.0f,"
           "\"prove_us\":%.1f,\"verify_us\":%.1f,\"ref\":\"ed25519_verify\",\"ref_us\":%.1f,"
           "\"ratio\":%.3f}\n",
           n, probes, (double)hashes / probes, (double)hashes / probes * 32, (double)bytes / probes,
           t_prove / probes * 1e6, t_verify / probes * 1e6, ed_us,
           ed_us / (t_verify / probes * 1e6));
    printf("{\"bench\":\"audit_proof\",\"kind\":\"consistency\",\"records\":%" PRIu64
           ",\"probes\":%" PRIu64 ",\"hashes\":%.1f,\"proof_bytes\":%.0f,\"prove_us\":%.1f,"
           "\"verify_us\":%.2f,\"ref\":\"sha256_node_x_hashes\",\"ref_us\":%.2f,\"ratio\":%.3f}\n",
           n, probes, (double)chashes / probes, (double)chashes / probes * 32,
           t_cprove / probes * 1e6, t_cverify / probes * 1e6, node_us * chashes / probes,
           node_us * chashes / probes / (t_cverify / probes * 1e6));
    fflush(stdout);
}

static double ed25519_verify_us(void)
{
    uint8_t pk[32], sk[64], sig[64], msg[100] = {1};
    double t0;
    int n = 2000;
    crypto_sign_keypair(pk, sk);
    crypto_sign_detached(sig, NULL, msg, sizeof(msg), sk);
    t0 = fa_bench_now_s();
    for (int i = 0; i < n; i++)
        if (crypto_sign_verify_detached(sig, msg, sizeof(msg), pk) != 0)
            abort();
    return (fa_bench_now_s() - t0) / n * 1e6;
}

int fa_bench_audit(int argc, char **argv)
{
    uint64_t records = 1000000, n_sync = 100, n_nosync = 20000, probes = 1000;
    const char *dir_arg = NULL;
    char dir[512], path[600];
    int keep = 0;
    uint8_t seed[32];
    fa_note_signer *signer;
    fa_note_verifier key;
    fa_error err;
    struct gen g;
    double ed_us;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--records") && i + 1 < argc) {
            records = strtoull(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--quick")) {
            records = 20000;
            n_sync = 20;
            n_nosync = 2000;
            probes = 200;
        } else if (!strcmp(argv[i], "--dir") && i + 1 < argc) {
            dir_arg = argv[++i];
        } else if (!strcmp(argv[i], "--keep")) {
            keep = 1;
        } else {
            fprintf(stderr, "usage: fedagg-bench audit [--records N] [--quick] [--dir DIR] "
                            "[--keep]\n");
            return 2;
        }
    }
    if (records < 2)
        records = 2;
    if (sodium_init() < 0)
        return 1;
    fa_log_set_level(FA_LOG_WARN);
    if (dir_arg) {
        snprintf(dir, sizeof(dir), "%s", dir_arg);
    } else {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof(dir), "%s/fa_bench_audit.XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            return 1;
        }
    }
    memset(seed, 0x77, sizeof(seed));
    if (fa_note_signer_new(&signer, origin, seed, 32, &err) != 0)
        die("key", &err);
    memset(&key, 0, sizeof(key));
    memcpy(key.pk, fa_note_signer_public_key(signer), 32);
    gen_init(&g);
    ed_us = ed25519_verify_us();

    bench_append(dir, signer, &g, n_sync, 1, "sync.log");
    gen_init(&g);
    bench_append(dir, signer, &g, n_nosync, 0, "nosync.log");
    snprintf(path, sizeof(path), "%s/nosync.log", dir);
    bench_verify(path, &key, &g, 1, 1 + NREG, ed_us);

    gen_init(&g);
    snprintf(path, sizeof(path), "%s/big.log", dir);
    bench_build(path, signer, &g, records);
    bench_open(path, &key);
    bench_verify(path, &key, &g, 0, 0, ed_us);
    bench_proofs(path, &key, probes, ed_us);

    if (!keep) {
        const char *names[] = {"sync.log", "nosync.log", "big.log"};
        for (size_t i = 0; i < 3; i++) {
            snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
            rm_log(path);
        }
        if (!dir_arg)
            rmdir(dir);
    }
    fa_note_signer_del(signer);
    return 0;
}
