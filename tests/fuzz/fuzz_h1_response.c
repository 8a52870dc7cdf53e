/*
 * libFuzzer target: a backend's bytes through the builtin client's response parser and framing
 * (gateway/backend/h1.c), as client_h1.c drives them: interim heads skipped, the final head parsed,
 * then the body decoded from reads of sizes the input chooses. Properties checked on every input:
 *   - a head is never longer than the bytes given; a refused one says why and how;
 *   - a parsed head's fields are lower-case tokens (RFC 9110 5.6.2), its reason and values field
 *     values (RFC 9110 5.5: no control character but HTAB);
 *   - Content-Length and Transfer-Encoding never both frame one response;
 *   - the body never yields more bytes than were given, nor more than Content-Length;
 *   - bytes after the end are counted, never handed over as body.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/backend/h1.h"

static void check_head(const mg_h1_head_t *head)
{
    int cl = 0, te = 0;
    if (!mg_is_field_value(head->reason.base, head->reason.len))
        abort();
    for (size_t i = 0; i < head->num_fields; i++) {
        const mg_backend_header_t *f = &head->fields[i];
        if (!mg_is_token(f->name.base, f->name.len) || !mg_is_field_value(f->value.base, f->value.len))
            abort();
        for (size_t j = 0; j < f->name.len; j++)
            if ((f->name.base[j] >= 'A' && f->name.base[j] <= 'Z') || f->name.base[j] <= ' ' || f->name.base[j] == ':')
                abort();
        cl |= f->name.len == 14 && memcmp(f->name.base, "content-length", 14) == 0;
        te |= f->name.len == 17 && memcmp(f->name.base, "transfer-encoding", 17) == 0;
    }
    if (cl && te)
        abort();
    if (head->framing == MG_H1_UNTIL_CLOSE && head->keep_alive)
        abort();
}

/* The body from p[0..n), in reads of 1 + (a byte of the input) bytes. */
static void read_body(const mg_h1_head_t *head, const uint8_t *p, size_t n, uint8_t sizes)
{
    mg_h1_body_t b;
    mg_h1_body_init(&b, head);
    char *buf = malloc(n + 1);
    size_t pos = 0, total = 0;
    while (pos < n) {
        size_t step = 1 + (size_t)(sizes = (uint8_t)(sizes * 33 + 7)) % 64;
        if (step > n - pos)
            step = n - pos;
        memcpy(buf, p + pos, step);
        pos += step;
        size_t body = 0, extra = 0;
        const char *why = NULL;
        mg_h1_decoded_t d = mg_h1_body_decode(&b, buf, step, &body, &extra, &why);
        if (d == MG_H1_ERROR) {
            if (why == NULL)
                abort();
            break;
        }
        if (body > step || extra > step - body)
            abort();
        total += body;
        if (d == MG_H1_END) {
            if (head->framing == MG_H1_LENGTH && total != head->content_length)
                abort();
            break;
        }
    }
    if (total > n || (head->framing == MG_H1_LENGTH && total > head->content_length))
        abort();
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    int head_request = data[0] & 1;
    uint8_t sizes = data[1];
    char *buf = malloc(size);
    memcpy(buf, data + 2, size - 2);
    size_t len = size - 2, off = 0;
    for (int interim = 0; interim < 8; interim++) {
        mg_h1_head_t head;
        mg_attempt_result_t err = MG_ATTEMPT_OK;
        const char *why = NULL;
        ssize_t rc = mg_h1_parse_head(buf + off, len - off, head_request, &head, &err, &why);
        if (rc < 0) {
            if (why == NULL || (err != MG_ATTEMPT_BAD_RESPONSE && err != MG_ATTEMPT_BAD_HEAD && err != MG_ATTEMPT_TOO_MANY_HEADERS))
                abort();
            break;
        }
        if (rc == 0)
            break;
        if ((size_t)rc > len - off || head.num_fields > MG_BACKEND_MAX_FIELDS)
            abort();
        check_head(&head);
        off += (size_t)rc;
        if (head.status < 200 && head.status != 101)
            continue;
        read_body(&head, (const uint8_t *)buf + off, len - off, sizes);
        break;
    }
    free(buf);
    return 0;
}
