/*
 * libFuzzer target: a whole configuration file, from YAML bytes to a compiled route tree and
 * backends (mg_config_load_string), then freed. Whatever the bytes, loading must end in a
 * configuration or in errors, never a crash, a leak or undefined behaviour; every error must
 * carry a position.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/gateway.h"

static void check_positions(const mg_errors_t *errs)
{
    /* "fuzz.yaml:LINE:COL: ..." for everything found inside the document */
    for (size_t i = 0; i != errs->size; ++i) {
        if (strncmp(errs->entries[i].text, "fuzz.yaml:", 10) != 0)
            abort();
    }
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
    mg_config_free(conf);
    mg_errors_clear(&errs);
    free(text);
    return 0;
}
