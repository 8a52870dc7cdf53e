/*
 * picohttpparser, as bundled in libh2o-evloop: its functions are exported, but its header is not
 * installed. These are its declarations (h2o 2.2.5's deps/picohttpparser/picohttpparser.h).
 */
#ifndef MG_GATEWAY_PHR_H
#define MG_GATEWAY_PHR_H

#include <stddef.h>
#include <sys/types.h>

/* One header line; an obs-fold continuation line has name NULL and name_len 0. */
struct phr_header {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
};

/* The length of the head, -1 when it is malformed, -2 when it is incomplete. */
int phr_parse_request(const char *buf, size_t len, const char **method, size_t *method_len, const char **path, size_t *path_len,
                      int *minor_version, struct phr_header *headers, size_t *num_headers, size_t last_len);
int phr_parse_response(const char *buf, size_t len, int *minor_version, int *status, const char **msg, size_t *msg_len,
                       struct phr_header *headers, size_t *num_headers, size_t last_len);

/* The chunked decoder's state: zero it, then set consume_trailer. */
struct phr_chunked_decoder {
    size_t bytes_left_in_chunk;
    char consume_trailer;
    char _hex_count;
    char _state;
};

/* Decodes buf[0..*bufsz) in place (*bufsz becomes the decoded length): -1 malformed, -2 more to
 * come, else the end was found and that many bytes after it are left at buf + *bufsz. */
ssize_t phr_decode_chunked(struct phr_chunked_decoder *decoder, char *buf, size_t *bufsz);

#endif
