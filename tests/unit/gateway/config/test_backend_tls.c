/*
 * gateway/config/backend_tls.c: a backend's `protocol` and `tls`. PEM files are made here with
 * OpenSSL (a CA-less self-signed certificate, its key, another key) in a temporary directory;
 * good files show every setting and default, bad ones their exact first error.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include "gateway/config/config.h"

static mg_errors_t errs;
static mg_config_t *conf;
static char dir[] = "/tmp/mg-test-backend-tls-XXXXXX";
/* in dir: cert.pem and key.pem (a pair), other.key (another key), empty.pem, and junk.pem */
static char cert[256], key[256], other_key[256], empty[256], junk[256];

static EVP_PKEY *make_key(void)
{
    EVP_PKEY *k = EVP_EC_gen("P-256");
    cr_assert_not_null(k);
    return k;
}

static void write_key(const char *path, EVP_PKEY *k)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    cr_assert_eq(PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL), 1);
    fclose(f);
}

static void write_cert(const char *path, EVP_PKEY *k)
{
    X509 *x = X509_new();
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), 0);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600);
    X509_set_pubkey(x, k);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC, (const unsigned char *)"test", -1, -1, 0);
    X509_set_issuer_name(x, X509_get_subject_name(x));
    cr_assert_neq(X509_sign(x, k, EVP_sha256()), 0);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    cr_assert_eq(PEM_write_X509(f, x), 1);
    fclose(f);
    X509_free(x);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static void setup(void)
{
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
    snprintf(key, sizeof(key), "%s/key.pem", dir);
    snprintf(other_key, sizeof(other_key), "%s/other.key", dir);
    snprintf(empty, sizeof(empty), "%s/empty.pem", dir);
    snprintf(junk, sizeof(junk), "%s/junk.pem", dir);
    EVP_PKEY *k = make_key(), *other = make_key();
    write_key(key, k);
    write_cert(cert, k);
    write_key(other_key, other);
    write_text(empty, "");
    write_text(junk, "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n");
    EVP_PKEY_free(k);
    EVP_PKEY_free(other);
}

static void teardown(void)
{
    mg_config_free(conf);
    conf = NULL;
    mg_errors_clear(&errs);
    const char *files[] = {cert, key, other_key, empty, junk};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        unlink(files[i]);
    rmdir(dir);
    strcpy(dir, "/tmp/mg-test-backend-tls-XXXXXX");
}

TestSuite(backend_tls, .init = setup, .fini = teardown);

#define BASE "listen:\n  - address: \"127.0.0.1:8080\"\nroutes:\n  - name: r\n    respond: {status: 200}\n"

/* The configuration text with a backend `crm` of `body` (a flow mapping; printf format with %s for paths). */
static const char *with_backend(const char *body_fmt, ...)
{
    static char text[4096];
    char body[2048];
    va_list ap;
    va_start(ap, body_fmt);
    vsnprintf(body, sizeof(body), body_fmt, ap);
    va_end(ap);
    snprintf(text, sizeof(text), "backends:\n  crm: %s\n" BASE, body);
    return text;
}

static mg_backend_conf_t *load(const char *text)
{
    conf = mg_config_load_string("gw.yaml", text, &errs);
    cr_assert_not_null(conf, "refused: %s", errs.size ? errs.entries[0].text : "(no error)");
    return &conf->backends[0];
}

static void expect_error(const char *text, const char *error)
{
    mg_config_t *c = mg_config_load_string("gw.yaml", text, &errs);
    cr_expect_null(c, "accepted:\n%s", text);
    mg_config_free(c);
    cr_assert_gt(errs.size, 0, "no error for:\n%s", text);
    cr_expect_str_eq(errs.entries[0].text, error, "got\n  %s\nfor:\n%s", errs.entries[0].text, text);
    mg_errors_clear(&errs);
}

Test(backend_tls, http_servers_default_to_plain_http1)
{
    mg_backend_conf_t *b = load(with_backend("{servers: [\"http://a:1\", \"ws://b:2\"]}"));
    cr_assert_eq(b->protocol, MG_PROTOCOL_HTTP1);
    cr_assert_eq(b->tls.verify, 1, "verification is on unless turned off");
    cr_assert_null(b->tls.ca);
    cr_assert_null(b->tls.server_name);
    cr_assert_null(b->tls.certificate);
    cr_assert_null(b->tls.key);
    for (size_t i = 0; i < b->num_servers; i++) {
        cr_assert_eq(b->servers[i].via_libcurl, 0);
        cr_assert_eq(b->servers[i].backend, b);
    }
}

Test(backend_tls, https_servers_verify_with_the_system_store_and_go_to_libcurl)
{
    mg_backend_conf_t *b = load(with_backend("{servers: [\"https://a:443/p/\", \"http://b:80\"]}"));
    cr_assert_str_eq(b->servers[0].url, "https://a:443/p");
    cr_assert_eq(b->servers[0].via_libcurl, 1);
    cr_assert_eq(b->servers[1].via_libcurl, 0, "an http:// server of the same backend stays plain");
    cr_assert_eq(b->tls.verify, 1);
    cr_assert_null(b->tls.ca);
}

Test(backend_tls, every_tls_key)
{
    mg_backend_conf_t *b = load(with_backend("{servers: [\"https://10.0.0.1:8443\"], tls: {ca: %s, verify: true, server_name: "
                                             "api.internal, certificate: %s, key: %s}}",
                                             cert, cert, key));
    cr_assert_str_eq(b->tls.ca, cert);
    cr_assert_eq(b->tls.verify, 1);
    cr_assert_str_eq(b->tls.server_name, "api.internal");
    cr_assert_str_eq(b->tls.certificate, cert);
    cr_assert_str_eq(b->tls.key, key);
}

Test(backend_tls, verify_false)
{
    mg_backend_conf_t *b = load(with_backend("{servers: [\"https://a:1\"], tls: {verify: false}}"));
    cr_assert_eq(b->tls.verify, 0);
}

Test(backend_tls, relative_paths_are_relative_to_the_configuration_file)
{
    char path[512], text[2048];
    snprintf(path, sizeof(path), "%s/gw.yaml", dir);
    snprintf(text, sizeof(text), "backends:\n  crm: {servers: [\"https://a:1\"], tls: {ca: cert.pem}}\n" BASE);
    write_text(path, text);
    conf = mg_config_load(path, &errs);
    unlink(path);
    cr_assert_not_null(conf, "refused: %s", errs.size ? errs.entries[0].text : "");
    cr_assert_str_eq(conf->backends[0].tls.ca, cert);
}

Test(backend_tls, h2_and_h2c_pick_libcurl_for_every_server)
{
    mg_backend_conf_t *b = load(with_backend("{servers: [\"https://a:1\", \"https://b:1\"], protocol: h2}"));
    cr_assert_eq(b->protocol, MG_PROTOCOL_H2);
    cr_assert(b->servers[0].via_libcurl && b->servers[1].via_libcurl);
    mg_config_free(conf);
    b = load(with_backend("{servers: [\"http://a:1\", \"ws://b:1\"], protocol: h2c}"));
    cr_assert_eq(b->protocol, MG_PROTOCOL_H2C);
    cr_assert(b->servers[0].via_libcurl && b->servers[1].via_libcurl);
    mg_config_free(conf);
    b = load(with_backend("{servers: [\"http://a:1\"], protocol: http1}"));
    cr_assert_eq(b->protocol, MG_PROTOCOL_HTTP1);
    cr_assert_eq(b->servers[0].via_libcurl, 0);
}

Test(backend_tls, bad_protocols)
{
    expect_error(with_backend("{servers: [\"http://a:1\"], protocol: h3}"),
                 "gw.yaml:2:44: unknown protocol 'h3' (did you mean 'h2'?)");
    expect_error(with_backend("{servers: [\"http://a:1\"], protocol: spdy}"),
                 "gw.yaml:2:44: unknown protocol 'spdy' (expected http1, h2 or h2c)");
    expect_error(with_backend("{servers: [\"http://a:1\"], protocol: [h2]}"), "gw.yaml:2:44: expected a string, got a sequence");
    expect_error(with_backend("{servers: [\"https://a:1\", \"http://b:1\"], protocol: h2}"),
                 "gw.yaml:2:59: protocol h2 is HTTP/2 over TLS, but server 'http://b:1' is not https:// (h2c is HTTP/2 without "
                 "TLS)");
    expect_error(with_backend("{servers: [\"https://a:1\"], protocol: h2c}"),
                 "gw.yaml:2:45: protocol h2c is HTTP/2 without TLS, but server 'https://a:1' is https:// (use h2)");
    expect_error(with_backend("{servers: [\"http://a:1\"], protocl: h2}"),
                 "gw.yaml:2:34: unknown key 'protocl' (did you mean 'protocol'?)");
}

Test(backend_tls, bad_tls_sections)
{
    expect_error(with_backend("{servers: [\"https://a:1\"], tls: yes}"), "gw.yaml:2:40: expected a mapping, got a scalar");
    expect_error(with_backend("{servers: [\"http://a:1\"], tls: {verify: false}}"),
                 "gw.yaml:2:39: tls is only used with https:// servers, and this backend has none");
    expect_error(with_backend("{servers: [\"https://a:1\"], tls: {verfy: false}}"),
                 "gw.yaml:2:41: unknown key 'verfy' (did you mean 'verify'?)");
    expect_error(with_backend("{servers: [\"https://a:1\"], tls: {verify: maybe}}"),
                 "gw.yaml:2:49: expected true or false, got 'maybe'");
    expect_error(with_backend("{servers: [\"https://a:1\"], tls: {server_name: \"a b\"}}"),
                 "gw.yaml:2:54: invalid server_name 'a b' (a host name: letters, digits, '.', '-', '_')");
    expect_error(with_backend("{servers: [\"https://a:1\"], tls: {server_name: \"\"}}"),
                 "gw.yaml:2:54: invalid server_name '' (a host name: letters, digits, '.', '-', '_')");
}

/* The column (1-based) of the `nth` (0-based) `needle` in the line "  crm: ..." of with_backend's text. */
static unsigned column_of(const char *text, const char *needle, int nth)
{
    const char *line = strstr(text, "  crm: "), *p = strstr(line, needle);
    while (nth-- > 0)
        p = strstr(p + 1, needle);
    return (unsigned)(p - line) + 1;
}

/* The error `msg` at the `nth` `at` of `text`. */
static void expect_error_at(const char *text, const char *at, int nth, const char *msg)
{
    char want[1024];
    snprintf(want, sizeof(want), "gw.yaml:2:%u: %s", column_of(text, at, nth), msg);
    expect_error(text, want);
}

Test(backend_tls, bad_files)
{
    char msg[900];
    const char *t;
    /* missing, or not a file */
    t = with_backend("{servers: [\"https://a:1\"], tls: {ca: /nonexistent/ca.pem}}");
    expect_error_at(t, "/nonexistent", 0, "cannot read ca '/nonexistent/ca.pem': No such file or directory");
    t = with_backend("{servers: [\"https://a:1\"], tls: {ca: %s}}", dir);
    snprintf(msg, sizeof(msg), "cannot read ca '%s': not a regular file", dir);
    expect_error_at(t, dir, 0, msg);
    t = with_backend("{servers: [\"https://a:1\"], tls: {certificate: %s, key: /nonexistent/k.pem}}", cert);
    expect_error_at(t, "/nonexistent", 0, "cannot read key '/nonexistent/k.pem': No such file or directory");
    /* no certificate in it: empty, a key, a broken block */
    const char *not_ca[] = {empty, key, junk};
    for (size_t i = 0; i < 3; i++) {
        t = with_backend("{servers: [\"https://a:1\"], tls: {ca: %s}}", not_ca[i]);
        snprintf(msg, sizeof(msg), "ca '%s' holds no PEM certificate", not_ca[i]);
        expect_error_at(t, not_ca[i], 0, msg);
    }
    t = with_backend("{servers: [\"https://a:1\"], tls: {certificate: %s, key: %s}}", junk, key);
    snprintf(msg, sizeof(msg), "certificate '%s' holds no PEM certificate", junk);
    expect_error_at(t, junk, 0, msg);
    /* certificate and key go together, and belong together */
    t = with_backend("{servers: [\"https://a:1\"], tls: {key: %s}}", key);
    expect_error_at(t, key, 0, "tls.certificate and tls.key go together: a client certificate needs its key");
    t = with_backend("{servers: [\"https://a:1\"], tls: {certificate: %s}}", cert);
    expect_error_at(t, cert, 0, "tls.certificate and tls.key go together: a client certificate needs its key");
    t = with_backend("{servers: [\"https://a:1\"], tls: {certificate: %s, key: %s}}", cert, other_key);
    snprintf(msg, sizeof(msg), "key '%s' does not belong to certificate '%s'", other_key, cert);
    expect_error_at(t, other_key, 0, msg);
    t = with_backend("{servers: [\"https://a:1\"], tls: {certificate: %s, key: %s}}", cert, cert);
    snprintf(msg, sizeof(msg), "key '%s' holds no unencrypted PEM private key", cert);
    expect_error_at(t, cert, 1, msg);
}
