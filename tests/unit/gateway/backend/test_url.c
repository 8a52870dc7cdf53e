/* Backend URL building and method classes. */
#include <criterion/criterion.h>
#include <string.h>
#include "gateway/internal.h"

Test(url, joins_base_path_and_query)
{
    char out[128];
    cr_expect_eq(mg_url_build(out, sizeof(out), "http://127.0.0.1:9001", MG_STR("/api/x"), MG_STR("a=1&b=2")), 35);
    cr_expect_str_eq(out, "http://127.0.0.1:9001/api/x?a=1&b=2");
    mg_url_build(out, sizeof(out), "http://h:1/prefix", MG_STR("/x"), MG_STR_NULL);
    cr_expect_str_eq(out, "http://h:1/prefix/x");
    mg_url_build(out, sizeof(out), "http://h:1", MG_STR("/"), MG_STR(""));
    cr_expect_str_eq(out, "http://h:1/");
}

Test(url, refuses_what_does_not_fit)
{
    char out[16];
    cr_expect_eq(mg_url_build(out, sizeof(out), "http://h:1", MG_STR("/abcd"), MG_STR_NULL), 15);
    cr_expect_eq(mg_url_build(out, sizeof(out), "http://h:1", MG_STR("/abcde"), MG_STR_NULL), -1);
    cr_expect_eq(mg_url_build(out, sizeof(out), "http://h:1", MG_STR("/a"), MG_STR("q=")), 15);
    cr_expect_eq(mg_url_build(out, sizeof(out), "http://h:1", MG_STR("/a"), MG_STR("q=1")), -1);
}

Test(url, method_classes)
{
    const char *idem[] = {"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"};
    for (size_t i = 0; i < 6; i++)
        cr_expect(mg_method_is_idempotent(mg_str(idem[i], strlen(idem[i]))), "%s", idem[i]);
    cr_expect(!mg_method_is_idempotent(MG_STR("POST")));
    cr_expect(!mg_method_is_idempotent(MG_STR("PATCH")));
    cr_expect(!mg_method_is_idempotent(MG_STR("get")));
    cr_expect(!mg_method_is_idempotent(MG_STR("GETX")));
    const char *writes[] = {"POST", "PUT", "PATCH", "DELETE"};
    for (size_t i = 0; i < 4; i++)
        cr_expect(mg_method_is_write(mg_str(writes[i], strlen(writes[i]))), "%s", writes[i]);
    cr_expect(!mg_method_is_write(MG_STR("GET")));
    cr_expect(!mg_method_is_write(MG_STR("HEAD")));
}

Test(url, authority_table)
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
