/* bodyq.c - the send side of one HTTP body.
 *
 * nghttp3 does not copy body bytes: what read_data hands it must stay valid
 * until the peer acknowledges it.  A buffer body is handed out whole.  A
 * pulled body is read into 256 KiB chunks that are freed (recycled) as
 * acknowledgements arrive; at most max_unacked bytes are outstanding, which
 * bounds memory per stream and is the sender's back-pressure: a slow peer or
 * path stops the reads of a multi-GB file.
 */
#include "transport/h3_internal.h"

#include <stdlib.h>
#include <string.h>

#define FA_BODYQ_CHUNK (256u * 1024u)

void fa_bodyq_init_buf(fa_bodyq *q, const uint8_t *buf, size_t len, uint8_t *owned)
{
    memset(q, 0, sizeof(*q));
    q->buf = buf;
    q->buf_len = len;
    q->owned = owned;
}

void fa_bodyq_init_pull(fa_bodyq *q, fa_h3_read_fn read, void *arg, uint64_t max_unacked)
{
    memset(q, 0, sizeof(*q));
    q->read = read;
    q->read_arg = arg;
    q->chunk_size = FA_BODYQ_CHUNK;
    q->max_unacked = max_unacked < 2 * FA_BODYQ_CHUNK ? 2 * FA_BODYQ_CHUNK : max_unacked;
}

static void chunk_list_free(fa_bodyq_chunk *c)
{
    while (c) {
        fa_bodyq_chunk *n = c->next;
        free(c);
        c = n;
    }
}

void fa_bodyq_free(fa_bodyq *q)
{
    chunk_list_free(q->head);
    chunk_list_free(q->spare);
    free(q->owned);
    memset(q, 0, sizeof(*q));
}

static fa_bodyq_chunk *chunk_get(fa_bodyq *q)
{
    fa_bodyq_chunk *c = q->spare;
    if (c) {
        q->spare = c->next;
        q->nspare--;
    } else {
        c = malloc(sizeof(*c) + q->chunk_size);
        if (!c)
            return NULL;
    }
    c->next = NULL;
    c->fill = 0;
    return c;
}

static void chunk_put(fa_bodyq *q, fa_bodyq_chunk *c)
{
    /* Keep chunks for reuse up to the outstanding limit: fresh 256 KiB
     * blocks come from mmap, and faulting their pages in again on every
     * chunk costs more than the copy itself.  Memory stays bounded by
     * max_unacked either way. */
    if ((uint64_t)q->nspare * q->chunk_size < q->max_unacked + q->chunk_size) {
        c->next = q->spare;
        q->spare = c;
        q->nspare++;
    } else {
        free(c);
    }
}

nghttp3_ssize fa_bodyq_read(fa_bodyq *q, nghttp3_vec *vec, size_t veccnt, uint32_t *pflags)
{
    size_t n = 0;

    if (!q->read) {
        if (q->buf_off < q->buf_len && veccnt > 0) {
            vec[0].base = (uint8_t *)q->buf + q->buf_off;
            vec[0].len = q->buf_len - q->buf_off;
            q->buf_off = q->buf_len;
            n = 1;
        }
        *pflags |= NGHTTP3_DATA_FLAG_EOF;
        return (nghttp3_ssize)n;
    }
    q->wait_app = 0;
    q->wait_ack = 0;
    /* at most about one chunk per call: nghttp3 asks again as the stream
     * drains, so reading never runs far ahead of what the network takes */
    for (uint64_t start = q->produced;
         n < veccnt && !q->eof && q->produced - start < q->chunk_size;) {
        fa_bodyq_chunk *c = q->tail;
        ssize_t r;
        size_t room;
        if (q->unacked >= q->max_unacked) {
            q->wait_ack = 1;
            break;
        }
        if (!c || c->fill == q->chunk_size) {
            c = chunk_get(q);
            if (!c) {
                q->error = FA_ERR_NOMEM;
                return NGHTTP3_ERR_CALLBACK_FAILURE;
            }
            if (q->tail)
                q->tail->next = c;
            else
                q->head = c;
            q->tail = c;
        }
        room = q->chunk_size - c->fill;
        r = q->read(q->read_arg, c->data + c->fill, room);
        if (r == 0) {
            q->eof = 1;
            break;
        }
        if (r == FA_ERR_AGAIN) {
            q->wait_app = 1;
            break;
        }
        if (r < 0 || (size_t)r > room) {
            q->error = r < 0 ? (int)r : FA_ERR_INVAL;
            return NGHTTP3_ERR_CALLBACK_FAILURE;
        }
        vec[n].base = c->data + c->fill;
        vec[n].len = (size_t)r;
        n++;
        c->fill += (size_t)r;
        q->unacked += (uint64_t)r;
        q->produced += (uint64_t)r;
    }
    if (q->eof)
        *pflags |= NGHTTP3_DATA_FLAG_EOF;
    if (n == 0 && !q->eof)
        return NGHTTP3_ERR_WOULDBLOCK;
    return (nghttp3_ssize)n;
}

int fa_bodyq_acked(fa_bodyq *q, uint64_t n)
{
    if (!q->read)
        return 0;
    q->unacked = n > q->unacked ? 0 : q->unacked - n;
    q->head_acked += n;
    /* Full chunks are never written again: free them once acknowledged.  The
     * tail is reused from its start once all of it is acknowledged. */
    while (q->head && q->head_acked >= q->head->fill) {
        fa_bodyq_chunk *c = q->head;
        if (c == q->tail && c->fill < q->chunk_size) {
            if (q->head_acked == c->fill) {
                q->head_acked = 0;
                c->fill = 0;
            }
            break;
        }
        q->head_acked -= c->fill;
        q->head = c->next;
        if (!q->head)
            q->tail = NULL;
        chunk_put(q, c);
    }
    if (q->wait_ack && q->unacked < q->max_unacked) {
        q->wait_ack = 0;
        return 1;
    }
    return 0;
}
