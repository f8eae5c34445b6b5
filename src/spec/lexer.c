/* The graph language's lexer: program text -> tokens with line and column. */
#include "spec/spec_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct lexer {
    const char *text;
    size_t length;
    size_t pos;
    uint32_t line;
    uint32_t column;
    kf__token *tokens;
    uint32_t count;
    uint32_t capacity;
    kf_spec_error *err;
} lexer;

static void lex_fail(lexer *lx, uint32_t line, uint32_t column, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void lex_fail(lexer *lx, uint32_t line, uint32_t column, const char *fmt, ...) {
    lx->err->line = line;
    lx->err->column = column;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(lx->err->message, sizeof lx->err->message, fmt, ap);
    va_end(ap);
}

static bool is_alpha(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

static bool is_word(char c) {
    return is_alpha(c) || is_digit(c);
}

/* '\0' past the end: no token class accepts it, so callers need no separate end check (a NUL
 * inside the text is refused the same way). */
static char peek(const lexer *lx, size_t ahead) {
    return lx->pos + ahead < lx->length ? lx->text[lx->pos + ahead] : '\0';
}

static bool push(lexer *lx, kf__tok_kind kind, size_t start, uint32_t column) {
    if (lx->count == lx->capacity) {
        uint32_t cap = lx->capacity ? lx->capacity * 2 : 64;
        kf__token *tokens = realloc(lx->tokens, sizeof *tokens * cap);
        if (!tokens) {
            lex_fail(lx, lx->line, column, "out of memory after %u tokens", lx->count);
            return false;
        }
        lx->tokens = tokens;
        lx->capacity = cap;
    }
    kf__token *t = &lx->tokens[lx->count++];
    t->kind = kind;
    t->text = lx->text + start;
    t->length = (uint32_t)(lx->pos - start);
    t->line = lx->line;
    t->column = column;
    return true;
}

/* Describes a byte for a message: printable ASCII as itself, anything else in hex, so that a
 * binary file or a stray NUL yields a readable message. */
static const char *byte_str(char c, char *buf, size_t size) {
    unsigned char u = (unsigned char)c;
    if (u >= 0x21 && u < 0x7f) {
        snprintf(buf, size, "'%c'", c);
    } else {
        snprintf(buf, size, "byte 0x%02x", u);
    }
    return buf;
}

static bool lex_number(lexer *lx, uint32_t column) {
    size_t start = lx->pos;
    while (is_digit(peek(lx, 0))) {
        lx->pos++;
    }
    if (peek(lx, 0) == '.') {
        lx->pos++;
        while (is_digit(peek(lx, 0))) {
            lx->pos++;
        }
    }
    bool malformed = false;
    if (peek(lx, 0) == 'e' || peek(lx, 0) == 'E') {
        lx->pos++;
        if (peek(lx, 0) == '+' || peek(lx, 0) == '-') {
            lx->pos++;
        }
        if (!is_digit(peek(lx, 0))) {
            malformed = true;
        }
        while (is_digit(peek(lx, 0))) {
            lx->pos++;
        }
    }
    /* "64x128" or "1.2.3" is one mistake, not two tokens: report the whole run. */
    if (is_word(peek(lx, 0)) || peek(lx, 0) == '.') {
        malformed = true;
    }
    if (malformed) {
        size_t end = lx->pos;
        while (end < lx->length && (is_word(lx->text[end]) || lx->text[end] == '.') &&
               end - start < 40) {
            end++;
        }
        lex_fail(lx, lx->line, column, "malformed number '%.*s'", (int)(end - start),
                 lx->text + start);
        return false;
    }
    if (lx->pos - start > KF__SPEC_MAX_TOKEN) {
        lex_fail(lx, lx->line, column, "number '%.20s...' is longer than %d characters",
                 lx->text + start, KF__SPEC_MAX_TOKEN);
        return false;
    }
    return push(lx, KF__TOK_NUMBER, start, column);
}

static bool lex_name(lexer *lx, uint32_t column) {
    size_t start = lx->pos;
    while (is_word(peek(lx, 0))) {
        lx->pos++;
    }
    if (lx->pos - start > KF__SPEC_MAX_TOKEN) {
        lex_fail(lx, lx->line, column, "name '%.20s...' is longer than %d characters",
                 lx->text + start, KF__SPEC_MAX_TOKEN);
        return false;
    }
    return push(lx, KF__TOK_NAME, start, column);
}

static bool lex_symbol(lexer *lx, uint32_t column) {
    size_t start = lx->pos;
    char c = peek(lx, 0);
    kf__tok_kind kind;
    switch (c) {
    case ':':
        kind = KF__TOK_COLON;
        break;
    case '=':
        kind = KF__TOK_EQUALS;
        break;
    case ',':
        kind = KF__TOK_COMMA;
        break;
    case '(':
        kind = KF__TOK_LPAREN;
        break;
    case ')':
        kind = KF__TOK_RPAREN;
        break;
    case '[':
        kind = KF__TOK_LBRACKET;
        break;
    case ']':
        kind = KF__TOK_RBRACKET;
        break;
    case ';':
        kind = KF__TOK_END;
        break;
    case '-':
        kind = KF__TOK_MINUS;
        break;
    case '|':
        if (peek(lx, 1) == '>') {
            lx->pos += 2;
            return push(lx, KF__TOK_PIPE, start, column);
        }
        lex_fail(lx, lx->line, column, "unexpected '|': the pipe is written '|>'");
        return false;
    case '+':
    case '*':
    case '/': {
        /* A common first guess; say what to write instead. */
        const char *op = c == '+' ? "add" : c == '*' ? "mul" : "div";
        lex_fail(lx, lx->line, column,
                 "unexpected '%c': the language has no infix arithmetic; write %s(a, b)", c, op);
        return false;
    }
    default: {
        char buf[16];
        lex_fail(lx, lx->line, column, "unexpected %s", byte_str(c, buf, sizeof buf));
        return false;
    }
    }
    lx->pos++;
    return push(lx, kind, start, column);
}

kf_status kf__spec_lex(const char *text, size_t length, kf__token **tokens, uint32_t *count,
                       kf_spec_error *err) {
    *tokens = NULL;
    *count = 0;
    if (length > KF__SPEC_MAX_PROGRAM) {
        err->line = 1;
        err->column = 1;
        snprintf(err->message, sizeof err->message, "program is %zu bytes; the limit is %u", length,
                 KF__SPEC_MAX_PROGRAM);
        return KF_ERROR_PARSE;
    }
    lexer lx = {.text = text, .length = length, .line = 1, .column = 1, .err = err};
    bool ok = true;
    while (ok && lx.pos < length) {
        char c = text[lx.pos];
        size_t before = lx.pos;
        uint32_t column = lx.column;
        /* A CR alone ends a line (old Mac files), as LF and CR LF do. */
        bool lone_cr = c == '\r' && (lx.pos + 1 == length || text[lx.pos + 1] != '\n');
        if ((c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') && !lone_cr) {
            lx.pos++;
        } else if (c == '#') {
            while (lx.pos < length && text[lx.pos] != '\n' && text[lx.pos] != '\r') {
                lx.pos++;
            }
        } else if (c == '\n' || lone_cr) {
            lx.pos++;
            ok = push(&lx, KF__TOK_END, before, column);
            lx.line++;
            lx.column = 1;
            continue;
        } else if (is_alpha(c)) {
            ok = lex_name(&lx, column);
        } else if (is_digit(c) || (c == '.' && is_digit(peek(&lx, 1)))) {
            ok = lex_number(&lx, column);
        } else {
            ok = lex_symbol(&lx, column);
        }
        lx.column += (uint32_t)(lx.pos - before);
    }
    if (ok) {
        ok = push(&lx, KF__TOK_EOF, lx.pos, lx.column);
    }
    if (!ok) {
        free(lx.tokens);
        return KF_ERROR_PARSE;
    }
    *tokens = lx.tokens;
    *count = lx.count;
    return KF_OK;
}

const char *kf__spec_token_str(const kf__token *t, char *buf, size_t size) {
    switch (t->kind) {
    case KF__TOK_EOF:
        snprintf(buf, size, "end of file");
        break;
    case KF__TOK_END:
        snprintf(buf, size, "%s", t->length && t->text[0] == ';' ? "';'" : "end of line");
        break;
    case KF__TOK_NAME:
        snprintf(buf, size, "name '%.*s'", (int)t->length, t->text);
        break;
    case KF__TOK_NUMBER:
        snprintf(buf, size, "number %.*s", (int)t->length, t->text);
        break;
    case KF__TOK_PIPE:
        snprintf(buf, size, "'|>'");
        break;
    default:
        snprintf(buf, size, "'%.*s'", (int)t->length, t->text);
        break;
    }
    return buf;
}

uint32_t kf__spec_edit_distance(const char *a, size_t a_len, const char *b, size_t b_len,
                                uint32_t cap) {
    /* Names are at most KF__SPEC_MAX_TOKEN long (the registry's too), so three rows on the
     * stack suffice; longer strings are never "close". */
    enum { W = KF__SPEC_MAX_TOKEN + 2 };
    if (a_len >= W - 1 || b_len >= W - 1) {
        return cap + 1;
    }
    size_t diff = a_len > b_len ? a_len - b_len : b_len - a_len;
    if (diff > cap) {
        return cap + 1;
    }
    uint32_t rows[3][W];
    uint32_t *prev2 = rows[0], *prev = rows[1], *cur = rows[2];
    for (size_t j = 0; j <= b_len; j++) {
        prev[j] = (uint32_t)j;
    }
    for (size_t i = 1; i <= a_len; i++) {
        cur[0] = (uint32_t)i;
        uint32_t row_min = cur[0];
        for (size_t j = 1; j <= b_len; j++) {
            uint32_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            uint32_t best = prev[j] + 1;
            if (cur[j - 1] + 1 < best) {
                best = cur[j - 1] + 1;
            }
            if (prev[j - 1] + cost < best) {
                best = prev[j - 1] + cost;
            }
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                prev2[j - 2] + 1 < best) {
                best = prev2[j - 2] + 1;
            }
            cur[j] = best;
            if (best < row_min) {
                row_min = best;
            }
        }
        if (row_min > cap) {
            return cap + 1;
        }
        uint32_t *t = prev2;
        prev2 = prev;
        prev = cur;
        cur = t;
    }
    return prev[b_len] > cap ? cap + 1 : prev[b_len];
}
