/* Fuzzing the graph language: valid programs mutated (bytes flipped, ranges deleted and
 * duplicated, tokens inserted, cut short), random token soups and random bytes. Whatever the
 * text, kf_spec_parse returns: either a graph with outputs, or no graph and an error whose line
 * and column lie inside the text, with a message. Bounded in count and time; the stream comes
 * from the run's printed seed, so a failure reproduces with --seed. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FUZZ_MAX_PROGRAMS 100000000
/* this target's part of the fuzz suite's budget (KFUSE_FUZZ_SECONDS) */
#define FUZZ_SHARE 0.2
#define FUZZ_MAX_TEXT 4096

static const char *const fuzz_corpus[] = {
    "x: f32[64, 128]\nw: f32[128, 256]\nb: f32[256]\ny = matmul(x, w) |> add(b) |> gelu\nout y\n",
    "q: f32[16, 8]\nk: f32[16, 8]\np = matmul(q, k, transpose_b=1) |> scale(0.125) |> softmax\n",
    "x: f32[32, 100]\nb: f32[100]\ny = x\n  |> scale(0.5)\n  |> add(b)\n  |> tanh\n  |> silu\n",
    "x: f32[8, 16]\nw: f32[16, 16]\ng: f32[16]\ny = matmul(x, w) |> add(x) |> rmsnorm(g, "
    "eps=1e-6)\n",
    "logits: f32[4, 10]\np = softmax(logits); lp = log_softmax(logits); m = max(logits)\n"
    "out p, lp\nout m\n",
    "# comment\ns: f32[]\nh: f16[2,3,5]\ny = h |> mul(2) |> sub(h) |> leaky_relu(0.1)\nu = sub(1, "
    "h)\n"
    "z = gelu(h, exact=true)\n",
    "x: f32[7]\ny = div(add(x, 1), (x |> abs |> add(1)))\nz = affine(y, 2, -1)\n",
};

/* Pieces the mutator splices in: the language's own tokens, limits, and junk. */
static const char *const fuzz_words[] = {
    "|>",    "(",      ")",    ",",      "=",          ":",         ";",        "\n",
    "#",     "[",      "]",    "-",      "f32",        "f16",       "out",      "true",
    "x",     "y",      "b",    "matmul", "gelu",       "add",       "softmax",  "rmsnorm",
    "scale", "0",      "1e39", "-1e-45", "4294967296", "65536",     "eps=",     "exact=1",
    " ",     "((((((", "))))", "\r\n",   "\t",         "|",         "+",        ".5",
    "1.2.3", "64x8",   "gleu", "out y",  "y = x",      "x: f32[4]", "\xff\xfe", "transpose_b=1",
};

static size_t fuzz_index(size_t n) {
    return n ? (size_t)(kt_rand_u64() % n) : 0;
}

static size_t splice(char *buf, size_t len, size_t at, const char *piece, size_t piece_len) {
    if (len + piece_len > FUZZ_MAX_TEXT) {
        return len;
    }
    memmove(buf + at + piece_len, buf + at, len - at);
    memcpy(buf + at, piece, piece_len);
    return len + piece_len;
}

static size_t mutate(char *buf, size_t len) {
    int rounds = 1 + (int)fuzz_index(4);
    for (int r = 0; r < rounds; r++) {
        size_t at = fuzz_index(len + 1);
        switch (fuzz_index(6)) {
        case 0: /* flip a byte */
            if (len) {
                buf[fuzz_index(len)] = (char)kt_rand_u64();
            }
            break;
        case 1: { /* delete a range */
            size_t n = 1 + fuzz_index(8);
            if (at + n > len) {
                n = len - at;
            }
            memmove(buf + at, buf + at + n, len - at - n);
            len -= n;
            break;
        }
        case 2:
        case 3: { /* insert a word */
            const char *w = fuzz_words[fuzz_index(sizeof fuzz_words / sizeof fuzz_words[0])];
            len = splice(buf, len, at, w, strlen(w));
            break;
        }
        case 4: { /* duplicate a range */
            size_t from = fuzz_index(len + 1);
            size_t n = fuzz_index(32);
            if (from + n > len) {
                n = len - from;
            }
            char piece[32];
            memcpy(piece, buf + from, n);
            len = splice(buf, len, at, piece, n);
            break;
        }
        default: /* cut short */
            len = at;
            break;
        }
    }
    return len;
}

static size_t random_program(char *buf) {
    size_t len = 0;
    if (fuzz_index(2)) { /* random bytes */
        len = fuzz_index(200);
        for (size_t i = 0; i < len; i++) {
            buf[i] = (char)kt_rand_u64();
        }
        return len;
    }
    size_t words = fuzz_index(60);
    for (size_t i = 0; i < words; i++) {
        const char *w = fuzz_words[fuzz_index(sizeof fuzz_words / sizeof fuzz_words[0])];
        len = splice(buf, len, len, w, strlen(w));
        if (fuzz_index(3) == 0) {
            len = splice(buf, len, len, " ", 1);
        }
    }
    return len;
}

static void print_program(const char *buf, size_t len) {
    fprintf(stderr, "    program (%zu bytes, C escapes): \"", len);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c == '\n') {
            fprintf(stderr, "\\n");
        } else if (c == '"' || c == '\\') {
            fprintf(stderr, "\\%c", c);
        } else if (c >= 0x20 && c < 0x7f) {
            fputc(c, stderr);
        } else {
            fprintf(stderr, "\\x%02x\"\"", c);
        }
    }
    fprintf(stderr, "\"\n");
}

/* The error's position must name a place in the text: a line that exists and a column at most
 * one past its end (where "end of line" and "end of file" are reported). */
static bool position_inside(const char *buf, size_t len, uint32_t line, uint32_t column) {
    uint32_t l = 1;
    size_t start = 0;
    /* a line ends at LF, CR LF or a CR alone, as the lexer counts them */
    for (size_t i = 0; i < len && l < line; i++) {
        if (buf[i] == '\n' || (buf[i] == '\r' && (i + 1 == len || buf[i + 1] != '\n'))) {
            l++;
            start = i + 1;
        }
    }
    if (l != line || column < 1) {
        return false;
    }
    size_t end = start;
    while (end < len && buf[end] != '\n' &&
           !(buf[end] == '\r' && (end + 1 == len || buf[end + 1] != '\n'))) {
        end++;
    }
    return column <= end - start + 1;
}

static bool check_program(const char *buf, size_t len, int *parsed) {
    kf_graph *g = (kf_graph *)1;
    kf_spec_error err;
    kf_status st = kf_spec_parse(buf, len, &g, &err);
    if (st == KF_OK) {
        bool ok = g && kf_graph_status(g) == KF_OK && kf_graph_output_count(g) >= 1;
        for (uint32_t i = 0; ok && i < kf_graph_output_count(g); i++) {
            kf_shape shape;
            ok = kf_graph_output_info(g, i, NULL, &shape, NULL) == KF_OK;
        }
        kf_graph_destroy(g);
        if (!ok) {
            kt_fail(__FILE__, __LINE__, "parsed into a graph without valid outputs");
            return false;
        }
        (*parsed)++;
        return true;
    }
    bool known = st == KF_ERROR_PARSE || st == KF_ERROR_SHAPE || st == KF_ERROR_TYPE ||
                 st == KF_ERROR_INVALID_ARGUMENT || st == KF_ERROR_LIMIT;
    if (g != NULL || !known || !err.message[0] ||
        !position_inside(buf, len, err.line, err.column)) {
        kt_fail(__FILE__, __LINE__, "bad error: status %s, graph %p, %u:%u '%s'", kf_status_str(st),
                (void *)g, err.line, err.column, err.message);
        return false;
    }
    /* the same text gives the same error */
    kf_spec_error again;
    kf_graph *g2 = NULL;
    if (kf_spec_parse(buf, len, &g2, &again) != st || again.line != err.line ||
        again.column != err.column || strcmp(again.message, err.message) != 0) {
        kt_fail(__FILE__, __LINE__, "a second parse gave a different error");
        kf_graph_destroy(g2);
        return false;
    }
    return true;
}

KT_CPU_TEST(fuzz, spec_parse_never_crashes) {
    size_t corpus_size = sizeof fuzz_corpus / sizeof fuzz_corpus[0];
    int parsed = 0, programs = 0;
    for (size_t i = 0; i < corpus_size; i++) {
        kf_graph *g = NULL;
        kf_spec_error err;
        kf_status st = kf_spec_parse(fuzz_corpus[i], strlen(fuzz_corpus[i]), &g, &err);
        KT_CHECK(st == KF_OK, "corpus %zu does not parse: %u:%u %s", i, err.line, err.column,
                 err.message);
        kf_graph_destroy(g);
    }
    char *buf = malloc(FUZZ_MAX_TEXT);
    KT_CHECK(buf, "malloc");
    double seconds = kt_fuzz_seconds(FUZZ_SHARE), start = kt_now();
    printf("    %.0f s from seed %llu (rerun with --seed %llu)\n", seconds,
           (unsigned long long)kt_seed(), (unsigned long long)kt_seed());
    for (; programs < FUZZ_MAX_PROGRAMS; programs++) {
        if ((programs & 255) == 0 && kt_now() - start > seconds) {
            break;
        }
        size_t len;
        if (fuzz_index(8) == 0) {
            len = random_program(buf);
        } else {
            const char *seed = fuzz_corpus[fuzz_index(corpus_size)];
            len = strlen(seed);
            memcpy(buf, seed, len);
            len = mutate(buf, len);
        }
        if (!check_program(buf, len, &parsed)) {
            print_program(buf, len);
            break;
        }
    }
    free(buf);
    printf("    %d programs (%d parsed, %d refused)\n", programs, parsed, programs - parsed);
    KT_CHECK(programs >= 1000, "only %d programs in %.0f s", programs, seconds);
    KT_CHECK(parsed > 0 && parsed < programs, "mutations never (or always) parsed");
}
