/* tierbench's compiled load engine: one request, or a pool of distinct ones sent in turn, pre-built and sent again
 * and again over HTTP/1.1 or gRPC (HTTP/2), in a closed loop (N requests in flight, each sent when the last
 * returned) or an open loop (arrivals on a schedule of gaps given in a file), and one binary record per request on
 * stdout: when it was scheduled, sent and done.
 *
 * Why it exists: a Python client costs 0.3-0.7 ms of CPU per 602 KB request, about what a GPU server spends on it;
 * perf_analyzer 2.51 (the C++ tool in the tritonclient wheel) keeps a copy of every request's input for its
 * profile export, so it cannot hand back raw per-request samples of a 602 KB tensor (docs/benchmarks.md).
 *
 * One thread, one epoll loop. HTTP/1.1 is written here (keep-alive connections, one request in flight on each,
 * Content-Length or chunked responses). HTTP/2 comes from the system's libnghttp2 (loaded with dlopen, so the
 * engine builds without its headers and HTTP/1.1 runs without it); a request's DATA frames go out from the
 * pre-built body without a copy (NGHTTP2_DATA_FLAG_NO_COPY). Every body is a slice of the one buffer --request was
 * read into: none is copied, on either protocol.
 *
 * Records (struct record, 56 bytes, little-endian) go to stdout: kind 1 a completed request (times on
 * CLOCK_MONOTONIC, nanoseconds: the clock of Python's time.perf_counter), kind 2 a heartbeat every few ms (the
 * watermark: every request scheduled before it has ended, answered or failed; the timer's lateness), kind 3 an
 * error (the message on stderr; the engine then exits 2), kind 4 ready (connections open, load starting), kind 5 a
 * failed request (below). SIGTERM / SIGINT
 * stop it: nothing new is sent, the requests in flight are let finish (at most --drain seconds: cancelling a gRPC
 * call at the wrong moment crashes Triton 2.48-2.52, triton-inference-server/server#7368), and the records are
 * flushed. A second signal stops it at once.
 *
 * Usage: loadgen --http1 HOST PORT --request FILE | --h2 HOST PORT --request FILE --headers FILE
 *                [--lengths FILE] (--closed N | --open GAPS_FILE) [--max-in-flight N] [--connections N]
 *                [--timeout S] [--first-response FILE] [--heartbeat-ms MS] [--nice N] [--drain S] [--any-size]
 *   --request   HTTP/1.1: the whole request (head and body); h2: the DATA payload (a gRPC message, prefix included).
 *               With --lengths, several such bodies one after another
 *   --lengths   uint64 little-endian byte lengths of the bodies in --request, in order (each > 0, summing to its
 *               size); the n-th request sent (from 0) carries body n modulo their count. Without it the whole file
 *               is one body. h2: every body goes with the same --headers
 *   --headers   h2: one "name: value" per line, pseudo-headers (:method :scheme :path :authority) first
 *   GAPS_FILE   float64 seconds between arrivals (the first arrival comes gaps[0] after the load starts)
 *   --open-at   the open loop's start, CLOCK_MONOTONIC ns: the first arrival comes gaps[0] after it (or after the
 *               engine's own start, when that is later): a schedule made on a clock grid stays on it
 *   --first-response  the body of the first successful response is written there (the caller checks it)
 *   --drain     seconds a stop waits for the requests in flight (default 3)
 *   --nice      the scheduling priority to run at, where the OS allows it (root, CAP_SYS_NICE); the one it runs
 *               at is in the ready record's `code` (niceness + 20)
 *   --timeout   seconds a request may wait for its answer (default 60); past it the request fails (TIMEOUT)
 *
 * Errors are results, not the end of the load: a request that fails is written as a kind 5 record (times as for
 * kind 1, `done_ns` when the failure was seen, `bytes` what came of the response) with `code` = outcome |
 * (status << 8), the outcome of serving/clients/outcomes.py:
 *   1 HTTP_STATUS  an answer with an HTTP status other than 200 (status: it). HTTP/1.1: the connection is kept when
 *                  the response was complete and did not say `Connection: close`, else another is opened
 *   2 GRPC_STATUS  an h2 answer with grpc-status != 0 (status: it); one without a grpc-status is 7 OTHER
 *   3 TIMEOUT      no answer within --timeout of the send. HTTP/1.1: that connection is closed and another opened;
 *                  h2: just that stream is reset (RST_STREAM CANCEL)
 *   4 RESET        the stream was reset, or the connection closed or reset with the request in flight
 *   5 REFUSED      a new connection could not be opened (the request that would have gone on it)
 *   7 OTHER        anything else the server got wrong (a response that does not parse)
 * and the first message of each class goes to stderr as `loadgen: [class] message` (class as outcomes.py names
 * it: http_503, grpc_14, timeout, reset, refused, other). The closed loop sends a loop's next request after a
 * failure as after an answer; the open loop keeps its schedule. While connections fail (refused, lost), opening new
 * ones is paced: at most one attempt per connection per 10 ms, so a closed loop against a dead server does not spin
 * (the caller stops a load that only fails). Setup errors (resolving the host, the first connections), a response
 * of another size than the first (without --any-size) and the schedule running out still end the engine (kind 3).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define ENGINE_VERSION "4"  /* 2: --any-size; 3: failed requests are records (kind 5), the load goes on;
                              * 4: --lengths, several bodies sent in turn */

enum { KIND_DONE = 1, KIND_HEARTBEAT = 2, KIND_ERROR = 3, KIND_READY = 4, KIND_FAILED = 5 };

/* A failed request's outcome (serving/clients/outcomes.py's Outcome): the low byte of its record's `code`. */
enum { OUT_HTTP_STATUS = 1, OUT_GRPC_STATUS = 2, OUT_TIMEOUT = 3, OUT_RESET = 4, OUT_REFUSED = 5, OUT_OTHER = 7 };

/* While connections fail, each may be tried at most once per this long. */
#define RECONNECT_PERIOD_NS 10000000LL

/* At most this much goes into one send/writev: on loopback the sender's syscall also delivers to the receiver, and
 * a 1.2 MB writev once held the loop for 15 ms (open-loop arrivals went out late). Between writes the loop serves
 * its timers; a socket with more to write stays watched for EPOLLOUT, which brings the loop straight back. */
#define MAX_WRITE (256 * 1024)

struct record {
    uint32_t kind;
    uint32_t code;        /* done: HTTP status; failed: outcome | (status << 8) */
    int64_t intended_ns;  /* done, failed: scheduled time; heartbeat: the watermark */
    int64_t sent_ns;      /* done, failed: sent; heartbeat: now */
    int64_t done_ns;      /* done: response complete; failed: the failure seen; heartbeat: the timer's worst
                           * lateness since the last one */
    float server_ms;      /* Server-Timing: the sum of its dur= values (NaN: none) */
    float server_batch;   /* Server-Timing: batch;desc=N (NaN: none) */
    int64_t bytes;        /* done, failed: response body bytes; heartbeat: requests in flight */
    float server_queue_ms; /* Server-Timing: queue;dur=Q, the wait for its forward pass (NaN: none) */
    uint32_t unused;      /* keeps records a multiple of 8 bytes */
};
_Static_assert(sizeof(struct record) == 56, "record layout is read by experiments/measure/engine/records.py");

/* What a server said of a request in its Server-Timing (NaN where it said nothing). */
struct timing {
    float ms, batch, queue_ms;
};
static const struct timing NO_TIMING = {NAN, NAN, NAN};

/* ------------------------------------------------------------------------------------------------ utilities */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void die(const char *fmt, ...);

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) die("out of memory (%zu bytes)", n);
    return p;
}

static void *xrealloc(void *p, size_t n) {
    p = realloc(p, n ? n : 1);
    if (!p) die("out of memory (%zu bytes)", n);
    return p;
}

static uint8_t *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0) die("cannot stat %s: %s", path, strerror(errno));
    uint8_t *buf = xmalloc((size_t)st.st_size);
    if (st.st_size && fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) die("cannot read %s", path);
    fclose(f);
    *len = (size_t)st.st_size;
    return buf;
}

/* A growable byte buffer; `off` is where unconsumed data starts. */
struct buf {
    uint8_t *data;
    size_t len, cap, off;
};

static void buf_append(struct buf *b, const void *data, size_t n) {
    if (b->off && b->off == b->len) b->off = b->len = 0;
    if (b->len + n > b->cap) {
        if (b->off) {  /* slide the unconsumed part to the front before growing */
            memmove(b->data, b->data + b->off, b->len - b->off);
            b->len -= b->off;
            b->off = 0;
        }
        if (b->len + n > b->cap) {
            b->cap = (b->len + n) * 2;
            b->data = xrealloc(b->data, b->cap);
        }
    }
    memcpy(b->data + b->len, data, n);
    b->len += n;
}

static size_t buf_pending(const struct buf *b) { return b->len - b->off; }

/* ----------------------------------------------------------------------------------- output: records, errors */

static struct buf out;       /* records not yet written to stdout (non-blocking) */
static int out_fd = 1;
static int epfd = -1;
static int out_watched = 0;  /* stdout is in the epoll set, waiting to be writable */

static void out_flush(int blocking) {
    while (buf_pending(&out)) {
        ssize_t n = write(out_fd, out.data + out.off, buf_pending(&out));
        if (n > 0) {
            out.off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) {
            if (!blocking) break;
            struct timespec pause = {0, 200000};
            nanosleep(&pause, NULL);
            continue;
        }
        _exit(3);  /* the reader is gone: nobody can use what follows */
    }
    if (buf_pending(&out) == 0) out.off = out.len = 0;
    int want = buf_pending(&out) > 0;
    if (!blocking && epfd >= 0 && want != out_watched) {
        struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = &out};
        epoll_ctl(epfd, want ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, out_fd, &ev);
        out_watched = want;
    }
}

static void emit(uint32_t kind, uint32_t code, int64_t a, int64_t b, int64_t c, struct timing server,
                 int64_t bytes) {
    struct record r = {kind, code, a, b, c, server.ms, server.batch, bytes, server.queue_ms, 0};
    buf_append(&out, &r, sizeof r);
}

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("loadgen: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    emit(KIND_ERROR, 0, now_ns(), 0, 0, NO_TIMING, 0);
    int flags = fcntl(out_fd, F_GETFL);
    if (flags >= 0) fcntl(out_fd, F_SETFL, flags & ~O_NONBLOCK);
    out_flush(1);
    exit(2);
}

/* `preprocess;dur=1.2, queue;dur=3, infer;dur=8.5, batch;desc=8` -> 12.7 ms, batch 8, queue 3 ms (NaN where
 * absent). */
static void parse_server_timing(const char *v, size_t n, struct timing *t) {
    char text[512];
    if (n >= sizeof text) n = sizeof text - 1;
    memcpy(text, v, n);
    text[n] = 0;
    double total = 0;
    int any = 0;
    char *save = NULL;
    for (char *metric = strtok_r(text, ",", &save); metric; metric = strtok_r(NULL, ",", &save)) {
        while (*metric == ' ') metric++;
        int is_batch = strncmp(metric, "batch", 5) == 0 && (metric[5] == ';' || metric[5] == 0);
        int is_queue = strncmp(metric, "queue", 5) == 0 && (metric[5] == ';' || metric[5] == 0);
        for (char *p = strchr(metric, ';'); p; p = strchr(p + 1, ';')) {
            char *param = p + 1;
            while (*param == ' ') param++;
            if (strncmp(param, "dur=", 4) == 0) {
                double dur = strtod(param + 4, NULL);
                total += dur;
                any = 1;
                if (is_queue) t->queue_ms = (float)dur;
            } else if (is_batch && strncmp(param, "desc=", 5) == 0) {
                t->batch = (float)strtod(param + 5, NULL);
            }
        }
    }
    if (any) t->ms = (float)total;
}

/* ------------------------------------------------------------------------------------------ configuration */

enum { PROTO_HTTP1 = 1, PROTO_H2 = 2 };

static struct {
    int proto;
    const char *host, *port;
    uint8_t *request;      /* --request as read: every body points into it */
    size_t request_len;
    struct body {
        const uint8_t *ptr;
        size_t len;
    } *bodies;             /* the requests to send in turn (one: the whole of --request) */
    size_t nbodies;
    char **header_names, **header_values;
    size_t nheaders;
    int closed;  /* closed loop: requests in flight; 0: open loop */
    double *gaps;
    size_t ngaps;
    int max_in_flight;
    int connections;
    int64_t timeout_ns;
    int64_t heartbeat_ns;
    const char *first_response_path;
    int nice;  /* INT32_MIN: leave the inherited one */
    int64_t drain_ns;
    int64_t open_at_ns;   /* open loop: the schedule's start (CLOCK_MONOTONIC), when later than the engine's own */
    int any_size;  /* responses may differ in size (text: JSON numbers); else each must be the first's size */
} cfg = {.nice = INT32_MIN, .drain_ns = 3000000000LL, .max_in_flight = 1024, .connections = 1, .timeout_ns = 60000000000LL, .heartbeat_ns = 5000000LL};

/* The bodies --request holds: the whole file, or the slices --lengths gives (checked against the file's size). */
static void load_bodies(const char *request_path, const char *lengths_path) {
    cfg.request = read_file(request_path, &cfg.request_len);
    if (!lengths_path) {
        if (!cfg.request_len) die("the request %s is empty", request_path);
        cfg.bodies = xmalloc(sizeof *cfg.bodies);
        cfg.bodies[0] = (struct body){cfg.request, cfg.request_len};
        cfg.nbodies = 1;
        return;
    }
    size_t bytes;
    uint8_t *raw = read_file(lengths_path, &bytes);
    if (!bytes || bytes % 8)
        die("--lengths %s holds %zu bytes: it must hold one or more uint64 lengths (8 bytes each)", lengths_path,
            bytes);
    cfg.nbodies = bytes / 8;
    cfg.bodies = xmalloc(cfg.nbodies * sizeof *cfg.bodies);
    size_t at = 0;
    for (size_t i = 0; i < cfg.nbodies; i++) {
        uint64_t len = 0;
        for (int b = 7; b >= 0; b--) len = len << 8 | raw[i * 8 + (size_t)b];  /* little-endian on any host */
        if (len == 0) die("--lengths %s: body %zu has length 0 (every body needs at least one byte)", lengths_path, i);
        if (len > cfg.request_len - at)
            die("--lengths %s: the lengths sum to more than the %zu bytes of %s (body %zu of %zu runs past its end)",
                lengths_path, cfg.request_len, request_path, i, cfg.nbodies);
        cfg.bodies[i] = (struct body){cfg.request + at, (size_t)len};
        at += (size_t)len;
    }
    if (at != cfg.request_len)
        die("--lengths %s: the %zu lengths sum to %zu bytes, but %s holds %zu", lengths_path, cfg.nbodies, at,
            request_path, cfg.request_len);
    free(raw);
}

static void load_headers(const char *path) {
    size_t len;
    char *text = (char *)read_file(path, &len);
    text = xrealloc(text, len + 1);
    text[len] = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        size_t l = strlen(line);
        if (l && line[l - 1] == '\r') line[--l] = 0;
        if (!l) continue;
        char *colon = strchr(line + 1, ':');  /* pseudo-headers start with ':' */
        if (!colon) die("header line without ':' in %s: %s", path, line);
        *colon = 0;
        char *value = colon + 1;
        while (*value == ' ') value++;
        cfg.header_names = xrealloc(cfg.header_names, (cfg.nheaders + 1) * sizeof(char *));
        cfg.header_values = xrealloc(cfg.header_values, (cfg.nheaders + 1) * sizeof(char *));
        cfg.header_names[cfg.nheaders] = line;
        cfg.header_values[cfg.nheaders] = value;
        cfg.nheaders++;
    }
}

/* ------------------------------------------------------------------------------------------------ requests */

struct conn;

struct req {
    int64_t intended, sent;
    int status;        /* HTTP status (h2: :status) */
    int grpc_status;   /* -1: none seen */
    struct timing server;  /* its Server-Timing */
    int64_t bytes;     /* response body bytes received */
    const uint8_t *request;          /* its body (HTTP/1.1: the whole request; h2: the DATA), in cfg.request */
    size_t request_len;
    size_t body_planned, body_sent;  /* h2: request DATA bytes handed to nghttp2 / written */
    int capture;       /* sent before any response ended: its body is kept, the first to end is saved */
    struct buf body;   /* that body */
    char message[160]; /* grpc-message, for the error */
    struct conn *conn;
    int32_t stream_id; /* h2 */
    int ended;         /* recorded (h2: a stream reset for its timeout, released once nghttp2 has closed it) */
    struct req *next;  /* free list */
    struct req *prev_live, *next_live;  /* the requests in flight (and the ended ones not yet released) */
};

static struct req *free_reqs;
static struct req *live;  /* requests in flight: the watermark and the timeout scan them */
static int in_flight;     /* of them, those not ended */
static int stopping;
static int captured;   /* the first response to end was saved to --first-response */
static int64_t expected_bytes = -1;  /* every successful response has the first one's body size */

static uint64_t sends;  /* requests sent so far: the next takes body `sends % cfg.nbodies` */

/* The request goes out now: it takes the next body in turn. (One refused before it was sent takes none.) */
static void take_body(struct req *r) {
    const struct body *b = &cfg.bodies[cfg.nbodies == 1 ? 0 : sends % cfg.nbodies];
    sends++;
    r->request = b->ptr;
    r->request_len = b->len;
}

static struct req *req_new(int64_t intended) {
    struct req *r = free_reqs;
    if (r) free_reqs = r->next;
    else r = xmalloc(sizeof *r);
    memset(r, 0, sizeof *r);
    r->intended = intended;
    r->grpc_status = -1;
    r->server = NO_TIMING;
    /* Not only the first request sent: under concurrency (or several Serve replicas) another may end first, and
     * the caller checks the file as soon as it has warm-up responses. */
    r->capture = !captured && cfg.first_response_path;
    r->next_live = live;
    if (live) live->prev_live = r;
    live = r;
    in_flight++;
    return r;
}

/* A request ended (its record is written): it no longer counts as in flight. */
static void req_end(struct req *r) {
    if (r->ended) return;
    r->ended = 1;
    in_flight--;
}

static void req_release(struct req *r) {
    req_end(r);
    free(r->body.data);
    if (r->prev_live) r->prev_live->next_live = r->next_live;
    else live = r->next_live;
    if (r->next_live) r->next_live->prev_live = r->prev_live;
    r->next = free_reqs;
    free_reqs = r;
}

/* The first message of each error class goes to stderr (the caller shows it with the class's count). */
static uint32_t said[64];
static int nsaid;

static void say_once(uint32_t code, const char *fmt, va_list ap) {
    for (int i = 0; i < nsaid; i++)
        if (said[i] == code) return;
    if (nsaid == (int)(sizeof said / sizeof *said)) return;
    said[nsaid++] = code;
    static const char *names[] = {"ok", "http", "grpc", "timeout", "reset", "refused", "invalid", "other"};
    unsigned outcome = code & 0xff, status = code >> 8;
    char text[400];
    vsnprintf(text, sizeof text, fmt, ap);
    for (char *p = text; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f) *p = ' ';  /* one line, whatever the body held */
    if (outcome == OUT_HTTP_STATUS || outcome == OUT_GRPC_STATUS)
        fprintf(stderr, "loadgen: [%s_%u] %s\n", names[outcome], status, text);
    else
        fprintf(stderr, "loadgen: [%s] %s\n", names[outcome < 8 ? outcome : 7], text);
}

/* A request failed: its record (kind 5: outcome | status << 8, done now), the class's first message on stderr. The
 * request ends; the caller releases it (h2: once its stream is closed). */
static void req_fail(struct req *r, int outcome, int status, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void req_fail(struct req *r, int outcome, int status, const char *fmt, ...) {
    if (r->ended) return;
    if (status < 0 || status > 0xffffff) status = 0;
    uint32_t code = (uint32_t)outcome | ((uint32_t)status << 8);
    va_list ap;
    va_start(ap, fmt);
    say_once(code, fmt, ap);
    va_end(ap);
    emit(KIND_FAILED, code, r->intended, r->sent, now_ns(), r->server, r->bytes);
    req_end(r);
}

/* While connections fail (refused, lost), new ones are paced: at most `pace_slots` attempts (one per connection the
 * load keeps) per RECONNECT_PERIOD_NS. Any answer from the server ends it. */
static int unhealthy;
static int64_t pace_start;
static int pace_used, pace_slots = 1;

static void mark_unhealthy(void) {
    if (unhealthy) return;
    unhealthy = 1;
    pace_start = now_ns();
    pace_used = 0;
}

/* May a connection be opened now? (Counts the attempt.) */
static int may_connect(void) {
    if (!unhealthy) return 1;
    int64_t t = now_ns();
    if (t - pace_start >= RECONNECT_PERIOD_NS) {
        pace_start = t;
        pace_used = 0;
    }
    if (pace_used >= pace_slots) return 0;
    pace_used++;
    return 1;
}

static void save_capture(const struct buf *body) {
    FILE *f = fopen(cfg.first_response_path, "wb");
    if (!f) die("cannot write %s: %s", cfg.first_response_path, strerror(errno));
    fwrite(body->data + body->off, 1, buf_pending(body), f);
    fclose(f);
    captured = 1;
}

static void conn_answered(struct conn *c);

/* A response ended: check it, record it (answered or failed), recycle the request. */
static void finished(struct req *r) {
    int64_t done = now_ns();
    unhealthy = 0;  /* the server answers */
    if (r->conn) conn_answered(r->conn);
    if (r->status != 200) {
        req_fail(r, OUT_HTTP_STATUS, r->status, "HTTP %d from the server%s%s", r->status, r->message[0] ? ": " : "",
                 r->message);
        req_release(r);
        return;
    }
    if (cfg.proto == PROTO_H2 && r->grpc_status != 0) {
        if (r->grpc_status < 0) req_fail(r, OUT_OTHER, 0, "the gRPC response ended without a grpc-status");
        else req_fail(r, OUT_GRPC_STATUS, r->grpc_status, "gRPC status %d: %s", r->grpc_status, r->message);
        req_release(r);
        return;
    }
    if (expected_bytes < 0 || cfg.any_size) expected_bytes = r->bytes;
    else if (r->bytes != expected_bytes)
        die("response of %lld bytes where the first was %lld: the server answered something else",
            (long long)r->bytes, (long long)expected_bytes);
    if (r->capture && !captured) save_capture(&r->body);
    emit(KIND_DONE, (uint32_t)r->status, r->intended, r->sent, done, r->server, r->bytes);
    req_release(r);
}

/* ------------------------------------------------------------------------------------------------ connections */

enum { H1_IDLE, H1_CONNECTING, H1_HEAD, H1_BODY, H1_CHUNK_SIZE, H1_CHUNK_DATA, H1_CHUNK_CRLF, H1_TRAILERS };

/* HTTP/2 output: what nghttp2 produced, in order, as slices for one writev. Request bodies are sent from the
 * shared request buffer (no copy); frame headers and control frames are copied into the slice itself (`own`). */
struct slice {
    const uint8_t *ptr;
    size_t len;
    uint8_t *own;  /* malloc'd copy, freed once written (NULL: points into the request body) */
    uint8_t small[16];
};

struct outq {
    struct slice *s;
    size_t head, len, cap;  /* slices [head, head + len) are pending; the head slice from `off` */
    size_t off;
};

struct conn {
    int tag;  /* first member: epoll data.ptr is a struct conn *, or one of the tags below */
    int fd;
    int dead;  /* dropped: freed once the current batch of events is handled */
    int connected;
    int answered;          /* responses read on it */
    struct outq q;         /* h2: frames not yet written (h1 writes from its request's body at `wpos`) */
    size_t wpos;           /* h1: bytes of the current request (req->request) written */
    int writing;           /* EPOLLOUT is watched */
    /* HTTP/1.1 */
    int state;
    struct req *req;
    struct buf head;
    int64_t left;          /* body or chunk bytes still to come */
    int close_after;
    /* HTTP/2 */
    void *session;
    int streams;
    struct conn *next_idle;
};

enum { TAG_CONN = 1, TAG_TIMER = 2, TAG_SIGNAL = 3 };

static void conn_answered(struct conn *c) { c->answered++; }

static struct conn **conns;
static int nconns;
static struct conn *graveyard;  /* dropped connections, freed after the events that may still name them */
static struct conn *idle_h1;   /* HTTP/1.1 connections with nothing in flight */

static void watch(struct conn *c, int want_write) {
    if (c->writing == want_write) return;
    struct epoll_event ev = {.events = EPOLLIN | (want_write ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
    c->writing = want_write;
}

static int resolve(struct sockaddr_storage *addr, socklen_t *len) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    int rc = getaddrinfo(cfg.host, cfg.port, &hints, &res);
    if (rc != 0) die("cannot resolve %s: %s", cfg.host, gai_strerror(rc));
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return addr->ss_family;
}

static int64_t start_ns;  /* the load's start: open-loop arrivals count from here (0: still setting up, where a
                           * failed connection ends the engine) */
static int64_t *queue;         /* open loop: arrivals due but not yet sent (no free connection / stream) */
static size_t queue_head, queue_len, queue_cap;
static void h2_setup(struct conn *c);
static void h2_session_free(struct conn *c);

/* A new connection (h2: its session too). NULL, errno set, where the connection is refused at once (on loopback
 * a refusal is immediate) once the load has started; before, that ends the engine. */
static struct conn *conn_open(void) {
    static struct sockaddr_storage addr;
    static socklen_t addrlen;
    static int family = -1;
    if (family < 0) family = resolve(&addr, &addrlen);
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&addr, addrlen) != 0 && errno != EINPROGRESS) {
        if (!start_ns) die("cannot connect to %s:%s: %s", cfg.host, cfg.port, strerror(errno));
        int err = errno;
        close(fd);
        errno = err;
        return NULL;
    }
    struct conn *c = xmalloc(sizeof *c);
    memset(c, 0, sizeof *c);
    c->tag = TAG_CONN;
    c->fd = fd;
    c->state = H1_CONNECTING;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
    epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
    c->writing = 1;
    conns = xrealloc(conns, (nconns + 1) * sizeof *conns);
    conns[nconns++] = c;
    if (cfg.proto == PROTO_H2) h2_setup(c);  /* its preface goes out once connected */
    return c;
}

static void conn_drop(struct conn *c) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    for (int i = 0; i < nconns; i++)
        if (conns[i] == c) {
            conns[i] = conns[--nconns];
            break;
        }
    for (struct conn **p = &idle_h1; *p; p = &(*p)->next_idle)
        if (*p == c) {
            *p = c->next_idle;
            break;
        }
    c->dead = 1;
    c->next_idle = graveyard;
    graveyard = c;
}

static void bury(void) {
    while (graveyard) {
        struct conn *c = graveyard;
        graveyard = c->next_idle;
        for (size_t i = 0; i < c->q.len; i++) free(c->q.s[c->q.head + i].own);
        free(c->q.s);
        free(c->head.data);
        free(c);
    }
}

/* The connection is lost (or was never made): every request on it fails (`outcome`, HTTP/1.1: an error status
 * already read stays that), it is dropped, and, unless it only closed after answering with nothing in flight, new
 * connections are paced until the server answers again. */
static void conn_lost(struct conn *c, int outcome, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void conn_lost(struct conn *c, int outcome, const char *fmt, ...) {
    char why[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    int failed = 0;
    for (struct req *r = live, *next; r; r = next) {
        next = r->next_live;
        if (r->conn != c) continue;
        failed += !r->ended;
        if (r->status && r->status != 200 && cfg.proto == PROTO_HTTP1)
            req_fail(r, OUT_HTTP_STATUS, r->status, "HTTP %d from the server (the connection closed before its body "
                     "ended)%s%s", r->status, r->message[0] ? ": " : "", r->message);
        else
            req_fail(r, outcome, 0, "%s", why);
        req_release(r);
    }
    c->req = NULL;
    c->streams = 0;
    h2_session_free(c);
    conn_drop(c);
    if (outcome == OUT_REFUSED || (outcome == OUT_RESET && (failed || !c->answered))) mark_unhealthy();
}

/* h2: a connection the server ended in good order (GOAWAY, its last stream closed): dropped, nothing failed. */
static void conn_retire(struct conn *c) {
    for (struct req *r = live, *next; r; r = next) {
        next = r->next_live;
        if (r->conn == c) req_release(r);  /* none but streams reset for their timeout (already recorded) */
    }
    c->streams = 0;
    h2_session_free(c);
    conn_drop(c);
}

static int h2_open_for_requests(struct conn *c);

/* An h2 connection could not be opened: where no other connection can carry it, the request waiting for one (a
 * closed loop's next, the open loop's oldest arrival due) fails REFUSED. */
static void refuse_waiting(const char *why) {
    for (int i = 0; i < nconns; i++)
        if (h2_open_for_requests(conns[i])) return;
    int64_t t = now_ns();
    struct req *r;
    if (cfg.closed) {
        if (in_flight >= cfg.closed) return;
        r = req_new(t);
    } else {
        if (!queue_len) return;
        r = req_new(queue[queue_head]);
        queue_head++;
        queue_len--;
    }
    r->sent = t;
    req_fail(r, OUT_REFUSED, 0, "%s", why);
    req_release(r);
}

/* A connection could not be opened (c NULL: refused at once, `err`): its request fails REFUSED (h2: the one
 * waiting for a connection). */
static void connect_failed(struct conn *c, int err) {
    char why[300];
    snprintf(why, sizeof why, "cannot connect to %s:%s: %s", cfg.host, cfg.port, strerror(err));
    mark_unhealthy();
    if (c) conn_lost(c, OUT_REFUSED, "%s", why);
    if (cfg.proto == PROTO_H2) refuse_waiting(why);
}

/* 1: connected; 0: refused (handled: see connect_failed). Before the load starts a refusal ends the engine. */
static int connect_finished(struct conn *c) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err && !start_ns) die("cannot connect to %s:%s: %s", cfg.host, cfg.port, strerror(err));
    if (err) {
        connect_failed(c, err);
        return 0;
    }
    c->connected = 1;
    return 1;
}

static void outq_push(struct outq *q, const uint8_t *ptr, size_t len, int copy) {
    if (!len) return;
    if (q->head + q->len == q->cap) {
        if (q->head) {
            memmove(q->s, q->s + q->head, q->len * sizeof *q->s);
            q->head = 0;
        } else {
            q->cap = q->cap ? q->cap * 2 : 256;
            q->s = xrealloc(q->s, q->cap * sizeof *q->s);
        }
    }
    struct slice *sl = &q->s[q->head + q->len++];
    sl->own = NULL;
    sl->len = len;
    if (!copy) {
        sl->ptr = ptr;
    } else if (len <= sizeof sl->small) {
        memcpy(sl->small, ptr, len);
        sl->ptr = NULL;  /* resolved to `small` when written: the slice may move */
    } else {
        sl->own = xmalloc(len);
        memcpy(sl->own, ptr, len);
        sl->ptr = sl->own;
    }
}

/* Write the pending slices, up to IOV_MAX per writev; watch for writability while some are left. 0 on EAGAIN, 1
 * when all is out, -1 when the connection is lost (dropped, its requests failed). */
static int flush_outq(struct conn *c) {
    struct outq *q = &c->q;
    while (q->len) {
        struct iovec iov[1024];
        int n = 0;
        size_t total = 0;
        for (size_t i = 0; i < q->len && n < 1024 && total < MAX_WRITE; i++, n++) {
            struct slice *sl = &q->s[q->head + i];
            const uint8_t *base = sl->ptr ? sl->ptr : sl->small;
            size_t skip = i == 0 ? q->off : 0;
            size_t len = sl->len - skip;
            if (total + len > MAX_WRITE) len = MAX_WRITE - total;
            iov[n] = (struct iovec){(void *)(base + skip), len};
            total += len;
        }
        ssize_t w = writev(c->fd, iov, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EAGAIN) {
            watch(c, 1);
            return 0;
        }
        if (w <= 0) {
            conn_lost(c, OUT_RESET, "send to %s:%s failed: %s", cfg.host, cfg.port,
                      w < 0 ? strerror(errno) : "connection closed");
            return -1;
        }
        size_t left = (size_t)w;
        while (left && q->len) {
            struct slice *sl = &q->s[q->head];
            size_t rest = sl->len - q->off;
            if (left < rest) {
                q->off += left;
                break;
            }
            left -= rest;
            free(sl->own);
            q->head++;
            q->len--;
            q->off = 0;
        }
        if (q->len) {  /* more to write: let the loop serve its timers first */
            watch(c, 1);
            return 0;
        }
    }
    q->head = q->off = 0;
    return 1;
}

/* ------------------------------------------------------------------------------------------------ HTTP/1.1 */

static void h1_received(struct conn *c, uint8_t *p, size_t n);

/* A send failed: the server may have answered first (an early error status) and closed. What it sent is read (a
 * buffer of its own: this may run while another read's bytes are being parsed); else the request fails RESET. */
static void h1_write_failed(struct conn *c, int err) {
    uint8_t rest[16384];
    for (;;) {
        ssize_t n = recv(c->fd, rest, sizeof rest, 0);
        if (n > 0) {
            h1_received(c, rest, (size_t)n);
            if (c->dead) return;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        break;
    }
    conn_lost(c, OUT_RESET, "send to %s:%s failed: %s", cfg.host, cfg.port, err ? strerror(err) : "connection closed");
}

static void h1_write(struct conn *c) {
    const uint8_t *request = c->req->request;
    size_t len = c->req->request_len;
    while (c->wpos < len) {
        size_t chunk = len - c->wpos < MAX_WRITE ? len - c->wpos : MAX_WRITE;
        ssize_t n = send(c->fd, request + c->wpos, chunk, MSG_NOSIGNAL);
        if (n > 0) {
            c->wpos += (size_t)n;
            if (c->wpos < len) {  /* more to write: let the loop serve its timers first */
                watch(c, 1);
                return;
            }
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) {
            watch(c, 1);
            return;
        }
        h1_write_failed(c, n < 0 ? errno : 0);
        return;
    }
    watch(c, 0);
}

static void h1_send(struct conn *c, struct req *r) {
    c->req = r;
    r->conn = c;
    c->wpos = 0;
    c->state = H1_HEAD;
    c->head.off = c->head.len = 0;
    take_body(r);
    r->sent = now_ns();
    if (cfg.closed) r->intended = r->sent;  /* a closed loop's request is due the moment it goes */
    if (c->connected) h1_write(c);
}

/* 0: not an HTTP/1.x response (the connection is dropped, its request failed). */
static int h1_parse_head(struct conn *c) {
    struct req *r = c->req;
    char *text = (char *)c->head.data;
    size_t n = c->head.len;
    if (n < 12 || strncmp(text, "HTTP/1.", 7) != 0) {
        conn_lost(c, OUT_OTHER, "not an HTTP/1.x response: %.60s", text);
        return 0;
    }
    r->status = atoi(text + 9);
    if (r->status <= 0) r->status = 0;
    c->left = 0;
    c->close_after = 0;
    int chunked = 0;
    char *line = memchr(text, '\n', n);
    while (line && (size_t)(line - text) + 1 < n) {
        line++;
        char *end = memchr(line, '\n', n - (size_t)(line - text));
        if (!end) break;
        size_t l = (size_t)(end - line);
        if (l && line[l - 1] == '\r') l--;
        char *colon = memchr(line, ':', l);
        if (colon) {
            size_t namelen = (size_t)(colon - line);
            char *value = colon + 1;
            while (value < line + l && *value == ' ') value++;
            size_t vlen = (size_t)(line + l - value);
            if (namelen == 14 && strncasecmp(line, "content-length", 14) == 0) c->left = strtoll(value, NULL, 10);
            else if (namelen == 17 && strncasecmp(line, "transfer-encoding", 17) == 0)
                chunked = vlen >= 7 && strncasecmp(value, "chunked", 7) == 0;
            else if (namelen == 10 && strncasecmp(line, "connection", 10) == 0)
                c->close_after = vlen >= 5 && strncasecmp(value, "close", 5) == 0;
            else if (namelen == 13 && strncasecmp(line, "server-timing", 13) == 0)
                parse_server_timing(value, vlen, &r->server);
        }
        line = end;
    }
    c->state = chunked ? H1_CHUNK_SIZE : H1_BODY;
    c->head.off = c->head.len = 0;
    return 1;
}

static void h1_body(struct req *r, const uint8_t *p, size_t n) {
    r->bytes += (int64_t)n;
    if (r->capture && !captured) buf_append(&r->body, p, n);
    if (r->status != 200 && !r->message[0])  /* the start of an error's body says what went wrong */
        snprintf(r->message, sizeof r->message, "%.*s", (int)(n > 150 ? 150 : n), p);
}

static void h1_after_response(struct conn *c);

/* Feed received bytes through the response state machine. */
static void h1_received(struct conn *c, uint8_t *p, size_t n) {
    while (n) {
        struct req *r = c->req;
        if (!r) {  /* nothing asked: the connection is out of step with the server */
            conn_lost(c, OUT_OTHER, "%zu bytes from the server with no request in flight", n);
            return;
        }
        switch (c->state) {
        case H1_HEAD:
        case H1_TRAILERS: {
            /* Collect the head up to the blank line; bytes after it go on through the loop. */
            size_t before = c->head.len;
            buf_append(&c->head, p, n);
            uint8_t *found = memmem(c->head.data + (before > 3 ? before - 3 : 0),
                                    c->head.len - (before > 3 ? before - 3 : 0), "\r\n\r\n", 4);
            int trailers_done = 0;
            if (c->state == H1_TRAILERS && c->head.len >= 2 && memcmp(c->head.data, "\r\n", 2) == 0) {
                found = c->head.data - 2;  /* no trailers: the CRLF right after the last chunk */
                trailers_done = 1;
            }
            if (!found) {
                if (c->head.len > (1 << 20)) conn_lost(c, OUT_OTHER, "response head over 1 MiB");
                return;
            }
            size_t head_len = (size_t)(found + 4 - c->head.data);
            size_t used = head_len - before;
            p += used;
            n -= used;
            if (c->state == H1_HEAD) {
                c->head.len = head_len;
                if (!h1_parse_head(c)) return;
                if (c->state == H1_BODY && c->left == 0) h1_after_response(c);
            } else {
                (void)trailers_done;
                c->head.off = c->head.len = 0;
                h1_after_response(c);
            }
            if (c->dead) return;
            break;
        }
        case H1_BODY: {
            size_t take = (size_t)c->left < n ? (size_t)c->left : n;
            h1_body(r, p, take);
            c->left -= (int64_t)take;
            p += take;
            n -= take;
            if (c->left == 0) h1_after_response(c);
            if (c->dead) return;
            break;
        }
        case H1_CHUNK_SIZE: {
            size_t before = c->head.len;
            buf_append(&c->head, p, n);
            uint8_t *eol = memmem(c->head.data, c->head.len, "\r\n", 2);
            if (!eol) return;
            size_t used = (size_t)(eol + 2 - c->head.data) - before;
            c->left = strtoll((char *)c->head.data, NULL, 16);
            c->head.off = c->head.len = 0;
            p += used;
            n -= used;
            c->state = c->left ? H1_CHUNK_DATA : H1_TRAILERS;
            break;
        }
        case H1_CHUNK_DATA: {
            size_t take = (size_t)c->left < n ? (size_t)c->left : n;
            h1_body(r, p, take);
            c->left -= (int64_t)take;
            p += take;
            n -= take;
            if (c->left == 0) {
                c->state = H1_CHUNK_CRLF;
                c->left = 2;
            }
            break;
        }
        case H1_CHUNK_CRLF: {
            size_t take = (size_t)c->left < n ? (size_t)c->left : n;
            c->left -= (int64_t)take;
            p += take;
            n -= take;
            if (c->left == 0) c->state = H1_CHUNK_SIZE;
            break;
        }
        default:
            conn_lost(c, OUT_OTHER, "bytes from the server in connection state %d", c->state);
            return;
        }
    }
}

static void next_request(struct conn *c);

static void h1_after_response(struct conn *c) {
    struct req *r = c->req;
    c->req = NULL;
    c->state = H1_IDLE;
    /* answered before the request was all written (an early error status): the rest would be read as another */
    int close_it = c->close_after || c->wpos < r->request_len;
    finished(r);
    if (close_it) {
        conn_drop(c);
        c = NULL;
    }
    next_request(c);
}

static void h1_event(struct conn *c, uint32_t events) {
    if (!c->connected) {
        if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) || !connect_finished(c)) return;
        if (c->req) h1_write(c);
        else watch(c, 0);
        if (c->dead) return;
        if (c->state == H1_CONNECTING) {
            c->state = H1_IDLE;
            next_request(c);
        }
        return;
    }
    if ((events & EPOLLOUT) && c->req && c->wpos < c->req->request_len) h1_write(c);
    if (c->dead) return;
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
        static uint8_t chunk[1 << 18];
        for (;;) {
            ssize_t n = recv(c->fd, chunk, sizeof chunk, 0);
            if (n > 0) {
                h1_received(c, chunk, (size_t)n);
                if (c->dead || (size_t)n < sizeof chunk) return;
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && errno == EAGAIN) return;
            /* closed by the server */
            if (c->req)
                conn_lost(c, OUT_RESET, "%s:%s closed the connection before the response ended%s%s", cfg.host,
                          cfg.port, n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
            else
                conn_drop(c);  /* an idle keep-alive connection timed out: the next request opens another */
            return;
        }
    }
}

/* ------------------------------------------------------------------------------------------------ HTTP/2 */

/* libnghttp2's ABI (soname 14, stable since 2015): the few types and calls used here, declared so the engine
 * needs no development headers. tests/test_load_engine_build.py checks them against <nghttp2/nghttp2.h> where it
 * exists. */
typedef struct nghttp2_session nghttp2_session;
typedef struct nghttp2_session_callbacks nghttp2_session_callbacks;
typedef struct {
    uint8_t *name;
    uint8_t *value;
    size_t namelen;
    size_t valuelen;
    uint8_t flags;
} nghttp2_nv;
typedef struct {
    size_t length;
    int32_t stream_id;
    uint8_t type;
    uint8_t flags;
    uint8_t reserved;
} nghttp2_frame_hd;
typedef union {
    nghttp2_frame_hd hd;
} nghttp2_frame;  /* every frame struct starts with its header; nothing else is read */
typedef union {
    int fd;
    void *ptr;
} nghttp2_data_source;
typedef ssize_t (*nghttp2_data_source_read_callback)(nghttp2_session *, int32_t, uint8_t *, size_t, uint32_t *,
                                                     nghttp2_data_source *, void *);
typedef struct {
    nghttp2_data_source source;
    nghttp2_data_source_read_callback read_callback;
} nghttp2_data_provider;
typedef struct {
    int32_t settings_id;
    uint32_t value;
} nghttp2_settings_entry;

#define NGHTTP2_ERR_WOULDBLOCK (-504)
#define NGHTTP2_ERR_CALLBACK_FAILURE (-902)
#define NGHTTP2_DATA_FLAG_EOF 0x01
#define NGHTTP2_DATA_FLAG_NO_COPY 0x04
#define NGHTTP2_NV_FLAG_NO_COPY_NAME 0x02
#define NGHTTP2_NV_FLAG_NO_COPY_VALUE 0x04
#define NGHTTP2_HEADERS 0x01
#define NGHTTP2_SETTINGS_ENABLE_PUSH 0x02
#define NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE 0x04
#define NGHTTP2_FLAG_NONE 0
#define NGHTTP2_CANCEL 0x08

typedef ssize_t (*send_cb_t)(nghttp2_session *, const uint8_t *, size_t, int, void *);
typedef int (*send_data_cb_t)(nghttp2_session *, nghttp2_frame *, const uint8_t *, size_t, nghttp2_data_source *,
                              void *);
typedef int (*on_header_cb_t)(nghttp2_session *, const nghttp2_frame *, const uint8_t *, size_t, const uint8_t *,
                              size_t, uint8_t, void *);
typedef int (*on_data_chunk_cb_t)(nghttp2_session *, uint8_t, int32_t, const uint8_t *, size_t, void *);
typedef int (*on_stream_close_cb_t)(nghttp2_session *, int32_t, uint32_t, void *);

static struct {
    int (*callbacks_new)(nghttp2_session_callbacks **);
    void (*callbacks_del)(nghttp2_session_callbacks *);
    void (*set_send)(nghttp2_session_callbacks *, send_cb_t);
    void (*set_send_data)(nghttp2_session_callbacks *, send_data_cb_t);
    void (*set_on_header)(nghttp2_session_callbacks *, on_header_cb_t);
    void (*set_on_data_chunk)(nghttp2_session_callbacks *, on_data_chunk_cb_t);
    void (*set_on_stream_close)(nghttp2_session_callbacks *, on_stream_close_cb_t);
    int (*client_new)(nghttp2_session **, const nghttp2_session_callbacks *, void *);
    int (*submit_settings)(nghttp2_session *, uint8_t, const nghttp2_settings_entry *, size_t);
    int (*set_local_window_size)(nghttp2_session *, uint8_t, int32_t, int32_t);
    int32_t (*submit_request)(nghttp2_session *, const void *, const nghttp2_nv *, size_t,
                              const nghttp2_data_provider *, void *);
    int (*session_send)(nghttp2_session *);
    ssize_t (*mem_recv)(nghttp2_session *, const uint8_t *, size_t);
    void *(*get_stream_user_data)(nghttp2_session *, int32_t);
    const char *(*strerror)(int);
    void (*session_del)(nghttp2_session *);
    int (*submit_rst_stream)(nghttp2_session *, uint8_t, int32_t, uint32_t);
    int (*want_read)(nghttp2_session *);
    int (*want_write)(nghttp2_session *);
    int (*check_request_allowed)(nghttp2_session *);  /* since 1.23 (NULL where older): 0 after a GOAWAY */
} ng;

static nghttp2_session_callbacks *h2_callbacks;
static nghttp2_nv *h2_nva;

static void h2_load_library(void) {
    void *lib = dlopen("libnghttp2.so.14", RTLD_NOW | RTLD_LOCAL);
    if (!lib) die("gRPC needs libnghttp2 (the HTTP/2 library curl uses; Debian/Ubuntu: libnghttp2-14): %s", dlerror());
#define SYM(field, name)                                                  \
    do {                                                                  \
        *(void **)(&ng.field) = dlsym(lib, name);                         \
        if (!ng.field) die("libnghttp2 has no %s: %s", name, dlerror()); \
    } while (0)
    SYM(callbacks_new, "nghttp2_session_callbacks_new");
    SYM(callbacks_del, "nghttp2_session_callbacks_del");
    SYM(set_send, "nghttp2_session_callbacks_set_send_callback");
    SYM(set_send_data, "nghttp2_session_callbacks_set_send_data_callback");
    SYM(set_on_header, "nghttp2_session_callbacks_set_on_header_callback");
    SYM(set_on_data_chunk, "nghttp2_session_callbacks_set_on_data_chunk_recv_callback");
    SYM(set_on_stream_close, "nghttp2_session_callbacks_set_on_stream_close_callback");
    SYM(client_new, "nghttp2_session_client_new");
    SYM(submit_settings, "nghttp2_submit_settings");
    SYM(set_local_window_size, "nghttp2_session_set_local_window_size");
    SYM(submit_request, "nghttp2_submit_request");
    SYM(session_send, "nghttp2_session_send");
    SYM(mem_recv, "nghttp2_session_mem_recv");
    SYM(get_stream_user_data, "nghttp2_session_get_stream_user_data");
    SYM(strerror, "nghttp2_strerror");
    SYM(session_del, "nghttp2_session_del");
    SYM(submit_rst_stream, "nghttp2_submit_rst_stream");
    SYM(want_read, "nghttp2_session_want_read");
    SYM(want_write, "nghttp2_session_want_write");
#undef SYM
    *(void **)(&ng.check_request_allowed) = dlsym(lib, "nghttp2_session_check_request_allowed");
}

static ssize_t h2_send_cb(nghttp2_session *s, const uint8_t *data, size_t len, int flags, void *user) {
    (void)s;
    (void)flags;
    outq_push(&((struct conn *)user)->q, data, len, 1);
    return (ssize_t)len;
}

/* A DATA frame: its 9-byte header (copied), then the request body's next bytes (not copied: the bodies live in one
 * buffer for the engine's life). Written with the rest of the batch in one writev (h2_pump). */
static int h2_send_data_cb(nghttp2_session *s, nghttp2_frame *frame, const uint8_t *framehd, size_t length,
                           nghttp2_data_source *source, void *user) {
    (void)s;
    (void)frame;
    struct conn *c = user;
    struct req *r = source->ptr;
    outq_push(&c->q, framehd, 9, 1);
    outq_push(&c->q, r->request + r->body_sent, length, 0);
    r->body_sent += length;
    return 0;
}

static ssize_t h2_read_cb(nghttp2_session *s, int32_t stream_id, uint8_t *dst, size_t length, uint32_t *flags,
                          nghttp2_data_source *source, void *user) {
    (void)s;
    (void)stream_id;
    (void)dst;
    (void)user;
    struct req *r = source->ptr;
    size_t left = r->request_len - r->body_planned;
    size_t n = left < length ? left : length;
    r->body_planned += n;
    *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
    if (r->body_planned == r->request_len) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int h2_header_cb(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                        const uint8_t *value, size_t valuelen, uint8_t flags, void *user) {
    (void)flags;
    (void)user;
    if (frame->hd.type != NGHTTP2_HEADERS) return 0;
    struct req *r = ng.get_stream_user_data(s, frame->hd.stream_id);
    if (!r || r->ended) return 0;
    if (namelen == 7 && memcmp(name, ":status", 7) == 0) r->status = atoi((const char *)value);
    else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0) r->grpc_status = atoi((const char *)value);
    else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0)
        snprintf(r->message, sizeof r->message, "%.*s", (int)valuelen, value);
    else if (namelen == 13 && memcmp(name, "server-timing", 13) == 0)
        parse_server_timing((const char *)value, valuelen, &r->server);
    return 0;
}

static int h2_data_cb(nghttp2_session *s, uint8_t flags, int32_t stream_id, const uint8_t *data, size_t len,
                      void *user) {
    (void)flags;
    (void)user;
    struct req *r = ng.get_stream_user_data(s, stream_id);
    if (!r || r->ended) return 0;
    r->bytes += (int64_t)len;
    if (r->capture && !captured) buf_append(&r->body, data, len);
    return 0;
}

static struct conn *h2_ready_conn;  /* a connection whose streams freed up while nghttp2 was reading */
static int h2_freed;

static int h2_close_cb(nghttp2_session *s, int32_t stream_id, uint32_t error_code, void *user) {
    struct conn *c = user;
    struct req *r = ng.get_stream_user_data(s, stream_id);
    if (!r) return 0;
    if (r->ended) {  /* timed out: recorded then, its stream reset by us, closed now */
        req_release(r);
        return 0;
    }
    c->streams--;
    if (error_code) {
        req_fail(r, OUT_RESET, 0, "stream reset by %s:%s (HTTP/2 error code %u)", cfg.host, cfg.port, error_code);
        req_release(r);
    } else {
        finished(r);
    }
    h2_ready_conn = c;
    h2_freed++;
    return 0;
}

static void h2_session_free(struct conn *c) {
    if (c->session) ng.session_del(c->session);  /* calls back nothing: the requests on it are handled already */
    c->session = NULL;
}

static void h2_setup(struct conn *c) {
    if (!h2_callbacks) {
        h2_load_library();
        if (ng.callbacks_new(&h2_callbacks) != 0) die("nghttp2_session_callbacks_new failed");
        ng.set_send(h2_callbacks, h2_send_cb);
        ng.set_send_data(h2_callbacks, h2_send_data_cb);
        ng.set_on_header(h2_callbacks, h2_header_cb);
        ng.set_on_data_chunk(h2_callbacks, h2_data_cb);
        ng.set_on_stream_close(h2_callbacks, h2_close_cb);
        h2_nva = xmalloc(cfg.nheaders * sizeof *h2_nva);
        for (size_t i = 0; i < cfg.nheaders; i++) {
            h2_nva[i] = (nghttp2_nv){(uint8_t *)cfg.header_names[i], (uint8_t *)cfg.header_values[i],
                                     strlen(cfg.header_names[i]), strlen(cfg.header_values[i]),
                                     NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE};
        }
    }
    if (ng.client_new((nghttp2_session **)&c->session, h2_callbacks, c) != 0) die("nghttp2_session_client_new failed");
    /* Large windows: the server never waits for a WINDOW_UPDATE from us to send a response. */
    nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                         {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 30}};
    if (ng.submit_settings(c->session, NGHTTP2_FLAG_NONE, settings, 2) != 0) die("nghttp2_submit_settings failed");
    ng.set_local_window_size(c->session, NGHTTP2_FLAG_NONE, 0, 1 << 30);
}

/* Hand nghttp2's frames to the socket. 0: the connection is lost (dropped, its requests failed), or, after a
 * GOAWAY, done with (dropped once its last stream closed: another is opened). */
static int h2_pump(struct conn *c) {
    int rc = ng.session_send(c->session);
    if (rc != 0) {
        conn_lost(c, OUT_OTHER, "HTTP/2 send failed: %s", ng.strerror(rc));
        return 0;
    }
    if (c->connected && !c->writing && flush_outq(c) < 0) return 0;
    if (c->connected && !ng.want_read(c->session) && !ng.want_write(c->session)) {
        conn_retire(c);
        return 0;
    }
    return 1;
}

/* Does `c` take new requests? (Connected, and no GOAWAY.) */
static int h2_open_for_requests(struct conn *c) {
    return c->connected && (!ng.check_request_allowed || ng.check_request_allowed(c->session));
}

/* h2 connections that carry new requests or will once connected (not those draining after a GOAWAY). */
static int h2_usable(void) {
    int n = 0;
    for (int i = 0; i < nconns; i++) n += !conns[i]->connected || h2_open_for_requests(conns[i]);
    return n;
}

static void h2_submit(struct conn *c, struct req *r) {
    r->conn = c;
    nghttp2_data_provider provider = {.source.ptr = r, .read_callback = h2_read_cb};
    take_body(r);
    r->sent = now_ns();
    if (cfg.closed) r->intended = r->sent;
    int32_t id = ng.submit_request(c->session, NULL, h2_nva, cfg.nheaders, &provider, r);
    if (id < 0) die("cannot submit the request: %s", ng.strerror(id));
    r->stream_id = id;
    c->streams++;
}

static void h2_event(struct conn *c, uint32_t events) {
    if (!c->connected) {
        if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) || !connect_finished(c)) return;
        watch(c, 0);
        if (h2_pump(c)) next_request(c);
        return;
    }
    if (events & EPOLLOUT) {
        int flushed = flush_outq(c);
        if (flushed < 0) return;
        if (flushed) {
            watch(c, 0);
            if (!h2_pump(c)) return;
        }
    }
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
        static uint8_t chunk[1 << 18];
        for (;;) {
            ssize_t n = recv(c->fd, chunk, sizeof chunk, 0);
            if (n > 0) {
                h2_freed = 0;
                ssize_t rc = ng.mem_recv(c->session, chunk, (size_t)n);
                if (rc < 0) {
                    conn_lost(c, OUT_OTHER, "HTTP/2 protocol error from %s:%s: %s", cfg.host, cfg.port,
                              ng.strerror((int)rc));
                    return;
                }
                for (int i = 0; i < h2_freed; i++) next_request(c);
                if (!h2_pump(c) || (size_t)n < sizeof chunk) return;
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && errno == EAGAIN) return;
            conn_lost(c, OUT_RESET, "%s:%s closed the HTTP/2 connection with %d calls in flight%s%s", cfg.host,
                      cfg.port, c->streams, n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
            return;
        }
    }
}

/* ------------------------------------------------------------------------------------------------ the load */

static size_t next_gap;        /* open loop: index of the next arrival's gap */
static int64_t next_arrival;   /* open loop: when it is due */

static void queue_push(int64_t t) {
    if (queue_head + queue_len == queue_cap) {
        if (queue_head) {
            memmove(queue, queue + queue_head, queue_len * sizeof *queue);
            queue_head = 0;
        } else {
            queue_cap = queue_cap ? queue_cap * 2 : 1024;
            queue = xrealloc(queue, queue_cap * sizeof *queue);
        }
    }
    queue[queue_head + queue_len++] = t;
}

static struct conn *h2_least_busy(void) {
    struct conn *best = NULL;
    for (int i = 0; i < nconns; i++)
        if (h2_open_for_requests(conns[i]) && (!best || conns[i]->streams < best->streams)) best = conns[i];
    return best;
}

/* Send the request that `intended` stands for on `c` (NULL: any free connection, or a new one). 0: nothing free. */
static int dispatch(struct conn *c, int64_t intended) {
    if (cfg.proto == PROTO_HTTP1) {
        if (!c) {
            if (idle_h1) {
                c = idle_h1;
                idle_h1 = c->next_idle;
            } else if (nconns < cfg.max_in_flight) {
                if (!may_connect()) return 0;  /* connections fail: the next attempt comes in its time */
                c = conn_open();  /* its request goes out once connected */
                if (!c) {  /* refused at once: the request that would have gone on it fails */
                    int err = errno;
                    struct req *r = req_new(intended);
                    r->sent = now_ns();
                    if (cfg.closed) r->intended = r->sent;
                    connect_failed(NULL, err);
                    req_fail(r, OUT_REFUSED, 0, "cannot connect to %s:%s: %s", cfg.host, cfg.port, strerror(err));
                    req_release(r);
                    return 1;
                }
            } else {
                return 0;
            }
        }
        h1_send(c, req_new(intended));
        return 1;
    }
    if (in_flight >= cfg.max_in_flight) return 0;
    if (!c || !h2_open_for_requests(c)) c = h2_least_busy();
    if (!c) return 0;
    h2_submit(c, req_new(intended));
    return 1;
}

/* A connection or stream came free (c NULL: an HTTP/1.1 connection was dropped): load it again. */
static void next_request(struct conn *c) {
    if (stopping || start_ns == 0) {
        if (c && cfg.proto == PROTO_HTTP1 && !c->req) {
            c->next_idle = idle_h1;
            idle_h1 = c;
        }
        return;
    }
    if (cfg.closed) {
        if (cfg.proto == PROTO_HTTP1 && in_flight < cfg.closed) dispatch(c, now_ns());
        else if (cfg.proto == PROTO_H2 && in_flight < cfg.closed) dispatch(c, now_ns());
        return;
    }
    if (queue_len) {
        if (dispatch(c, queue[queue_head])) {
            queue_head++;
            queue_len--;
        }
        return;
    }
    if (c && cfg.proto == PROTO_HTTP1 && !c->req) {
        c->next_idle = idle_h1;
        idle_h1 = c;
    }
}

static void send_due_arrivals(int64_t now) {
    while (next_gap < cfg.ngaps && next_arrival <= now) {
        if (queue_len || !dispatch(NULL, next_arrival)) queue_push(next_arrival);
        next_gap++;
        if (next_gap < cfg.ngaps) next_arrival += (int64_t)(cfg.gaps[next_gap] * 1e9);
        else die("the arrival schedule ran out after %zu arrivals: the load outlasted the time it was made for "
                 "(experiment.trial_timeout_s)", cfg.ngaps);
    }
}

/* h2: write what the requests submitted meanwhile made (backwards: a lost connection leaves the array). */
static void pump_all(void) {
    if (cfg.proto != PROTO_H2) return;
    for (int i = nconns - 1; i >= 0; i--)
        if (i < nconns && conns[i]->connected) h2_pump(conns[i]);
}

/* Every request scheduled before the watermark has ended (answered or failed). */
static int64_t watermark(int64_t now) {
    int64_t w = cfg.closed ? now : (next_gap < cfg.ngaps ? next_arrival : INT64_MAX);
    if (queue_len && queue[queue_head] < w) w = queue[queue_head];
    for (struct req *r = live; r; r = r->next_live)
        if (!r->ended && r->intended < w) w = r->intended;
    return w;
}

/* Requests without an answer --timeout after they were sent fail (TIMEOUT). HTTP/1.1: the connection is closed
 * (the answer may still come on it); h2: the stream is reset (CANCEL), the connection goes on. */
static void expire(int64_t now) {
    int waiting = in_flight;
    for (struct req *r = live, *next; r; r = next) {
        next = r->next_live;
        if (r->ended || now - r->sent <= cfg.timeout_ns) continue;
        struct conn *c = r->conn;
        req_fail(r, OUT_TIMEOUT, 0, "no answer within %g s (experiment.request_timeout_s) with %d requests in flight",
                 cfg.timeout_ns / 1e9, waiting);
        if (cfg.proto == PROTO_HTTP1) {
            c->req = NULL;
            req_release(r);
            conn_drop(c);
        } else {
            c->streams--;
            ng.submit_rst_stream(c->session, NGHTTP2_FLAG_NONE, r->stream_id, NGHTTP2_CANCEL);
            /* released when nghttp2 closes the stream (h2_close_cb), or with its connection */
        }
    }
}

/* Keep the load up after failures: h2 connections lost are opened again, a closed loop's requests that failed are
 * followed by the loops' next, the open loop's arrivals waiting for a connection go out; each as far as the pacing
 * of new connections lets it (the heartbeat's timer comes back for the rest). */
static void top_up(void) {
    if (stopping || !start_ns) {
        pump_all();  /* resets of streams timed out while draining */
        return;
    }
    if (cfg.proto == PROTO_H2)  /* (one ended by a GOAWAY is replaced at once; it closes once its streams have) */
        for (int tries = cfg.connections; h2_usable() < cfg.connections && tries > 0 && may_connect(); tries--) {
            struct conn *c = conn_open();
            if (!c) connect_failed(NULL, errno);
        }
    if (cfg.closed) {
        for (int tries = cfg.closed; in_flight < cfg.closed && tries > 0; tries--)
            if (!dispatch(NULL, now_ns())) break;
    } else {
        for (size_t tries = queue_len; queue_len && tries > 0; tries--) {
            if (!dispatch(NULL, queue[queue_head])) break;
            queue_head++;
            queue_len--;
        }
    }
    pump_all();
}

static void arm(int tfd, int64_t at) {
    struct itimerspec its = {0};
    if (at <= 0) at = 1;
    its.it_value.tv_sec = at / 1000000000LL;
    its.it_value.tv_nsec = at % 1000000000LL;
    timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void usage(void) {
    fprintf(stderr,
            "usage: loadgen (--http1 HOST PORT | --h2 HOST PORT --headers FILE) --request FILE [--lengths FILE] "
            "(--closed N | --open GAPS [--open-at NS]) [--max-in-flight N] [--connections N] [--timeout S] [--first-response FILE] "
            "[--heartbeat-ms MS] [--nice N] [--drain S] [--any-size] | --version\n");
    exit(64);
}

int main(int argc, char **argv) {
    const char *request_path = NULL, *lengths_path = NULL, *headers_path = NULL, *gaps_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define NEXT() (i + 1 < argc ? argv[++i] : (usage(), ""))
        if (!strcmp(a, "--abi")) {  /* the nghttp2 layouts declared above, as tests compare them with the header */
            printf("nv %zu %zu %zu %zu %zu %zu\n", sizeof(nghttp2_nv), offsetof(nghttp2_nv, name),
                   offsetof(nghttp2_nv, value), offsetof(nghttp2_nv, namelen), offsetof(nghttp2_nv, valuelen),
                   offsetof(nghttp2_nv, flags));
            printf("hd %zu %zu %zu %zu %zu\n", sizeof(nghttp2_frame_hd), offsetof(nghttp2_frame_hd, length),
                   offsetof(nghttp2_frame_hd, stream_id), offsetof(nghttp2_frame_hd, type),
                   offsetof(nghttp2_frame_hd, flags));
            printf("dp %zu %zu %zu\n", sizeof(nghttp2_data_provider), offsetof(nghttp2_data_provider, source),
                   offsetof(nghttp2_data_provider, read_callback));
            printf("se %zu ds %zu\n", sizeof(nghttp2_settings_entry), sizeof(nghttp2_data_source));
            printf("%d %d %d %d %d %d %d %d %d\n", NGHTTP2_ERR_WOULDBLOCK, NGHTTP2_ERR_CALLBACK_FAILURE,
                   NGHTTP2_DATA_FLAG_EOF, NGHTTP2_DATA_FLAG_NO_COPY, NGHTTP2_NV_FLAG_NO_COPY_NAME,
                   NGHTTP2_NV_FLAG_NO_COPY_VALUE, NGHTTP2_HEADERS, NGHTTP2_SETTINGS_ENABLE_PUSH,
                   NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE);
            return 0;
        }
        if (!strcmp(a, "--version")) {
            void *lib = dlopen("libnghttp2.so.14", RTLD_NOW | RTLD_LOCAL);
            printf("tierbench-loadgen %s http1 %s\n", ENGINE_VERSION, lib ? "h2" : "(no h2: libnghttp2.so.14 missing)");
            return 0;
        } else if (!strcmp(a, "--http1") || !strcmp(a, "--h2")) {
            cfg.proto = !strcmp(a, "--h2") ? PROTO_H2 : PROTO_HTTP1;
            cfg.host = NEXT();
            cfg.port = NEXT();
        } else if (!strcmp(a, "--request")) request_path = NEXT();
        else if (!strcmp(a, "--lengths")) lengths_path = NEXT();
        else if (!strcmp(a, "--headers")) headers_path = NEXT();
        else if (!strcmp(a, "--closed")) cfg.closed = atoi(NEXT());
        else if (!strcmp(a, "--open")) gaps_path = NEXT();
        else if (!strcmp(a, "--max-in-flight")) cfg.max_in_flight = atoi(NEXT());
        else if (!strcmp(a, "--connections")) cfg.connections = atoi(NEXT());
        else if (!strcmp(a, "--timeout")) cfg.timeout_ns = (int64_t)(atof(NEXT()) * 1e9);
        else if (!strcmp(a, "--first-response")) cfg.first_response_path = NEXT();
        else if (!strcmp(a, "--heartbeat-ms")) cfg.heartbeat_ns = (int64_t)(atof(NEXT()) * 1e6);
        else if (!strcmp(a, "--nice")) cfg.nice = atoi(NEXT());
        else if (!strcmp(a, "--drain")) cfg.drain_ns = (int64_t)(atof(NEXT()) * 1e9);
        else if (!strcmp(a, "--open-at")) cfg.open_at_ns = strtoll(NEXT(), NULL, 10);
        else if (!strcmp(a, "--any-size")) cfg.any_size = 1;
        else usage();
#undef NEXT
    }
    if (!cfg.proto || !request_path || (cfg.closed <= 0) == !gaps_path || cfg.max_in_flight <= 0 ||
        cfg.connections <= 0 || (cfg.proto == PROTO_H2 && !headers_path))
        usage();

    /* Die with the client actor that started us, whatever kills it. */
    pid_t parent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) return 0;

    /* A load generator must be timely: run ahead of the server it shares cores with where allowed (Ray starts its
     * workers, and so the servers and this engine, at nice 15). Without the privilege the inherited one stays. */
    if (cfg.nice != INT32_MIN) setpriority(PRIO_PROCESS, 0, cfg.nice);
    int niceness = getpriority(PRIO_PROCESS, 0);

    fcntl(out_fd, F_SETFL, fcntl(out_fd, F_GETFL) | O_NONBLOCK);
    fcntl(out_fd, F_SETPIPE_SZ, 1 << 20);
    load_bodies(request_path, lengths_path);
    if (headers_path) load_headers(headers_path);
    if (gaps_path) {
        size_t bytes;
        cfg.gaps = (double *)read_file(gaps_path, &bytes);
        cfg.ngaps = bytes / sizeof(double);
        if (!cfg.ngaps) die("the arrival schedule %s is empty", gaps_path);
    }
    if (cfg.closed && cfg.closed > cfg.max_in_flight) cfg.max_in_flight = cfg.closed;

    epfd = epoll_create1(EPOLL_CLOEXEC);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    static int timer_tag = TAG_TIMER, signal_tag = TAG_SIGNAL;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &timer_tag};
    epoll_ctl(epfd, EPOLL_CTL_ADD, tfd, &ev);
    ev.data.ptr = &signal_tag;
    epoll_ctl(epfd, EPOLL_CTL_ADD, sfd, &ev);

    /* Connections first (closed loop: one per request in flight over HTTP/1.1); the load starts once they are up. */
    int want = cfg.proto == PROTO_H2 ? cfg.connections : (cfg.closed ? cfg.closed : (cfg.max_in_flight < 4 ? cfg.max_in_flight : 4));
    pace_slots = want;  /* while connections fail: one attempt per connection per RECONNECT_PERIOD_NS */
    for (int i = 0; i < want; i++) conn_open();
    int64_t connect_deadline = now_ns() + cfg.timeout_ns;
    for (;;) {
        int up = 0;
        for (int i = 0; i < nconns; i++) up += conns[i]->connected;
        if (up == nconns) break;
        if (now_ns() > connect_deadline) die("connections to %s:%s not open after the request timeout", cfg.host, cfg.port);
        struct epoll_event events[64];
        int n = epoll_wait(epfd, events, 64, 100);
        for (int i = 0; i < n; i++) {
            if (events[i].data.ptr == &signal_tag) return 0;
            struct conn *c = events[i].data.ptr;
            if (c->tag != TAG_CONN || c->connected) continue;
            connect_finished(c);  /* a refusal here ends the engine: the server is not there to measure */
            watch(c, 0);
            if (cfg.proto == PROTO_H2) h2_pump(c);
            else c->state = H1_IDLE;
        }
    }
    for (int i = 0; i < nconns; i++)
        if (cfg.proto == PROTO_HTTP1) {
            conns[i]->next_idle = idle_h1;
            idle_h1 = conns[i];
        }

    start_ns = now_ns();
    emit(KIND_READY, (uint32_t)(niceness + 20), start_ns, start_ns, 0, NO_TIMING, 0);
    if (cfg.closed) {
        for (int i = 0; i < cfg.closed; i++) dispatch(NULL, now_ns());
        pump_all();
    } else {
        next_arrival = (cfg.open_at_ns > start_ns ? cfg.open_at_ns : start_ns) + (int64_t)(cfg.gaps[0] * 1e9);
    }
    out_flush(0);

    int64_t next_beat = start_ns + cfg.heartbeat_ns;
    int64_t worst_lag = 0, armed = -1, drain_until = 0;
    for (;;) {
        /* Stopping, the schedule's next arrival stays where it was (in the past): the heartbeat wakes the loop (its
         * timeouts, its drain limit) even when no socket has anything to say. */
        int64_t wake = next_beat, now = now_ns();
        if (!cfg.closed && !stopping && next_gap < cfg.ngaps && next_arrival < wake) wake = next_arrival;
        int64_t retry = pace_start + RECONNECT_PERIOD_NS;  /* connections paced: the next attempt's time */
        if (unhealthy && pace_used >= pace_slots && retry > now && retry < wake) wake = retry;
        if (wake != armed || wake <= now) arm(tfd, armed = wake);  /* (a one-shot timer past its time is spent) */
        struct epoll_event events[256];
        int n = epoll_wait(epfd, events, 256, -1);
        if (n < 0 && errno != EINTR) die("epoll_wait: %s", strerror(errno));
        for (int i = 0; i < n; i++) {
            void *p = events[i].data.ptr;
            if (p == &signal_tag) {
                struct signalfd_siginfo info;
                ssize_t unused = read(sfd, &info, sizeof info);
                (void)unused;
                if (stopping) drain_until = 0;  /* a second signal: at once */
                else drain_until = now_ns() + cfg.drain_ns;
                stopping = 1;
            } else if (p == &timer_tag) {
                uint64_t expirations;
                ssize_t unused = read(tfd, &expirations, sizeof expirations);
                (void)unused;
                int64_t t = now_ns();
                if (t - wake > worst_lag) worst_lag = t - wake;
            } else if (p == &out) {
                out_flush(0);
            } else {
                struct conn *c = p;
                if (c->dead) continue;  /* dropped earlier in this batch */
                if (cfg.proto == PROTO_H2) h2_event(c, events[i].events);
                else h1_event(c, events[i].events);
            }
        }
        bury();
        int64_t t = now_ns();
        if (stopping && (in_flight == 0 || t >= drain_until)) break;
        if (!cfg.closed && !stopping) send_due_arrivals(t);
        if (t >= next_beat) expire(t);  /* at the heartbeat's pace: the scan is of every request in flight */
        top_up();
        if (t >= next_beat) {
            emit(KIND_HEARTBEAT, 0, watermark(t), t, worst_lag, NO_TIMING, in_flight);
            worst_lag = 0;
            next_beat += cfg.heartbeat_ns;
            if (next_beat < t) next_beat = t + cfg.heartbeat_ns;
            out_flush(0);
        }
    }
    emit(KIND_HEARTBEAT, 0, watermark(now_ns()), now_ns(), worst_lag, NO_TIMING, in_flight);
    fcntl(out_fd, F_SETFL, fcntl(out_fd, F_GETFL) & ~O_NONBLOCK);
    out_flush(1);
    return 0;
}
