/* admin_render.c - tables and the watch frame.  See admin_render.h. */
#include "tools/admin_render.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "aggregator/dashboard.h"
#include "crypto/secagg.h"

/* ------------------------------------------------------------ documents */

static int num(const json_t *o, const char *key, double *v)
{
    const json_t *x = json_object_get(o, key);
    if (!json_is_number(x))
        return 0;
    *v = json_number_value(x);
    return isfinite(*v);
}

static double num_or(const json_t *o, const char *key, double dflt)
{
    double v;
    return num(o, key, &v) ? v : dflt;
}

static const char *str_or(const json_t *o, const char *key, const char *dflt)
{
    const json_t *x = json_object_get(o, key);
    return json_is_string(x) ? json_string_value(x) : dflt;
}

static json_t *load(const char *prog, const char *json)
{
    json_error_t je;
    json_t *o = json_loads(json, 0, &je);
    if (!o || !json_is_object(o)) {
        fprintf(stderr, "fedagg %s: the aggregator's answer is not a JSON object (%s)\n", prog,
                o ? "another JSON value" : je.text);
        json_decref(o);
        return NULL;
    }
    return o;
}

/* "jo, ann" from an array of strings; "-" when empty. */
static void names(const json_t *a, char *buf, size_t n)
{
    size_t i, len = 0;
    const json_t *x;
    buf[0] = '\0';
    if (json_is_array(a))
        json_array_foreach(a, i, x)
        {
            if (!json_is_string(x) || len + 1 >= n)
                continue;
            snprintf(buf + len, n - len, "%s%s", len ? "," : "", json_string_value(x));
            len = strlen(buf);
        }
    if (!buf[0])
        snprintf(buf, n, "-");
}

static const char *region_state(const json_t *r)
{
    return json_is_true(json_object_get(r, "drained"))     ? "drained"
           : json_is_true(json_object_get(r, "connected")) ? "connected"
                                                           : "offline";
}

static void last_seen(const json_t *r, uint64_t now, char *buf, size_t n)
{
    double d;
    if (num(r, "last_seen_unix_ms", &d) && d > 0)
        fa_dashboard_fmt_ago((double)now - d, buf, n);
    else if (num(r, "last_seen_ms_ago", &d))
        fa_dashboard_fmt_ago(d, buf, n);
    else
        snprintf(buf, n, "never");
}

static void privacy(const json_t *r, char *buf, size_t n)
{
    const json_t *p = json_object_get(r, "privacy");
    double e, b;
    if (!json_is_object(p) || !num(p, "epsilon", &e)) {
        snprintf(buf, n, "-");
        return;
    }
    if (num(p, "budget_epsilon", &b) && b > 0)
        snprintf(buf, n, "eps %.3g of %.3g (%.0f%%)", e, b, 100 * e / b);
    else
        snprintf(buf, n, "eps %.3g", e);
}

/* The accuracies of a version as "global 81.00% federated 79.00%". */
static void version_acc(const json_t *doc, const json_t *attempt, double version, char *buf,
                        size_t n)
{
    static const char *keys[] = {"global_accuracy", "central_accuracy", "federated_accuracy"};
    static const char *labels[] = {"global", "central", "federated"};
    const json_t *vs = json_object_get(doc, "versions"), *o, *src = NULL;
    size_t i, len = 0;
    double v;

    buf[0] = '\0';
    if (json_is_array(vs))
        json_array_foreach(vs, i, o)
        {
            if (num(o, "version", &v) && v == version)
                src = o;
        }
    if (!src)
        src = attempt;
    for (int k = 0; k < 3 && src; k++)
        if (num(src, keys[k], &v) && len + 1 < n) {
            snprintf(buf + len, n - len, "%s%s %.2f%%", len ? " " : "", labels[k], 100 * v);
            len = strlen(buf);
        }
    if (!buf[0])
        snprintf(buf, n, "-");
}

/* ----------------------------------------------------------------- tables */

/* Display width of UTF-8 text (code points; our texts have no wide ones). */
static size_t width(const char *s)
{
    size_t w = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80)
            w++;
    return w;
}

struct table {
    size_t ncols, nrows, cap;
    const char *const *head;
    const char *right; /* 'r' per right-aligned column */
    char **cells;      /* nrows * ncols */
    int oom;
};

static void row(struct table *t, ...)
{
    va_list ap;
    if (t->oom)
        return;
    if (t->nrows == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        char **nc = realloc(t->cells, cap * t->ncols * sizeof(char *));
        if (!nc) {
            t->oom = 1;
            return;
        }
        t->cells = nc;
        t->cap = cap;
    }
    va_start(ap, t);
    for (size_t c = 0; c < t->ncols; c++) {
        const char *v = va_arg(ap, const char *);
        char *d = strdup(v ? v : "-");
        if (!d)
            t->oom = 1;
        t->cells[t->nrows * t->ncols + c] = d;
    }
    va_end(ap);
    t->nrows++;
}

static void pad(FILE *out, size_t n)
{
    while (n--)
        fputc(' ', out);
}

static void table_print(FILE *out, struct table *t)
{
    size_t w[16] = {0};
    for (size_t c = 0; c < t->ncols && c < 16; c++) {
        w[c] = width(t->head[c]);
        for (size_t r = 0; r < t->nrows; r++) {
            const char *v = t->cells[r * t->ncols + c];
            if (v && width(v) > w[c])
                w[c] = width(v);
        }
    }
    for (size_t r = 0; r <= t->nrows; r++) {
        size_t owed = 0; /* spaces written only before more text: no trailing blanks */
        for (size_t c = 0; c < t->ncols && c < 16; c++) {
            const char *v = r == 0 ? t->head[c] : t->cells[(r - 1) * t->ncols + c];
            int right = t->right && t->right[c] == 'r';
            size_t vw;
            if (!v)
                v = "?";
            vw = width(v);
            if (right)
                owed += w[c] - vw;
            if (*v) {
                pad(out, owed);
                fputs(v, out);
                owed = 0;
            }
            owed += (right ? 0 : w[c] - vw) + 2;
        }
        fputc('\n', out);
    }
    for (size_t i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    t->cells = NULL;
}

/* ------------------------------------------------------------- commands */

static void regions_table(FILE *out, const json_t *rs, uint64_t now)
{
    static const char *const head[] = {"REGION",   "STATE", "LAST SEEN", "ROUNDS",
                                       "DROPOUTS", "BYTES", "PRIVACY"};
    struct table t = {7, 0, 0, head, "   rrr ", NULL, 0};
    size_t i;
    const json_t *r;

    json_array_foreach(rs, i, r)
    {
        char seen[32], rounds[24], drop[24], bytes[32], pv[64];
        last_seen(r, now, seen, sizeof(seen));
        snprintf(rounds, sizeof(rounds), "%.0f", num_or(r, "rounds_participated", 0));
        snprintf(drop, sizeof(drop), "%.0f", num_or(r, "dropouts", 0));
        fa_dashboard_fmt_bytes(num_or(r, "bytes_received", 0), bytes, sizeof(bytes));
        privacy(r, pv, sizeof(pv));
        row(&t, str_or(r, "id", "?"), region_state(r), seen, rounds, drop, bytes, pv);
    }
    table_print(out, &t);
}

int fa_admin_render_status(FILE *out, const char *prog, const char *json, uint64_t now)
{
    json_t *st = load(prog, json);
    const json_t *storage, *fe, *ce, *audit, *rs, *ddp;
    char t1[64], t2[64];
    double d, e;

    if (!st)
        return 1;
    fprintf(out, "Federation %s\n", str_or(st, "federation_id", "?"));
    fprintf(out, "  round %.0f, attempt %.0f, phase %s", num_or(st, "round", 0),
            num_or(st, "attempt", 0), str_or(st, "phase", "?"));
    if (num(st, "phase_deadline_unix_ms", &d)) {
        fa_dashboard_fmt_utc(d, t1, sizeof(t1));
        if (d > (double)now)
            fprintf(out, " (deadline in %.0f s, %s)", ceil((d - (double)now) / 1000), t1);
        else
            fprintf(out, " (deadline passed, %s)", t1);
    }
    fputc('\n', out);
    if (json_is_true(json_object_get(st, "paused")))
        fprintf(out, "  PAUSED by %s: no new round opens until `fedagg resume`\n",
                str_or(st, "paused_by", "an operator"));
    fprintf(out, "  model version %.0f", num_or(st, "model_version", 0));
    if (num(st, "num_tensors", &d) && num(st, "num_params", &e))
        fprintf(out, " (%.0f tensors, %.0f federated parameters)", d, e);
    fprintf(out, "\n  rounds completed %.0f, attempts aborted %.0f\n",
            num_or(st, "rounds_completed", 0), num_or(st, "rounds_aborted", 0));
    fprintf(out, "  accuracy:");
    {
        int any = 0;
        fe = json_object_get(st, "federated_eval");
        ce = json_object_get(st, "central_eval");
        if (num(st, "eval_accuracy", &d)) {
            fprintf(out, " global %.2f%% (version %.0f)", 100 * d, num_or(st, "eval_version", 0));
            any = 1;
        }
        if (json_is_object(ce) && num(ce, "accuracy", &d)) {
            fprintf(out, "%s central %.2f%% (version %.0f)", any ? "," : "", 100 * d,
                    num_or(ce, "version", 0));
            any = 1;
        }
        if (json_is_object(fe) && num(fe, "accuracy", &d)) {
            fprintf(out, "%s federated %.2f%% (version %.0f, %.0f regions)", any ? "," : "",
                    100 * d, num_or(fe, "version", 0), num_or(fe, "regions", 0));
            any = 1;
        }
        if (!any)
            fprintf(out, " none yet");
    }
    fputc('\n', out);
    storage = json_object_get(st, "storage");
    if (json_is_object(storage)) {
        if (json_is_false(json_object_get(storage, "ok")))
            fprintf(out, "  storage BLOCKED: %s", str_or(storage, "reason", "?"));
        else
            fprintf(out, "  storage ok");
        if (num(storage, "free_bytes", &d)) {
            fa_dashboard_fmt_bytes(d, t2, sizeof(t2));
            fprintf(out, ", %s free", t2);
        }
        fputc('\n', out);
    }
    ddp = json_object_get(st, "distributed_dp");
    if (json_is_object(ddp)) {
        fprintf(out, "  distributed DP: noise multiplier %g, clip %g, %.0f regions' noise charged",
                num_or(ddp, "noise_multiplier", 0), num_or(ddp, "clip", 0),
                num_or(ddp, "min_regions", 0));
        if (num(ddp, "epsilon_total", &d))
            fprintf(
                out,
                "; epsilon %.4g at delta %g after %.0f rounds (the last with %.0f regions' noise)",
                d, num_or(ddp, "delta", 0), num_or(ddp, "rounds_accounted", 0),
                num_or(ddp, "noisy_contributions_last", 0));
        else
            fprintf(out, "; no round accounted yet");
        fputc('\n', out);
    }
    audit = json_object_get(st, "audit");
    fprintf(out, "  audit log %.0f records",
            json_is_object(audit) ? num_or(audit, "tree_size", num_or(st, "audit_tree_size", 0))
                                  : num_or(st, "audit_tree_size", 0));
    if (json_is_object(audit))
        fprintf(out, " (%.0f in the latest signed checkpoint)", num_or(audit, "signed_size", 0));
    fputc('\n', out);
    rs = json_object_get(st, "regions");
    if (json_is_array(rs) && json_array_size(rs)) {
        fputc('\n', out);
        regions_table(out, rs, now);
    }
    json_decref(st);
    return 0;
}

int fa_admin_render_regions(FILE *out, const char *prog, const char *json, uint64_t now)
{
    json_t *d = load(prog, json);
    const json_t *rs;
    if (!d)
        return 1;
    rs = json_object_get(d, "regions");
    if (!json_is_array(rs)) {
        fprintf(stderr, "fedagg %s: the answer has no \"regions\" list\n", prog);
        json_decref(d);
        return 1;
    }
    regions_table(out, rs, now);
    json_decref(d);
    return 0;
}

int fa_admin_render_rounds(FILE *out, const char *prog, const char *json, size_t last)
{
    static const char *const head[] = {"ROUND",     "ATTEMPT", "OUTCOME", "STARTED",     "SECONDS",
                                       "ADVERTISE", "SHARES",  "MASKED",  "CONSISTENCY", "UNMASK",
                                       "REGIONS",   "DROPPED", "VERSION", "ACCURACY",    "REASON"};
    struct table t = {15, 0, 0, head, "rr  rrrrrrr r  ", NULL, 0};
    json_t *d = load(prog, json);
    const json_t *rs;
    size_t n, first;

    if (!d)
        return 1;
    rs = json_object_get(d, "rounds");
    if (!json_is_array(rs)) {
        fprintf(stderr, "fedagg %s: the answer has no \"rounds\" list\n", prog);
        json_decref(d);
        return 1;
    }
    n = json_array_size(rs);
    first = last && n > last ? n - last : 0;
    for (size_t i = first; i < n; i++) {
        const json_t *a = json_array_get(rs, i), *ph = json_object_get(a, "phases");
        char r[24], at[24], start[64], secs[32], p[FA_SECAGG_N_PHASES][32], parts[24], dropped[256],
            ver[24], acc[160];
        double v, s;
        snprintf(r, sizeof(r), "%.0f", num_or(a, "round", 0));
        snprintf(at, sizeof(at), "%.0f", num_or(a, "attempt", 0));
        fa_dashboard_fmt_utc(num_or(a, "start_unix_ms", 0), start, sizeof(start));
        if (num(a, "seconds", &s))
            snprintf(secs, sizeof(secs), "%.2f", s);
        else
            snprintf(secs, sizeof(secs), "-");
        for (int k = 0; k < FA_SECAGG_N_PHASES; k++)
            if (json_is_object(ph) && num(ph, fa_secagg_phase_names[k], &s))
                snprintf(p[k], sizeof(p[k]), "%.2f", s);
            else
                snprintf(p[k], sizeof(p[k]), "-");
        snprintf(parts, sizeof(parts), "%zu", json_array_size(json_object_get(a, "participants")));
        names(json_object_get(a, "dropped"), dropped, sizeof(dropped));
        if (num(a, "version", &v)) {
            snprintf(ver, sizeof(ver), "%.0f", v);
            version_acc(d, a, v, acc, sizeof(acc));
        } else {
            snprintf(ver, sizeof(ver), "-");
            snprintf(acc, sizeof(acc), "-");
        }
        row(&t, r, at, str_or(a, "outcome", "?"), start, secs, p[0], p[1], p[2], p[3], p[4], parts,
            dropped, ver, acc, str_or(a, "reason", ""));
    }
    if (n == 0)
        fprintf(out, "no round attempt has ended yet\n");
    else
        table_print(out, &t);
    json_decref(d);
    return 0;
}

int fa_admin_render_models(FILE *out, const char *prog, const char *json)
{
    static const char *const head[] = {"VERSION", "ROUND", "BYTES", "MASTER", "SHA256"};
    struct table t = {5, 0, 0, head, "rrr  ", NULL, 0};
    json_t *d = load(prog, json);
    const json_t *ms, *m;
    size_t i;

    if (!d)
        return 1;
    ms = json_object_get(d, "models");
    if (!json_is_array(ms)) {
        fprintf(stderr, "fedagg %s: the answer has no \"models\" list\n", prog);
        json_decref(d);
        return 1;
    }
    json_array_foreach(ms, i, m)
    {
        char v[24], r[24], b[32];
        snprintf(v, sizeof(v), "%.0f", num_or(m, "version", 0));
        snprintf(r, sizeof(r), "%.0f", num_or(m, "round", 0));
        fa_dashboard_fmt_bytes(num_or(m, "bytes", 0), b, sizeof(b));
        row(&t, v, r, b, json_is_true(json_object_get(m, "master")) ? "yes" : "no",
            str_or(m, "sha256", "-"));
    }
    table_print(out, &t);
    json_decref(d);
    return 0;
}

int fa_admin_render_audit_head(FILE *out, const char *prog, const char *json)
{
    json_t *d = load(prog, json);
    const char *ck;
    if (!d)
        return 1;
    fprintf(out, "tree size    %.0f\nsigned size  %.0f\nroot         %s\n",
            num_or(d, "tree_size", 0), num_or(d, "signed_size", 0), str_or(d, "root", "-"));
    ck = str_or(d, "checkpoint", NULL);
    if (ck)
        fprintf(out, "\n%s%s", ck, ck[0] && ck[strlen(ck) - 1] == '\n' ? "" : "\n");
    else
        fprintf(out, "\nno signed checkpoint yet\n");
    json_decref(d);
    return 0;
}

/* ---------------------------------------------------------------- watch */

/* A frame: lines cut at cols visible characters, at most rows lines. */
struct frame {
    FILE *out;
    int cols, rows, line, col, color;
};

static void fr_put(struct frame *f, const char *s)
{
    if (f->line >= f->rows)
        return;
    for (; *s; s++) {
        int lead = ((unsigned char)*s & 0xC0) != 0x80;
        if (lead && f->col >= f->cols)
            continue;
        fputc(*s, f->out);
        if (lead)
            f->col++;
    }
}

static void fr_putf(struct frame *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fr_putf(struct frame *f, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fr_put(f, buf);
}

/* SGR attributes ("1" bold, "32" green...; "" resets), when colours are on. */
static void fr_sgr(struct frame *f, const char *code)
{
    if (f->color && f->line < f->rows)
        fprintf(f->out, "\x1b[%sm", code);
}

static void fr_nl(struct frame *f)
{
    if (f->line >= f->rows)
        return;
    fr_sgr(f, "");
    fputc('\n', f->out);
    f->line++;
    f->col = 0;
}

/* A sparkline of the newest global (else federated) accuracies. */
static void sparkline(struct frame *f, const json_t *st, int width_max)
{
    static const char *bars[] = {"\u2581", "\u2582", "\u2583", "\u2584",
                                 "\u2585", "\u2586", "\u2587", "\u2588"};
    const json_t *vs = json_object_get(st, "versions");
    static const char *const keys[] = {"global_accuracy", "federated_accuracy"};
    const char *key = keys[0];
    double vals[64], lo = 1, hi = 0;
    size_t n = 0, total;

    if (!json_is_array(vs))
        return;
    total = json_array_size(vs);
    for (int pass = 0; pass < 2 && n == 0; pass++) {
        key = keys[pass];
        for (size_t i = total > (size_t)width_max ? total - (size_t)width_max : 0;
             i < total && n < 64; i++) {
            double a;
            if (num(json_array_get(vs, i), key, &a)) {
                vals[n++] = a;
                lo = fmin(lo, a);
                hi = fmax(hi, a);
            }
        }
    }
    if (n < 2)
        return;
    fr_putf(f, "  %s per version ", key[0] == 'g' ? "global" : "federated");
    for (size_t i = 0; i < n; i++) {
        int b = hi > lo ? (int)((vals[i] - lo) / (hi - lo) * 7.999) : 7;
        fr_put(f, bars[b < 0 ? 0 : b > 7 ? 7 : b]);
    }
    fr_putf(f, " %.1f%%..%.1f%%", 100 * lo, 100 * hi);
}

void fa_admin_render_watch(FILE *out, const char *json, const char *error, const char *aggregator,
                           uint64_t now, int cols, int rows, int color)
{
    struct frame f = {out, cols > 20 ? cols : 20, rows > 5 ? rows : 5, 0, 0, color};
    json_t *st = json ? json_loads(json, 0, NULL) : NULL;
    const json_t *fe, *ce, *storage, *rs, *rounds;
    char t[64], t2[64];
    double d;

    fa_dashboard_fmt_utc((double)now, t, sizeof(t));
    fr_sgr(&f, "1");
    fr_putf(&f, "fedagg watch  %s", st ? str_or(st, "federation_id", "?") : "");
    fr_sgr(&f, "");
    fr_putf(&f, "  @ %s  %s  (q quits)", aggregator ? aggregator : "?", t);
    fr_nl(&f);
    if (error) {
        fr_sgr(&f, "31");
        fr_putf(&f, "! %s (retrying)", error);
        fr_nl(&f);
    }
    if (!st) {
        fr_nl(&f);
        fr_put(&f, error ? "no status yet" : "waiting for the aggregator...");
        fr_nl(&f);
        return;
    }
    fr_nl(&f);
    fr_sgr(&f, "1");
    fr_putf(&f, "Round %.0f", num_or(st, "round", 0));
    fr_sgr(&f, "");
    fr_putf(&f, "  attempt %.0f  phase ", num_or(st, "attempt", 0));
    fr_sgr(&f, "1;34");
    fr_put(&f, str_or(st, "phase", "?"));
    fr_sgr(&f, "");
    if (num(st, "phase_deadline_unix_ms", &d)) {
        if (d > (double)now)
            fr_putf(&f, "  deadline in %.0f s", ceil((d - (double)now) / 1000));
        else
            fr_put(&f, "  deadline passed");
    }
    if (json_is_true(json_object_get(st, "paused"))) {
        fr_put(&f, "  ");
        fr_sgr(&f, "1;33");
        fr_putf(&f, "PAUSED by %s", str_or(st, "paused_by", "an operator"));
        fr_sgr(&f, "");
    }
    fr_nl(&f);
    fr_putf(&f, "Model version %.0f  rounds completed %.0f, aborted %.0f",
            num_or(st, "model_version", 0), num_or(st, "rounds_completed", 0),
            num_or(st, "rounds_aborted", 0));
    storage = json_object_get(st, "storage");
    if (json_is_object(storage)) {
        if (json_is_false(json_object_get(storage, "ok"))) {
            fr_put(&f, "  ");
            fr_sgr(&f, "1;31");
            fr_putf(&f, "storage BLOCKED: %s", str_or(storage, "reason", "?"));
            fr_sgr(&f, "");
        } else if (num(storage, "free_bytes", &d)) {
            fa_dashboard_fmt_bytes(d, t2, sizeof(t2));
            fr_putf(&f, "  storage ok, %s free", t2);
        }
    }
    fr_nl(&f);
    {
        const json_t *ddp = json_object_get(st, "distributed_dp");
        if (json_is_object(ddp)) {
            fr_putf(&f, "Distributed DP  z %g  ", num_or(ddp, "noise_multiplier", 0));
            if (num(ddp, "epsilon_total", &d))
                fr_putf(&f,
                        "epsilon %.4g (delta %g) after %.0f rounds, last %.0f/%.0f regions' noise",
                        d, num_or(ddp, "delta", 0), num_or(ddp, "rounds_accounted", 0),
                        num_or(ddp, "noisy_contributions_last", 0), num_or(ddp, "min_regions", 0));
            else
                fr_put(&f, "no round accounted yet");
            fr_nl(&f);
        }
    }
    fr_put(&f, "Accuracy ");
    fe = json_object_get(st, "federated_eval");
    ce = json_object_get(st, "central_eval");
    if (num(st, "eval_accuracy", &d))
        fr_putf(&f, " global %.2f%% (v%.0f)", 100 * d, num_or(st, "eval_version", 0));
    if (json_is_object(ce) && num(ce, "accuracy", &d))
        fr_putf(&f, "  central %.2f%% (v%.0f)", 100 * d, num_or(ce, "version", 0));
    if (json_is_object(fe) && num(fe, "accuracy", &d))
        fr_putf(&f, "  federated %.2f%% (v%.0f, %.0f regions)", 100 * d, num_or(fe, "version", 0),
                num_or(fe, "regions", 0));
    fr_nl(&f);
    if (f.cols > 40) {
        int before = f.line;
        sparkline(&f, st, f.cols - 40 < 64 ? f.cols - 40 : 64);
        if (f.col > 0 || f.line != before)
            fr_nl(&f);
    }
    fr_nl(&f);

    rs = json_object_get(st, "regions");
    fr_sgr(&f, "1");
    fr_putf(&f, "%-16s %-10s %-12s %7s %9s %12s  %s", "REGION", "STATE", "LAST SEEN", "ROUNDS",
            "DROPOUTS", "BYTES", "PRIVACY");
    fr_nl(&f);
    if (json_is_array(rs)) {
        size_t i;
        const json_t *r;
        json_array_foreach(rs, i, r)
        {
            const char *state = region_state(r);
            char seen[32], bytes[32], pv[64];
            last_seen(r, now, seen, sizeof(seen));
            fa_dashboard_fmt_bytes(num_or(r, "bytes_received", 0), bytes, sizeof(bytes));
            privacy(r, pv, sizeof(pv));
            fr_putf(&f, "%-16s ", str_or(r, "id", "?"));
            fr_sgr(&f, !strcmp(state, "connected") ? "32" : !strcmp(state, "drained") ? "31" : "2");
            fr_putf(&f, "%-10s", state);
            fr_sgr(&f, "");
            fr_putf(&f, " %-12s %7.0f %9.0f %12s  %s", seen, num_or(r, "rounds_participated", 0),
                    num_or(r, "dropouts", 0), bytes, pv);
            fr_nl(&f);
        }
    }
    rounds = json_object_get(st, "rounds");
    if (json_is_array(rounds) && json_array_size(rounds) && f.line + 3 < f.rows) {
        size_t n = json_array_size(rounds), room = (size_t)(f.rows - f.line - 3);
        fr_nl(&f);
        fr_sgr(&f, "1");
        fr_putf(&f, "%6s %7s  %-9s %9s  %s", "ROUND", "ATTEMPT", "OUTCOME", "SECONDS",
                "DROPPED / REASON");
        fr_nl(&f);
        for (size_t j = 0; j < n && j < room && j < 8; j++) {
            const json_t *a = json_array_get(rounds, n - 1 - j);
            const char *outcome = str_or(a, "outcome", "?");
            char dropped[256];
            names(json_object_get(a, "dropped"), dropped, sizeof(dropped));
            fr_putf(&f, "%6.0f %7.0f  ", num_or(a, "round", 0), num_or(a, "attempt", 0));
            fr_sgr(&f, !strcmp(outcome, "completed") ? "32" : "31");
            fr_putf(&f, "%-9s", outcome);
            fr_sgr(&f, "");
            fr_putf(&f, " %9.2f  %s%s%s", num_or(a, "seconds", 0), dropped,
                    json_object_get(a, "reason") ? " / " : "", str_or(a, "reason", ""));
            fr_nl(&f);
        }
    }
    json_decref(st);
}
