/* The graph language's parser: tokens -> a kf_graph, built while parsing (recursive descent).
 *
 *     program   := (statement? END)* EOF             END is a newline or ';'
 *     statement := NAME ':' DTYPE '[' dims? ']'      an input
 *                | 'param' NAME ':' 'f32' '[' dims? ']' ('=' init)?    a trainable parameter
 *                | NAME '=' expr                     an assignment
 *                | 'out' NAME (',' NAME)*            outputs
 *     expr      := term ('|>' callee)*
 *     term      := NAME | number | call | '(' expr ')'
 *     call      := NAME '(' (arg (',' arg)*)? ')'
 *     callee    := NAME | call                       a |> f(b) is f(a, b); a |> f is f(a)
 *     arg       := NAME '=' (number | list | expr) | number | list | expr    a keyword: a
 *                                                    parameter or an input
 *     list      := '[' (number (',' number)*)? ']'   whole numbers (reshape's shape, permute's
 * axes) number    := '-'? NUMBER | 'true' | 'false' init      := 'zeros' | 'uniform' '(' number ')'
 *
 * docs/graph-language.md is the user's description; this file follows it. */
#include "spec/spec_internal.h"
#include "ops/operator.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Nesting of parentheses and calls inside one expression. Recursion depth is what this bounds:
 * a program of a million '(' must fail with a message, not overflow the stack. */
#define SPEC_MAX_DEPTH 64
/* Arguments of one call; operators take at most 4 tensors and a few numbers. */
#define SPEC_MAX_ARGS 16
/* The largest tensor the language declares: kernels index elements with u32. */
#define SPEC_MAX_ELEMENTS 4294967295ull

typedef struct symbol {
    char name[KF__SPEC_MAX_TOKEN + 1];
    uint32_t length;
    kf_node node;
    const kf__token *defined; /* the name's token where it was declared or assigned */
    const kf__token *output;  /* the name's token in its 'out' statement, if any */
    bool is_input;
    bool read; /* some expression reads it (decides the implicit outputs) */
} symbol;

typedef struct parser {
    const kf__token *tokens;
    uint32_t count;
    uint32_t pos;
    kf_graph *g;
    kf_spec_error *err;
    kf_status status;
    symbol *symbols;
    uint32_t symbol_count;
    uint32_t symbol_capacity;
    uint32_t *table; /* open addressing over symbols: index + 1, 0 is empty */
    uint32_t table_size;
    uint32_t depth;
    bool any_out;
} parser;

/* An argument of a call, gathered before the call is made (numbers' roles depend on where the
 * last tensor argument is). */
typedef enum arg_kind { ARG_TENSOR = 1, ARG_NUMBER, ARG_KEYWORD, ARG_KEYWORD_TENSOR } arg_kind;

typedef struct call_arg {
    arg_kind kind;
    kf_node node;
    double number;
    const kf__token *token;
    char name[KF__SPEC_MAX_TOKEN + 1]; /* ARG_KEYWORD, ARG_KEYWORD_TENSOR */
    bool is_list; /* ARG_NUMBER, ARG_KEYWORD: a list of whole numbers instead of `number` */
    int32_t list[KF_MAX_DIMS];
    uint32_t list_count;
} call_arg;

static bool fail_at(parser *p, const kf__token *t, kf_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static bool fail_at(parser *p, const kf__token *t, kf_status st, const char *fmt, ...) {
    if (p->status != KF_OK) {
        return false;
    }
    p->status = st;
    p->err->line = t->line;
    p->err->column = t->column;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err->message, sizeof p->err->message, fmt, ap);
    va_end(ap);
    return false;
}

static const kf__token *cur(const parser *p) {
    return &p->tokens[p->pos];
}

/* The token `ahead` places on; EOF repeats past the end. */
static const kf__token *peek_at(const parser *p, uint32_t ahead) {
    uint32_t i = p->pos + ahead;
    return &p->tokens[i < p->count ? i : p->count - 1];
}

static void advance(parser *p) {
    if (p->pos + 1 < p->count) {
        p->pos++;
    }
}

static bool is_newline(const kf__token *t) {
    return t->kind == KF__TOK_END && t->text[0] == '\n';
}

static bool is_word(const kf__token *t, const char *word) {
    return t->kind == KF__TOK_NAME && t->length == strlen(word) &&
           !memcmp(t->text, word, t->length);
}

static bool is_reserved(const kf__token *t) {
    return is_word(t, "out") || is_word(t, "true") || is_word(t, "false");
}

/* Inside parentheses a newline is just space. */
static void skip_newlines(parser *p) {
    while (is_newline(cur(p))) {
        advance(p);
    }
}

static bool expected(parser *p, const char *what) {
    char found[96];
    return fail_at(p, cur(p), KF_ERROR_PARSE, "expected %s, found %s", what,
                   kf__spec_token_str(cur(p), found, sizeof found));
}

static void token_copy(const kf__token *t, char *buf, size_t size) {
    size_t n = t->length < size - 1 ? t->length : size - 1;
    memcpy(buf, t->text, n);
    buf[n] = '\0';
}

/* ---- symbols -------------------------------------------------------------------------------- */

static uint32_t name_hash(const char *s, uint32_t n) {
    uint32_t h = 2166136261u;
    for (uint32_t i = 0; i < n; i++) {
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    }
    return h;
}

static symbol *lookup(const parser *p, const char *name, uint32_t length) {
    if (!p->table_size) {
        return NULL;
    }
    uint32_t mask = p->table_size - 1;
    for (uint32_t i = name_hash(name, length) & mask;; i = (i + 1) & mask) {
        uint32_t slot = p->table[i];
        if (!slot) {
            return NULL;
        }
        symbol *s = &p->symbols[slot - 1];
        if (s->length == length && !memcmp(s->name, name, length)) {
            return s;
        }
    }
}

static symbol *lookup_token(const parser *p, const kf__token *t) {
    return lookup(p, t->text, t->length);
}

static bool table_insert(parser *p, uint32_t index) {
    if ((p->symbol_count + 1) * 2 > p->table_size) {
        uint32_t size = p->table_size ? p->table_size * 2 : 64;
        uint32_t *table = calloc(size, sizeof *table);
        if (!table) {
            return false;
        }
        for (uint32_t s = 0; s < p->symbol_count; s++) {
            if (s == index) {
                continue;
            }
            uint32_t i = name_hash(p->symbols[s].name, p->symbols[s].length) & (size - 1);
            while (table[i]) {
                i = (i + 1) & (size - 1);
            }
            table[i] = s + 1;
        }
        free(p->table);
        p->table = table;
        p->table_size = size;
    }
    const symbol *sym = &p->symbols[index];
    uint32_t mask = p->table_size - 1;
    uint32_t i = name_hash(sym->name, sym->length) & mask;
    while (p->table[i]) {
        i = (i + 1) & mask;
    }
    p->table[i] = index + 1;
    return true;
}

static bool define(parser *p, const kf__token *name, kf_node node, bool is_input) {
    if (p->symbol_count == p->symbol_capacity) {
        uint32_t cap = p->symbol_capacity ? p->symbol_capacity * 2 : 32;
        symbol *symbols = realloc(p->symbols, sizeof *symbols * cap);
        if (!symbols) {
            return fail_at(p, name, KF_ERROR_OUT_OF_MEMORY, "out of memory defining '%.*s'",
                           (int)name->length, name->text);
        }
        p->symbols = symbols;
        p->symbol_capacity = cap;
    }
    symbol *s = &p->symbols[p->symbol_count];
    memset(s, 0, sizeof *s);
    token_copy(name, s->name, sizeof s->name);
    s->length = name->length;
    s->node = node;
    s->defined = name;
    s->is_input = is_input;
    if (!table_insert(p, p->symbol_count)) {
        return fail_at(p, name, KF_ERROR_OUT_OF_MEMORY, "out of memory defining '%s'", s->name);
    }
    p->symbol_count++;
    return true;
}

/* Names are defined once: a second definition is almost always a typo or a copy-paste slip, and
 * refusing it keeps "the value of x" meaning one thing throughout the program. */
static bool check_new_name(parser *p, const kf__token *name) {
    if (is_reserved(name)) {
        return fail_at(p, name, KF_ERROR_PARSE, "'%.*s' is a reserved word; choose another name",
                       (int)name->length, name->text);
    }
    const symbol *s = lookup_token(p, name);
    if (s) {
        return fail_at(p, name, KF_ERROR_PARSE, "'%s' is already defined at line %u", s->name,
                       s->defined->line);
    }
    return true;
}

/* The closest of `count` candidates within a small edit distance, or NULL. Short names get a
 * tighter bound: for 'z' every one-letter name would be "close". */
typedef const char *(*candidate_fn)(const void *ctx, uint32_t i);

static const char *suggest(const char *name, size_t length, const void *ctx, uint32_t count,
                           candidate_fn candidate) {
    if (length < 3) {
        return NULL;
    }
    uint32_t cap = length <= 4 ? 1 : 2;
    const char *best = NULL;
    uint32_t best_distance = cap + 1;
    for (uint32_t i = 0; i < count; i++) {
        const char *c = candidate(ctx, i);
        if (!c) {
            continue;
        }
        uint32_t d = kf__spec_edit_distance(name, length, c, strlen(c), cap);
        if (d < best_distance) {
            best = c;
            best_distance = d;
        }
    }
    return best;
}

static const char *op_candidate(const void *ctx, uint32_t i) {
    (void)ctx;
    const kf_operator *op = kf_op_at(i);
    return op ? op->name : NULL;
}

static const char *symbol_candidate(const void *ctx, uint32_t i) {
    const parser *p = ctx;
    return p->symbols[i].name;
}

static bool check_graph(parser *p, const kf__token *t, kf_node node) {
    kf_status st = kf_graph_status(p->g);
    if (st != KF_OK) {
        return fail_at(p, t, st, "%s", kf_graph_error(p->g));
    }
    if (!node.id) {
        return fail_at(p, t, KF_ERROR_INTERNAL, "the graph returned no node and no error");
    }
    return true;
}

/* ---- numbers and names ---------------------------------------------------------------------- */

/* true when a number literal starts here: NUMBER, '-' NUMBER, true or false. *tokens receives
 * how many tokens it spans. */
static bool number_ahead(const parser *p, uint32_t *tokens) {
    const kf__token *t = cur(p);
    if (t->kind == KF__TOK_NUMBER || is_word(t, "true") || is_word(t, "false")) {
        *tokens = 1;
        return true;
    }
    if (t->kind == KF__TOK_MINUS && peek_at(p, 1)->kind == KF__TOK_NUMBER) {
        *tokens = 2;
        return true;
    }
    return false;
}

static bool parse_number(parser *p, double *out) {
    const kf__token *t = cur(p);
    if (is_word(t, "true") || is_word(t, "false")) {
        *out = is_word(t, "true") ? 1.0 : 0.0;
        advance(p);
        return true;
    }
    double sign = 1.0;
    if (t->kind == KF__TOK_MINUS) {
        advance(p);
        if (cur(p)->kind != KF__TOK_NUMBER) {
            return expected(p, "a number after '-'");
        }
        sign = -1.0;
    } else if (t->kind != KF__TOK_NUMBER) {
        return expected(p, "a number");
    }
    const kf__token *n = cur(p);
    char buf[KF__SPEC_MAX_TOKEN + 1];
    token_copy(n, buf, sizeof buf);
    char *end = NULL;
    errno = 0;
    double v = strtod(buf, &end);
    if (!end || *end != '\0') {
        return fail_at(p, n, KF_ERROR_PARSE, "malformed number '%s'", buf);
    }
    /* Every number ends up as an f32 (a scalar or a parameter): refuse what f32 cannot hold
     * rather than silently turning it into infinity. */
    if (!isfinite(v) || fabs(v) > FLT_MAX) {
        return fail_at(p, t, KF_ERROR_PARSE, "number %s%s is out of range for f32 (largest %g)",
                       sign < 0 ? "-" : "", buf, (double)FLT_MAX);
    }
    advance(p);
    *out = sign * v;
    return true;
}

/* ---- expressions ---------------------------------------------------------------------------- */

static bool parse_expr(parser *p, kf_node *out);

static const kf_operator *resolve_op(parser *p, const kf__token *name) {
    char buf[KF__SPEC_MAX_TOKEN + 1];
    token_copy(name, buf, sizeof buf);
    const kf_operator *op = kf_op_find(buf);
    if (op) {
        return op;
    }
    if (lookup_token(p, name)) {
        fail_at(p, name, KF_ERROR_PARSE, "'%s' is a tensor, not an operator", buf);
        return NULL;
    }
    const char *near = suggest(buf, name->length, NULL, kf_op_count(), op_candidate);
    if (near) {
        fail_at(p, name, KF_ERROR_PARSE, "unknown operator '%s' (did you mean '%s'?)", buf, near);
    } else {
        fail_at(p, name, KF_ERROR_PARSE,
                "unknown operator '%s' (the operators are listed in docs/operators.md)", buf);
    }
    return NULL;
}

/* Whether a number literal stands alone here (followed by ',' or ')'): a number argument rather
 * than the start of an expression (2 |> f). */
static bool number_alone(const parser *p) {
    uint32_t span = 0;
    if (!number_ahead(p, &span)) {
        return false;
    }
    uint32_t i = span;
    while (is_newline(peek_at(p, i))) {
        i++;
    }
    kf__tok_kind next = peek_at(p, i)->kind;
    return next == KF__TOK_COMMA || next == KF__TOK_RPAREN;
}

/* '[' (number (',' number)*)? ']' at the current token: whole numbers that fit int32. */
static bool parse_list(parser *p, call_arg *arg) {
    const kf__token *open = cur(p);
    advance(p);
    skip_newlines(p);
    arg->is_list = true;
    arg->list_count = 0;
    while (cur(p)->kind != KF__TOK_RBRACKET) {
        const kf__token *t = cur(p);
        double v = 0.0;
        if (arg->list_count == KF_MAX_DIMS) {
            return fail_at(p, t, KF_ERROR_PARSE, "a list has at most %d entries", KF_MAX_DIMS);
        }
        if (!parse_number(p, &v)) {
            return false;
        }
        if (v != floor(v) || v < -2147483648.0 || v > 2147483647.0) {
            return fail_at(p, t, KF_ERROR_PARSE, "list entry %.9g is not a whole number", v);
        }
        arg->list[arg->list_count++] = (int32_t)v;
        skip_newlines(p);
        if (cur(p)->kind == KF__TOK_COMMA) {
            advance(p);
            skip_newlines(p);
        } else if (cur(p)->kind != KF__TOK_RBRACKET) {
            char what[96];
            snprintf(what, sizeof what, "',' or ']' in the list opened at line %u, column %u",
                     open->line, open->column);
            return expected(p, what);
        }
    }
    advance(p);
    return true;
}

static bool parse_arg(parser *p, const kf__token *op_name, call_arg *arg, bool after_keyword) {
    skip_newlines(p);
    const kf__token *t = cur(p);
    arg->token = t;
    if (t->kind == KF__TOK_NAME && peek_at(p, 1)->kind == KF__TOK_EQUALS) {
        token_copy(t, arg->name, sizeof arg->name);
        advance(p);
        advance(p);
        skip_newlines(p);
        /* name=NUMBER (or [list]) sets a parameter; name=EXPRESSION passes a tensor input by its
         * name. */
        if (cur(p)->kind == KF__TOK_LBRACKET) {
            arg->kind = ARG_KEYWORD;
            return parse_list(p, arg);
        }
        if (number_alone(p)) {
            arg->kind = ARG_KEYWORD;
            return parse_number(p, &arg->number);
        }
        arg->kind = ARG_KEYWORD_TENSOR;
        return parse_expr(p, &arg->node);
    }
    if (after_keyword) {
        return fail_at(p, t, KF_ERROR_PARSE,
                       "positional argument after a keyword argument in %.*s(...); put "
                       "keyword arguments last",
                       (int)op_name->length, op_name->text);
    }
    if (cur(p)->kind == KF__TOK_LBRACKET) {
        arg->kind = ARG_NUMBER;
        return parse_list(p, arg);
    }
    /* A number standing alone is a number argument; anything longer (2 |> f) is an expression. */
    if (number_alone(p)) {
        arg->kind = ARG_NUMBER;
        return parse_number(p, &arg->number);
    }
    arg->kind = ARG_TENSOR;
    return parse_expr(p, &arg->node);
}

/* name '(' args ')' with name at the current token, or a bare name after '|>' (no parentheses).
 * piped, when not NULL, is the first tensor argument. */
static bool parse_call(parser *p, const kf_node *piped, kf_node *out) {
    const kf__token *name = cur(p);
    const kf_operator *op = resolve_op(p, name);
    if (!op) {
        return false;
    }
    advance(p);
    call_arg args[SPEC_MAX_ARGS];
    uint32_t arg_count = 0;
    if (cur(p)->kind == KF__TOK_LPAREN) {
        const kf__token *open = cur(p);
        advance(p);
        skip_newlines(p);
        bool any_keyword = false;
        if (cur(p)->kind != KF__TOK_RPAREN) {
            for (;;) {
                if (arg_count == SPEC_MAX_ARGS) {
                    return fail_at(p, cur(p), KF_ERROR_PARSE,
                                   "too many arguments to %s (at most %d)", op->name,
                                   SPEC_MAX_ARGS);
                }
                call_arg *a = &args[arg_count++];
                memset(a, 0, sizeof *a);
                if (!parse_arg(p, name, a, any_keyword)) {
                    return false;
                }
                if (a->kind == ARG_KEYWORD || a->kind == ARG_KEYWORD_TENSOR) {
                    for (uint32_t i = 0; i + 1 < arg_count; i++) {
                        bool keyword =
                            args[i].kind == ARG_KEYWORD || args[i].kind == ARG_KEYWORD_TENSOR;
                        if (keyword && !strcmp(args[i].name, a->name)) {
                            return fail_at(p, a->token, KF_ERROR_PARSE,
                                           "'%s' is given twice in %s(...)", a->name, op->name);
                        }
                    }
                    any_keyword = true;
                }
                skip_newlines(p);
                if (cur(p)->kind != KF__TOK_COMMA) {
                    break;
                }
                advance(p);
            }
        }
        if (cur(p)->kind != KF__TOK_RPAREN) {
            char what[160];
            snprintf(what, sizeof what,
                     "',' or ')' after the arguments of %s (its '(' is at line %u, column %u)",
                     op->name, open->line, open->column);
            return expected(p, what);
        }
        advance(p);
    }

    /* Numbers before the last tensor stand where a tensor goes (sub(1, x) is 1 - x): they become
     * scalar nodes. Numbers after it are the op's to interpret (kf_graph_call). */
    uint32_t last_tensor = 0; /* one past */
    for (uint32_t i = 0; i < arg_count; i++) {
        if (args[i].kind == ARG_TENSOR) {
            last_tensor = i + 1;
        }
    }
    kf_node tensors[SPEC_MAX_ARGS + 1];
    kf_graph_arg numbers[SPEC_MAX_ARGS];
    uint32_t tensor_count = 0, number_count = 0;
    if (piped) {
        tensors[tensor_count++] = *piped;
    }
    for (uint32_t i = 0; i < arg_count; i++) {
        call_arg *a = &args[i];
        if (a->kind == ARG_TENSOR) {
            tensors[tensor_count++] = a->node;
        } else if (a->kind == ARG_NUMBER && a->is_list && i < last_tensor) {
            return fail_at(p, a->token, KF_ERROR_PARSE,
                           "a list argument of %s comes after its tensor arguments", op->name);
        } else if (a->kind == ARG_NUMBER && i < last_tensor) {
            kf_node s = kf_graph_scalar(p->g, (float)a->number);
            if (!check_graph(p, a->token, s)) {
                return false;
            }
            tensors[tensor_count++] = s;
        } else {
            kf_graph_arg *n = &numbers[number_count++];
            memset(n, 0, sizeof *n);
            n->name = a->kind == ARG_NUMBER ? NULL : a->name;
            n->number = a->number;
            if (a->is_list) {
                n->list = a->list;
                n->list_count = a->list_count;
            }
            if (a->kind == ARG_KEYWORD_TENSOR) {
                n->tensor = a->node;
            }
        }
    }
    *out = kf_graph_call(p->g, op->name, tensors, tensor_count, numbers, number_count);
    return check_graph(p, name, *out);
}

static bool parse_name_term(parser *p, kf_node *out) {
    const kf__token *t = cur(p);
    symbol *s = lookup_token(p, t);
    if (!s) {
        char buf[KF__SPEC_MAX_TOKEN + 1];
        token_copy(t, buf, sizeof buf);
        if (kf_op_find(buf)) {
            return fail_at(p, t, KF_ERROR_PARSE,
                           "name '%s' is not defined ('%s' is an operator: call it as %s(...))",
                           buf, buf, buf);
        }
        const char *near = suggest(buf, t->length, p, p->symbol_count, symbol_candidate);
        if (near) {
            return fail_at(p, t, KF_ERROR_PARSE, "name '%s' is not defined (did you mean '%s'?)",
                           buf, near);
        }
        return fail_at(p, t, KF_ERROR_PARSE, "name '%s' is not defined", buf);
    }
    s->read = true;
    *out = s->node;
    advance(p);
    return true;
}

static bool parse_term(parser *p, kf_node *out) {
    const kf__token *t = cur(p);
    uint32_t span;
    if (t->kind == KF__TOK_NAME && peek_at(p, 1)->kind == KF__TOK_LPAREN) {
        return parse_call(p, NULL, out);
    }
    if (number_ahead(p, &span)) {
        double v = 0.0;
        if (!parse_number(p, &v)) {
            return false;
        }
        *out = kf_graph_scalar(p->g, (float)v);
        return check_graph(p, t, *out);
    }
    if (t->kind == KF__TOK_NAME) {
        return parse_name_term(p, out);
    }
    if (t->kind == KF__TOK_LPAREN) {
        advance(p);
        skip_newlines(p);
        if (!parse_expr(p, out)) {
            return false;
        }
        skip_newlines(p);
        if (cur(p)->kind != KF__TOK_RPAREN) {
            char what[96];
            snprintf(what, sizeof what, "')' to close the '(' at line %u, column %u", t->line,
                     t->column);
            return expected(p, what);
        }
        advance(p);
        return true;
    }
    if (t->kind == KF__TOK_MINUS) {
        advance(p);
        return expected(p, kf_op_find("neg") ? "a number after '-' (negate a tensor with neg(x))"
                                             : "a number after '-'");
    }
    return expected(p, "an expression (a name, a number, a call or '(')");
}

static bool parse_expr(parser *p, kf_node *out) {
    if (p->depth >= SPEC_MAX_DEPTH) {
        return fail_at(p, cur(p), KF_ERROR_PARSE, "expression nested deeper than %d levels",
                       SPEC_MAX_DEPTH);
    }
    p->depth++;
    bool ok = parse_term(p, out);
    while (ok) {
        /* A line that starts with '|>' continues the expression above it. */
        uint32_t i = 0;
        while (is_newline(peek_at(p, i))) {
            i++;
        }
        if (peek_at(p, i)->kind != KF__TOK_PIPE) {
            break;
        }
        p->pos += i;
        advance(p);
        skip_newlines(p);
        if (cur(p)->kind != KF__TOK_NAME) {
            ok = expected(p, "an operator after '|>'");
            break;
        }
        kf_node piped = *out;
        ok = parse_call(p, &piped, out);
    }
    p->depth--;
    return ok;
}

/* ---- statements ----------------------------------------------------------------------------- */

static bool parse_dim(parser *p, uint32_t *out) {
    const kf__token *t = cur(p);
    if (t->kind != KF__TOK_NUMBER) {
        return expected(p, "a dimension (a whole number, at least 1)");
    }
    uint64_t v = 0;
    for (uint32_t i = 0; i < t->length; i++) {
        char c = t->text[i];
        if (c < '0' || c > '9') {
            return fail_at(p, t, KF_ERROR_PARSE, "a dimension must be a whole number, not %.*s",
                           (int)t->length, t->text);
        }
        v = v * 10 + (uint64_t)(c - '0');
        if (v > UINT32_MAX) {
            return fail_at(p, t, KF_ERROR_PARSE, "dimension %.*s is too large (at most %u)",
                           (int)t->length, t->text, UINT32_MAX);
        }
    }
    if (v == 0) {
        return fail_at(p, t, KF_ERROR_PARSE, "a dimension must be at least 1");
    }
    *out = (uint32_t)v;
    advance(p);
    return true;
}

/* `= zeros` or `= uniform(bound)` after a param's shape. */
static bool parse_init(parser *p, kf_param_init *init) {
    advance(p); /* '=' */
    const kf__token *t = cur(p);
    if (is_word(t, "zeros")) {
        init->kind = KF_INIT_ZEROS;
        advance(p);
        return true;
    }
    if (!is_word(t, "uniform") || peek_at(p, 1)->kind != KF__TOK_LPAREN) {
        return expected(p, "an initialiser after '=': zeros or uniform(bound)");
    }
    advance(p);
    advance(p);
    const kf__token *at = cur(p);
    double bound = 0.0;
    if (!parse_number(p, &bound)) {
        return false;
    }
    if (!(bound > 0.0 && bound < 1e30)) {
        return fail_at(p, at, KF_ERROR_PARSE, "uniform(bound) needs a bound above 0");
    }
    if (cur(p)->kind != KF__TOK_RPAREN) {
        return expected(p, "')' after uniform's bound");
    }
    advance(p);
    init->kind = KF_INIT_UNIFORM;
    init->bound = (float)bound;
    return true;
}

static bool parse_input(parser *p, bool is_param) {
    if (is_param) {
        advance(p); /* 'param' */
    }
    const kf__token *name = cur(p);
    if (!check_new_name(p, name)) {
        return false;
    }
    advance(p); /* name */
    advance(p); /* ':' */
    const kf__token *dt = cur(p);
    kf_dtype dtype;
    if (is_word(dt, "f32")) {
        dtype = KF_DTYPE_F32;
    } else if (is_word(dt, "f16")) {
        dtype = KF_DTYPE_F16;
    } else if (is_word(dt, "i32")) {
        dtype = KF_DTYPE_I32;
    } else if (dt->kind == KF__TOK_NAME) {
        return fail_at(p, dt, KF_ERROR_PARSE,
                       "unknown dtype '%.*s' (the dtypes are f32, f16 and i32)", (int)dt->length,
                       dt->text);
    } else {
        return expected(p, "a dtype (f32, f16 or i32) after ':'");
    }
    advance(p);
    if (cur(p)->kind != KF__TOK_LBRACKET) {
        return expected(p, "'[' and the shape after the dtype (f32[] for a scalar)");
    }
    advance(p);
    kf_shape shape = {0};
    uint64_t elements = 1;
    if (cur(p)->kind != KF__TOK_RBRACKET) {
        for (;;) {
            const kf__token *t = cur(p);
            if (shape.rank == KF_MAX_DIMS) {
                return fail_at(p, t, KF_ERROR_PARSE, "a shape has at most %d dimensions",
                               KF_MAX_DIMS);
            }
            uint32_t d = 0;
            if (!parse_dim(p, &d)) {
                return false;
            }
            elements *= d;
            if (elements > SPEC_MAX_ELEMENTS) {
                return fail_at(p, t, KF_ERROR_PARSE, "'%.*s' has more than %llu elements",
                               (int)name->length, name->text, SPEC_MAX_ELEMENTS);
            }
            shape.dims[shape.rank++] = d;
            if (cur(p)->kind != KF__TOK_COMMA) {
                break;
            }
            advance(p);
        }
        if (cur(p)->kind != KF__TOK_RBRACKET) {
            return expected(p, "',' or ']' in the shape");
        }
    }
    advance(p); /* ']' */
    char buf[KF__SPEC_MAX_TOKEN + 1];
    token_copy(name, buf, sizeof buf);
    kf_node node;
    if (is_param) {
        if (dtype != KF_DTYPE_F32) {
            return fail_at(p, dt, KF_ERROR_PARSE, "a param is f32 (trainable values)");
        }
        kf_param_init init = {0};
        if (cur(p)->kind == KF__TOK_EQUALS && !parse_init(p, &init)) {
            return false;
        }
        node = kf_graph_param(p->g, buf, &shape, &init);
    } else {
        node = kf_graph_input(p->g, buf, &shape, dtype);
    }
    return check_graph(p, name, node) && define(p, name, node, true);
}

static bool parse_assignment(parser *p) {
    const kf__token *name = cur(p);
    if (!check_new_name(p, name)) {
        return false;
    }
    advance(p); /* name */
    advance(p); /* '=' */
    kf_node node = {0};
    if (!parse_expr(p, &node)) {
        return false;
    }
    return define(p, name, node, false);
}

/* `d1, d2, ... = grad(loss, x1, x2, ...)`: the gradients of a rank-0 loss with respect to named
 * values (kf_graph_grad), one name on the left per value on the right; `dx = grad(loss, x)` for
 * one. The gradients are ordinary values: outputs, or read by later statements. */
#define SPEC_MAX_GRADS 16

static bool parse_grad_assignment(parser *p) {
    const kf__token *names[SPEC_MAX_GRADS];
    uint32_t count = 0;
    for (;;) {
        const kf__token *t = cur(p);
        if (t->kind != KF__TOK_NAME) {
            return expected(p, "a name to assign a gradient to");
        }
        if (count == SPEC_MAX_GRADS) {
            return fail_at(p, t, KF_ERROR_PARSE, "at most %d names on the left of grad(...)",
                           SPEC_MAX_GRADS);
        }
        if (!check_new_name(p, t)) {
            return false;
        }
        for (uint32_t i = 0; i < count; i++) {
            if (names[i]->length == t->length && !memcmp(names[i]->text, t->text, t->length)) {
                return fail_at(p, t, KF_ERROR_PARSE, "'%.*s' appears twice on the left",
                               (int)t->length, t->text);
            }
        }
        names[count++] = t;
        advance(p);
        if (cur(p)->kind == KF__TOK_EQUALS) {
            break;
        }
        if (cur(p)->kind != KF__TOK_COMMA) {
            return expected(p, "',' or '=' after the names of a multiple assignment");
        }
        advance(p);
    }
    advance(p); /* '=' */
    const kf__token *call_at = cur(p);
    if (!is_word(call_at, "grad") || peek_at(p, 1)->kind != KF__TOK_LPAREN) {
        return fail_at(p, call_at, KF_ERROR_PARSE,
                       "only grad(...) gives several values: dx, dy = grad(loss, x, y)");
    }
    advance(p); /* grad */
    advance(p); /* '(' */
    skip_newlines(p);
    const kf__token *loss_at = cur(p);
    kf_node loss = {0};
    if (!parse_expr(p, &loss)) {
        return false;
    }
    kf_node wrt[SPEC_MAX_GRADS];
    uint32_t wrt_count = 0;
    skip_newlines(p);
    while (cur(p)->kind == KF__TOK_COMMA) {
        advance(p);
        skip_newlines(p);
        const kf__token *t = cur(p);
        if (t->kind != KF__TOK_NAME || peek_at(p, 1)->kind == KF__TOK_LPAREN) {
            return expected(p, "the name of a value to differentiate by");
        }
        if (wrt_count == SPEC_MAX_GRADS) {
            return fail_at(p, t, KF_ERROR_PARSE, "grad takes at most %d values", SPEC_MAX_GRADS);
        }
        if (!parse_name_term(p, &wrt[wrt_count])) {
            return false;
        }
        wrt_count++;
        skip_newlines(p);
    }
    if (cur(p)->kind != KF__TOK_RPAREN) {
        return expected(p, "',' or ')' in grad(loss, x, ...)");
    }
    advance(p);
    if (wrt_count == 0) {
        return fail_at(p, call_at, KF_ERROR_PARSE,
                       "grad needs the values to differentiate by: grad(loss, x, ...)");
    }
    if (wrt_count != count) {
        return fail_at(p, names[0], KF_ERROR_PARSE,
                       "%u name%s on the left, but grad(...) gives %u gradient%s", count,
                       count == 1 ? "" : "s", wrt_count, wrt_count == 1 ? "" : "s");
    }
    kf_node grads[SPEC_MAX_GRADS];
    if (kf_graph_grad(p->g, loss, wrt, wrt_count, grads) != KF_OK) {
        /* the loss's shape is its own fault; anything else is the call's */
        const kf__token *at = kf_graph_status(p->g) == KF_ERROR_SHAPE ? loss_at : call_at;
        return check_graph(p, at, (kf_node){0});
    }
    for (uint32_t i = 0; i < count; i++) {
        if (!define(p, names[i], grads[i], false)) {
            return false;
        }
    }
    return true;
}

static bool parse_out(parser *p) {
    advance(p); /* 'out' */
    for (;;) {
        const kf__token *t = cur(p);
        if (t->kind != KF__TOK_NAME) {
            return expected(p, "the name of an output");
        }
        symbol *s = lookup_token(p, t);
        if (!s) {
            char buf[KF__SPEC_MAX_TOKEN + 1];
            token_copy(t, buf, sizeof buf);
            const char *near = suggest(buf, t->length, p, p->symbol_count, symbol_candidate);
            if (near) {
                return fail_at(p, t, KF_ERROR_PARSE,
                               "name '%s' is not defined (did you mean '%s'?)", buf, near);
            }
            return fail_at(p, t, KF_ERROR_PARSE, "name '%s' is not defined", buf);
        }
        if (s->output) {
            return fail_at(p, t, KF_ERROR_PARSE, "'%s' is already an output (line %u)", s->name,
                           s->output->line);
        }
        kf_graph_output(p->g, s->name, s->node);
        if (!check_graph(p, t, s->node)) {
            return false;
        }
        s->output = t;
        p->any_out = true;
        advance(p);
        if (cur(p)->kind != KF__TOK_COMMA) {
            return true;
        }
        advance(p);
    }
}

static bool parse_statement(parser *p) {
    const kf__token *t = cur(p);
    kf__tok_kind next = peek_at(p, 1)->kind;
    if (t->kind == KF__TOK_NAME) {
        if (next == KF__TOK_COLON) {
            return parse_input(p, false);
        }
        if (is_word(t, "param") && next == KF__TOK_NAME) {
            if (peek_at(p, 2)->kind != KF__TOK_COLON) {
                return fail_at(p, peek_at(p, 2), KF_ERROR_PARSE,
                               "expected ':' and a type after 'param %.*s' (param w: f32[64, 32])",
                               (int)peek_at(p, 1)->length, peek_at(p, 1)->text);
            }
            return parse_input(p, true);
        }
        if (next == KF__TOK_COMMA || (next == KF__TOK_EQUALS && is_word(peek_at(p, 2), "grad") &&
                                      peek_at(p, 3)->kind == KF__TOK_LPAREN)) {
            return parse_grad_assignment(p);
        }
        if (next == KF__TOK_COMMA || (next == KF__TOK_EQUALS && is_word(peek_at(p, 2), "grad") &&
                                      peek_at(p, 3)->kind == KF__TOK_LPAREN)) {
            return parse_grad_assignment(p);
        }
        if (next == KF__TOK_EQUALS) {
            return parse_assignment(p);
        }
        if (is_word(t, "out")) {
            return parse_out(p);
        }
        if (next == KF__TOK_LPAREN || next == KF__TOK_PIPE) {
            return fail_at(p, t, KF_ERROR_PARSE,
                           "an expression alone is not a statement; assign it (y = %.*s...)",
                           (int)t->length, t->text);
        }
        char found[96];
        return fail_at(p, peek_at(p, 1), KF_ERROR_PARSE,
                       "expected ':' (an input) or '=' (an assignment) after '%.*s', found %s",
                       (int)t->length, t->text,
                       kf__spec_token_str(peek_at(p, 1), found, sizeof found));
    }
    return expected(p, "a statement (NAME: f32[dims], NAME = expression, or out NAME)");
}

/* Without any 'out', the results nothing reads are the outputs: the last value of a chain is what
 * a program is for, and intermediate values stay internal (fusable). */
static bool implicit_outputs(parser *p) {
    uint32_t outputs = 0;
    for (uint32_t i = 0; i < p->symbol_count; i++) {
        symbol *s = &p->symbols[i];
        if (s->is_input || s->read) {
            continue;
        }
        kf_graph_output(p->g, s->name, s->node);
        if (!check_graph(p, s->defined, s->node)) {
            return false;
        }
        outputs++;
    }
    if (!outputs) {
        return fail_at(p, cur(p), KF_ERROR_PARSE,
                       "the program has no outputs: assign a result (y = relu(x)) or name one "
                       "with 'out NAME'");
    }
    return true;
}

static bool parse_program(parser *p) {
    while (cur(p)->kind != KF__TOK_EOF) {
        if (cur(p)->kind == KF__TOK_END) {
            advance(p);
            continue;
        }
        if (!parse_statement(p)) {
            return false;
        }
        kf__tok_kind k = cur(p)->kind;
        if (k != KF__TOK_END && k != KF__TOK_EOF) {
            return expected(p, "the end of the statement (a new line or ';')");
        }
    }
    return p->any_out || implicit_outputs(p);
}

kf_status kf_spec_parse(const char *text, size_t length, kf_graph **out, kf_spec_error *err) {
    kf_spec_error scratch;
    if (!err) {
        err = &scratch;
    }
    memset(err, 0, sizeof *err);
    if (out) {
        *out = NULL;
    }
    if (!out || (!text && length)) {
        snprintf(err->message, sizeof err->message, "kf_spec_parse: %s is NULL",
                 out ? "text" : "out");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    *out = NULL;
    parser p = {.err = err};
    kf__token *tokens = NULL;
    kf_status st = kf__spec_lex(text ? text : "", length, &tokens, &p.count, err);
    if (st != KF_OK) {
        return st;
    }
    p.tokens = tokens;
    p.g = kf_graph_create();
    if (!p.g) {
        free(tokens);
        err->line = 1;
        err->column = 1;
        snprintf(err->message, sizeof err->message, "out of memory creating the graph");
        return KF_ERROR_OUT_OF_MEMORY;
    }
    bool ok = parse_program(&p);
    free(p.symbols);
    free(p.table);
    free(tokens);
    if (!ok) {
        kf_graph_destroy(p.g);
        return p.status;
    }
    *out = p.g;
    return KF_OK;
}

kf_status kf_spec_parse_file(const char *path, kf_graph **out, kf_spec_error *err) {
    kf_spec_error scratch;
    if (!err) {
        err = &scratch;
    }
    memset(err, 0, sizeof *err);
    if (!path || !out) {
        snprintf(err->message, sizeof err->message, "kf_spec_parse_file: %s is NULL",
                 path ? "out" : "path");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err->message, sizeof err->message, "cannot open '%s': %s", path, strerror(errno));
        return KF_ERROR_IO;
    }
    size_t size = 0, capacity = 4096;
    char *text = malloc(capacity);
    kf_status st = KF_OK;
    while (text) {
        if (size > KF__SPEC_MAX_PROGRAM) {
            break; /* the lexer refuses it with the size in the message */
        }
        if (size == capacity) {
            char *bigger = realloc(text, capacity * 2);
            if (!bigger) {
                free(text);
                text = NULL;
                break;
            }
            text = bigger;
            capacity *= 2;
        }
        size_t n = fread(text + size, 1, capacity - size, f);
        size += n;
        if (n == 0) {
            if (ferror(f)) {
                snprintf(err->message, sizeof err->message, "cannot read '%s': %s", path,
                         strerror(errno));
                st = KF_ERROR_IO;
            }
            break;
        }
    }
    fclose(f);
    if (!text) {
        snprintf(err->message, sizeof err->message, "out of memory reading '%s'", path);
        return KF_ERROR_OUT_OF_MEMORY;
    }
    if (st == KF_OK) {
        st = kf_spec_parse(text, size, out, err);
    }
    free(text);
    return st;
}
