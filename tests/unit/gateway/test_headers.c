/* Header rules: what crosses the proxy (RFC 9110 7.6.1), and the access log format. */
#include <criterion/criterion.h>
#include <string.h>
#include "gateway/internal.h"

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

Test(headers, response_headers_replaced_by_gateway)
{
    cr_expect(mg_header_is_replaced_in_response("date", 4));
    cr_expect(mg_header_is_replaced_in_response("server", 6));
    cr_expect(mg_header_is_replaced_in_response("content-length", 14));
    cr_expect(!mg_header_is_replaced_in_response("content-type", 12));
}

Test(headers, unsafe_values)
{
    cr_expect(mg_header_value_is_safe("plain value", 11));
    cr_expect(!mg_header_value_is_safe("a\r\nb", 4));
    cr_expect(!mg_header_value_is_safe("a\nb", 3));
    cr_expect(!mg_header_value_is_safe("a\0b", 3));
}

Test(accesslog, formats_one_json_line)
{
    mg_access_entry_t e = {.peer = MG_STR("127.0.0.1"),
                           .method = MG_STR("GET"),
                           .path = MG_STR("/a\"b\\c\n"),
                           .status = 200,
                           .bytes = 42,
                           .duration_ms = 1.5,
                           .route = MG_STR("api"),
                           .tenant = MG_STR("acme"),
                           .request_id = MG_STR("abc")};
    e.when.tv_sec = 0;
    e.when.tv_usec = 123000;
    char buf[MG_ACCESS_LINE_MAX];
    size_t len = mg_access_format(&e, buf, sizeof(buf));
    buf[len] = '\0';
    cr_expect_str_eq(buf, "{\"time\":\"1970-01-01T00:00:00.123Z\",\"peer\":\"127.0.0.1\",\"method\":\"GET\","
                          "\"path\":\"/a\\\"b\\\\c\\u000a\",\"status\":200,\"bytes\":42,\"duration_ms\":1.500,"
                          "\"route\":\"api\",\"tenant\":\"acme\",\"server\":null,\"request_id\":\"abc\"}\n");
}

Test(accesslog, worst_case_entry_fits_and_stays_one_line)
{
    static char path[8192];
    memset(path, '\x01', sizeof(path));
    mg_str_t all = mg_str(path, sizeof(path));
    /* every field at its longest, every byte escaped to \u00XX */
    mg_access_entry_t e = {
        .path = all, .method = all, .peer = all, .route = all, .tenant = all, .server = all, .request_id = all, .status = 200};
    char buf[MG_ACCESS_LINE_MAX];
    size_t len = mg_access_format(&e, buf, sizeof(buf));
    cr_assert_lt(len, sizeof(buf));
    cr_expect_eq(buf[len - 1], '\n');
    cr_expect_eq(buf[len - 2], '}');
    cr_expect_null(memchr(buf, '\n', len - 1));
}
