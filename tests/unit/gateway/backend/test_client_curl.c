/*
 * gateway/backend/client_curl.c, its static helpers for https:// and HTTP/2 servers: what a
 * finished transfer's code comes to (TLS failures apart from other ones), and the url and
 * connection target of tls.server_name. The transfers themselves are in
 * tests/integration/test_backend_tls.py.
 */
#include <criterion/criterion.h>
#include "../../../../gateway/backend/client_curl.c"

static h2o_mem_pool_t pool;
static curl_exchange_t x;

static void setup(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    h2o_mem_init_pool(&pool);
    x = (curl_exchange_t){.pool = &pool, .easy = curl_easy_init()};
    cr_assert_not_null(x.easy);
}

static void teardown(void)
{
    curl_easy_cleanup(x.easy);
    h2o_mem_clear_pool(&pool);
}

TestSuite(client_curl, .init = setup, .fini = teardown);

static char *https_error(const char *text)
{
    char *e = h2o_mem_alloc_pool(&pool, CURL_ERROR_SIZE);
    snprintf(e, CURL_ERROR_SIZE, "%s", text);
    return e;
}

Test(client_curl, tls_failures_are_their_own_result)
{
    static const struct {
        CURLcode code;
        mg_attempt_result_t result;
    } table[] = {
        {CURLE_SSL_CONNECT_ERROR, MG_ATTEMPT_TLS_FAILED},    {CURLE_PEER_FAILED_VERIFICATION, MG_ATTEMPT_TLS_FAILED},
        {CURLE_SSL_CERTPROBLEM, MG_ATTEMPT_TLS_FAILED},      {CURLE_SSL_CIPHER, MG_ATTEMPT_TLS_FAILED},
        {CURLE_SSL_CACERT_BADFILE, MG_ATTEMPT_TLS_FAILED},   {CURLE_SSL_ISSUER_ERROR, MG_ATTEMPT_TLS_FAILED},
        {CURLE_COULDNT_CONNECT, MG_ATTEMPT_NOT_CONNECTED},   {CURLE_COULDNT_RESOLVE_HOST, MG_ATTEMPT_NOT_CONNECTED},
        {CURLE_WEIRD_SERVER_REPLY, MG_ATTEMPT_BAD_RESPONSE}, {CURLE_HTTP2, MG_ATTEMPT_FAILED},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        cr_expect_eq(result_of(&x, table[i].code), table[i].result, "curl code %d", (int)table[i].code);
}

Test(client_curl, read_errors_of_plain_or_reused_connections_are_not_tls_failures)
{
    /* http://: no error buffer */
    cr_expect_eq(result_of(&x, CURLE_RECV_ERROR), MG_ATTEMPT_FAILED);
    cr_expect_eq(result_of(&x, CURLE_SEND_ERROR), MG_ATTEMPT_FAILED);
    cr_expect_eq(result_of(&x, CURLE_GOT_NOTHING), MG_ATTEMPT_FAILED);
    /* https://, but no connection was made for this exchange (a fresh handle reports 0) */
    x.error = https_error("OpenSSL SSL_read: error:0A00045C:SSL routines::tlsv13 alert certificate required");
    cr_expect_eq(result_of(&x, CURLE_RECV_ERROR), MG_ATTEMPT_FAILED);
    /* https://, after the server began its answer */
    x.status = 200;
    cr_expect_eq(result_of(&x, CURLE_RECV_ERROR), MG_ATTEMPT_FAILED);
}

Test(client_curl, a_stopped_head_wins_over_the_code)
{
    x.stopped = STOP_BAD_HEAD;
    cr_expect_eq(result_of(&x, CURLE_SSL_CONNECT_ERROR), MG_ATTEMPT_BAD_HEAD);
}

static const char *base_for(const char *url, const char *name)
{
    mg_server_conf_t server = {.url = (char *)url};
    return mg__curl_url_with_server_name(&x, &server, name);
}

Test(client_curl, server_name_replaces_the_host_of_the_url_only)
{
    cr_expect_str_eq(base_for("https://127.0.0.1:8443", "api.internal"), "https://api.internal:8443");
    cr_expect_str_eq(base_for("https://10.0.0.7:443/prefix/v1", "billing.internal"), "https://billing.internal:443/prefix/v1");
    cr_expect_str_eq(base_for("https://[::1]:9443/p", "localhost"), "https://localhost:9443/p");
    cr_expect_null(base_for("https://nohost", "x"), "no port: the configuration never lets one in");
}
