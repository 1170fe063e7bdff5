/* `fedagg audit`: verify, show and prove the aggregator's audit log
 * (audit/audit_log.h, docs/operations.md).
 *
 * Exit status: 0 success (everything verified), 1 failure (something did not
 * verify, or a file could not be read), 2 usage. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>
#include <sodium.h>

#include "aggregator/model_store.h"
#include "audit/audit_log.h"
#include "audit/lineage.h"
#include "common/fa_file.h"
#include "common/fa_hex.h"
#include "common/fa_log.h"
#include "crypto/checkpoint.h"
#include "crypto/merkle.h"
#include "audit/privacy_audit.h"
#include "tools/audit_cli.h"
#include "tools/card_render.h"

const char fa_cmd_audit_help[] =
    "verify, show, prove and repair the signed audit log (verify, show, prove, check-proof, "
    "consistency, repair, lineage)";

static const char usage_text[] =
    "usage: fedagg audit verify LOG --pubkey KEY [--config AGGREGATOR.textproto]\n"
    "                    [--region-key REGION=KEY]... [--json] [--max-problems N]\n"
    "       fedagg audit show LOG [--json] [--from INDEX] [--count N] [--pubkey KEY]\n"
    "       fedagg audit prove LOG --round R --region ID [--pubkey KEY] [-o FILE]\n"
    "       fedagg audit check-proof FILE --pubkey KEY [--region ID] [--upload-digest HEX]\n"
    "                    [--config AGGREGATOR.textproto] [--region-key REGION=KEY]... [--json]\n"
    "       fedagg audit consistency OLD_CHECKPOINT LOG [--pubkey KEY]\n"
    "       fedagg audit checkpoint LOG [--pubkey KEY]\n"
    "       fedagg audit key SIGNING_KEY --origin ORIGIN\n"
    "       fedagg audit privacy LOG [--region ID] [--config AGGREGATOR.textproto]\n"
    "                    [--region-key REGION=KEY]... [--pubkey KEY] [--json]\n"
    "       fedagg audit repair LOG --pubkey KEY [--store DIR] [--dry-run]\n"
    "       fedagg audit lineage VERSION --log LOG --pubkey KEY [--config AGGREGATOR.textproto]\n"
    "                    [--region-key REGION=KEY]... [--json]\n"
    "\n"
    "LOG is the aggregator's audit log (audit.log_file; default <storage.dir>/audit.log),\n"
    "with LOG.checkpoints and LOG.tree beside it.  KEY is the aggregator's Ed25519\n"
    "public key: a file or the text itself, as base64, hex, or a C2SP/Go note\n"
    "verifier key <origin>+<key id>+<base64>.  Region keys come from the aggregator\n"
    "config (--config, its regions' identity keys) or --region-key.\n"
    "\n"
    "verify       checks every record and its checksum, the record rules, every\n"
    "             region signature whose key is given, every signed checkpoint and\n"
    "             the Merkle tree; names the record index of every problem.\n"
    "show         lists the records as a table, or as JSON lines (--json) for a SIEM;\n"
    "             records not yet covered by a checkpoint are marked '*'.\n"
    "prove        writes one proof file: the record of ROUND in which REGION took\n"
    "             part, its inclusion proof and the latest signed checkpoint.\n"
    "check-proof  checks such a file offline, without the log (what a region runs).\n"
    "consistency  proves that LOG only grew since an old checkpoint (C2SP note text).\n"
    "checkpoint   prints the latest signed checkpoint (to keep for `consistency`).\n"
    "key          prints the public key and note verifier key of a signing key.\n"
    "privacy      adds up each region's signed privacy statements over the log: its\n"
    "             cumulative epsilon at delta against the budget it declared, the\n"
    "             mechanism; checks every statement's signature (keys from --config or\n"
    "             --region-key) and that the accounting adds up.\n"
    "repair       recovers a damaged log (one the aggregator refuses to open) to its\n"
    "             last checkpoint signed by KEY that the records left still match;\n"
    "             the damaged files are kept as LOG*.damaged-<time>, never deleted.\n"
    "             With --store (the aggregator's storage.dir) a model store ahead of\n"
    "             the repaired log goes back to the log's last version: the newer\n"
    "             versions and the round in flight move into DIR/damaged-<time>/.\n"
    "             Stop the aggregator first; --dry-run says what would be done.\n"
    "lineage      recomputes the model card of VERSION from the log alone (what\n"
    "             `fedagg model card` shows): its parent, round, regions and their\n"
    "             signed data statements, settings, privacy, evaluations, promotion\n"
    "             decision, channels and ancestry; after every check of verify.  Fails\n"
    "             naming the record when anything does not follow.\n"
    "\n"
    "Exit status: 0 verified, 1 not verified or an error, 2 usage.\n";

#define PROG "fedagg audit"

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, PROG ": ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n%s", usage_text);
    return 2;
}

static int fail(const fa_error *err, int rc)
{
    fprintf(stderr, PROG ": %s\n", fa_error_msg(err, rc));
    return 1;
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;
    if (!s || !*s || *s == '-')
        return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

/* Options shared by the subcommands. */
struct opts {
    const char *pos[2];
    int npos;
    const char *pubkey, *config, *out, *region, *upload_digest, *origin, *store, *log;
    int json, have_round, dry_run;
    uint64_t round, from, count, max_problems;
    fa_audit_region_key *keys;
    size_t nkeys;
};

static int parse_opts(int argc, char **argv, struct opts *o, fa_error *err)
{
    memset(o, 0, sizeof(*o));
    o->count = UINT64_MAX;
    o->max_problems = 50;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1, rc = 0;
        if (!strcmp(a, "--json")) {
            o->json = 1;
            takes = 0;
        } else if (!strcmp(a, "--dry-run")) {
            o->dry_run = 1;
            takes = 0;
        } else if (!strcmp(a, "--store") && v) {
            o->store = v;
        } else if (!strcmp(a, "--pubkey") && v) {
            o->pubkey = v;
        } else if (!strcmp(a, "--config") && v) {
            o->config = v;
        } else if ((!strcmp(a, "-o") || !strcmp(a, "--out")) && v) {
            o->out = v;
        } else if (!strcmp(a, "--region") && v) {
            o->region = v;
        } else if ((!strcmp(a, "--upload-digest") || !strcmp(a, "--upload-sha256")) && v) {
            o->upload_digest = v; /* --upload-sha256: its name before BLAKE3 */
        } else if (!strcmp(a, "--origin") && v) {
            o->origin = v;
        } else if (!strcmp(a, "--log") && v) {
            o->log = v;
        } else if (!strcmp(a, "--round") && v) {
            if (parse_u64(v, &o->round) != 0)
                return usage_error("--round %s: expected a round number", v);
            o->have_round = 1;
        } else if (!strcmp(a, "--from") && v) {
            if (parse_u64(v, &o->from) != 0)
                return usage_error("--from %s: expected a record index", v);
        } else if (!strcmp(a, "--count") && v) {
            if (parse_u64(v, &o->count) != 0)
                return usage_error("--count %s: expected a number", v);
        } else if (!strcmp(a, "--max-problems") && v) {
            if (parse_u64(v, &o->max_problems) != 0)
                return usage_error("--max-problems %s: expected a number", v);
        } else if (!strcmp(a, "--region-key") && v) {
            rc = fa_audit_cli_region_key(v, &o->keys, &o->nkeys, err);
        } else if (a[0] == '-' && a[1]) {
            return usage_error("unknown or incomplete option '%s'", a);
        } else {
            if (o->npos == 2)
                return usage_error("unexpected argument '%s'", a);
            o->pos[o->npos++] = a;
            takes = 0;
        }
        if (rc != 0) {
            fail(err, rc);
            return 1;
        }
        i += takes;
    }
    if (o->config) {
        int rc = fa_audit_cli_config_keys(o->config, &o->keys, &o->nkeys, err);
        if (rc != 0) {
            fail(err, rc);
            return 1;
        }
    }
    return 0;
}

static int need_pos(const struct opts *o, int n, const char *what)
{
    if (o->npos != n)
        return usage_error("expected %s", what);
    return 0;
}

/* ---------------------------------------------------------------------------
 * verify
 * ------------------------------------------------------------------------- */

struct vprint {
    const struct opts *o;
    uint64_t shown, hidden;
};

static void print_finding(void *ctx, int severity, int64_t index, const char *msg)
{
    struct vprint *p = ctx;
    if (severity == FA_AUDIT_PROBLEM && p->shown >= p->o->max_problems) {
        p->hidden++;
        return;
    }
    if (severity == FA_AUDIT_PROBLEM)
        p->shown++;
    if (p->o->json) {
        json_t *j = json_object();
        char *s;
        json_object_set_new(j, "finding", json_string(severity ? "problem" : "note"));
        json_object_set_new(j, "index", index < 0 ? json_null() : json_integer(index));
        json_object_set_new(j, "message", json_string(msg));
        s = json_dumps(j, JSON_COMPACT);
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(j);
    } else if (index < 0) {
        printf("%s: log: %s\n", severity ? "problem" : "note", msg);
    } else {
        printf("%s: record %" PRId64 ": %s\n", severity ? "problem" : "note", index, msg);
    }
}

static int cmd_verify(struct opts *o)
{
    fa_note_verifier key;
    fa_audit_verify_opts vo;
    fa_audit_verify_result res;
    struct vprint p = {o, 0, 0};
    char root[64];
    fa_error err;
    int rc;

    if (need_pos(o, 1, "one LOG"))
        return 2;
    if (!o->pubkey)
        return usage_error("%s needs --pubkey KEY (the aggregator's public key)", "verify");
    fa_error_clear(&err);
    if ((rc = fa_audit_cli_pubkey(o->pubkey, &key, &err)) != 0)
        return fail(&err, rc);
    memset(&vo, 0, sizeof(vo));
    vo.key = &key;
    vo.region_keys = o->keys;
    vo.nregion_keys = o->nkeys;
    vo.report = print_finding;
    vo.report_ctx = &p;
    rc = fa_audit_verify(o->pos[0], &vo, &res, &err);
    if (rc != 0 && rc != FA_ERR_VERIFY)
        return fail(&err, rc);
    sodium_bin2base64(root, sizeof(root), res.root, sizeof(res.root),
                      sodium_base64_VARIANT_ORIGINAL);
    if (o->json) {
        json_t *j = json_object();
        char *s;
        json_object_set_new(j, "verified", json_boolean(rc == 0));
        json_object_set_new(j, "records", json_integer((json_int_t)res.records));
        json_object_set_new(j, "checkpoints", json_integer((json_int_t)res.checkpoints));
        json_object_set_new(j, "tree_size", json_integer((json_int_t)res.signed_size));
        json_object_set_new(j, "root", json_string(root));
        json_object_set_new(j, "origin", json_string(res.origin));
        json_object_set_new(j, "region_signatures",
                            json_integer((json_int_t)res.region_signatures));
        json_object_set_new(j, "evaluation_signatures",
                            json_integer((json_int_t)res.eval_signatures));
        json_object_set_new(j, "privacy_signatures",
                            json_integer((json_int_t)res.privacy_signatures));
        json_object_set_new(j, "data_statement_signatures",
                            json_integer((json_int_t)res.data_signatures));
        json_object_set_new(j, "decisions_recomputed", json_integer((json_int_t)res.decisions));
        json_object_set_new(j, "region_signatures_unchecked",
                            json_integer((json_int_t)res.region_unknown));
        json_object_set_new(j, "problems", json_integer((json_int_t)res.problems));
        json_object_set_new(j, "first_bad_index",
                            rc == 0 ? json_null() : json_integer((json_int_t)res.first_bad));
        s = json_dumps(j, JSON_COMPACT);
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(j);
        return rc == 0 ? 0 : 1;
    }
    if (p.hidden)
        printf("... and %" PRIu64 " more problems (--max-problems)\n", p.hidden);
    if (rc == 0) {
        printf("ok: %s: %" PRIu64 " records, %" PRIu64
               " signed checkpoints by %s; tree size %" PRIu64 ", root %s; %" PRIu64
               " region signatures verified",
               o->pos[0], res.records, res.checkpoints, res.origin, res.signed_size, root,
               res.region_signatures);
        if (res.eval_signatures)
            printf(", %" PRIu64 " evaluation reports verified", res.eval_signatures);
        if (res.privacy_signatures)
            printf(", %" PRIu64 " privacy statements verified", res.privacy_signatures);
        if (res.data_signatures)
            printf(", %" PRIu64 " data statements verified", res.data_signatures);
        if (res.decisions)
            printf(", %" PRIu64 " promotion decisions recomputed", res.decisions);
        if (res.region_unknown)
            printf(", %" PRIu64 " not checked (no key given)", res.region_unknown);
        printf("\n");
        return 0;
    }
    if (res.first_bad < 0)
        printf("FAILED: %s: %" PRIu64 " problems; the first concerns the log as a whole\n",
               o->pos[0], res.problems);
    else
        printf("FAILED: %s: %" PRIu64 " problems; the first at record %" PRId64 "\n", o->pos[0],
               res.problems, res.first_bad);
    return 1;
}

/* ---------------------------------------------------------------------------
 * show
 * ------------------------------------------------------------------------- */

static int cmd_show(struct opts *o)
{
    fa_note_verifier key;
    fa_audit_log *log = NULL;
    fa_audit_open_report rep;
    fa_error err;
    uint64_t n, signed_size;
    int rc;

    if (need_pos(o, 1, "one LOG"))
        return 2;
    fa_error_clear(&err);
    if (o->pubkey && (rc = fa_audit_cli_pubkey(o->pubkey, &key, &err)) != 0)
        return fail(&err, rc);
    rc = fa_audit_log_open_readonly(&log, o->pos[0], o->pubkey ? &key : NULL, &rep, &err);
    if (rc != 0) {
        fail(&err, rc);
        if (rc == FA_ERR_CORRUPT)
            fprintf(stderr, PROG ": run `fedagg audit verify %s --pubkey KEY` for every problem\n",
                    o->pos[0]);
        return 1;
    }
    n = fa_audit_log_size(log);
    signed_size = fa_audit_log_signed_size(log);
    if (!o->json)
        fa_audit_cli_table_header(stdout);
    for (uint64_t i = o->from; i < n && i - o->from < o->count; i++) {
        uint8_t *buf, leaf[FA_MERKLE_HASH_LEN];
        size_t len;
        Fedagg__AuditRecord *r;
        if ((rc = fa_audit_log_read(log, i, &buf, &len, &err)) != 0)
            break;
        fa_merkle_leaf_hash(buf, len, leaf);
        r = fedagg__audit_record__unpack(NULL, len, buf);
        free(buf);
        if (!r) {
            rc = fa_errorf(&err, FA_ERR_CORRUPT, "record %" PRIu64 " is not an AuditRecord", i);
            break;
        }
        if (o->json) {
            json_t *j = fa_audit_cli_record_json(r, i, leaf, i < signed_size);
            char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
            if (s)
                printf("%s\n", s);
            free(s);
            json_decref(j);
        } else {
            fa_audit_cli_table_row(stdout, r, i, i < signed_size);
        }
        fedagg__audit_record__free_unpacked(r, NULL);
    }
    if (rc == 0 && !o->json) {
        printf("%" PRIu64 " records; the latest checkpoint signs %" PRIu64, n, signed_size);
        if (n > signed_size)
            printf(" (* not yet signed)");
        if (rep.torn_log_bytes)
            printf("; a torn last record of %" PRIu64 " bytes follows (cut off when the "
                   "aggregator next opens the log)",
                   rep.torn_log_bytes);
        printf("\n");
    }
    fa_audit_log_close(log);
    return rc == 0 ? 0 : fail(&err, rc);
}

/* ---------------------------------------------------------------------------
 * prove, checkpoint
 * ------------------------------------------------------------------------- */

static int write_out(const char *path, const char *data, size_t len, fa_error *err)
{
    if (!path || !strcmp(path, "-"))
        return fwrite(data, 1, len, stdout) == len && fflush(stdout) == 0
                   ? 0
                   : fa_errorf(err, FA_ERR_IO, "stdout: write failed");
    return fa_file_write_atomic(path, data, len, 0644, err);
}

static int open_ro(struct opts *o, const char *path, fa_audit_log **log, fa_error *err)
{
    fa_note_verifier key;
    int rc;
    if (o->pubkey && (rc = fa_audit_cli_pubkey(o->pubkey, &key, err)) != 0)
        return rc;
    return fa_audit_log_open_readonly(log, path, o->pubkey ? &key : NULL, NULL, err);
}

static int cmd_prove(struct opts *o)
{
    fa_audit_log *log = NULL;
    fa_error err;
    uint64_t index;
    char *bundle = NULL;
    size_t len = 0;
    int rc;

    if (need_pos(o, 1, "one LOG"))
        return 2;
    if (!o->have_round || !o->region)
        return usage_error("%s needs --round R and --region ID", "prove");
    fa_error_clear(&err);
    if ((rc = open_ro(o, o->pos[0], &log, &err)) == 0 &&
        (rc = fa_audit_log_find(log, o->round, o->region, &index, &err)) == 0 &&
        (rc = fa_audit_log_prove(log, index, &bundle, &len, &err)) == 0)
        rc = write_out(o->out, bundle, len, &err);
    fa_audit_log_close(log);
    free(bundle);
    if (rc != 0)
        return fail(&err, rc);
    if (o->out)
        fprintf(stderr, PROG ": wrote the proof of record %" PRIu64 " to %s\n", index, o->out);
    return 0;
}

/* fedagg audit lineage: `verify` first (every frame, signature and rule,
 * the governance records recomputed), then the card from the records. */
static int cmd_lineage(struct opts *o)
{
    fa_note_verifier key;
    fa_audit_verify_opts vo;
    fa_audit_verify_result res;
    fa_audit_log *log = NULL;
    uint64_t version;
    char *json = NULL;
    fa_error err;
    int rc;

    if (need_pos(o, 1, "one VERSION"))
        return 2;
    if (parse_u64(o->pos[0], &version) != 0)
        return usage_error("'%s' is not a model version", o->pos[0]);
    if (!o->log || !o->pubkey)
        return usage_error("%s needs --log LOG and --pubkey KEY", "lineage");
    fa_error_clear(&err);
    if ((rc = fa_audit_cli_pubkey(o->pubkey, &key, &err)) != 0)
        return fail(&err, rc);
    memset(&vo, 0, sizeof(vo));
    vo.key = &key;
    vo.region_keys = o->keys;
    vo.nregion_keys = o->nkeys;
    rc = fa_audit_verify(o->log, &vo, &res, &err);
    if (rc == FA_ERR_VERIFY) {
        fprintf(stderr, PROG ": %s does not verify, so no card follows from it: %s\n", o->log,
                err.msg);
        return 1;
    }
    if (rc != 0)
        return fail(&err, rc);
    rc = fa_audit_log_open_readonly(&log, o->log, &key, NULL, &err);
    if (rc == 0)
        rc = fa_lineage_card_json(log, version, o->keys, o->nkeys, &json, &err);
    fa_audit_log_close(log);
    if (rc != 0)
        return fail(&err, rc);
    if (o->json)
        printf("%s\n", json);
    else
        rc = fa_card_render_markdown(stdout, json);
    free(json);
    return rc;
}

static int cmd_checkpoint(struct opts *o)
{
    fa_audit_log *log = NULL;
    fa_error err;
    char *note = NULL;
    size_t len = 0;
    int rc;

    if (need_pos(o, 1, "one LOG"))
        return 2;
    fa_error_clear(&err);
    if ((rc = open_ro(o, o->pos[0], &log, &err)) == 0 &&
        (rc = fa_audit_log_checkpoint(log, &note, &len, &err)) == 0)
        rc = write_out(o->out, note, len, &err);
    fa_audit_log_close(log);
    free(note);
    return rc == 0 ? 0 : fail(&err, rc);
}

/* ---------------------------------------------------------------------------
 * check-proof
 * ------------------------------------------------------------------------- */

static int in_list(char **v, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(v[i], s))
            return 1;
    return 0;
}

static int cmd_check_proof(struct opts *o)
{
    fa_note_verifier key;
    fa_proof_bundle b;
    fa_checkpoint cp;
    Fedagg__AuditRecord *r = NULL;
    uint8_t *data = NULL, want_digest[32];
    size_t len = 0;
    char desc[600];
    fa_error err;
    int rc, bad = 0;

    memset(&b, 0, sizeof(b));
    if (need_pos(o, 1, "one proof FILE"))
        return 2;
    if (!o->pubkey)
        return usage_error("%s needs --pubkey KEY (the aggregator's public key)", "check-proof");
    if (o->upload_digest) {
        if (fa_hex_decode(want_digest, sizeof(want_digest), o->upload_digest,
                          strlen(o->upload_digest)) != 0)
            return usage_error("--upload-digest %s: expected 64 hex digits", o->upload_digest);
        if (!o->region)
            return usage_error("%s: --upload-digest needs --region", "check-proof");
    }
    fa_error_clear(&err);
    if ((rc = fa_audit_cli_pubkey(o->pubkey, &key, &err)) != 0)
        return fail(&err, rc);
    rc = fa_file_read_all(o->pos[0], &data, &len, 2 * FA_PROOF_BUNDLE_MAX_RECORD + FA_NOTE_MAX_LEN,
                          &err);
    if (rc == 0)
        rc = fa_proof_bundle_parse((const char *)data, len, &b, &err);
    if (rc != 0) {
        fa_error_prefix(&err, rc, "%s", o->pos[0]);
        goto out;
    }
    rc = fa_proof_bundle_verify(&b, &key, &cp, &err);
    if (rc != 0) {
        fa_error_prefix(&err, rc, "%s", o->pos[0]);
        goto out;
    }
    r = fedagg__audit_record__unpack(NULL, b.record_len, b.record);
    if (!r) {
        rc =
            fa_errorf(&err, FA_ERR_PARSE, "%s: the proven record is not an AuditRecord", o->pos[0]);
        goto out;
    }
    fa_audit_cli_describe(r, desc, sizeof(desc));
    printf("ok: record %" PRIu64 " (%s) is in the log %s, tree size %" PRIu64
           ", signed by its key\n",
           b.index, desc, cp.origin, cp.size);

    /* What a region wants to know about itself. */
    if (o->region) {
        const Fedagg__RegionCommitment *c = NULL;
        for (size_t i = 0; i < r->n_commitments; i++)
            if (r->commitments[i]->region && !strcmp(r->commitments[i]->region, o->region))
                c = r->commitments[i];
        if (c) {
            char hex[65] = "";
            fa_hex_encode(hex, sizeof(hex), c->upload_digest.data,
                          c->upload_digest.len == 32 ? 32 : 0);
            printf("region %s took part with the upload of %s %s (%" PRIu64 " bytes)\n",
                   o->region, fa_audit_upload_alg_name(c), hex, c->upload_bytes);
            if (o->upload_digest && (c->upload_digest.len != 32 ||
                                     sodium_memcmp(c->upload_digest.data, want_digest, 32) != 0)) {
                printf("MISMATCH: region %s's recorded upload is not %s\n", o->region,
                       o->upload_digest);
                bad = 1;
            }
        } else if (in_list(r->dropped, r->n_dropped, o->region)) {
            printf("region %s is recorded as dropped out of this round\n", o->region);
            if (o->upload_digest) {
                printf("MISMATCH: no upload of region %s is recorded\n", o->region);
                bad = 1;
            }
        } else {
            printf("MISMATCH: region %s does not appear in this record\n", o->region);
            bad = 1;
        }
    }
    /* Region signatures, for the keys given. */
    for (size_t i = 0; i < r->n_commitments; i++) {
        const Fedagg__RegionCommitment *c = r->commitments[i];
        const uint8_t *pk = fa_audit_region_key_find(o->keys, o->nkeys, c->region);
        int check;
        if (!pk)
            continue;
        check = fa_audit_commitment_check(r, c, pk);
        if (check == FA_ERR_NOTFOUND) {
            printf("region %s: upload commitment unsigned (it dropped out after uploading, "
                   "before the consistency check)\n",
                   c->region);
            continue;
        }
        if (check == 0) {
            printf("region %s: upload commitment signature verified\n", c->region);
        } else {
            printf("MISMATCH: region %s: the upload commitment signature does not verify\n",
                   c->region);
            bad = 1;
        }
    }
    if (o->json) {
        uint8_t leaf[FA_MERKLE_HASH_LEN];
        json_t *j;
        char *s;
        fa_merkle_leaf_hash(b.record, b.record_len, leaf);
        j = fa_audit_cli_record_json(r, b.index, leaf, 1);
        s = j ? json_dumps(j, JSON_COMPACT) : NULL;
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(j);
    }
    if (bad)
        rc = 1;
out:
    if (r)
        fedagg__audit_record__free_unpacked(r, NULL);
    fa_proof_bundle_free(&b);
    free(data);
    if (rc == 1)
        return 1;
    return rc == 0 ? 0 : fail(&err, rc);
}

/* ---------------------------------------------------------------------------
 * consistency
 * ------------------------------------------------------------------------- */

static int cmd_consistency(struct opts *o)
{
    fa_note_verifier key;
    fa_audit_log *log = NULL;
    fa_checkpoint old, cur;
    uint8_t *data = NULL, proof[FA_MERKLE_MAX_PROOF * FA_MERKLE_HASH_LEN];
    char *note = NULL;
    size_t len = 0, nlen = 0, plen = 0;
    fa_error err;
    int rc;

    if (need_pos(o, 2, "OLD_CHECKPOINT and LOG"))
        return 2;
    fa_error_clear(&err);
    if (o->pubkey && (rc = fa_audit_cli_pubkey(o->pubkey, &key, &err)) != 0)
        return fail(&err, rc);
    rc = fa_file_read_all(o->pos[0], &data, &len, FA_NOTE_MAX_LEN, &err);
    if (rc == 0)
        rc = o->pubkey ? fa_checkpoint_open((const char *)data, len, &key, &old, &err)
                       : fa_checkpoint_parse((const char *)data, len, &old, &err);
    if (rc != 0) {
        fa_error_prefix(&err, rc, "%s", o->pos[0]);
        goto out;
    }
    if ((rc = open_ro(o, o->pos[1], &log, &err)) != 0 ||
        (rc = fa_audit_log_checkpoint(log, &note, &nlen, &err)) != 0)
        goto out;
    if ((rc = fa_checkpoint_parse(note, nlen, &cur, &err)) != 0)
        goto out;
    if (strcmp(old.origin, cur.origin) != 0) {
        rc = fa_errorf(&err, FA_ERR_VERIFY,
                       "the old checkpoint is of log \"%s\", this log is \"%s\"", old.origin,
                       cur.origin);
        goto out;
    }
    if (old.size > cur.size) {
        rc = fa_errorf(&err, FA_ERR_VERIFY,
                       "NOT CONSISTENT: the old checkpoint signs %" PRIu64
                       " records but the log's latest signs only %" PRIu64
                       ": records were removed (truncated)",
                       old.size, cur.size);
        goto out;
    }
    rc = fa_audit_log_consistency_proof(log, old.size, cur.size, proof, &plen, &err);
    if (rc != 0)
        goto out;
    /* The proof is checked as a verifier holding only the two checkpoints
     * would check it. */
    if (fa_merkle_verify_consistency(old.size, cur.size, old.root, cur.root, proof, plen) != 0) {
        rc = fa_errorf(&err, FA_ERR_VERIFY,
                       "NOT CONSISTENT: the first %" PRIu64 " records of the log are not the "
                       "tree the old checkpoint signed: the log was rewritten",
                       old.size);
        goto out;
    }
    printf("ok: the log %s only grew from %" PRIu64 " to %" PRIu64 " records since the old "
           "checkpoint%s\n",
           cur.origin, old.size, cur.size,
           o->pubkey ? " (both checkpoints signed by the key)"
                     : " (signatures not checked: no --pubkey)");
    printf("consistency proof %" PRIu64 " -> %" PRIu64 "\n", old.size, cur.size);
    for (size_t i = 0; i < plen; i++) {
        char b64[64];
        sodium_bin2base64(b64, sizeof(b64), proof + i * FA_MERKLE_HASH_LEN, FA_MERKLE_HASH_LEN,
                          sodium_base64_VARIANT_ORIGINAL);
        printf("hash %s\n", b64);
    }
    printf("\n%s", note);
out:
    fa_audit_log_close(log);
    free(note);
    free(data);
    return rc == 0 ? 0 : fail(&err, rc);
}

/* ---------------------------------------------------------------------------
 * key
 * ------------------------------------------------------------------------- */

static int cmd_key(struct opts *o)
{
    fa_note_signer *s = NULL;
    uint8_t *data = NULL;
    size_t len = 0;
    char vkey[FA_NOTE_NAME_MAX + 128], b64[64];
    fa_error err;
    int rc;

    if (need_pos(o, 1, "one SIGNING_KEY file"))
        return 2;
    fa_error_clear(&err);
    if ((rc = fa_file_check_private(o->pos[0], &err)) != 0 ||
        (rc = fa_file_read_all(o->pos[0], &data, &len, 4096, &err)) != 0)
        return fail(&err, rc);
    rc = fa_note_signer_parse(&s, o->origin, data, len, &err);
    sodium_memzero(data, len);
    free(data);
    if (rc == 0)
        rc = fa_note_vkey_format(fa_note_signer_name(s), fa_note_signer_public_key(s), vkey,
                                 sizeof(vkey), &err);
    if (rc != 0) {
        fa_note_signer_del(s);
        if (rc == FA_ERR_INVAL && !o->origin)
            return usage_error("%s needs --origin ORIGIN (the log's origin, audit.origin)", "key");
        return fail(&err, rc);
    }
    sodium_bin2base64(b64, sizeof(b64), fa_note_signer_public_key(s), FA_ED25519_PK_LEN,
                      sodium_base64_VARIANT_ORIGINAL);
    printf("public key:    %s\nverifier key:  %s\n", b64, vkey);
    fa_note_signer_del(s);
    return 0;
}

/* ---------------------------------------------------------------------------
 * privacy
 * ------------------------------------------------------------------------- */

static int cmd_privacy(struct opts *o)
{
    struct vprint p = {o, 0, 0};
    fa_privacy_audit *pa = NULL;
    fa_audit_log *log = NULL;
    fa_error err;
    uint64_t n;
    size_t shown = 0;
    int rc;

    if (need_pos(o, 1, "one LOG"))
        return 2;
    fa_error_clear(&err);
    if ((rc = open_ro(o, o->pos[0], &log, &err)) != 0)
        return fail(&err, rc);
    if ((rc = fa_privacy_audit_new(&pa, o->keys, o->nkeys, print_finding, &p, &err)) != 0) {
        fa_audit_log_close(log);
        return fail(&err, rc);
    }
    n = fa_audit_log_size(log);
    for (uint64_t i = 0; i < n && rc == 0; i++) {
        uint8_t *buf;
        size_t len;
        Fedagg__AuditRecord *r;
        if ((rc = fa_audit_log_read(log, i, &buf, &len, &err)) != 0)
            break;
        r = fedagg__audit_record__unpack(NULL, len, buf);
        free(buf);
        if (!r) {
            rc = fa_errorf(&err, FA_ERR_CORRUPT, "record %" PRIu64 " is not an AuditRecord", i);
            break;
        }
        fa_privacy_audit_record(pa, (int64_t)i, r);
        fedagg__audit_record__free_unpacked(r, NULL);
    }
    if (rc == 0 && !o->json)
        printf("%-16s %6s %9s %11s %9s %11s %9s  %s\n", "REGION", "ROUNDS", "EPSILON", "DELTA",
               "BUDGET", "BUDGET_DLT", "VERIFIED", "MECHANISM");
    for (size_t i = 0; rc == 0 && i < fa_privacy_audit_count(pa); i++) {
        const fa_privacy_total *t = fa_privacy_audit_at(pa, i);
        if (o->region && strcmp(o->region, t->region))
            continue;
        shown++;
        if (o->json) {
            json_t *j = json_object();
            char *txt;
            json_object_set_new(j, "region", json_string(t->region));
            json_object_set_new(j, "statements", json_integer((json_int_t)t->statements));
            json_object_set_new(j, "verified", json_integer((json_int_t)t->verified));
            json_object_set_new(j, "first_round", json_integer((json_int_t)t->first_round));
            json_object_set_new(j, "last_round", json_integer((json_int_t)t->last_round));
            json_object_set_new(j, "epsilon", json_real(t->epsilon));
            json_object_set_new(j, "delta", json_real(t->delta));
            json_object_set_new(j, "budget_epsilon", json_real(t->budget_epsilon));
            json_object_set_new(j, "budget_delta", json_real(t->budget_delta));
            json_object_set_new(j, "mechanism", json_string(t->mechanism));
            json_object_set_new(j, "accountant", json_string(t->accountant));
            txt = json_dumps(j, JSON_COMPACT);
            if (txt)
                printf("%s\n", txt);
            free(txt);
            json_decref(j);
        } else {
            printf("%-16s %6" PRIu64 " %9.4f %11.3g %9.4f %11.3g %4" PRIu64 "/%-4" PRIu64
                   "  %s (%s)\n",
                   t->region, t->statements, t->epsilon, t->delta, t->budget_epsilon,
                   t->budget_delta, t->verified, t->statements, t->mechanism, t->accountant);
        }
    }
    if (rc == 0 && !o->json && shown == 0)
        printf("no privacy statements%s%s in %" PRIu64 " records\n", o->region ? " of " : "",
               o->region ? o->region : "", n);
    if (rc == 0 && fa_privacy_audit_problems(pa))
        rc = fa_errorf(&err, FA_ERR_VERIFY, "%" PRIu64 " problems in the privacy ledger",
                       fa_privacy_audit_problems(pa));
    fa_privacy_audit_del(pa);
    fa_audit_log_close(log);
    return rc == 0 ? 0 : fail(&err, rc);
}

/* ---------------------------------------------------------------------------
 * repair
 * ------------------------------------------------------------------------- */

/* The model version the log ends at: the new version of its last record (an
 * operator's action keeps the version it names), 0 for an empty log. */
static int log_version(const char *path, const fa_note_verifier *v, uint64_t *version,
                       fa_error *err)
{
    fa_audit_log *log = NULL;
    uint8_t *rec = NULL;
    size_t len = 0;
    Fedagg__AuditRecord *r;
    int rc = fa_audit_log_open_readonly(&log, path, v, NULL, err);

    *version = 0;
    if (rc == 0 && fa_audit_log_size(log) > 0)
        rc = fa_audit_log_read(log, fa_audit_log_size(log) - 1, &rec, &len, err);
    if (rc == 0 && rec) {
        r = fedagg__audit_record__unpack(NULL, len, rec);
        if (!r)
            rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: its last record does not decode", path);
        else
            *version = r->new_version;
        if (r)
            fedagg__audit_record__free_unpacked(r, NULL);
    }
    free(rec);
    fa_audit_log_close(log);
    return rc;
}

/* The round in flight belongs to a version the store no longer has: its
 * state goes with that version's files. */
static int move_round_state(const char *store, const char *aside, fa_error *err)
{
    DIR *d = opendir(store);
    struct dirent *de;
    int rc = 0;

    if (!d)
        return fa_errorf(err, FA_ERR_IO, "%s: %s", store, strerror(errno));
    while (rc == 0 && (de = readdir(d))) {
        char from[4200], to[4200];
        if (strcmp(de->d_name, "round.state") != 0 && strncmp(de->d_name, "round.sum", 9) != 0)
            continue;
        snprintf(from, sizeof(from), "%s/%s", store, de->d_name);
        snprintf(to, sizeof(to), "%s/%s", aside, de->d_name);
        if (rename(from, to) != 0)
            rc = fa_errorf(err, FA_ERR_IO, "cannot move %s to %s: %s", from, to, strerror(errno));
        else
            printf("  moved %s to %s\n", from, to);
    }
    closedir(d);
    return rc;
}

static int cmd_repair(struct opts *o)
{
    fa_note_verifier v;
    fa_audit_repair_report rep;
    fa_error err;
    uint64_t version = 0, was = 0;
    const char *path;
    int rc;

    if (need_pos(o, 1, "LOG") != 0)
        return 2;
    if (!o->pubkey)
        return usage_error("%s needs --pubkey KEY (the aggregator's: only checkpoints it "
                           "signed are kept)",
                           "repair");
    path = o->pos[0];
    fa_error_clear(&err);
    if ((rc = fa_audit_cli_pubkey(o->pubkey, &v, &err)) != 0)
        return fail(&err, rc);
    rc = fa_audit_log_repair(path, &v, o->dry_run, &rep, &err);
    if (rc != 0)
        return fail(&err, rc);
    if (rep.intact) {
        printf("%s: opens as it is (%" PRIu64 " records, %" PRIu64 " signed): nothing to repair\n",
               path, rep.records_found, rep.records_signed);
    } else {
        printf("%s: damaged: %s\n", path, rep.damage);
        printf("  found %" PRIu64 " whole records and %" PRIu64 " checkpoints\n", rep.records_found,
               rep.checkpoints_found);
        printf("  %s %" PRIu64 " records and %" PRIu64
               " checkpoints (up to the last signed checkpoint they match); %" PRIu64
               " records after it are not in the repaired log\n",
               o->dry_run ? "would keep" : "kept", rep.records_kept, rep.checkpoints_kept,
               rep.records_found - rep.records_kept);
        if (!o->dry_run)
            printf("  the damaged files are kept as %s*%s\n", path, rep.suffix);
    }
    if (o->store) {
        char aside[4200];
        if (o->dry_run && !rep.intact) {
            printf("  (--store: the version to go back to is known once the log is repaired)\n");
            return 0;
        }
        if ((rc = log_version(path, &v, &version, &err)) != 0)
            return fail(&err, rc);
        for (unsigned k = 0;; k++) { /* a directory of its own */
            struct stat st;
            if (k == 0)
                snprintf(aside, sizeof(aside), "%s/damaged-%lld", o->store, (long long)time(NULL));
            else
                snprintf(aside, sizeof(aside), "%s/damaged-%lld.%u", o->store,
                         (long long)time(NULL), k);
            if (lstat(aside, &st) != 0)
                break;
        }
        rc = fa_model_store_rollback(o->store, version, aside, o->dry_run, &was, &err);
        if (rc != 0)
            return fail(&err, rc);
        if (was == version) {
            printf("%s: at version %" PRIu64 ", the log's: nothing to do\n", o->store, version);
        } else if (o->dry_run) {
            printf("%s: at version %" PRIu64 ", the log at %" PRIu64 ": would go back to %" PRIu64
                   " (files of later versions into %s)\n",
                   o->store, was, version, version, aside);
        } else {
            printf("%s: went back from version %" PRIu64 " to %" PRIu64
                   ", the log's; the later versions' files are in %s\n",
                   o->store, was, version, aside);
            if ((rc = move_round_state(o->store, aside, &err)) != 0)
                return fail(&err, rc);
        }
    }
    if (!rep.intact && !o->dry_run)
        printf("next: start the aggregator.  Regions that verified a later checkpoint will "
               "raise an ALARM (the log does not extend it): the records from index %" PRIu64
               " on are lost (restore them from a backup of storage.dir if there is one; "
               "docs/operations.md says how regions rejoin).\n",
               rep.records_kept);
    return 0;
}

int fa_cmd_audit(int argc, char **argv)
{
    struct opts o;
    fa_error err;
    const char *cmd;
    int rc;

    if (argc < 2) {
        fputs(usage_text, stderr);
        return 2;
    }
    cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        fputs(usage_text, stdout);
        return 0;
    }
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_text, stdout);
            return 0;
        }
    if (sodium_init() < 0) {
        fprintf(stderr, PROG ": libsodium failed to initialise\n");
        return 1;
    }
    fa_error_clear(&err);
    rc = parse_opts(argc, argv, &o, &err);
    if (rc != 0) {
        fa_audit_cli_free_keys(o.keys, o.nkeys);
        return rc;
    }
    if (!strcmp(cmd, "verify"))
        rc = cmd_verify(&o);
    else if (!strcmp(cmd, "show"))
        rc = cmd_show(&o);
    else if (!strcmp(cmd, "prove"))
        rc = cmd_prove(&o);
    else if (!strcmp(cmd, "check-proof"))
        rc = cmd_check_proof(&o);
    else if (!strcmp(cmd, "consistency"))
        rc = cmd_consistency(&o);
    else if (!strcmp(cmd, "checkpoint"))
        rc = cmd_checkpoint(&o);
    else if (!strcmp(cmd, "key"))
        rc = cmd_key(&o);
    else if (!strcmp(cmd, "privacy"))
        rc = cmd_privacy(&o);
    else if (!strcmp(cmd, "repair"))
        rc = cmd_repair(&o);
    else if (!strcmp(cmd, "lineage"))
        rc = cmd_lineage(&o);
    else
        rc = usage_error("unknown command '%s'", cmd);
    fa_audit_cli_free_keys(o.keys, o.nkeys);
    return rc;
}
