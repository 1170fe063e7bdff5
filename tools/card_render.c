/* card_render.c - a model card as Markdown.  See card_render.h. */
#include "tools/card_render.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

#include "tools/audit_cli.h"

static const char *str(const json_t *o, const char *key, const char *dflt)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : dflt;
}

/* A number, or "-" for null. */
static void put_num(FILE *out, const json_t *v, const char *fmt)
{
    if (json_is_number(v))
        fprintf(out, fmt, json_number_value(v));
    else
        fputs("-", out);
}

static void put_int(FILE *out, const json_t *v)
{
    if (json_is_integer(v))
        fprintf(out, "%lld", (long long)json_integer_value(v));
    else
        fputs("-", out);
}

/* The first 16 hex digits of a digest, or "-". */
static void put_digest(FILE *out, const json_t *v)
{
    const char *s = json_string_value(v);
    if (s)
        fprintf(out, "`%.16s…`", s);
    else
        fputs("-", out);
}

static void put_time(FILE *out, const json_t *v)
{
    char t[32];
    if (!json_is_integer(v)) {
        fputs("-", out);
        return;
    }
    fa_audit_cli_time((uint64_t)json_integer_value(v), t);
    fputs(t, out);
}

static void made_line(FILE *out, const json_t *made)
{
    const char *by = str(made, "by", "?");
    if (!strcmp(by, "initial")) {
        fputs("the initial model", out);
        return;
    }
    if (!strcmp(by, "rollback")) {
        fprintf(out, "a rollback to version ");
        put_int(out, json_object_get(made, "restores"));
        fprintf(out, " (byte for byte, with its optimizer state) from version ");
        put_int(out, json_object_get(made, "parent"));
        fprintf(out, ", by %s: %s", str(made, "by_operator", "the promotion gate"),
                str(made, "reason", ""));
    } else {
        fputs("round ", out);
        put_int(out, json_object_get(made, "round"));
        fputs(" attempt ", out);
        put_int(out, json_object_get(made, "attempt"));
        fputs(", trained from version ", out);
        put_int(out, json_object_get(made, "parent"));
    }
    fputs(", committed ", out);
    put_time(out, json_object_get(made, "commit_unix_ms"));
    fputs(" (record ", out);
    put_int(out, json_object_get(made, "record"));
    fputs(")", out);
}

static void regions_table(FILE *out, const json_t *regions)
{
    size_t i;
    json_t *r;
    fputs("\n## Regions whose updates are in it\n\n", out);
    if (json_array_size(regions) == 0) {
        fputs("None: this version was not made by a round.\n", out);
        return;
    }
    fputs("| region | dataset | data manifest | examples | trainer | trainer digest | "
          "statement | privacy: ε round / total (δ) |\n"
          "|---|---|---|---|---|---|---|---|\n",
          out);
    json_array_foreach(regions, i, r)
    {
        const json_t *d = json_object_get(r, "data"), *p = json_object_get(r, "privacy");
        fprintf(out, "| %s | ", str(r, "region", "?"));
        if (json_is_object(d)) {
            fprintf(out, "%s | ", str(d, "dataset", "?"));
            put_digest(out, json_object_get(d, "manifest_sha256"));
            fputs(" | ", out);
            put_int(out, json_object_get(d, "num_examples"));
            fprintf(out, " | %s (%s) | ", str(d, "trainer", "?"), str(d, "trainer_kind", "?"));
            put_digest(out, json_object_get(d, "trainer_sha256"));
            fprintf(out, " | %s | ", str(d, "signature", "?"));
        } else {
            fputs("- | - | - | - | - | no data statement | ", out);
        }
        if (json_is_object(p)) {
            fprintf(out, "%s: ", str(p, "mechanism", "?"));
            put_num(out, json_object_get(p, "epsilon_round"), "%.4g");
            fputs(" / ", out);
            put_num(out, json_object_get(p, "epsilon_total"), "%.4g");
            fputs(" (", out);
            put_num(out, json_object_get(p, "delta"), "%g");
            fputs(")", out);
        } else {
            fputs("none stated", out);
        }
        fputs(" |\n", out);
    }
}

static void settings_block(FILE *out, const json_t *s)
{
    const json_t *o, *q, *d;
    if (!json_is_object(s))
        return;
    o = json_object_get(s, "optimizer");
    q = json_object_get(s, "quantization");
    d = json_object_get(s, "distributed_dp");
    fputs("\n## Settings\n\n", out);
    if (json_is_object(o)) {
        fprintf(out, "- server optimizer: %s, learning rate ", str(o, "kind", "?"));
        put_num(out, json_object_get(o, "learning_rate"), "%g");
        fputs("\n", out);
    }
    if (json_is_object(q)) {
        fputs("- quantisation: ", out);
        put_int(out, json_object_get(q, "bits"));
        fputs(" bits in a ring of 2^", out);
        put_int(out, json_object_get(q, "ring_bits"));
        fprintf(out, ", clip %s (L2 ", str(q, "clip_mode", "?"));
        put_num(out, json_object_get(q, "clip_l2_norm"), "%g");
        fprintf(out, "), ranges %s, weight cap ", str(q, "range", "?"));
        put_int(out, json_object_get(q, "max_examples"));
        fputs(" examples\n", out);
    }
    fputs("- secure aggregation threshold: ", out);
    put_int(out, json_object_get(s, "threshold"));
    fputs("\n", out);
    if (json_is_object(d)) {
        fputs("- distributed DP: noise multiplier ", out);
        put_num(out, json_object_get(d, "noise_multiplier"), "%g");
        fputs(", noise of ", out);
        put_int(out, json_object_get(d, "noisy_contributions"));
        fputs(" regions, region-level ε this round ", out);
        put_num(out, json_object_get(d, "epsilon_round"), "%.4g");
        fputs(", in all ", out);
        put_num(out, json_object_get(d, "epsilon_total"), "%.4g");
        fputs(" (δ ", out);
        put_num(out, json_object_get(d, "delta"), "%g");
        fputs(")\n", out);
    }
}

static void evaluations_block(FILE *out, const json_t *e)
{
    size_t i;
    json_t *s;
    const json_t *fed, *cen;
    fputs("\n## Evaluations\n\n", out);
    if (!json_is_object(e)) {
        fputs("None recorded.\n", out);
        return;
    }
    fputs("The regions' signed statements on their own held-out data (record ", out);
    put_int(out, json_object_get(e, "record"));
    fputs("):\n\n| region | examples | accuracy | loss |\n|---|---|---|---|\n", out);
    json_array_foreach(json_object_get(e, "statements"), i, s)
    {
        fprintf(out, "| %s | ", str(s, "region", "?"));
        put_int(out, json_object_get(s, "num_examples"));
        fputs(" | ", out);
        put_num(out, json_object_get(s, "accuracy"), "%.4f");
        fputs(" | ", out);
        put_num(out, json_object_get(s, "loss"), "%.4f");
        fputs(" |\n", out);
    }
    fed = json_object_get(e, "federated");
    cen = json_object_get(e, "central");
    if (json_is_object(fed)) {
        fputs("\nExample-weighted mean: accuracy ", out);
        put_num(out, json_object_get(fed, "accuracy"), "%.4f");
        fputs(", loss ", out);
        put_num(out, json_object_get(fed, "loss"), "%.4f");
        fputs(" over ", out);
        put_int(out, json_object_get(fed, "num_examples"));
        fputs(" examples.\n", out);
    }
    if (json_is_object(cen)) {
        fputs("\nThe aggregator's evaluator command: accuracy ", out);
        put_num(out, json_object_get(cen, "accuracy"), "%.4f");
        fputs(", loss ", out);
        put_num(out, json_object_get(cen, "loss"), "%.4f");
        fputs(".\n", out);
    }
}

static void decision_block(FILE *out, const json_t *d, const char *status)
{
    const json_t *rule;
    fputs("\n## Promotion decision\n\n", out);
    if (!json_is_object(d)) {
        fprintf(out, "None: the version is %s.\n",
                !strcmp(status, "candidate") ? "a candidate not decided (no gate, or not yet)"
                                             : status);
        return;
    }
    rule = json_object_get(d, "rule");
    fprintf(out, "**%s** (record ", str(d, "outcome", "?"));
    put_int(out, json_object_get(d, "record"));
    fprintf(out, ", %s): %s.\n\n", str(d, "action", "none"), str(d, "reason", ""));
    fprintf(out, "Rule: %s of the %s source, %s is better, tolerance ", str(rule, "metric", "?"),
            str(rule, "source", "?"),
            json_is_true(json_object_get(rule, "higher_is_better")) ? "higher" : "lower");
    put_num(out, json_object_get(rule, "tolerance"), "%g");
    fprintf(out, ", baseline %s", str(rule, "baseline", "?"));
    fputs(", at least ", out);
    put_int(out, json_object_get(rule, "min_regions"));
    fprintf(out, " regions' statements, on regression: %s.\n", str(rule, "on_regression", "?"));
}

static void channels_block(FILE *out, const json_t *channels, const json_t *releases)
{
    size_t i;
    json_t *c;
    fputs("\n## Release channels\n\n", out);
    if (json_array_size(channels) == 0)
        fputs("No channel points at this version now.\n", out);
    json_array_foreach(channels, i, c)
    {
        fprintf(out, "- %s points at it (record ", str(c, "channel", "?"));
        put_int(out, json_object_get(c, "record"));
        fprintf(out, ", moved by %s)\n", str(c, "by", "the promotion gate"));
    }
    if (json_array_size(releases)) {
        fputs("\nEvery move of a channel to it:\n\n", out);
        json_array_foreach(releases, i, c)
        {
            fprintf(out, "- %s at ", str(c, "channel", "?"));
            put_time(out, json_object_get(c, "unix_ms"));
            fprintf(out, " by %s (record ", str(c, "by", "the promotion gate"));
            put_int(out, json_object_get(c, "record"));
            fputs(")\n", out);
        }
    }
}

static void ancestry_block(FILE *out, const json_t *anc)
{
    size_t i;
    json_t *a;
    fputs("\n## Ancestry\n\n", out);
    if (json_array_size(anc) == 0) {
        fputs("None: the initial model.\n", out);
        return;
    }
    fputs("| version | made by | round | regions | status |\n|---|---|---|---|---|\n", out);
    json_array_foreach(anc, i, a)
    {
        size_t k;
        json_t *p;
        fputs("| ", out);
        put_int(out, json_object_get(a, "version"));
        fprintf(out, " | %s | ", str(a, "made", "?"));
        put_int(out, json_object_get(a, "round"));
        fputs(" | ", out);
        json_array_foreach(json_object_get(a, "participants"), k, p)
            fprintf(out, "%s%s", k ? ", " : "", json_string_value(p));
        fprintf(out, " | %s |\n", str(a, "status", "?"));
    }
}

int fa_card_render_markdown(FILE *out, const char *json)
{
    json_error_t e;
    json_t *c = json_loads(json, 0, &e);
    const json_t *made;

    if (!json_is_object(c) || !json_is_integer(json_object_get(c, "version"))) {
        fprintf(stderr, "not a model card: %s\n", c ? "no version" : e.text);
        json_decref(c);
        return 1;
    }
    made = json_object_get(c, "made");
    fprintf(out, "# Model card: federation %s, version ", str(c, "federation", "?"));
    put_int(out, json_object_get(c, "version"));
    fputs("\n\n", out);
    fputs("| | |\n|---|---|\n", out);
    fprintf(out, "| model SHA-256 | `%s` |\n", str(c, "model_sha256", "-"));
    fprintf(out, "| status | %s |\n", str(c, "status", "?"));
    fputs("| made by | ", out);
    made_line(out, made);
    fputs(" |\n| config digest | ", out);
    put_digest(out, json_object_get(c, "config_digest"));
    fputs(" |\n| tensor table | ", out);
    put_digest(out, json_object_get(c, "tensor_table_digest"));
    fputs(", ", out);
    put_int(out, json_object_get(c, "num_tensors"));
    fputs(" tensors, ", out);
    put_int(out, json_object_get(c, "num_params"));
    fprintf(out, " federated parameters |\n| software | fedagg %s |\n",
            str(c, "software_version", "-"));
    fputs("| audit log | ", out);
    put_int(out, json_object_get(c, "log_records"));
    fputs(" records |\n", out);
    regions_table(out, json_object_get(c, "regions"));
    if (json_array_size(json_object_get(c, "dropped"))) {
        size_t i;
        json_t *d;
        fputs("\nDropped out of the round: ", out);
        json_array_foreach(json_object_get(c, "dropped"), i, d)
            fprintf(out, "%s%s", i ? ", " : "", json_string_value(d));
        fputs(".\n", out);
    }
    settings_block(out, json_object_get(c, "settings"));
    evaluations_block(out, json_object_get(c, "evaluations"));
    decision_block(out, json_object_get(c, "decision"), str(c, "status", "?"));
    channels_block(out, json_object_get(c, "channels"), json_object_get(c, "releases"));
    ancestry_block(out, json_object_get(c, "ancestry"));
    json_decref(c);
    return fflush(out) == 0 ? 0 : 1;
}
