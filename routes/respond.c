/*
 * The `respond:` terminal: the gateway answers the request itself, with a status, a body and
 * headers written in the file.
 *
 *   respond: {status: 200, body: "ok\n", headers: {Content-Type: text/plain}}
 */
#include <stdlib.h>
#include <strings.h>

#include "routes/internal.h"

static const char *const mg_respond_keys[] = {"status", "body", "headers", NULL};

static int mg_respond_header_name_ok(mg_errors_t *errs, const mg_node_t *key)
{
    if (!mg_is_token(key->u.scalar.str, key->u.scalar.len)) {
        mg_errors_add(errs, key, "invalid header name (a token such as X-Reason: no spaces, ':', CR, LF or NUL)");
        return 0;
    }
    /* The gateway frames the body itself; a second, conflicting length would be a bug. */
    if (strcasecmp(key->u.scalar.str, "content-length") == 0 || strcasecmp(key->u.scalar.str, "transfer-encoding") == 0) {
        mg_errors_add(errs, key, "header '%s' is set by the gateway", key->u.scalar.str);
        return 0;
    }
    return 1;
}

static void mg_respond_read_header(mg_errors_t *errs, mg_route_t *r, const mg_node_pair_t *pair)
{
    mg_str_t value;
    if (!mg_respond_header_name_ok(errs, pair->key) || mg__read_str(pair->value, &value, errs) != 0)
        return;
    if (!mg_is_field_value(value.base, value.len)) {
        mg_errors_add(errs, pair->value, "invalid header value (CR, LF, NUL and other control characters are refused)");
        return;
    }
    char *name = mg_copy_or_abort(pair->key->u.scalar.str, pair->key->u.scalar.len);
    for (char *p = name; *p != '\0'; ++p)
        *p = (*p >= 'A' && *p <= 'Z') ? (char)(*p - 'A' + 'a') : *p;
    mg_header_t *h = &r->respond->headers[r->respond->num_headers++];
    *h = (mg_header_t){mg_str(name, pair->key->u.scalar.len), mg_str(mg_copy_or_abort(value.base, value.len), value.len)};
}

static void mg_respond_read_headers(mg_errors_t *errs, mg_route_t *r, const mg_node_t *map)
{
    if (mg_node_expect(map, MG_NODE_MAPPING, errs) != 0)
        return;
    if ((r->respond->headers = calloc(map->u.mapping.size + 1, sizeof(*r->respond->headers))) == NULL)
        abort();
    for (size_t i = 0; i != map->u.mapping.size; ++i)
        mg_respond_read_header(errs, r, &map->u.mapping.pairs[i]);
}

void mg__respond_read(mg_errors_t *errs, mg_route_t *r, const mg_node_t *v)
{
    r->kind = MG_ROUTE_RESPOND;
    r->respond = mg__route_part(sizeof(*r->respond));
    if (mg_node_expect(v, MG_NODE_MAPPING, errs) != 0 || mg_node_check_keys(v, mg_respond_keys, errs) != 0)
        return;
    const mg_node_t *status = mg_node_require(v, "status", errs), *body = mg_node_get(v, "body");
    const mg_node_t *headers = mg_node_get(v, "headers");
    uint64_t code;
    if (status != NULL && mg_node_to_uint(status, 100, 599, &code, errs) == 0)
        r->respond->status = (int)code;
    mg_str_t s;
    if (body != NULL && mg__read_str(body, &s, errs) == 0) {
        r->respond->body = mg_copy_or_abort(s.base, s.len);
        r->respond->body_len = s.len;
    }
    if (headers != NULL)
        mg_respond_read_headers(errs, r, headers);
}

void mg__respond_free(mg_route_respond_t *respond)
{
    if (respond == NULL)
        return;
    for (size_t i = 0; i != respond->num_headers; ++i) {
        free((char *)respond->headers[i].name.base);
        free((char *)respond->headers[i].value.base);
    }
    free(respond->headers);
    free(respond->body);
    free(respond);
}
