/*
 * The top-level `auth:` section: named authenticators, each of kind `jwt` or `api_key`, read into
 * mg_auth_conf_t (gateway/auth/auth.h). JWKS files, secrets and keys files are read here, with
 * the configuration: a file that cannot be used is an error at the key naming it, and a reload
 * reads them again. JWKS urls are fetched by the gateway (gateway/auth/fetch.c), never here.
 *
 *   auth:
 *     corp:
 *       jwt: {issuer, audiences, jwks: {file | url, refresh, min_refresh, timeout}, algorithms,
 *             secret_file, clock_skew, require_exp, from, max_token_bytes, forward_claims,
 *             forward_token, cache_ttl, realm}
 *     partners:
 *       api_key: {keys_file, header, query, from, forward_claims, forward_token, realm}
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "gateway/config/internal.h"

static const char *const jwt_keys[] = {
    "issuer", "audiences",       "jwks",           "algorithms",    "secret_file", "clock_skew", "require_exp",
    "from",   "max_token_bytes", "forward_claims", "forward_token", "cache_ttl",   "realm",      NULL};
static const char *const api_key_keys[] = {"keys_file",      "header",        "query", "from",
                                           "forward_claims", "forward_token", "realm", NULL};
static const char *const jwks_keys[] = {"file", "url", "refresh", "min_refresh", "timeout", NULL};
static const char *const source_kinds[] = {"header", "cookie", "query", NULL};

#define MG_SECRET_MIN_BYTES 32
#define MG_MAX_CLOCK_SKEW_MS (3600 * 1000)

static mg_str_t copy_str(mg_config_loader_t *cl, const mg_node_t *at, const char *s, int lower)
{
    char *copy = mg__config_copy_str(cl, at, s);
    for (char *p = copy; lower && p != NULL && *p != '\0'; p++)
        *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
    return mg_str(copy, copy != NULL ? strlen(copy) : 0);
}

/* A header name (a token), lower-cased; base NULL after an error. */
static mg_str_t read_header_name(mg_config_loader_t *cl, const mg_node_t *node)
{
    const char *s;
    if (mg_node_to_str(node, &s, cl->errs) != 0)
        return MG_STR_NULL;
    if (!mg_is_token(s, node->u.scalar.len)) {
        mg_errors_add(cl->errs, node, "invalid header name '%s' (a token such as X-Api-Key)", s);
        return MG_STR_NULL;
    }
    return copy_str(cl, node, s, 1);
}

/* A name that goes into a header (realm) or a cookie/parameter name: printable, no quote or
 * backslash, so that it needs no escaping where it is written. */
static int read_plain(mg_config_loader_t *cl, const mg_node_t *node, const char *what, const char **out)
{
    if (mg_node_to_str(node, out, cl->errs) != 0)
        return -1;
    for (const char *p = *out; *p != '\0'; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f || *p == '"' || *p == '\\') {
            mg_errors_add(cl->errs, node, "%s cannot hold a control character, '\"' or '\\'", what);
            return -1;
        }
    if ((*out)[0] == '\0' || strlen(*out) != node->u.scalar.len) {
        mg_errors_add(cl->errs, node, "%s cannot be empty or hold NUL", what);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Where the credential is read: `from: [{header: N, prefix: P}, {cookie: N}, {query: N}]`
 */
static void read_source(mg_config_loader_t *cl, const mg_node_t *item, mg_auth_source_t *src)
{
    const char *s;
    if (mg_node_expect(item, MG_NODE_MAPPING, cl->errs) != 0 || item->u.mapping.size == 0)
        return;
    const mg_node_pair_t *first = &item->u.mapping.pairs[0];
    const char *kind = first->key->u.scalar.str;
    static const char *const header_keys[] = {"header", "prefix", NULL};
    if (mg_node_get(item, "header") != NULL) {
        mg_node_check_keys(item, header_keys, cl->errs);
        src->kind = MG_AUTH_FROM_HEADER;
        src->name = read_header_name(cl, mg_node_get(item, "header"));
        const mg_node_t *prefix = mg_node_get(item, "prefix");
        if (prefix != NULL && mg_node_to_str(prefix, &s, cl->errs) == 0)
            src->prefix = copy_str(cl, prefix, s, 0);
        return;
    }
    if ((strcmp(kind, "cookie") != 0 && strcmp(kind, "query") != 0) || item->u.mapping.size != 1) {
        mg_node_check_keys(item, source_kinds, cl->errs);
        mg_errors_add(cl->errs, item, "a source is {header: NAME, prefix: P}, {cookie: NAME} or {query: NAME}");
        return;
    }
    src->kind = strcmp(kind, "cookie") == 0 ? MG_AUTH_FROM_COOKIE : MG_AUTH_FROM_QUERY;
    if (read_plain(cl, first->value, "a cookie or parameter name", &s) == 0)
        src->name = copy_str(cl, first->value, s, 0);
}

static void add_source(mg_authenticator_t *a, mg_auth_source_kind_t kind, const char *name, const char *prefix)
{
    a->sources = realloc(a->sources, (a->num_sources + 1) * sizeof(*a->sources));
    if (a->sources == NULL)
        abort();
    a->sources[a->num_sources++] = (mg_auth_source_t){kind, mg_str(strdup(name), strlen(name)),
                                                      prefix != NULL ? mg_str(strdup(prefix), strlen(prefix)) : MG_STR_NULL};
}

static void read_sources(mg_config_loader_t *cl, const mg_node_t *seq, mg_authenticator_t *a)
{
    if (mg_node_expect(seq, MG_NODE_SEQUENCE, cl->errs) != 0)
        return;
    if (seq->u.sequence.size == 0) {
        mg_errors_add(cl->errs, seq, "'from' needs at least one source");
        return;
    }
    a->sources = calloc(seq->u.sequence.size, sizeof(*a->sources));
    if (a->sources == NULL)
        abort();
    a->num_sources = seq->u.sequence.size;
    for (size_t i = 0; i < seq->u.sequence.size; i++)
        read_source(cl, seq->u.sequence.items[i], &a->sources[i]);
}

/* ---------------------------------------------------------------------------------------
 * What goes on to the backend: forward_claims, forward_token
 */
static void read_forward_claims(mg_config_loader_t *cl, const mg_node_t *map, mg_authenticator_t *a)
{
    if (mg_node_expect(map, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(map, NULL, cl->errs);
    a->forward_claims = calloc(map->u.mapping.size + 1, sizeof(*a->forward_claims));
    if (a->forward_claims == NULL)
        abort();
    for (size_t i = 0; i < map->u.mapping.size; i++) {
        const mg_node_pair_t *p = &map->u.mapping.pairs[i];
        mg_str_t header = read_header_name(cl, p->value);
        const char *why = header.base != NULL ? mg_header_refusal(header.base) : NULL;
        if (why != NULL)
            mg_errors_add(cl->errs, p->value, "forward_claims cannot set '%s': it %s", header.base, why);
        if (header.base == NULL || why != NULL) {
            free((char *)header.base);
            continue;
        }
        a->forward_claims[a->num_forward_claims++] = (mg_forward_claim_t){copy_str(cl, p->key, p->key->u.scalar.str, 0), header};
    }
}

static void read_common(mg_config_loader_t *cl, const mg_node_t *map, mg_authenticator_t *a)
{
    const mg_node_t *node;
    const char *s;
    a->forward_token = 1;
    if ((node = mg_node_get(map, "forward_claims")) != NULL)
        read_forward_claims(cl, node, a);
    if ((node = mg_node_get(map, "forward_token")) != NULL)
        mg_node_to_bool(node, &a->forward_token, cl->errs);
    if ((node = mg_node_get(map, "realm")) != NULL && read_plain(cl, node, "realm", &s) == 0)
        a->realm = mg__config_copy_str(cl, node, s);
    if (a->realm == NULL)
        a->realm = strdup("matchgate");
    if ((node = mg_node_get(map, "from")) != NULL)
        read_sources(cl, node, a);
}

/* ---------------------------------------------------------------------------------------
 * Files read with the configuration
 */

/* The whole file at `path` (at most `max` bytes) into a new buffer; NULL after an error at `at`. */
static char *read_whole(mg_config_loader_t *cl, const mg_node_t *at, const char *path, size_t max, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    char *buf = NULL;
    ssize_t n = 0;
    if (fd < 0) {
        mg_errors_add(cl->errs, at, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    if ((buf = malloc(max + 1)) == NULL)
        abort();
    *len = 0;
    while (*len <= max && (n = read(fd, buf + *len, max + 1 - *len)) > 0)
        *len += (size_t)n;
    close(fd);
    if (n < 0 || *len > max) {
        mg_errors_add(cl->errs, at, n < 0 ? "cannot read '%s'" : "'%s' is too large", path);
        free(buf);
        return NULL;
    }
    buf[*len] = '\0';
    return buf;
}

/* secret_file: its bytes, one trailing newline removed (editors add one). */
static void read_secret(mg_config_loader_t *cl, const mg_node_t *node, mg_authenticator_t *a)
{
    const char *s;
    size_t len;
    char *path = mg_node_to_str(node, &s, cl->errs) == 0 ? mg__config_resolve_path(cl, node, s) : NULL;
    char *buf = path != NULL ? read_whole(cl, node, path, 4096, &len) : NULL;
    a->secret_file = path;
    if (buf == NULL)
        return;
    if (len != 0 && buf[len - 1] == '\n')
        len -= len >= 2 && buf[len - 2] == '\r' ? 2 : 1;
    if (len < MG_SECRET_MIN_BYTES) {
        mg_errors_add(cl->errs, node, "the secret has %zu bytes: HS256/384/512 need at least %d", len, MG_SECRET_MIN_BYTES);
        free(buf);
        return;
    }
    a->secret = (uint8_t *)buf;
    a->secret_len = len;
}

static void read_jwks_file(mg_config_loader_t *cl, const mg_node_t *node, mg_authenticator_t *a)
{
    const char *s;
    size_t len, skipped = 0;
    char warn[160] = "", err[160] = "";
    if (mg_node_to_str(node, &s, cl->errs) != 0 || (a->jwks_file = mg__config_resolve_path(cl, node, s)) == NULL)
        return;
    char *json = read_whole(cl, node, a->jwks_file, MG_KEYSET_MAX_BYTES, &len);
    if (json == NULL)
        return;
    mg_keyset_t *ks = mg_keyset_parse(json, len, &skipped, warn, sizeof(warn), err, sizeof(err));
    free(json);
    if (ks == NULL) {
        mg_errors_add(cl->errs, node, "'%s': %s", a->jwks_file, err);
        return;
    }
    if (skipped != 0)
        mg_errors_warn(cl->errs, node, "'%s': %zu key%s not used (%s)", a->jwks_file, skipped, skipped == 1 ? "" : "s", warn);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    a->keys = mg_keyring_new();
    mg_keyring_install(a->keys, ks, (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000);
}

/* A JWKS url: http or https, no control character or space (it goes into a log line). */
static void read_jwks_url(mg_config_loader_t *cl, const mg_node_t *node, mg_authenticator_t *a)
{
    const char *s;
    if (mg_node_to_str(node, &s, cl->errs) != 0)
        return;
    int ok = strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0;
    for (const char *p = s; ok && *p != '\0'; p++)
        ok = (unsigned char)*p > 0x20 && *p != 0x7f;
    if (!ok || strlen(s) != node->u.scalar.len) {
        mg_errors_add(cl->errs, node, "jwks.url must be an http:// or https:// url without spaces");
        return;
    }
    a->jwks_url = mg__config_copy_str(cl, node, s);
    a->keys = mg_keyring_new();
}

static void read_jwks(mg_config_loader_t *cl, const mg_node_t *map, mg_authenticator_t *a)
{
    if (mg_node_expect(map, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(map, jwks_keys, cl->errs);
    const mg_node_t *file = mg_node_get(map, "file"), *url = mg_node_get(map, "url");
    if ((file == NULL) == (url == NULL)) {
        mg_errors_add(cl->errs, map, "jwks takes exactly one of 'file' or 'url'");
        return;
    }
    a->refresh_ms = 600000;
    a->min_refresh_ms = 30000;
    a->timeout_ms = 5000;
    mg__config_read_duration(cl, map, "refresh", 1, &a->refresh_ms);
    mg__config_read_duration(cl, map, "min_refresh", 1, &a->min_refresh_ms);
    mg__config_read_duration(cl, map, "timeout", 1, &a->timeout_ms);
    if (file != NULL)
        read_jwks_file(cl, file, a);
    else
        read_jwks_url(cl, url, a);
}

/* ---------------------------------------------------------------------------------------
 * jwt
 */
static void read_algorithms(mg_config_loader_t *cl, const mg_node_t *seq, mg_authenticator_t *a)
{
    if (mg_node_expect(seq, MG_NODE_SEQUENCE, cl->errs) != 0)
        return;
    a->policy.algorithms = 0;
    for (size_t i = 0; i < seq->u.sequence.size; i++) {
        const mg_node_t *item = seq->u.sequence.items[i];
        const char *s;
        if (mg_node_to_str(item, &s, cl->errs) != 0)
            continue;
        int alg = mg_jwt_alg_parse(s, item->u.scalar.len);
        if (alg < 0)
            mg_errors_add(cl->errs, item,
                          "unknown algorithm '%s' (expected RS256/384/512, PS256/384/512, ES256/384/512, EdDSA or HS256/384/512)",
                          s);
        else
            a->policy.algorithms |= MG_JWT_ALG_BIT(alg);
    }
    if (seq->u.sequence.size == 0)
        mg_errors_add(cl->errs, seq, "'algorithms' needs at least one algorithm");
}

static void read_audiences(mg_config_loader_t *cl, const mg_node_t *node, mg_authenticator_t *a)
{
    const char *s;
    size_t n = node->kind == MG_NODE_SEQUENCE ? node->u.sequence.size : 1;
    a->audiences = calloc(n + 1, sizeof(*a->audiences));
    if (a->audiences == NULL)
        abort();
    for (size_t i = 0; i < n; i++) {
        const mg_node_t *item = node->kind == MG_NODE_SEQUENCE ? node->u.sequence.items[i] : node;
        if (mg_node_to_str(item, &s, cl->errs) == 0)
            a->audiences[a->num_audiences++] = mg__config_copy_str(cl, item, s);
    }
}

/* What the keys and the algorithms must agree on, once both are read. */
static void check_keys(mg_config_loader_t *cl, const mg_node_t *map, mg_authenticator_t *a)
{
    unsigned hs = a->policy.algorithms & MG_JWT_HS_ALGS;
    if (hs != 0 && a->secret == NULL && mg_node_get(map, "secret_file") == NULL)
        mg_errors_add(cl->errs, map, "HS256/384/512 verify with a shared secret: give 'secret_file'");
    if (hs == 0 && mg_node_get(map, "secret_file") != NULL)
        mg_errors_add(cl->errs, mg_node_get(map, "secret_file"),
                      "secret_file is only used by HS256/384/512: add one to 'algorithms'");
    if ((a->policy.algorithms & ~MG_JWT_HS_ALGS) != 0 && mg_node_get(map, "jwks") == NULL)
        mg_errors_add(cl->errs, map, "the algorithms need public keys: give 'jwks: {file: PATH}' or 'jwks: {url: URL}'");
}

static void read_jwt(mg_config_loader_t *cl, const mg_node_t *map, mg_authenticator_t *a)
{
    const mg_node_t *node;
    const char *s;
    uint64_t skew_ms = 60000, max_bytes = MG_AUTH_DEFAULT_MAX_TOKEN_BYTES;
    if (mg_node_expect(map, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(map, jwt_keys, cl->errs);
    a->kind = MG_AUTH_KIND_JWT;
    a->policy = (mg_jwt_policy_t){.algorithms = MG_JWT_DEFAULT_ALGS, .require_exp = 1};
    a->cache_ttl_ms = 300000;
    if ((node = mg_node_get(map, "issuer")) != NULL && mg_node_to_str(node, &s, cl->errs) == 0)
        a->issuer = mg__config_copy_str(cl, node, s);
    if ((node = mg_node_get(map, "audiences")) != NULL)
        read_audiences(cl, node, a);
    if ((node = mg_node_get(map, "algorithms")) != NULL)
        read_algorithms(cl, node, a);
    if ((node = mg_node_get(map, "jwks")) != NULL)
        read_jwks(cl, node, a);
    if ((node = mg_node_get(map, "secret_file")) != NULL)
        read_secret(cl, node, a);
    if ((node = mg_node_get(map, "require_exp")) != NULL)
        mg_node_to_bool(node, &a->policy.require_exp, cl->errs);
    mg__config_read_duration(cl, map, "clock_skew", 0, &skew_ms);
    if (skew_ms > MG_MAX_CLOCK_SKEW_MS)
        mg_errors_add(cl->errs, mg_node_get(map, "clock_skew"), "clock_skew is at most 1h");
    if ((node = mg_node_get(map, "max_token_bytes")) != NULL && mg_node_to_size(node, &max_bytes, cl->errs) == 0 &&
        (max_bytes < 64 || max_bytes > 65536))
        mg_errors_add(cl->errs, node, "max_token_bytes is between 64 and 64KiB");
    mg__config_read_duration(cl, map, "cache_ttl", 0, &a->cache_ttl_ms);
    a->policy.clock_skew = (int64_t)(skew_ms / 1000);
    a->policy.max_token_bytes = (size_t)max_bytes;
    a->policy.issuer = a->issuer;
    a->policy.audiences = a->audiences;
    a->policy.num_audiences = a->num_audiences;
    a->policy.secret = a->secret;
    a->policy.secret_len = a->secret_len;
    read_common(cl, map, a);
    if (a->num_sources == 0)
        add_source(a, MG_AUTH_FROM_HEADER, "authorization", "Bearer ");
    check_keys(cl, map, a);
}

/* ---------------------------------------------------------------------------------------
 * api_key
 */
static void read_api_key(mg_config_loader_t *cl, const mg_node_t *map, mg_authenticator_t *a)
{
    const mg_node_t *node;
    const char *s;
    if (mg_node_expect(map, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(map, api_key_keys, cl->errs);
    a->kind = MG_AUTH_KIND_API_KEY;
    a->policy.max_token_bytes = 1024;
    if ((node = mg_node_require(map, "keys_file", cl->errs)) != NULL && mg_node_to_str(node, &s, cl->errs) == 0 &&
        (a->keys_file = mg__config_resolve_path(cl, node, s)) != NULL) {
        a->apikeys = mg_apikeys_load(a->keys_file, cl->errs);
    }
    read_common(cl, map, a);
    if (a->num_sources != 0 && (mg_node_get(map, "header") != NULL || mg_node_get(map, "query") != NULL))
        mg_errors_add(cl->errs, map, "give either 'from' or 'header'/'query', not both");
    if (a->num_sources != 0)
        return;
    mg_str_t header = (node = mg_node_get(map, "header")) != NULL ? read_header_name(cl, node) : MG_STR_NULL;
    add_source(a, MG_AUTH_FROM_HEADER, header.base != NULL ? header.base : "x-api-key", "");
    free((char *)header.base);
    if ((node = mg_node_get(map, "query")) != NULL && read_plain(cl, node, "a parameter name", &s) == 0)
        add_source(a, MG_AUTH_FROM_QUERY, s, NULL);
}

/* ---------------------------------------------------------------------------------------
 * The section
 */
static int name_ok(const char *s)
{
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_");
    return n != 0 && s[n] == '\0' && strcmp(s, "none") != 0 && strcmp(s, "optional") != 0;
}

static mg_authenticator_t *read_authenticator(mg_config_loader_t *cl, const mg_node_pair_t *p, unsigned index)
{
    static const char *const kinds[] = {"jwt", "api_key", NULL};
    const char *name = p->key->u.scalar.str;
    if (!name_ok(name))
        mg_errors_add(cl->errs, p->key, "invalid authenticator name '%s' (letters, digits, '-', '_'; not none or optional)", name);
    if (mg_node_expect(p->value, MG_NODE_MAPPING, cl->errs) != 0 || mg_node_check_keys(p->value, kinds, cl->errs) != 0)
        return NULL;
    if (p->value->u.mapping.size != 1) {
        mg_errors_add(cl->errs, p->value, "an authenticator has exactly one of 'jwt' or 'api_key'");
        return NULL;
    }
    mg_authenticator_t *a = aligned_alloc(64, (sizeof(*a) + 63) / 64 * 64);
    if (a == NULL)
        abort();
    memset(a, 0, sizeof(*a));
    a->name = strdup(name);
    a->index = index;
    const mg_node_pair_t *kind = &p->value->u.mapping.pairs[0];
    if (strcmp(kind->key->u.scalar.str, "jwt") == 0)
        read_jwt(cl, kind->value, a);
    else
        read_api_key(cl, kind->value, a);
    return a;
}

/* The union of the forward_claims headers: whatever a client sends under those names is dropped. */
static void collect_strip_headers(mg_auth_conf_t *ac)
{
    for (size_t i = 0; i < ac->num_authenticators; i++) {
        const mg_authenticator_t *a = ac->authenticators[i];
        for (size_t j = 0; j < a->num_forward_claims; j++) {
            mg_str_t h = a->forward_claims[j].header;
            size_t k = 0;
            while (k < ac->num_strip_headers && strcmp(ac->strip_headers[k].base, h.base) != 0)
                k++;
            if (k < ac->num_strip_headers)
                continue;
            ac->strip_headers = realloc(ac->strip_headers, (ac->num_strip_headers + 1) * sizeof(*ac->strip_headers));
            if (ac->strip_headers == NULL)
                abort();
            ac->strip_headers[ac->num_strip_headers++] = h;
        }
    }
}

void mg__config_parse_auth(mg_config_loader_t *cl, const mg_node_t *root)
{
    const mg_node_t *map = mg_node_get(root, "auth");
    mg_auth_conf_t *ac = &cl->conf->auth;
    if (map == NULL || mg_node_expect(map, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(map, NULL, cl->errs);
    if (map->u.mapping.size > MG_AUTH_MAX_AUTHENTICATORS) {
        mg_errors_add(cl->errs, map, "at most %d authenticators", MG_AUTH_MAX_AUTHENTICATORS);
        return;
    }
    ac->authenticators = calloc(map->u.mapping.size + 1, sizeof(*ac->authenticators));
    if (ac->authenticators == NULL)
        abort();
    for (size_t i = 0; i < map->u.mapping.size; i++) {
        mg_authenticator_t *a = read_authenticator(cl, &map->u.mapping.pairs[i], (unsigned)ac->num_authenticators);
        if (a != NULL)
            ac->authenticators[ac->num_authenticators++] = a;
    }
    collect_strip_headers(ac);
}
