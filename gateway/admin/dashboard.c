/*
 * GET / on the admin listener: the dashboard, one self-contained HTML page (dashboard.html,
 * embedded in the binary at build time by scripts/embed.py). It holds no data: it is served
 * without the token, and its script asks for the token and sends it with each call it makes to
 * the other endpoints, which all require it. Its policy allows no resource from elsewhere.
 */
#include "gateway/admin/internal.h"

extern const char mg_dashboard_html[];
extern const size_t mg_dashboard_html_len;

void mg_admin_dashboard(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req)
{
    static const char policy[] = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
                                 "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("content-security-policy"), 0, NULL, policy,
                          sizeof(policy) - 1);
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-frame-options"), 0, NULL, H2O_STRLIT("DENY"));
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-content-type-options"), 0, NULL, H2O_STRLIT("nosniff"));
    mg_admin_send(req, 200, "text/html; charset=utf-8", mg_dashboard_html, mg_dashboard_html_len);
}
