/*
 * libFuzzer target: a whole configuration file, from YAML bytes to a compiled route tree and
 * backends (mg_config_load_string), then freed. Whatever the bytes, loading must end in a
 * configuration or in errors, never a crash, a leak or undefined behaviour; every error must
 * carry a position. The same bytes are then reloaded over a fixed running configuration
 * (mg_config_reload_string): the result must keep the running restart-only settings.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/config/config.h"

static void check_positions(const mg_errors_t *errs)
{
    /* "fuzz.yaml:LINE:COL: ..." for everything found inside the document */
    for (size_t i = 0; i != errs->size; ++i) {
        if (strncmp(errs->entries[i].text, "fuzz.yaml:", 10) != 0)
            abort();
    }
}

static const char running_text[] = "listen:\n  - address: \"127.0.0.1:8080\"\n  - address: \"[::1]:8443\"\n"
                                   "workers: 3\nadmin: {address: \"127.0.0.1:9901\", token: t}\n"
                                   "limits: {max_request_body: 1KiB, client_idle_timeout: 7s, max_http2_streams: 9}\n"
                                   "routes: []\n";

static int keeps_start_settings(const mg_config_t *conf, const mg_config_t *running)
{
    return conf->num_listeners == running->num_listeners && strcmp(conf->listeners[1].address, "[::1]:8443") == 0 &&
           conf->workers == running->workers && strcmp(conf->admin.address, running->admin.address) == 0 &&
           conf->limits.max_request_body == running->limits.max_request_body &&
           conf->limits.client_idle_timeout_ms == running->limits.client_idle_timeout_ms &&
           conf->limits.max_http2_streams == running->limits.max_http2_streams && conf->generation == running->generation + 1;
}

static void fuzz_reload(const char *text)
{
    static mg_config_t *running;
    mg_errors_t errs = {0};

    if (running == NULL && (running = mg_config_load_string("fuzz.yaml", running_text, &errs)) == NULL)
        abort();
    mg_config_t *conf = mg_config_reload_string(running, text, &errs);
    if (conf == NULL && errs.num_errors == 0)
        abort();
    check_positions(&errs);
    if (conf != NULL && !keeps_start_settings(conf, running))
        abort();
    mg_config_free(conf);
    mg_errors_clear(&errs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* mg_config_load_string reads a NUL-terminated text: an embedded NUL ends it early, as a
     * file with one would be refused by the YAML reader anyway. */
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    mg_errors_t errs = {0};
    mg_config_t *conf = mg_config_load_string("fuzz.yaml", text, &errs);
    if (conf == NULL && errs.num_errors == 0)
        abort(); /* refused without saying why */
    check_positions(&errs);
    if (conf != NULL)
        fuzz_reload(text);
    mg_config_free(conf);
    mg_errors_clear(&errs);
    free(text);
    return 0;
}
