/* gateway/backend/url.c: the URL of a request to a server. */
#include <criterion/criterion.h>
#include <string.h>
#include "gateway/backend/internal.h"

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
