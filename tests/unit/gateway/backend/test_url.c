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
