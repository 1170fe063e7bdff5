/* fa_err.h - error codes and error messages shared by every fedagg module.
 *
 * Every public function returns 0 on success or one of the negative FA_ERR_*
 * codes below, and may fill a caller-owned fa_error with a message for a
 * person: what was wrong, where (file:line:col, region, round, field) and,
 * where it helps, what to do.  Codes are only ever appended, never renumbered.
 */
#ifndef FA_ERR_H
#define FA_ERR_H

#include <stddef.h>

enum {
    FA_OK = 0,
    FA_ERR_NOMEM = -1,        /* out of memory */
    FA_ERR_INVAL = -2,        /* invalid argument or input */
    FA_ERR_IO = -3,           /* file or socket I/O failed (errno in the message) */
    FA_ERR_PARSE = -4,        /* malformed text, protobuf, JSON, safetensors... */
    FA_ERR_RANGE = -5,        /* value out of range */
    FA_ERR_NOTFOUND = -6,     /* file, field, region, version not found */
    FA_ERR_EXISTS = -7,       /* already exists / duplicate */
    FA_ERR_CRYPTO = -8,       /* a cryptographic operation failed */
    FA_ERR_VERIFY = -9,       /* a signature, MAC, checksum or proof did not verify */
    FA_ERR_PROTOCOL = -10,    /* peer violated the protocol */
    FA_ERR_STATE = -11,       /* call not valid in the current state */
    FA_ERR_REPLAY = -12,      /* message for another round or attempt */
    FA_ERR_THRESHOLD = -13,   /* too few participants to stay above the threshold */
    FA_ERR_TIMEOUT = -14,     /* a deadline passed */
    FA_ERR_TLS = -15,         /* TLS handshake or certificate error */
    FA_ERR_QUIC = -16,        /* QUIC transport error */
    FA_ERR_HTTP = -17,        /* HTTP/3 error or unexpected status */
    FA_ERR_AUTH = -18,        /* not authorised (unknown region, wrong identity) */
    FA_ERR_TOOBIG = -19,      /* size limit exceeded */
    FA_ERR_UNSUPPORTED = -20, /* feature not built in or not supported */
    FA_ERR_CUDA = -21,        /* CUDA / cuBLAS error */
    FA_ERR_NCCL = -22,        /* NCCL error */
    FA_ERR_MPI = -23,         /* MPI error */
    FA_ERR_CORRUPT = -24,     /* stored data failed an integrity check */
    FA_ERR_CHILD = -25,       /* an external command failed */
    FA_ERR_CANCELLED = -26,   /* operation cancelled (shutdown) */
    FA_ERR_AGAIN = -27,       /* not ready yet, try again later */
    FA_ERR_NODEVICE = -28,    /* no GPU present */
    FA_ERR_NOSPACE = -29,     /* not enough room: disk, or the memory allowed */
};

/* A caller-owned error message.  Functions that take an `fa_error *` fill it
 * on failure; NULL is always accepted and means "code only". */
typedef struct fa_error {
    int code;
    char msg[512];
} fa_error;

/* Returns a short constant name for a code ("out of memory"...). */
const char *fa_strerror(int code);

/* Fills err (when not NULL) with code and a printf-style message; returns code,
 * so that `return fa_errorf(err, FA_ERR_INVAL, "...")` reads naturally. */
int fa_errorf(fa_error *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Prefixes an existing message with more context ("config.textproto: ...");
 * returns err->code (or code when err is NULL). */
int fa_error_prefix(fa_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Resets err to "no error". */
void fa_error_clear(fa_error *err);

/* The message of err, or fa_strerror(code) when none was set. */
const char *fa_error_msg(const fa_error *err, int code);

#endif
