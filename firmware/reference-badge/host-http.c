/*
 * HTTP/1.0 over TCP, as esp_http_client does it: the server's address from NVS, one request per
 * connection with the bearer token (and a resume's Range and If-Range), the head read and
 * checked, the body handed out at the radio's speed (--link-kib-s), and a socket silent for the
 * stall timeout reported as a stall.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "host.h"

#define HEAD_MAX 16384

/* the HTTP exchange under way */
static struct {
    int socket;
    char head[HEAD_MAX + 1];
    size_t spare_at, spare_len; /* body bytes that came with the head */
    long content_length;
    size_t body_read;
    uint64_t opened_ms;
} http = {.socket = -1};

bool host_server_of(char *host_name, size_t cap, char *port, size_t port_cap) {
    char url[256];
    if (!host_nvs_get(NULL, "server", url, sizeof url) || strncmp(url, "http://", 7) != 0) return false;
    const char *start = url + 7;
    const char *colon = strrchr(start, ':');
    const char *slash = strchr(start, '/');
    if (slash && slash[1] != '\0') return false;
    size_t host_len = colon ? (size_t)(colon - start) : (slash ? (size_t)(slash - start) : strlen(start));
    if (host_len == 0 || host_len >= cap) return false;
    memcpy(host_name, start, host_len);
    host_name[host_len] = '\0';
    size_t port_len = colon ? (slash ? (size_t)(slash - colon - 1) : strlen(colon + 1)) : 2;
    if (port_len == 0 || port_len >= port_cap) return false;
    if (colon) memcpy(port, colon + 1, port_len);
    else memcpy(port, "80", 2);
    port[port_len] = '\0';
    return true;
}

/* waits for the socket to be readable; false after host.stall_ms of silence on the badge's clock */
static bool readable(void) {
    struct pollfd wait = {.fd = http.socket, .events = POLLIN};
    int wall_ms = (int)((host.stall_ms + host.clock_factor - 1) / host.clock_factor);
    int ready;
    while ((ready = poll(&wait, 1, wall_ms)) == -1 && errno == EINTR) continue;
    return ready > 0;
}

void host_http_close(void *ctx) {
    (void)ctx;
    if (http.socket >= 0) close(http.socket);
    http.socket = -1;
}

/* a header's value with the blanks around it dropped, into out ("" when it does not fit) */
static void header_value(const char *from, const char *line_end, char *out, size_t cap) {
    while (from < line_end && (*from == ' ' || *from == '\t')) from++;
    while (line_end > from && (line_end[-1] == ' ' || line_end[-1] == '\t')) line_end--;
    size_t len = (size_t)(line_end - from);
    if (len >= cap) len = 0;
    memcpy(out, from, len);
    out[len] = '\0';
}

/* Content-Length, Content-Range and Retry-After (seconds, 1-9 digits; a date is none) from the head */
static void read_headers(const char *end, bb_http_head *head) {
    head->content_length = -1;
    head->content_range[0] = '\0';
    head->retry_after_s = -1;
    char value[64];
    /* over the bytes, not as strings: a NUL in a garbled value hides neither its line's end nor
       the lines after it. Each line ends at a CRLF no later than the head's end, which has one. */
    const char *head_end = end + 2;
    for (const char *line = memmem(http.head, (size_t)(head_end - http.head), "\r\n", 2), *line_end; line && line < end; line = line_end) {
        line_end = memmem(line + 2, (size_t)(head_end - (line + 2)), "\r\n", 2);
        if (strncasecmp(line + 2, "content-length:", 15) == 0) head->content_length = strtol(line + 17, NULL, 10);
        if (strncasecmp(line + 2, "content-range:", 14) == 0) header_value(line + 16, line_end, head->content_range, sizeof head->content_range);
        if (strncasecmp(line + 2, "retry-after:", 12) == 0) {
            header_value(line + 14, line_end, value, sizeof value);
            size_t digits = strspn(value, "0123456789");
            if (digits > 0 && digits <= 9 && value[digits] == '\0') head->retry_after_s = strtol(value, NULL, 10);
        }
    }
}

bool host_http_open(void *ctx, const char *method, const char *path, const char *token, const char *body, size_t body_len, const bb_range_request *range,
                    bb_http_head *head, char *why, size_t why_cap) {
    (void)ctx;
    char name[200], port[8];
    if (!host_server_of(name, sizeof name, port, sizeof port)) {
        snprintf(why, why_cap, "no server URL (http://HOST:PORT) in NVS");
        return false;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *found;
    int error = getaddrinfo(name, port, &hints, &found);
    if (error != 0) {
        snprintf(why, why_cap, "%s: %s", name, gai_strerror(error));
        return false;
    }
    http.socket = -1;
    for (struct addrinfo *at = found; at && http.socket < 0; at = at->ai_next) {
        http.socket = socket(at->ai_family, at->ai_socktype | SOCK_CLOEXEC, at->ai_protocol);
        if (http.socket >= 0 && connect(http.socket, at->ai_addr, at->ai_addrlen) != 0) host_http_close(NULL);
    }
    freeaddrinfo(found);
    if (http.socket < 0) {
        snprintf(why, why_cap, "%s:%s: %s", name, port, strerror(errno));
        return false;
    }
    char request[1024];
    int len = snprintf(request, sizeof request, "%s %s HTTP/1.0\r\nHost: %s:%s\r\nAuthorization: Bearer %s\r\n", method, path, name, port, token);
    if (range) len += snprintf(request + len, sizeof request - (size_t)len, "Range: bytes=%u-\r\nIf-Range: \"%s\"\r\n", (unsigned)range->from, range->md5);
    if (body) len += snprintf(request + len, sizeof request - (size_t)len, "Content-Type: text/plain\r\nContent-Length: %zu\r\n", body_len);
    len += snprintf(request + len, sizeof request - (size_t)len, "\r\n");
    if ((size_t)len >= sizeof request) {
        host_http_close(NULL);
        snprintf(why, why_cap, "request head too long");
        return false;
    }
    signal(SIGPIPE, SIG_IGN);
    if (send(http.socket, request, (size_t)len, 0) != len || (body && send(http.socket, body, body_len, 0) != (ssize_t)body_len)) {
        snprintf(why, why_cap, "send: %s", strerror(errno));
        host_http_close(NULL);
        return false;
    }
    /* the head, up to the blank line */
    size_t have = 0;
    char *end = NULL;
    while (!end) {
        if (have == HEAD_MAX || !readable()) {
            snprintf(why, why_cap, have == HEAD_MAX ? "response head longer than %d bytes" : "no answer for %u ms", have == HEAD_MAX ? HEAD_MAX : (int)host.stall_ms);
            host_http_close(NULL);
            return false;
        }
        ssize_t n = recv(http.socket, http.head + have, HEAD_MAX - have, 0);
        if (n <= 0) {
            snprintf(why, why_cap, "answer cut after %zu bytes", have);
            host_http_close(NULL);
            return false;
        }
        have += (size_t)n;
        http.head[have] = '\0';
        /* over the bytes, not as a string: a NUL in a garbled head must not hide its end */
        end = memmem(http.head, have, "\r\n\r\n", 4);
    }
    if (sscanf(http.head, "HTTP/1.%*1[01] %3d", &head->status) != 1) {
        snprintf(why, why_cap, "not an HTTP response");
        host_http_close(NULL);
        return false;
    }
    read_headers(end, head);
    http.content_length = head->content_length;
    http.spare_at = (size_t)(end + 4 - http.head);
    http.spare_len = have - http.spare_at;
    http.body_read = 0;
    http.opened_ms = host_badge_ms();
    return true;
}

long host_http_read(void *ctx, uint8_t *buf, size_t cap) {
    (void)ctx;
    if (http.content_length >= 0 && http.body_read >= (size_t)http.content_length) return BB_HTTP_END;
    if (http.content_length >= 0 && cap > (size_t)http.content_length - http.body_read) cap = (size_t)http.content_length - http.body_read;
    long n;
    if (http.spare_len > 0) {
        n = (long)(cap < http.spare_len ? cap : http.spare_len);
        memcpy(buf, http.head + http.spare_at, (size_t)n);
        http.spare_at += (size_t)n;
        http.spare_len -= (size_t)n;
    } else {
        if (!readable()) return BB_HTTP_STALLED;
        ssize_t got = recv(http.socket, buf, cap, 0);
        if (got < 0) return BB_HTTP_CUT;
        if (got == 0) return http.content_length >= 0 ? BB_HTTP_CUT : BB_HTTP_END;
        n = (long)got;
    }
    http.body_read += (size_t)n;
    /* the radio's speed: the body may not arrive faster than the link carries it (in badge time) */
    if (host.link_bytes_per_s > 0) {
        uint64_t due = http.opened_ms + (uint64_t)http.body_read * 1000 / host.link_bytes_per_s;
        uint64_t now = host_badge_ms();
        if (due > now) host_badge_sleep_ms(due - now);
    }
    return n;
}
