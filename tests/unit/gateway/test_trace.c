/*
 * gateway/request/trace.c: W3C Trace Context's traceparent, parsed (the cases of the specification's
 * section 3.2 and the ones its test suite sends) and made.
 */
#include <criterion/criterion.h>
#include <string.h>
#include "gateway/request/trace.h"

static int parse(const char *v, char *trace_id, char *flags)
{
    return mg_traceparent_parse(mg_str(v, strlen(v)), trace_id, flags);
}

Test(trace, valid_values_give_their_trace_id_and_flags)
{
    char id[MG_TRACE_ID_LEN], flags[2];
    cr_assert_eq(parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", id, flags), 1);
    cr_expect_eq(memcmp(id, "4bf92f3577b34da6a3ce929d0e0e4736", 32), 0);
    cr_expect_eq(memcmp(flags, "01", 2), 0);
    /* a later version may carry more after a '-' */
    cr_expect_eq(parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-the-future-holds", id, flags), 1);
    cr_expect_eq(memcmp(flags, "09", 2), 0);
    cr_expect_eq(parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", id, flags), 1);
}

Test(trace, invalid_values_are_refused)
{
    static const char *const bad[] = {
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", /* version 00 has nothing more */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",   /* short */
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  /* upper case */
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  /* zero trace id */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  /* zero parent id */
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  /* version ff */
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", /* more without '-' */
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  /* separators */
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",  /* not hex */
        "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  /* version not hex */
    };
    char id[MG_TRACE_ID_LEN], flags[2];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_expect_eq(parse(bad[i], id, flags), 0, "'%s'", bad[i]);
}

Test(trace, the_gateway_hop_keeps_the_trace_with_a_new_span)
{
    char out[MG_TRACEPARENT_LEN + 1], id[MG_TRACE_ID_LEN], flags[2];
    mg_traceparent_format(out, "4bf92f3577b34da6a3ce929d0e0e4736", 0x1234, "01");
    cr_expect_str_eq(out, "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000001234-01");
    mg_traceparent_format(out, "4bf92f3577b34da6a3ce929d0e0e4736", 0, "00");
    cr_expect_str_eq(out, "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000001-00", "never a zero span");
    mg_trace_id_new(id, 0, 0);
    mg_traceparent_format(out, id, 7, "00");
    cr_expect_eq(parse(out, id, flags), 1, "a made value is valid: %s", out);
}
