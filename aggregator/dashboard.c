/* dashboard.c - the status document as one HTML page.  See dashboard.h.
 *
 * The page is built in one growable buffer; every string that comes from
 * the document goes through put_esc().  Numbers are formatted here, never
 * copied as text from the document, so only escaped strings and our own
 * digits reach the page. */
#include "aggregator/dashboard.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/fa_strbuf.h"
#include "crypto/secagg.h"

/* ------------------------------------------------------------------ page */

static void put_esc(fa_strbuf *b, const char *s)
{
    const char *run = s;
    for (; s && *s; s++) {
        const char *rep = NULL;
        switch (*s) {
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '"': rep = "&quot;"; break;
        case '\'': rep = "&#39;"; break;
        default: break;
        }
        if (rep) {
            fa_strbuf_put(b, run, (size_t)(s - run));
            fa_strbuf_puts(b, rep);
            run = s + 1;
        }
    }
    if (run && s)
        fa_strbuf_put(b, run, (size_t)(s - run));
}

/* ------------------------------------------------------------ the document */

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

static const char *str(const json_t *o, const char *key)
{
    const json_t *x = json_object_get(o, key);
    return json_is_string(x) ? json_string_value(x) : NULL;
}

static int flag(const json_t *o, const char *key)
{
    return json_is_true(json_object_get(o, key));
}

/* ---------------------------------------------------------------- formats */

void fa_dashboard_fmt_bytes(double v, char *buf, size_t n)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, n, "%.0f B", v);
    else
        snprintf(buf, n, "%.*f %s", v < 10 ? 2 : v < 100 ? 1 : 0, v, units[u]);
}

void fa_dashboard_fmt_utc(double unix_ms, char *buf, size_t n)
{
    time_t t = (time_t)(unix_ms / 1000);
    struct tm tm;
    if (unix_ms <= 0 || !gmtime_r(&t, &tm) || !strftime(buf, n, "%Y-%m-%d %H:%M:%SZ", &tm))
        snprintf(buf, n, "-");
}

void fa_dashboard_fmt_secs(double s, char *buf, size_t n)
{
    if (s < 0)
        snprintf(buf, n, "-");
    else if (s < 10)
        snprintf(buf, n, "%.2f s", s);
    else if (s < 120)
        snprintf(buf, n, "%.1f s", s);
    else if (s < 7200)
        snprintf(buf, n, "%.0f min %.0f s", floor(s / 60), fmod(s, 60));
    else
        snprintf(buf, n, "%.1f h", s / 3600);
}

/* "3 s ago", "5 min ago"... for a span in ms. */
void fa_dashboard_fmt_ago(double ms, char *buf, size_t n)
{
    double s = ms / 1000;
    if (s < 0)
        s = 0;
    if (s < 120)
        snprintf(buf, n, "%.0f s ago", s);
    else if (s < 7200)
        snprintf(buf, n, "%.0f min ago", s / 60);
    else if (s < 172800)
        snprintf(buf, n, "%.0f h ago", s / 3600);
    else
        snprintf(buf, n, "%.0f d ago", s / 86400);
}

static void fmt_acc(double v, char *buf, size_t n)
{
    snprintf(buf, n, "%.2f%%", 100 * v);
}

/* ------------------------------------------------------------------ style */

static const char STYLE[] =
    "<style>\n"
    ":root{--ink:#1d2330;--mute:#5b6475;--line:#d9dee7;--bg:#f5f7fa;--card:#fff;"
    "--ok:#1a7f37;--warn:#b35900;--bad:#c62828;--accent:#2456a6}\n"
    "*{box-sizing:border-box}\n"
    "body{margin:0;font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;"
    "color:var(--ink);background:var(--bg)}\n"
    "header{background:#1d2330;color:#fff;padding:14px 24px;display:flex;align-items:baseline;"
    "gap:16px;flex-wrap:wrap}\n"
    "header h1{font-size:20px;margin:0;font-weight:600}\n"
    "header .meta{color:#c5cbd6;font-size:13px}\n"
    "main{padding:18px 24px;max-width:1280px}\n"
    "section{background:var(--card);border:1px solid var(--line);border-radius:8px;"
    "padding:14px 18px;margin:0 0 18px}\n"
    "h2{font-size:16px;margin:0 0 10px;font-weight:600}\n"
    ".cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(180px,1fr));gap:12px}\n"
    ".card{border:1px solid var(--line);border-radius:6px;padding:10px 12px;background:#fbfcfe}\n"
    ".card .label{color:var(--mute);font-size:12px;text-transform:uppercase;letter-spacing:.04em}"
    "\n"
    ".card .value{font-size:22px;font-weight:600;margin-top:2px}\n"
    ".card .sub{color:var(--mute);font-size:12px}\n"
    "table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}\n"
    "th,td{text-align:left;padding:6px 10px;border-bottom:1px solid var(--line);"
    "vertical-align:top}\n"
    "th{color:var(--mute);font-weight:600;font-size:12px;background:#f8f9fb}\n"
    "td.n,th.n{text-align:right}\n"
    "tbody tr:nth-child(even){background:#fafbfc}\n"
    ".state,.phase,.outcome{display:inline-block;padding:1px 8px;border-radius:10px;"
    "font-size:12px;font-weight:600}\n"
    ".state-connected,.outcome-completed{background:#dcf3e3;color:var(--ok)}\n"
    ".state-offline{background:#eceff3;color:var(--mute)}\n"
    ".state-drained,.outcome-aborted{background:#fde2e1;color:var(--bad)}\n"
    ".state-running,.state-finished{background:#dcf3e3;color:var(--ok)}\n"
    ".state-paused{background:#fff4e0;color:var(--warn)}\n"
    ".state-stopped{background:#fde2e1;color:var(--bad)}\n"
    ".state-archived{background:#eceff3;color:var(--mute)}\n"
    ".federation>h2{font-size:18px}\n"
    ".phase{background:#dde7f7;color:var(--accent)}\n"
    ".banner{padding:10px 14px;border-radius:6px;margin:0 0 18px;font-weight:600}\n"
    ".banner.paused{background:#fff4e0;border:1px solid #f0c27a;color:var(--warn)}\n"
    ".banner.blocked{background:#fde2e1;border:1px solid #f1a7a3;color:var(--bad)}\n"
    ".empty{color:var(--mute);font-style:italic}\n"
    ".legend{list-style:none;padding:0;margin:6px 0 0;display:flex;gap:18px;flex-wrap:wrap;"
    "color:var(--mute);font-size:12px}\n"
    ".legend i{display:inline-block;width:12px;height:12px;border-radius:2px;"
    "margin-right:6px;vertical-align:-1px}\n"
    "svg text{font:11px system-ui,sans-serif;fill:#5b6475}\n"
    "pre{background:#f3f5f8;border:1px solid var(--line);border-radius:6px;padding:10px;"
    "overflow-x:auto;font-size:12px}\n"
    ".mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;"
    "word-break:break-all}\n"
    "footer{color:var(--mute);font-size:12px;padding:0 24px 24px}\n"
    "</style>\n";

static void page_head(fa_strbuf *b, const char *title_text)
{
    fa_strbuf_puts(b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    fa_strbuf_printf(b, "<meta http-equiv=\"refresh\" content=\"%d\">\n", FA_DASHBOARD_REFRESH_S);
    fa_strbuf_puts(b, "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\n"
                      "<meta name=\"robots\" content=\"noindex\">\n<title>");
    put_esc(b, title_text);
    fa_strbuf_puts(b, "</title>\n");
    fa_strbuf_puts(b, STYLE);
    fa_strbuf_puts(b, "</head>\n<body>\n");
}

/* --------------------------------------------------------------- overview */

static void card(fa_strbuf *b, const char *label, const char *id, const char *value,
                 const char *sub)
{
    fa_strbuf_puts(b, "<div class=\"card\"><div class=\"label\">");
    fa_strbuf_puts(b, label);
    fa_strbuf_puts(b, "</div><div class=\"value\"");
    if (id)
        fa_strbuf_printf(b, " id=\"%s\"", id);
    fa_strbuf_puts(b, ">");
    put_esc(b, value);
    fa_strbuf_puts(b, "</div>");
    if (sub && sub[0]) {
        fa_strbuf_puts(b, "<div class=\"sub\">");
        put_esc(b, sub);
        fa_strbuf_puts(b, "</div>");
    }
    fa_strbuf_puts(b, "</div>\n");
}

static void overview(fa_strbuf *b, const json_t *st, uint64_t now)
{
    const char *phase = str(st, "phase");
    const json_t *storage = json_object_get(st, "storage");
    const json_t *audit = json_object_get(st, "audit");
    char v[160], sub[256], t1[64];
    double d, e;

    if (flag(st, "paused")) {
        const char *by = str(st, "paused_by");
        fa_strbuf_puts(b, "<div class=\"banner paused\" id=\"paused\">Paused");
        if (by) {
            fa_strbuf_puts(b, " by ");
            put_esc(b, by);
        }
        fa_strbuf_puts(b, ": no new round opens until an operator resumes the federation "
                          "(<code>fedagg resume</code>).</div>\n");
    }
    if (json_is_object(storage) && json_is_false(json_object_get(storage, "ok"))) {
        const char *why = str(storage, "reason");
        fa_strbuf_puts(b, "<div class=\"banner blocked\" id=\"storage-blocked\">Storage blocked: ");
        put_esc(b, why ? why : "the storage cannot take a round");
        fa_strbuf_puts(b, ". No attempt opens until a check succeeds.</div>\n");
    }

    fa_strbuf_puts(b, "<section id=\"overview\"><h2>Federation</h2><div class=\"cards\">\n");
    snprintf(v, sizeof(v), "%.0f", num_or(st, "round", 0));
    snprintf(sub, sizeof(sub), "attempt %.0f", num_or(st, "attempt", 0));
    card(b, "Round", "round", v, sub);

    sub[0] = '\0';
    if (num(st, "phase_deadline_unix_ms", &d)) {
        fa_dashboard_fmt_utc(d, t1, sizeof(t1));
        if (d > (double)now)
            snprintf(sub, sizeof(sub), "deadline in %.0f s (%s)", ceil((d - (double)now) / 1000),
                     t1);
        else
            snprintf(sub, sizeof(sub), "deadline passed (%s)", t1);
    }
    fa_strbuf_puts(b, "<div class=\"card\"><div class=\"label\">Phase</div><div class=\"value\">"
                      "<span class=\"phase\" id=\"phase\">");
    put_esc(b, phase ? phase : "unknown");
    fa_strbuf_puts(b, "</span></div>");
    if (sub[0]) {
        fa_strbuf_puts(b, "<div class=\"sub\" id=\"phase-deadline\">");
        put_esc(b, sub);
        fa_strbuf_puts(b, "</div>");
    }
    fa_strbuf_puts(b, "</div>\n");

    snprintf(v, sizeof(v), "%.0f", num_or(st, "model_version", 0));
    sub[0] = '\0';
    if (num(st, "num_params", &d) && num(st, "num_tensors", &e))
        snprintf(sub, sizeof(sub), "%.0f tensors, %.0f federated parameters", e, d);
    card(b, "Model version", "model-version", v, sub);

    snprintf(v, sizeof(v), "%.0f", num_or(st, "rounds_completed", 0));
    snprintf(sub, sizeof(sub), "%.0f attempts aborted", num_or(st, "rounds_aborted", 0));
    card(b, "Rounds completed", "rounds-completed", v, sub);

    /* The latest accuracies: built-in evaluation, evaluator command, regions. */
    if (num(st, "eval_accuracy", &d)) {
        fmt_acc(d, v, sizeof(v));
        snprintf(sub, sizeof(sub), "built-in evaluation, version %.0f",
                 num_or(st, "eval_version", 0));
        card(b, "Global accuracy", "global-accuracy", v, sub);
    }
    {
        const json_t *c = json_object_get(st, "central_eval");
        if (json_is_object(c) && num(c, "accuracy", &d)) {
            fmt_acc(d, v, sizeof(v));
            snprintf(sub, sizeof(sub), "evaluator command, version %.0f", num_or(c, "version", 0));
            card(b, "Central accuracy", "central-accuracy", v, sub);
        }
    }
    {
        const json_t *f = json_object_get(st, "federated_eval");
        if (json_is_object(f) && num(f, "accuracy", &d)) {
            fmt_acc(d, v, sizeof(v));
            snprintf(sub, sizeof(sub), "version %.0f, %.0f regions, %.0f examples",
                     num_or(f, "version", 0), num_or(f, "regions", 0),
                     num_or(f, "num_examples", 0));
            card(b, "Federated accuracy", "federated-accuracy", v, sub);
        }
    }

    if (json_is_object(storage)) {
        int ok = !json_is_false(json_object_get(storage, "ok"));
        sub[0] = '\0';
        if (num(storage, "free_bytes", &d)) {
            fa_dashboard_fmt_bytes(d, t1, sizeof(t1));
            snprintf(sub, sizeof(sub), "%s free", t1);
        }
        if (num(storage, "failures", &e) && e > 0) {
            size_t l = strlen(sub);
            snprintf(sub + l, sizeof(sub) - l, "%s%.0f failures", l ? ", " : "", e);
        }
        card(b, "Storage", "storage", ok ? "ok" : "blocked", sub);
    }

    /* Distributed DP on the secure sum: the account of the log's rounds. */
    {
        const json_t *ddp = json_object_get(st, "distributed_dp");
        if (json_is_object(ddp)) {
            if (num(ddp, "epsilon_total", &d)) {
                snprintf(v, sizeof(v), "\u03b5 %.4g", d);
                snprintf(sub, sizeof(sub),
                         "at \u03b4 %g after %.0f rounds (the last with %.0f regions' noise); "
                         "noise multiplier %g, clip %g",
                         num_or(ddp, "delta", 0), num_or(ddp, "rounds_accounted", 0),
                         num_or(ddp, "noisy_contributions_last", 0),
                         num_or(ddp, "noise_multiplier", 0), num_or(ddp, "clip", 0));
            } else {
                snprintf(v, sizeof(v), "no round yet");
                snprintf(sub, sizeof(sub), "noise multiplier %g, clip %g, %.0f regions' noise",
                         num_or(ddp, "noise_multiplier", 0), num_or(ddp, "clip", 0),
                         num_or(ddp, "min_regions", 0));
            }
            card(b, "Distributed DP", "distributed-dp", v, sub);
        }
    }

    /* Released models (docs/governance.md): the last promoted version,
     * the channels, a run of rejections. */
    {
        const json_t *g = json_object_get(st, "governance");
        const json_t *pol = json_object_get(g, "policy"), *chans = json_object_get(g, "channels");
        if (json_is_object(g) && (json_is_object(pol) || json_array_size(chans))) {
            size_t i, l;
            const json_t *ch;
            if (num(g, "last_promoted", &d))
                snprintf(v, sizeof(v), "v%.0f", d);
            else
                snprintf(v, sizeof(v), "%s", json_is_object(pol) ? "none yet" : "gate off");
            sub[0] = '\0';
            json_array_foreach(chans, i, ch)
            {
                const char *name = json_string_value(json_object_get(ch, "channel"));
                l = strlen(sub);
                snprintf(sub + l, sizeof(sub) - l, "%s%s v%.0f", l ? ", " : "", name ? name : "?",
                         num_or(ch, "version", 0));
            }
            l = strlen(sub);
            if (num(g, "rejections_in_a_row", &e) && e > 0)
                snprintf(sub + l, sizeof(sub) - l, "%s%.0f rejected in a row", l ? "; " : "", e);
            else if (json_is_object(pol))
                snprintf(sub + l, sizeof(sub) - l, "%s%.0f promoted, %.0f rejected", l ? "; " : "",
                         num_or(g, "promotions", 0), num_or(g, "rejections", 0));
            card(b, "Released model", "released", v, sub);
        }
    }

    {
        double tree = num_or(st, "audit_tree_size", 0), signed_size = tree;
        if (json_is_object(audit)) {
            tree = num_or(audit, "tree_size", tree);
            signed_size = num_or(audit, "signed_size", signed_size);
        }
        snprintf(v, sizeof(v), "%.0f", tree);
        snprintf(sub, sizeof(sub), "records; %.0f in the latest signed checkpoint", signed_size);
        card(b, "Audit log", "audit-size", v, sub);
    }
    fa_strbuf_puts(b, "</div></section>\n");
}

/* ---------------------------------------------------------------- regions */

static void regions(fa_strbuf *b, const json_t *st, uint64_t now)
{
    const json_t *rs = json_object_get(st, "regions");
    size_t i;
    const json_t *r;

    fa_strbuf_puts(b, "<section id=\"regions-section\"><h2>Regions</h2>\n");
    if (!json_is_array(rs) || json_array_size(rs) == 0) {
        fa_strbuf_puts(b, "<p class=\"empty\">No regions in the status.</p></section>\n");
        return;
    }
    fa_strbuf_puts(
        b, "<table id=\"regions\"><thead><tr><th>Region</th><th>State</th><th>Last seen</th>"
           "<th class=\"n\">Rounds</th><th class=\"n\">Dropouts</th>"
           "<th class=\"n\">Bytes received</th><th>Privacy budget</th></tr></thead>\n<tbody>\n");
    json_array_foreach(rs, i, r)
    {
        const char *id = str(r, "id"), *state, *by = str(r, "drained_by");
        const json_t *pv = json_object_get(r, "privacy");
        char seen[64] = "never", bytes[32], t1[64];
        double d, eps, budget;

        if (!json_is_object(r))
            continue;
        state = flag(r, "drained") ? "drained" : flag(r, "connected") ? "connected" : "offline";
        if (num(r, "last_seen_unix_ms", &d) && d > 0) {
            fa_dashboard_fmt_ago((double)now - d, seen, sizeof(seen));
            fa_dashboard_fmt_utc(d, t1, sizeof(t1));
        } else if (num(r, "last_seen_ms_ago", &d)) {
            fa_dashboard_fmt_ago(d, seen, sizeof(seen));
            fa_dashboard_fmt_utc((double)now - d, t1, sizeof(t1));
        } else {
            t1[0] = '\0';
        }
        fa_dashboard_fmt_bytes(num_or(r, "bytes_received", 0), bytes, sizeof(bytes));
        fa_strbuf_puts(b, "<tr><td class=\"region-id\">");
        put_esc(b, id ? id : "?");
        fa_strbuf_printf(b, "</td><td><span class=\"state state-%s\"", state);
        if (by) {
            fa_strbuf_puts(b, " title=\"drained by ");
            put_esc(b, by);
            fa_strbuf_puts(b, "\"");
        }
        fa_strbuf_printf(b, ">%s</span></td><td", state);
        if (t1[0]) {
            fa_strbuf_puts(b, " title=\"");
            put_esc(b, t1);
            fa_strbuf_puts(b, "\"");
        }
        fa_strbuf_printf(b,
                         ">%s</td><td class=\"n\">%.0f</td><td class=\"n\">%.0f</td>"
                         "<td class=\"n\">%s</td><td>",
                         seen, num_or(r, "rounds_participated", 0), num_or(r, "dropouts", 0),
                         bytes);
        if (json_is_object(pv) && num(pv, "epsilon", &eps)) {
            fa_strbuf_printf(b, "&epsilon; %.3g", eps);
            if (num(pv, "budget_epsilon", &budget) && budget > 0) {
                double frac = eps / budget;
                fa_strbuf_printf(b, " of %.3g", budget);
                fa_strbuf_printf(b,
                                 " <svg width=\"80\" height=\"8\" aria-hidden=\"true\">"
                                 "<rect width=\"80\" height=\"8\" rx=\"2\" fill=\"#e6e9ef\"/>"
                                 "<rect width=\"%.1f\" height=\"8\" rx=\"2\" fill=\"%s\"/></svg>",
                                 80 * (frac > 1   ? 1
                                       : frac < 0 ? 0
                                                  : frac),
                                 frac >= 0.9   ? "#c62828"
                                 : frac >= 0.7 ? "#b35900"
                                               : "#2456a6");
            }
            if (num(pv, "delta", &d))
                fa_strbuf_printf(b, " (&delta; %.2g)", d);
        } else {
            fa_strbuf_puts(b, "<span class=\"empty\">not reported</span>");
        }
        fa_strbuf_puts(b, "</td></tr>\n");
    }
    fa_strbuf_puts(b, "</tbody></table></section>\n");
}

/* --------------------------------------------------------- accuracy chart */

enum { S_GLOBAL, S_CENTRAL, S_FEDERATED, S_COUNT };
static const struct {
    const char *key, *label, *color;
} series_info[S_COUNT] = {
    {"global_accuracy", "global (built-in evaluation)", "#2456a6"},
    {"central_accuracy", "central (evaluator command)", "#1a7f37"},
    {"federated_accuracy", "federated (the regions' own data)", "#c2410c"},
};
static const char *const series_names[S_COUNT] = {"global", "central", "federated"};

struct point {
    double version, value;
};

struct series {
    struct point *p;
    size_t n, cap;
};

/* Adds (version, value), replacing an earlier value of the same version. */
static void series_add(struct series *s, double version, double value)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->p[i].version == version) {
            s->p[i].value = value;
            return;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        struct point *np = realloc(s->p, cap * sizeof(*np));
        if (!np)
            return; /* a point fewer; the page still renders */
        s->p = np;
        s->cap = cap;
    }
    s->p[s->n++] = (struct point){version, value};
}

static int by_version(const void *a, const void *b)
{
    const struct point *x = a, *y = b;
    return x->version < y->version ? -1 : x->version > y->version;
}

/* The accuracies per version: the "versions" array when the document has
 * one, else the per-attempt fields of "rounds", else the latest values. */
static void collect(const json_t *st, struct series s[S_COUNT])
{
    const json_t *vs = json_object_get(st, "versions"), *rs = json_object_get(st, "rounds");
    const json_t *src = json_is_array(vs) && json_array_size(vs) ? vs : rs;
    size_t i;
    const json_t *o;
    double v, a;

    if (json_is_array(src))
        json_array_foreach(src, i, o)
        {
            if (!json_is_object(o) || !num(o, "version", &v))
                continue;
            for (int k = 0; k < S_COUNT; k++)
                if (num(o, series_info[k].key, &a))
                    series_add(&s[k], v, a);
        }
    if (s[S_GLOBAL].n == 0 && num(st, "eval_version", &v) && num(st, "eval_accuracy", &a))
        series_add(&s[S_GLOBAL], v, a);
    o = json_object_get(st, "central_eval");
    if (s[S_CENTRAL].n == 0 && json_is_object(o) && num(o, "version", &v) && num(o, "accuracy", &a))
        series_add(&s[S_CENTRAL], v, a);
    o = json_object_get(st, "federated_eval");
    if (s[S_FEDERATED].n == 0 && json_is_object(o) && num(o, "version", &v) &&
        num(o, "accuracy", &a))
        series_add(&s[S_FEDERATED], v, a);
    for (int k = 0; k < S_COUNT; k++)
        if (s[k].n > 1) /* qsort wants a non-null array, even of no element */
            qsort(s[k].p, s[k].n, sizeof(struct point), by_version);
}

#define CW 760.0 /* chart width, px */
#define CH 280.0
#define ML 52.0 /* margins */
#define MR 16.0
#define MT 14.0
#define MB 40.0

static void accuracy_chart(fa_strbuf *b, const json_t *st)
{
    struct series s[S_COUNT] = {{0}};
    double vmin = INFINITY, vmax = -INFINITY, lo = INFINITY, hi = -INFINITY;
    size_t total = 0;

    collect(st, s);
    for (int k = 0; k < S_COUNT; k++)
        for (size_t i = 0; i < s[k].n; i++) {
            vmin = fmin(vmin, s[k].p[i].version);
            vmax = fmax(vmax, s[k].p[i].version);
            lo = fmin(lo, s[k].p[i].value);
            hi = fmax(hi, s[k].p[i].value);
            total++;
        }
    fa_strbuf_puts(b, "<section id=\"accuracy-section\"><h2>Accuracy per model version</h2>\n");
    if (total == 0) {
        fa_strbuf_puts(
            b, "<p class=\"empty\" id=\"accuracy-empty\">No evaluation yet: the built-in "
               "evaluation, the evaluator command and the regions' federated evaluation report "
               "here once a model version has been evaluated.</p></section>\n");
        goto out;
    }
    /* The y range: whole tenths around the data, at least 0.1 wide, in [0, 1]. */
    lo = floor(lo * 10 - 1e-9) / 10;
    hi = ceil(hi * 10 + 1e-9) / 10;
    if (lo < 0)
        lo = 0;
    if (hi > 1)
        hi = 1;
    if (hi - lo < 0.1) {
        if (hi < 1)
            hi = fmin(1, lo + 0.1);
        else
            lo = hi - 0.1;
    }
    if (vmax == vmin) {
        vmin -= 1;
        vmax += 1;
    }
    fa_strbuf_printf(
        b,
        "<svg id=\"accuracy-chart\" role=\"img\" viewBox=\"0 0 %.0f %.0f\" width=\"%.0f\" "
        "height=\"%.0f\" xmlns=\"http://www.w3.org/2000/svg\">\n<title>Accuracy per model "
        "version</title>\n",
        CW, CH, CW, CH);
#define X(v) (ML + ((v)-vmin) / (vmax - vmin) * (CW - ML - MR))
#define Y(a) (CH - MB - ((a)-lo) / (hi - lo) * (CH - MT - MB))
    /* grid and y labels: every 10 points, or 20 over a wider range */
    {
        double step = hi - lo > 0.55 ? 0.2 : 0.1;
        for (double a = lo; a <= hi + 1e-9; a += step)
            fa_strbuf_printf(
                b,
                "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e7ee\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.0f%%</text>\n",
                ML, CW - MR, Y(a), Y(a), ML - 6, Y(a) + 4, 100 * a);
    }
    /* x ticks: at most 10 whole versions */
    {
        double span = vmax - vmin, step = ceil(span / 10);
        if (step < 1)
            step = 1;
        /* at most 11 ticks, also where v + step == v (versions near 2^53) */
        for (int t = 0; t <= 10; t++) {
            double v = ceil(vmin) + step * t;
            if (v > vmax + 1e-9)
                break;
            fa_strbuf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n",
                             X(v), CH - MB + 16, v);
        }
        fa_strbuf_printf(
            b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">model version</text>\n",
            ML + (CW - ML - MR) / 2, CH - 6);
        fa_strbuf_printf(
            b, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#9aa3b2\"/>\n", ML,
            CW - MR, CH - MB, CH - MB);
    }
    /* Federated first, as dashed lines and rings, so that a global point on
     * the same spot (regions evaluating on the same public set) shows in it. */
    for (int k = S_COUNT - 1; k >= 0; k--) {
        int ring = k == S_FEDERATED;
        if (s[k].n == 0)
            continue;
        if (s[k].n > 1) {
            fa_strbuf_printf(
                b,
                "<polyline class=\"line\" data-series=\"%s\" fill=\"none\" stroke=\"%s\" "
                "stroke-width=\"2\"%s points=\"",
                series_names[k], series_info[k].color,
                ring             ? " stroke-dasharray=\"6,4\""
                : k == S_CENTRAL ? " stroke-dasharray=\"2,3\""
                                 : "");
            for (size_t i = 0; i < s[k].n; i++)
                fa_strbuf_printf(b, "%s%.1f,%.1f", i ? " " : "", X(s[k].p[i].version),
                                 Y(s[k].p[i].value));
            fa_strbuf_puts(b, "\"/>\n");
        }
        for (size_t i = 0; i < s[k].n; i++)
            fa_strbuf_printf(
                b,
                "<circle class=\"point\" data-series=\"%s\" data-version=\"%.0f\" "
                "data-value=\"%.6f\" cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" fill=\"%s\" "
                "stroke=\"%s\" stroke-width=\"2\"><title>version %.0f, %s: %.2f%%</title>"
                "</circle>\n",
                series_names[k], s[k].p[i].version, s[k].p[i].value, X(s[k].p[i].version),
                Y(s[k].p[i].value), ring ? "5.5" : "3", ring ? "#fff" : series_info[k].color,
                series_info[k].color, s[k].p[i].version, series_names[k], 100 * s[k].p[i].value);
    }
#undef X
#undef Y
    fa_strbuf_puts(b, "</svg>\n<ul class=\"legend\">");
    for (int k = 0; k < S_COUNT; k++)
        if (s[k].n)
            fa_strbuf_printf(
                b,
                "<li data-series=\"%s\"><i style=\"background:%s\"></i>%s: %zu version%s, "
                "latest %.2f%%</li>",
                series_names[k], series_info[k].color, series_info[k].label, s[k].n,
                s[k].n == 1 ? "" : "s", 100 * s[k].p[s[k].n - 1].value);
    fa_strbuf_puts(b, "</ul></section>\n");
out:
    for (int k = 0; k < S_COUNT; k++)
        free(s[k].p);
}

/* --------------------------------------------------------- round timeline */

static const char *const phase_colors[FA_SECAGG_N_PHASES] = {"#7aa2e3", "#5cc0b5", "#f2b84b",
                                                             "#b08ad9", "#ef7f7f"};

static double attempt_seconds(const json_t *a)
{
    double s, s0, s1;
    if (num(a, "seconds", &s))
        return s;
    if (num(a, "start_unix_ms", &s0) && num(a, "end_unix_ms", &s1) && s1 >= s0)
        return (s1 - s0) / 1000;
    return 0;
}

static void timeline_chart(fa_strbuf *b, const json_t *rs)
{
    size_t n = json_array_size(rs),
           first = n > FA_DASHBOARD_TIMELINE ? n - FA_DASHBOARD_TIMELINE : 0;
    size_t shown = n - first;
    double maxs = 0, bw, pw = CW - ML - MR, ph = CH - MT - MB;

    for (size_t i = first; i < n; i++)
        maxs = fmax(maxs, attempt_seconds(json_array_get(rs, i)));
    if (maxs <= 0)
        maxs = 1;
    bw = pw / (double)(shown < 12 ? 12 : shown);
    fa_strbuf_printf(
        b,
        "<svg id=\"timeline-chart\" role=\"img\" viewBox=\"0 0 %.0f %.0f\" width=\"%.0f\" "
        "height=\"%.0f\" xmlns=\"http://www.w3.org/2000/svg\">\n<title>Round timeline: "
        "seconds per attempt and phase</title>\n",
        CW, CH, CW, CH);
    for (int t = 0; t <= 4; t++) {
        double v = maxs * t / 4, y = CH - MB - ph * t / 4;
        char lab[32];
        fa_dashboard_fmt_secs(v, lab, sizeof(lab));
        fa_strbuf_printf(
            b,
            "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e7ee\"/>"
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
            ML, CW - MR, y, y, ML - 6, y + 4, lab);
    }
    for (size_t i = first; i < n; i++) {
        const json_t *a = json_array_get(rs, i), *phases = json_object_get(a, "phases");
        double total = attempt_seconds(a), y = CH - MB, x = ML + bw * (double)(i - first) + 1,
               w = bw - 2 > 1 ? bw - 2 : 1, used = 0, round = num_or(a, "round", 0);
        const char *outcome = str(a, "outcome");
        int aborted = outcome && !strcmp(outcome, "aborted");

        for (int k = 0; k < FA_SECAGG_N_PHASES; k++) {
            double s, h;
            if (!json_is_object(phases) || !num(phases, fa_secagg_phase_names[k], &s) || s <= 0)
                continue;
            used += s;
            h = s / maxs * ph;
            y -= h;
            fa_strbuf_printf(
                b,
                "<rect class=\"phase\" data-phase=\"%s\" data-round=\"%.0f\" x=\"%.1f\" "
                "y=\"%.1f\" width=\"%.1f\" height=\"%.2f\" fill=\"%s\"><title>round %.0f "
                "attempt %.0f, %s: %.2f s</title></rect>\n",
                fa_secagg_phase_names[k], round, x, y, w, h, phase_colors[k], round,
                num_or(a, "attempt", 0), fa_secagg_phase_names[k], s);
        }
        if (total > used + 1e-3) { /* commit, evaluation hand-off... */
            double h = (total - used) / maxs * ph;
            y -= h;
            fa_strbuf_printf(
                b,
                "<rect class=\"phase\" data-phase=\"other\" data-round=\"%.0f\" x=\"%.1f\" "
                "y=\"%.1f\" width=\"%.1f\" height=\"%.2f\" fill=\"#c9ced8\"><title>round %.0f "
                "attempt %.0f, outside the phases (commit): %.2f s</title></rect>\n",
                round, x, y, w, h, round, num_or(a, "attempt", 0), total - used);
        }
        if (aborted)
            fa_strbuf_printf(b,
                             "<rect class=\"aborted\" data-round=\"%.0f\" x=\"%.1f\" y=\"%.1f\" "
                             "width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#c62828\" "
                             "stroke-width=\"1.5\" stroke-dasharray=\"3,2\"/>\n",
                             round, x, y < CH - MB - 3 ? y : CH - MB - 3, w,
                             CH - MB - (y < CH - MB - 3 ? y : CH - MB - 3));
        if (shown <= 20 || (i - first) % ((shown + 19) / 20) == 0)
            fa_strbuf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n",
                             x + w / 2, CH - MB + 16, round);
    }
    fa_strbuf_printf(
        b,
        "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#9aa3b2\"/>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">round (each bar an attempt; "
        "dashed red: aborted)</text>\n</svg>\n",
        ML, CW - MR, CH - MB, CH - MB, ML + pw / 2, CH - 6);
    fa_strbuf_puts(b, "<ul class=\"legend\">");
    for (int k = 0; k < FA_SECAGG_N_PHASES; k++)
        fa_strbuf_printf(b, "<li><i style=\"background:%s\"></i>%s</li>", phase_colors[k],
                         fa_secagg_phase_names[k]);
    fa_strbuf_puts(b, "<li><i style=\"background:#c9ced8\"></i>commit and the rest</li></ul>\n");
}

/* A version's accuracies as "global 81.2%, federated 79.0%". */
static void version_accuracy(const json_t *st, double version, char *buf, size_t n)
{
    const json_t *vs = json_object_get(st, "versions"), *o;
    size_t i, len = 0;

    buf[0] = '\0';
    if (!json_is_array(vs))
        return;
    json_array_foreach(vs, i, o)
    {
        double v, a;
        if (!num(o, "version", &v) || v != version)
            continue;
        for (int k = 0; k < S_COUNT && len < n; k++)
            if (num(o, series_info[k].key, &a)) {
                snprintf(buf + len, n - len, "%s%s %.2f%%", len ? ", " : "", series_names[k],
                         100 * a);
                len = strlen(buf);
            }
    }
}

static void put_names(fa_strbuf *b, const json_t *list)
{
    size_t i;
    const json_t *x;
    int any = 0;
    if (!json_is_array(list))
        return;
    json_array_foreach(list, i, x)
    {
        if (!json_is_string(x))
            continue;
        if (any++)
            fa_strbuf_puts(b, ", ");
        put_esc(b, json_string_value(x));
    }
}

static void timeline(fa_strbuf *b, const json_t *st)
{
    const json_t *rs = json_object_get(st, "rounds");
    size_t n = json_is_array(rs) ? json_array_size(rs) : 0;

    fa_strbuf_puts(b, "<section id=\"timeline-section\"><h2>Round timeline</h2>\n");
    if (n == 0) {
        fa_strbuf_puts(b, "<p class=\"empty\">No round attempt has ended yet.</p></section>\n");
        return;
    }
    timeline_chart(b, rs);
    fa_strbuf_puts(
        b, "<table id=\"rounds\"><thead><tr><th class=\"n\">Round</th><th class=\"n\">Attempt"
           "</th><th>Outcome</th><th>Started</th><th class=\"n\">Duration</th>");
    for (int k = 0; k < FA_SECAGG_N_PHASES; k++)
        fa_strbuf_printf(b, "<th class=\"n\">%s</th>", fa_secagg_phase_names[k]);
    fa_strbuf_puts(
        b, "<th>Participants</th><th>Dropped</th><th class=\"n\">Version</th><th>Accuracy</th>"
           "</tr></thead>\n<tbody>\n");
    for (size_t j = 0; j < n && j < FA_DASHBOARD_TABLE_ROWS; j++) {
        const json_t *a = json_array_get(rs, n - 1 - j), *ph = json_object_get(a, "phases");
        const char *outcome = str(a, "outcome"), *reason = str(a, "reason");
        char t[64], dur[32], acc[160] = "";
        double v, s;

        fa_dashboard_fmt_utc(num_or(a, "start_unix_ms", 0), t, sizeof(t));
        fa_dashboard_fmt_secs(attempt_seconds(a), dur, sizeof(dur));
        fa_strbuf_printf(b, "<tr><td class=\"n round\">%.0f</td><td class=\"n\">%.0f</td><td>",
                         num_or(a, "round", 0), num_or(a, "attempt", 0));
        if (outcome) {
            fa_strbuf_puts(b, "<span class=\"outcome outcome-");
            put_esc(b, outcome);
            fa_strbuf_puts(b, "\"");
            if (reason) {
                fa_strbuf_puts(b, " title=\"");
                put_esc(b, reason);
                fa_strbuf_puts(b, "\"");
            }
            fa_strbuf_puts(b, ">");
            put_esc(b, outcome);
            fa_strbuf_puts(b, "</span>");
            if (reason) {
                fa_strbuf_puts(b, " <span class=\"empty\">");
                put_esc(b, reason);
                fa_strbuf_puts(b, "</span>");
            }
        }
        fa_strbuf_printf(b, "</td><td>%s</td><td class=\"n\">%s</td>", t, dur);
        for (int k = 0; k < FA_SECAGG_N_PHASES; k++) {
            char ps[32] = "-";
            if (json_is_object(ph) && num(ph, fa_secagg_phase_names[k], &s))
                fa_dashboard_fmt_secs(s, ps, sizeof(ps));
            fa_strbuf_printf(b, "<td class=\"n\">%s</td>", ps);
        }
        fa_strbuf_puts(b, "<td>");
        put_names(b, json_object_get(a, "participants"));
        fa_strbuf_puts(b, "</td><td>");
        put_names(b, json_object_get(a, "dropped"));
        fa_strbuf_puts(b, "</td>");
        if (num(a, "version", &v)) {
            version_accuracy(st, v, acc, sizeof(acc));
            for (int k = 0; k < S_COUNT; k++) { /* per-attempt fields, when present */
                double x;
                size_t l = strlen(acc);
                if (!strstr(acc, series_names[k]) && num(a, series_info[k].key, &x))
                    snprintf(acc + l, sizeof(acc) - l, "%s%s %.2f%%", l ? ", " : "",
                             series_names[k], 100 * x);
            }
            fa_strbuf_printf(b, "<td class=\"n\">%.0f</td><td>%s</td></tr>\n", v, acc);
        } else {
            fa_strbuf_puts(b, "<td class=\"n\">-</td><td></td></tr>\n");
        }
    }
    fa_strbuf_puts(b, "</tbody></table>");
    if (n > FA_DASHBOARD_TABLE_ROWS)
        fa_strbuf_printf(
            b,
            "<p class=\"empty\">The latest %d of %zu attempts; <code>fedagg rounds</code> "
            "lists them all.</p>",
            FA_DASHBOARD_TABLE_ROWS, n);
    fa_strbuf_puts(b, "</section>\n");
}

/* ------------------------------------------------------------------ audit */

static void audit(fa_strbuf *b, const json_t *st)
{
    const json_t *a = json_object_get(st, "audit");
    const char *ck = json_is_object(a) ? str(a, "checkpoint") : NULL;
    const char *root = json_is_object(a) ? str(a, "root") : NULL;

    fa_strbuf_puts(b, "<section id=\"audit-section\"><h2>Audit log</h2>\n");
    fa_strbuf_printf(b, "<p><span id=\"audit-tree-size\">%.0f</span> records",
                     json_is_object(a) ? num_or(a, "tree_size", num_or(st, "audit_tree_size", 0))
                                       : num_or(st, "audit_tree_size", 0));
    if (json_is_object(a))
        fa_strbuf_printf(b, ", %.0f covered by the latest signed checkpoint",
                         num_or(a, "signed_size", 0));
    fa_strbuf_puts(b, ".");
    if (root) {
        fa_strbuf_puts(b, " Root hash: <span class=\"mono\" id=\"audit-root\">");
        put_esc(b, root);
        fa_strbuf_puts(b, "</span>");
    }
    fa_strbuf_puts(b, "</p>\n");
    if (ck) {
        fa_strbuf_puts(b, "<p>The latest signed checkpoint (C2SP signed note; check it with "
                          "<code>fedagg audit verify</code>):</p>\n<pre id=\"checkpoint\">");
        put_esc(b, ck);
        fa_strbuf_puts(b, "</pre>\n");
    } else {
        fa_strbuf_puts(b, "<p class=\"empty\">No signed checkpoint yet.</p>\n");
    }
    fa_strbuf_puts(b, "</section>\n");
}

/* ------------------------------------------------------------------- page */

static int finish(fa_strbuf *b, char **out, size_t *out_len, fa_error *err)
{
    if (b->oom) {
        free(b->data);
        return fa_errorf(err, FA_ERR_NOMEM, "dashboard: out of memory");
    }
    *out = b->data;
    *out_len = b->len;
    return 0;
}

/* ---------------------------------------------------------------- service */

/* Copies src into dst, every ` id="` of it prefixed (a federation's panels,
 * several on one page).  Strings from the document are escaped (a quote is
 * &quot;), so every ` id="` in src is one of ours. */
static void put_prefixed_ids(fa_strbuf *dst, const fa_strbuf *src, const char *prefix)
{
    static const char tag[] = " id=\"";
    const char *p = src->data, *end = src->data + src->len, *at;

    while (p && p < end && (at = strstr(p, tag)) != NULL && at < end) {
        fa_strbuf_put(dst, p, (size_t)(at - p) + strlen(tag));
        fa_strbuf_puts(dst, prefix);
        p = at + strlen(tag);
    }
    if (p && p < end)
        fa_strbuf_put(dst, p, (size_t)(end - p));
    if (src->oom)
        dst->oom = 1;
}

/* The latest accuracy of a federation: built-in, else federated, else the
 * evaluator's; "-" when none. */
static void latest_accuracy(const json_t *f, char *buf, size_t n)
{
    const json_t *fe = json_object_get(f, "federated_eval");
    const json_t *ce = json_object_get(f, "central_eval");
    double v;
    if (num(f, "eval_accuracy", &v) || (json_is_object(fe) && num(fe, "accuracy", &v)) ||
        (json_is_object(ce) && num(ce, "accuracy", &v)))
        fmt_acc(v, buf, n);
    else
        snprintf(buf, n, "-");
}

static void federations_table(fa_strbuf *b, const json_t *feds)
{
    const json_t *f;
    size_t i;

    fa_strbuf_puts(b, "<section id=\"federations-section\"><h2>Federations</h2>\n");
    if (json_array_size(feds) == 0) {
        fa_strbuf_puts(b, "<p class=\"empty\">No federation yet: operators create them with "
                          "<code>fedagg federation create</code>.</p></section>\n");
        return;
    }
    fa_strbuf_puts(b, "<table id=\"federations\"><thead><tr><th>Federation</th><th>Team</th>"
                      "<th>State</th><th class=\"n\">Round</th><th>Phase</th>"
                      "<th class=\"n\">Model</th><th class=\"n\">Accuracy</th>"
                      "<th class=\"n\">Regions</th></tr></thead><tbody>\n");
    json_array_foreach(feds, i, f)
    {
        const char *st = str(f, "state"), *why = str(f, "state_reason");
        const json_t *rs = json_object_get(f, "regions"), *r;
        size_t k, connected = 0;
        char acc[32];
        json_array_foreach(rs, k, r) connected += flag(r, "connected");
        latest_accuracy(f, acc, sizeof(acc));
        fa_strbuf_printf(b, "<tr><td><a href=\"#f%zu\">", i);
        put_esc(b, str(f, "id") ? str(f, "id") : "?");
        fa_strbuf_puts(b, "</a>");
        if (flag(f, "default"))
            fa_strbuf_puts(b, " <span class=\"sub\">(default)</span>");
        fa_strbuf_puts(b, "</td><td>");
        put_esc(b, str(f, "team") && str(f, "team")[0] ? str(f, "team") : "-");
        fa_strbuf_puts(b, "</td><td><span class=\"state state-");
        /* the state names a class only when it is one of ours */
        fa_strbuf_puts(b, st && (!strcmp(st, "running") || !strcmp(st, "paused") ||
                                 !strcmp(st, "finished") || !strcmp(st, "stopped") ||
                                 !strcmp(st, "archived"))
                              ? st
                              : "offline");
        fa_strbuf_puts(b, "\">");
        put_esc(b, st ? st : "unknown");
        fa_strbuf_puts(b, "</span>");
        if (why && why[0]) {
            fa_strbuf_puts(b, " ");
            put_esc(b, why);
        }
        fa_strbuf_printf(b, "</td><td class=\"n\">%.0f</td><td>", num_or(f, "round", 0));
        put_esc(b, str(f, "phase") ? str(f, "phase") : "-");
        fa_strbuf_printf(b,
                         "</td><td class=\"n\">%.0f</td><td class=\"n\">%s</td>"
                         "<td class=\"n\">%zu / %zu</td></tr>\n",
                         num_or(f, "model_version", 0), acc, connected, json_array_size(rs));
    }
    fa_strbuf_puts(b, "</tbody></table></section>\n");
}

/* A service's page: the table of its federations, then each one's panels. */
static void service_page(fa_strbuf *b, const json_t *doc, uint64_t now)
{
    const json_t *feds = json_object_get(doc, "federations"), *f;
    size_t i;

    federations_table(b, feds);
    json_array_foreach(feds, i, f)
    {
        fa_strbuf one = {0};
        char prefix[32];
        snprintf(prefix, sizeof(prefix), "f%zu-", i);
        fa_strbuf_printf(b, "<div class=\"federation\" id=\"f%zu\"><h2>Federation ", i);
        put_esc(b, str(f, "id") ? str(f, "id") : "?");
        fa_strbuf_puts(b, "</h2>\n");
        overview(&one, f, now);
        regions(&one, f, now);
        accuracy_chart(&one, f);
        timeline(&one, f);
        audit(&one, f);
        put_prefixed_ids(b, &one, prefix);
        free(one.data);
        fa_strbuf_puts(b, "</div>\n");
    }
}

int fa_dashboard_render(const char *status_json, size_t len, uint64_t now_unix_ms, char **out,
                        size_t *out_len, fa_error *err)
{
    fa_strbuf b = {0};
    json_error_t je;
    json_t *st;
    const char *fed;
    char title[256], t[64];

    *out = NULL;
    *out_len = 0;
    st = json_loadb(status_json, len, JSON_REJECT_DUPLICATES, &je);
    if (!st)
        return fa_errorf(err, FA_ERR_PARSE, "dashboard: status JSON at line %d column %d: %s",
                         je.line, je.column, je.text);
    if (!json_is_object(st)) {
        json_decref(st);
        return fa_errorf(err, FA_ERR_PARSE, "dashboard: the status is not a JSON object");
    }
    if (json_is_array(json_object_get(st, "federations")) &&
        json_is_object(json_object_get(st, "service"))) {
        const json_t *sv = json_object_get(st, "service");
        snprintf(title, sizeof(title), "fedagg service: %.0f federations",
                 num_or(sv, "federations", 0));
        page_head(&b, title);
        fa_strbuf_printf(&b,
                         "<header><h1>fedagg service</h1><span class=\"meta\" "
                         "id=\"service-summary\">%.0f federations: %.0f running, %.0f paused, "
                         "%.0f finished, %.0f stopped, %.0f archived</span></header>\n<main>\n",
                         num_or(sv, "federations", 0),
                         num_or(json_object_get(sv, "states"), "running", 0),
                         num_or(json_object_get(sv, "states"), "paused", 0),
                         num_or(json_object_get(sv, "states"), "finished", 0),
                         num_or(json_object_get(sv, "states"), "stopped", 0),
                         num_or(json_object_get(sv, "states"), "archived", 0));
        service_page(&b, st, now_unix_ms);
    } else {
        fed = str(st, "federation_id");
        snprintf(title, sizeof(title), "fedagg %s: round %.0f, %s", fed ? fed : "federation",
                 num_or(st, "round", 0), str(st, "phase") ? str(st, "phase") : "unknown");
        page_head(&b, title);
        fa_strbuf_puts(&b, "<header><h1>fedagg federation <span id=\"federation-id\">");
        put_esc(&b, fed ? fed : "?");
        fa_strbuf_puts(
            &b, "</span></h1><span class=\"meta\">read-only dashboard</span></header>\n<main>\n");
        overview(&b, st, now_unix_ms);
        regions(&b, st, now_unix_ms);
        accuracy_chart(&b, st);
        timeline(&b, st);
        audit(&b, st);
    }
    fa_dashboard_fmt_utc((double)now_unix_ms, t, sizeof(t));
    fa_strbuf_printf(
        &b,
        "</main>\n<footer>Generated %s from the aggregator's status; reloads every %d s. "
        "Counters and names only: no region data, nothing secret.</footer>\n"
        "</body>\n</html>\n",
        t, FA_DASHBOARD_REFRESH_S);
    json_decref(st);
    return finish(&b, out, out_len, err);
}

int fa_dashboard_render_unavailable(const char *why, char **out, size_t *out_len, fa_error *err)
{
    fa_strbuf b = {0};

    *out = NULL;
    *out_len = 0;
    page_head(&b, "fedagg: status not available");
    fa_strbuf_puts(
        &b, "<header><h1>fedagg federation</h1><span class=\"meta\">read-only dashboard</span>"
            "</header>\n<main><section><h2>Status not available</h2><p id=\"unavailable\">");
    put_esc(&b, why && why[0] ? why : "The aggregator has not published its status yet.");
    fa_strbuf_printf(&b,
                     "</p><p class=\"empty\">This page reloads every %d s.</p></section></main>\n"
                     "</body>\n</html>\n",
                     FA_DASHBOARD_REFRESH_S);
    return finish(&b, out, out_len, err);
}
