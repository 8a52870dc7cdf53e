/*
 * gateway/backend/headers.c: the header fields a backend gets for a request, and those of its
 * response the gateway writes itself.
 */
#include <criterion/criterion.h>
#include <string.h>
#include "gateway/backend/internal.h"

Test(backend_headers, response_headers_replaced_by_gateway)
{
    cr_expect(mg_header_is_replaced_in_response("date", 4));
    cr_expect(mg_header_is_replaced_in_response("server", 6));
    cr_expect(mg_header_is_replaced_in_response("content-length", 14));
    cr_expect(!mg_header_is_replaced_in_response("content-type", 12));
}
