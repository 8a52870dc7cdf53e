/* Header rules: what crosses the proxy (RFC 9110 7.6.1), and what a client request head may hold. */
#include <criterion/criterion.h>
#include <string.h>
#include "gateway/request/headers.h"
#include "gateway/phr.h"

static int hop(const char *name, const mg_conn_tokens_t *t)
{
    return mg_header_is_hop_by_hop(name, strlen(name), t);
}

Test(headers, fixed_hop_by_hop_names)
{
    const char *hop_names[] = {"connection",          "keep-alive",      "te", "trailer", "transfer-encoding", "upgrade",
                               "proxy-authorization", "proxy-connection"};
    for (size_t i = 0; i < sizeof(hop_names) / sizeof(hop_names[0]); i++)
        cr_expect(hop(hop_names[i], NULL), "%s must be hop-by-hop", hop_names[i]);
    const char *end_to_end[] = {"content-type", "authorization", "x-custom", "tea", "t", "upgrade-insecure-requests", "proxy"};
    for (size_t i = 0; i < sizeof(end_to_end) / sizeof(end_to_end[0]); i++)
        cr_expect(!hop(end_to_end[i], NULL), "%s must be forwarded", end_to_end[i]);
}

Test(headers, connection_tokens_are_hop_by_hop)
{
    mg_conn_tokens_t t = {.size = 0};
    const char *v = " close , X-Secret,,\tX-Other-Header ";
    mg_conn_tokens_add(&t, v, strlen(v));
    cr_assert_eq(t.size, 3);
    cr_expect_str_eq(t.names[0], "close");
    cr_expect_str_eq(t.names[1], "x-secret");
    cr_expect_str_eq(t.names[2], "x-other-header");
    cr_expect(hop("x-secret", &t));
    cr_expect(hop("x-other-header", &t));
    cr_expect(!hop("x-secre", &t));
    cr_expect(!hop("x-secret-2", &t));
}

Test(headers, connection_tokens_accumulate_over_headers_and_cap)
{
    mg_conn_tokens_t t = {.size = 0};
    mg_conn_tokens_add(&t, "a", 1);
    mg_conn_tokens_add(&t, "B", 1);
    cr_expect(hop("a", &t) && hop("b", &t));
    char many[200] = "";
    for (int i = 0; i < 20; i++)
        sprintf(many + strlen(many), "h%d,", i);
    mg_conn_tokens_add(&t, many, strlen(many));
    cr_expect_eq(t.size, 16);
    cr_expect(hop("h13", &t));
    cr_expect(!hop("h14", &t)); /* beyond the cap */
}

Test(headers, overlong_token_is_not_truncated_into_a_match)
{
    mg_conn_tokens_t t = {.size = 0};
    const char *v = "x-a-very-long-header-name-that-exceeds-the-buffer";
    mg_conn_tokens_add(&t, v, strlen(v));
    cr_expect_eq(t.size, 0);
    cr_expect(!hop("x-a-very-long-header-name-that-", &t));
}

Test(headers, unsafe_values)
{
    cr_expect(mg_header_value_is_safe("plain value", 11));
    cr_expect(!mg_header_value_is_safe("a\r\nb", 4));
    cr_expect(!mg_header_value_is_safe("a\nb", 3));
    cr_expect(!mg_header_value_is_safe("a\0b", 3));
}

static h2o_headers_t headers_of(h2o_mem_pool_t *pool, const char *const *fields)
{
    h2o_headers_t h = {NULL, 0, 0};
    for (; fields[0] != NULL; fields += 2)
        h2o_add_header_by_str(pool, &h, fields[0], strlen(fields[0]), 1, NULL, fields[1], strlen(fields[1]));
    return h;
}

static void expect_names(const h2o_headers_t *h, const char *const *names)
{
    size_t n = 0;
    for (; names[n] != NULL; n++) {
        cr_assert_lt(n, h->size, "missing %s", names[n]);
        cr_expect(h2o_memis(h->entries[n].name->base, h->entries[n].name->len, names[n], strlen(names[n])), "#%zu is %.*s, not %s",
                  n, (int)h->entries[n].name->len, h->entries[n].name->base, names[n]);
    }
    cr_expect_eq(h->size, n, "%zu headers kept, %zu expected", h->size, n);
}

Test(headers, strip_removes_hop_by_hop_and_connection_named_fields_keeping_order)
{
    static const struct {
        const char *fields[24];
        const char *kept[12];
    } rows[] = {
        /* the multi-tenant example's attack: the route's X-Tenant and Authorization come later */
        {{"connection", "X-Tenant, Authorization", "x-tenant", "evil", "authorization", "Bearer x", "accept", "*/*", NULL},
         {"accept", NULL}},
        {{"keep-alive", "5", "te", "trailers", "trailer", "x", "proxy-authorization", "y", "proxy-connection", "close", "x-a", "1",
          NULL},
         {"x-a", NULL}},
        /* every Connection header counts, wherever it stands, in any case and with odd spacing */
        {{"x-one", "1", "connection", "close", "x-two", "2", "connection", " X-ONE ,\tx-three,,", "x-three", "3", "x-four", "4",
          NULL},
         {"x-two", "x-four", NULL}},
        /* names are compared whole */
        {{"connection", "x-a", "x-ab", "1", "x-", "2", "x-a", "3", NULL}, {"x-ab", "x-", NULL}},
        {{"cookie", "a=1", "upgrade-insecure-requests", "1", "tea", "green", NULL},
         {"cookie", "upgrade-insecure-requests", "tea", NULL}},
        {{NULL}, {NULL}},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        h2o_mem_pool_t pool;
        h2o_mem_init_pool(&pool);
        h2o_headers_t h = headers_of(&pool, rows[i].fields);
        mg_headers_strip_hop_by_hop(&h);
        expect_names(&h, rows[i].kept);
        h2o_mem_clear_pool(&pool);
    }
}

Test(headers, route_added_fields_survive_the_client_connection_header)
{
    /* the order of the handler: strip the client's, then the route adds; forward then filters the
     * fixed hop-by-hop set only */
    h2o_mem_pool_t pool;
    h2o_mem_init_pool(&pool);
    static const char *const client[] = {"connection", "x-tenant, authorization, x-forwarded-for, x-request-id, host", "x-tenant",
                                         "mallory", NULL};
    h2o_headers_t h = headers_of(&pool, client);
    mg_headers_strip_hop_by_hop(&h);
    h2o_add_header_by_str(&pool, &h, H2O_STRLIT("x-tenant"), 1, NULL, H2O_STRLIT("acme"));
    h2o_add_header_by_str(&pool, &h, H2O_STRLIT("authorization"), 1, NULL, H2O_STRLIT("Bearer internal"));
    static const char *const kept[] = {"x-tenant", "authorization", NULL};
    expect_names(&h, kept);
    cr_expect(h2o_memis(h.entries[0].value.base, h.entries[0].value.len, H2O_STRLIT("acme")));
    for (size_t i = 0; i < h.size; i++)
        cr_expect(!mg_header_is_hop_by_hop(h.entries[i].name->base, h.entries[i].name->len, NULL));
    h2o_mem_clear_pool(&pool);
}

/* ---------------------------------------------------------------------------------------
 * RFC 9112 framing of HTTP/1 request heads, on the fields as picohttpparser reads them.
 */
#define FOLD NULL /* an obs-fold continuation line: picohttpparser gives it no name */

Test(headers, http1_framing_table)
{
    static const struct {
        int minor;
        const char *fields[12]; /* name, value pairs; FOLD as a name is a continuation line */
        const char *error;      /* a word of the reason, NULL when accepted */
    } rows[] = {
        {1, {"Host", "a", NULL}, NULL},
        {1, {"Host", "a", "Content-Length", "5", NULL}, NULL},
        {1, {"Host", "a", "Transfer-Encoding", "chunked", NULL}, NULL},
        {1, {"Host", "a", "transfer-encoding", " Chunked ", NULL}, NULL},
        {0, {"Content-Length", "5", NULL}, NULL},
        {0, {NULL}, NULL},
        /* identical lengths agree (RFC 9110 8.6) */
        {1, {"Content-Length", "5", "Content-Length", "5", NULL}, NULL},
        {1, {"Content-Length", "5", "content-length", "005", NULL}, NULL},
        /* both */
        {1, {"Content-Length", "3", "Transfer-Encoding", "chunked", NULL}, "both"},
        {1, {"Transfer-Encoding", "chunked", "Content-Length", "3", NULL}, "both"},
        {1, {"Transfer-Encoding", "chunked", "Content-Length", "0", NULL}, "both"},
        /* differing or broken lengths */
        {1, {"Content-Length", "5", "Content-Length", "6", NULL}, "Content-Length"},
        {1, {"Content-Length", "5, 6", NULL}, "Content-Length"},
        {1, {"Content-Length", "5, 5", "Content-Length", "6", NULL}, "Content-Length"},
        {1, {"Content-Length", "5", "Content-Length", "abc", NULL}, "Content-Length"},
        {1, {"Content-Length", "5", "Content-Length", "", NULL}, "Content-Length"},
        {1, {"Content-Length", "5,", NULL}, "Content-Length"},
        {1, {"Content-Length", "+5", NULL}, "Content-Length"},
        {1, {"Content-Length", "-1", NULL}, "Content-Length"},
        {1, {"Content-Length", "99999999999999999999999", NULL}, "Content-Length"},
        /* Host */
        {1, {"Host", "a", "Host", "b", NULL}, "Host"},
        {1, {"Host", "a", "host", "a", NULL}, "Host"},
        {0, {"Host", "a", "Host", "", NULL}, "Host"},
        /* Transfer-Encoding other than one final chunked */
        {1, {"Transfer-Encoding", "gzip", NULL}, "chunked"},
        {1, {"Transfer-Encoding", "gzip, chunked", NULL}, "chunked"},
        {1, {"Transfer-Encoding", "chunked, gzip", NULL}, "chunked"},
        {1, {"Transfer-Encoding", "gzip", "Transfer-Encoding", "chunked", NULL}, "chunked"},
        {1, {"Transfer-Encoding", "chunked", "Transfer-Encoding", "chunked", NULL}, "chunked"},
        {1, {"Transfer-Encoding", "", NULL}, "chunked"},
        {1, {"Transfer-Encoding", "chunkedx", NULL}, "chunked"},
        /* HTTP/1.0 */
        {0, {"Transfer-Encoding", "chunked", NULL}, "HTTP/1.0"},
        {0, {"Transfer-Encoding", "identity", NULL}, "HTTP/1.0"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct phr_header h[6];
        size_t n = 0;
        for (; rows[i].fields[2 * n] != NULL; n++) {
            const char *name = rows[i].fields[2 * n], *value = rows[i].fields[2 * n + 1];
            h[n] = (struct phr_header){name, strlen(name), value, strlen(value)};
        }
        const char *why = mg_http1_framing_error(h, n, rows[i].minor);
        if (rows[i].error == NULL)
            cr_expect_null(why, "row %zu refused: %s", i, why);
        else
            cr_expect(why != NULL && strstr(why, rows[i].error) != NULL, "row %zu: %s", i, why != NULL ? why : "accepted");
    }
}

Test(headers, http1_framing_refuses_a_folded_line)
{
    struct phr_header h[] = {{"x-a", 3, "a", 1}, {FOLD, 0, "Transfer-Encoding: chunked", 26}};
    const char *why = mg_http1_framing_error(h, 2, 1);
    cr_expect(why != NULL && strstr(why, "obs-fold") != NULL);
    cr_expect_null(mg_http1_framing_error(h, 1, 1));
}

/* ---------------------------------------------------------------------------------------
 * A backend's response header lines: valid fields only (RFC 9110 5.1, 5.5; RFC 9112 5.1, 5.2).
 */
Test(headers, response_line_table)
{
    static const struct {
        const char *line;
        size_t len;               /* 0: strlen */
        const char *name, *value; /* NULL: refused */
    } rows[] = {
        {"Content-Type: text/plain", 0, "content-type", "text/plain"},
        {"X-A:v", 0, "x-a", "v"},
        {"X-A: \t v w \t", 0, "x-a", "v w"},
        {"X-A:", 0, "x-a", ""},
        {"X-A: a\tb", 0, "x-a", "a\tb"},
        {"X-A: caf\xc3\xa9", 0, "x-a", "caf\xc3\xa9"}, /* obs-text */
        {"X-A : v", 0, "x-a", "v"},                    /* RFC 9112 5.1: the proxy removes the space */
        {"X-A\t: v", 0, "x-a", "v"},
        {"X-A: a: b", 0, "x-a", "a: b"},
        {"!#$%&'*+-.^_`|~09az: v", 0, "!#$%&'*+-.^_`|~09az", "v"},
        /* the issue's: a bare CR would end the line for an HTTP/1 client and start a field */
        {"X-Evil: a\rSet-Cookie: x", 0, NULL, NULL},
        {"X-Evil: a\nSet-Cookie: x", 0, NULL, NULL},
        {"X-A: a\0b", 8, NULL, NULL},
        {"X-A: \x01", 0, NULL, NULL},
        {"X-A: \x1b[31m", 0, NULL, NULL},
        {"X-A: a\x7f", 0, NULL, NULL},
        {" X-A: folded", 0, NULL, NULL},
        {"\tcontinued", 0, NULL, NULL},
        {"no colon", 0, NULL, NULL},
        {": v", 0, NULL, NULL},
        {"X A: v", 0, NULL, NULL},
        {"X(A): v", 0, NULL, NULL},
        {"X-\xc3\xa9: v", 0, NULL, NULL},
        {"X\rA: v", 0, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char buf[64];
        size_t len = rows[i].len != 0 ? rows[i].len : strlen(rows[i].line);
        memcpy(buf, rows[i].line, len);
        h2o_iovec_t name, value;
        int rc = mg_header_line_split(h2o_iovec_init(buf, len), &name, &value);
        if (rows[i].name == NULL) {
            cr_expect_eq(rc, -1, "row %zu accepted", i);
            continue;
        }
        cr_assert_eq(rc, 0, "row %zu refused", i);
        cr_expect(h2o_memis(name.base, name.len, rows[i].name, strlen(rows[i].name)), "row %zu: name %.*s", i, (int)name.len,
                  name.base);
        cr_expect(h2o_memis(value.base, value.len, rows[i].value, strlen(rows[i].value)), "row %zu: value %.*s", i, (int)value.len,
                  value.base);
    }
}

/* ---------------------------------------------------------------------------------------
 * A client's request fields (RFC 9110 5.1, 5.5; RFC 9113 8.2.1 for HTTP/2).
 */
Test(headers, request_field_table)
{
    static const struct {
        const char *name, *value;
        size_t vlen; /* 0: strlen */
        int http2;
        int valid;
    } rows[] = {
        {"x-a", "plain value", 0, 0, 1},
        {"x-a", "plain value", 0, 1, 1},
        {"x-a", "", 0, 1, 1},
        {"x-a", "a\tb c", 0, 1, 1},
        {"x-a", "caf\xc3\xa9", 0, 1, 1},
        {"!#$%&'*+-.^_`|~", "v", 0, 1, 1},
        /* HTTP/1 values may keep white space at their end (picohttpparser keeps the trailing one) */
        {"x-a", "trailing ", 0, 0, 1},
        {"x-a", " lead", 0, 1, 0},
        {"x-a", "trail\t", 0, 1, 0},
        {"x-a", " ", 0, 1, 0},
        {"x-a", "a\rb", 0, 0, 0},
        {"x-a", "a\nb", 0, 1, 0},
        {"x-a", "a\0b", 3, 1, 0},
        {"x-a", "a\x0b", 0, 1, 0},
        {"x-a", "\x1b[31m", 0, 0, 0},
        {"x-a", "a\x7f", 0, 1, 0},
        {"", "v", 0, 0, 0}, /* h2o's HTTP/1 head for an obs-fold line; HTTP/2 plain-coded empty name */
        {"", "v", 0, 1, 0},
        {"x a", "v", 0, 1, 0},
        {"x(a", "v", 0, 1, 0},
        {"x:a", "v", 0, 1, 0},
        {"x\x80", "v", 0, 1, 0},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        size_t vlen = rows[i].vlen != 0 ? rows[i].vlen : strlen(rows[i].value);
        const char *why = mg_request_field_error(rows[i].name, strlen(rows[i].name), rows[i].value, vlen, rows[i].http2);
        cr_expect_eq(why == NULL, rows[i].valid, "row %zu: %s", i, why != NULL ? why : "accepted");
    }
}

/* The method, as h2o hands it over from HTTP/2's :method (unchecked) or an HTTP/1 request line. */
Test(headers, request_method_table)
{
    static const struct {
        const char *method;
        size_t len; /* 0: strlen */
        int valid;
    } rows[] = {
        {"GET", 0, 1},    {"M-SEARCH", 0, 1},    {"x!#$%&'*+-.^_`|~9", 0, 1},
        {"", 0, 0},       {"GET /admin?", 0, 0}, /* request-line injection towards the backend */
        {"GET\t", 0, 0},  {"GET\r\nX: y", 0, 0}, {"G\0T", 3, 0},
        {"G\x7fT", 0, 0}, {"G\xc3\xa9T", 0, 0},  {"GET,POST", 0, 0},
        {"G(T)", 0, 0},   {"GE\"T", 0, 0},       {"GET/", 0, 0},
    };
    h2o_mem_pool_t pool;
    h2o_mem_init_pool(&pool);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        for (int version = 0x101; version <= 0x200; version += 0x200 - 0x101) {
            h2o_req_t req = {.version = version};
            req.method = h2o_iovec_init(rows[i].method, rows[i].len != 0 ? rows[i].len : strlen(rows[i].method));
            req.headers = headers_of(&pool, (const char *const[]){"accept", "*/*", NULL});
            const char *why = mg_request_head_error(&req);
            cr_expect_eq(why == NULL, rows[i].valid, "row %zu (version %x): %s", i, version, why != NULL ? why : "accepted");
        }
    }
    h2o_mem_clear_pool(&pool);
}

/* The request target goes into the backend's request line as it came (the builtin client writes
 * it by memcpy): over HTTP/2 nothing but this check keeps a space or a control character out. */
Test(headers, request_target_table)
{
    static const struct {
        const char *path;
        int valid;
    } rows[] = {
        {"/", 1},     {"/a/b?x=1&y=%20", 1}, {"/caf\xc3\xa9", 1},    {"/a!$&'()*+,;=:@~", 1},
        {"/a b", 0},  {"/a?x=1 2", 0},       {"/x\tz", 0},           {"/x\r\nX-Injected: 1", 0},
        {"/\x7f", 0}, {"/nul\x01", 0},       {"/a HTTP/1.1\r\n", 0},
    };
    h2o_mem_pool_t pool;
    h2o_mem_init_pool(&pool);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        h2o_req_t req = {.version = 0x200, .method = h2o_iovec_init(H2O_STRLIT("GET"))};
        req.input.path = h2o_iovec_init(rows[i].path, strlen(rows[i].path));
        req.headers = headers_of(&pool, (const char *const[]){"accept", "*/*", NULL});
        const char *why = mg_request_head_error(&req);
        cr_expect_eq(why == NULL, rows[i].valid, "row %zu: %s", i, why != NULL ? why : "accepted");
    }
    h2o_mem_clear_pool(&pool);
}

/* The fields are checked after the method, with mg_request_field_error's rules. */
Test(headers, request_head_checks_every_field)
{
    h2o_mem_pool_t pool;
    h2o_mem_init_pool(&pool);
    h2o_req_t req = {.version = 0x200, .method = h2o_iovec_init(H2O_STRLIT("GET"))};
    req.headers = headers_of(&pool, (const char *const[]){"accept", "*/*", "x-a", " padded", NULL});
    cr_expect_str_eq(mg_request_head_error(&req), "an HTTP/2 header value starts or ends with white space");
    req.version = 0x101;
    cr_expect_null(mg_request_head_error(&req));
    h2o_mem_clear_pool(&pool);
}

Test(headers, authority_table)
{
    static const struct {
        const char *authority;
        int valid;
    } rows[] = {
        {"example.com", 1},
        {"Example.COM:8080", 1},
        {"a", 1},
        {"127.0.0.1", 1},
        {"127.0.0.1:80", 1},
        {"host:", 1}, /* RFC 3986: port = *DIGIT */
        {"host:0", 1},
        {"host:65535", 1},
        {"xn--bcher-kva.example", 1},
        {"my_host-1.example~", 1},
        {"a%41b", 1},
        {"a!$&'()*+,;=b", 1}, /* sub-delims are reg-name characters */
        {"[::1]", 1},
        {"[::1]:8080", 1},
        {"[2001:db8::7]:443", 1},
        {"[::ffff:192.0.2.1]", 1},
        {"[v1.fe80::a+en1]", 1},
        {"[V7.x:y]", 1},
        /* the issue's, and their kin */
        {"evil.com/x y", 0},
        {"evil.com/x", 0},
        {"a b", 0},
        {" a", 0},
        {"a ", 0},
        {"a\tb", 0},
        {"a\r\nX-Injected: 1", 0},
        {"a\x7f", 0},
        {"a?b", 0},
        {"a#b", 0},
        {"a\\b", 0},
        {"user@host", 0},
        {"user:pw@host", 0},
        {"a\"b", 0},
        {"a<b>", 0},
        {"caf\xc3\xa9.example", 0},
        {"a%4", 0},
        {"a%zz", 0},
        {"a%", 0},
        {"", 0},
        {":80", 0},
        {"host:port", 0},
        {"host:65536", 0},
        {"host:123456", 0},
        {"host:-1", 0},
        {"host:80:80", 0},
        {"host:80/", 0},
        {"[::1", 0},
        {"[::1]x", 0},
        {"[::1]:", 1},
        {"[]", 0},
        {"[zz::1]", 0},
        {"[::1 ]", 0},
        {"[fe80::1%25eth0]", 0}, /* zone ids are not part of an HTTP URI's host */
        {"[v1.]", 0},
        {"[v.x]", 0},
        {"[1.2.3.4]", 0},
        {"[::1]]", 0},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        cr_expect_eq(mg_authority_is_valid(rows[i].authority, strlen(rows[i].authority)), rows[i].valid, "%s", rows[i].authority);
}
