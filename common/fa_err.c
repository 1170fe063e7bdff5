#include "common/fa_err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *fa_strerror(int code)
{
    switch (code) {
    case FA_OK: return "success";
    case FA_ERR_NOMEM: return "out of memory";
    case FA_ERR_INVAL: return "invalid argument";
    case FA_ERR_IO: return "I/O error";
    case FA_ERR_PARSE: return "parse error";
    case FA_ERR_RANGE: return "value out of range";
    case FA_ERR_NOTFOUND: return "not found";
    case FA_ERR_EXISTS: return "already exists";
    case FA_ERR_CRYPTO: return "cryptographic operation failed";
    case FA_ERR_VERIFY: return "verification failed";
    case FA_ERR_PROTOCOL: return "protocol violation";
    case FA_ERR_STATE: return "invalid state";
    case FA_ERR_REPLAY: return "message for another round or attempt";
    case FA_ERR_THRESHOLD: return "below threshold";
    case FA_ERR_TIMEOUT: return "timed out";
    case FA_ERR_TLS: return "TLS error";
    case FA_ERR_QUIC: return "QUIC error";
    case FA_ERR_HTTP: return "HTTP error";
    case FA_ERR_AUTH: return "not authorised";
    case FA_ERR_TOOBIG: return "too large";
    case FA_ERR_UNSUPPORTED: return "not supported";
    case FA_ERR_CUDA: return "CUDA error";
    case FA_ERR_NCCL: return "NCCL error";
    case FA_ERR_MPI: return "MPI error";
    case FA_ERR_CORRUPT: return "data corrupt";
    case FA_ERR_CHILD: return "external command failed";
    case FA_ERR_CANCELLED: return "cancelled";
    case FA_ERR_AGAIN: return "try again";
    case FA_ERR_NODEVICE: return "no GPU device";
    case FA_ERR_NOSPACE: return "not enough space";
    default: return "unknown error";
    }
}

int fa_errorf(fa_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->code = code;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
    }
    return code;
}

int fa_error_prefix(fa_error *err, int code, const char *fmt, ...)
{
    char prefix[256], old[sizeof(err->msg)];
    va_list ap;

    if (!err)
        return code;
    if (err->code == 0) {
        err->code = code;
        snprintf(err->msg, sizeof(err->msg), "%s", fa_strerror(code));
    }
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof(old));
    snprintf(err->msg, sizeof(err->msg), "%s: %s", prefix, old);
    return err->code;
}

void fa_error_clear(fa_error *err)
{
    if (err) {
        err->code = 0;
        err->msg[0] = '\0';
    }
}

const char *fa_error_msg(const fa_error *err, int code)
{
    if (err && err->code != 0 && err->msg[0])
        return err->msg;
    return fa_strerror(code);
}
