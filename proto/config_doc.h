/* config_doc.h - the comments of config.proto, for the annotated example
 * (`fedagg config print --defaults`).  The table is generated at build time
 * by proto/docgen from `protoc --include_source_info` output, so it never
 * drifts from config.proto. */
#ifndef FA_CONFIG_DOC_H
#define FA_CONFIG_DOC_H

struct fa_config_doc {
    const char *name;    /* "fedagg.RoundPolicy", "fedagg.RoundPolicy.threshold",
                            "fedagg.ClipMode.CLIP_L2" */
    const char *comment; /* the leading comment, else the trailing one; lines end in \n */
};

/* Terminated by {NULL, NULL}. */
extern const struct fa_config_doc fa_config_docs[];

/* The comment of a full name, or NULL. */
const char *fa_config_doc_find(const char *name);

#endif
