/* gateway/request/accesslog.c: one JSON object per line. */
#include <criterion/criterion.h>
#include <string.h>
#include "gateway/request/accesslog.h"

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

/* ---------------------------------------------------------------------------------------
 * What the client's connection alone carries leaves its headers before routing.
 */
