/* Internals of the graph language (src/spec): the lexer's tokens, shared by the parser and the
 * unit tests. The language itself is documented in docs/graph-language.md. */
#ifndef KF_SPEC_INTERNAL_H
#define KF_SPEC_INTERNAL_H

#include "kfuse.h"

/* Names and numbers longer than this are refused by the lexer: a graph name must fit the graph's
 * 64-byte name fields with its NUL, and no sensible number needs more characters. */
#define KF__SPEC_MAX_TOKEN 63
/* Programs larger than this are refused before lexing, so that line and column fit uint32_t with
 * room to spare and a stray multi-gigabyte file fails fast. */
#define KF__SPEC_MAX_PROGRAM (64u << 20)

typedef enum kf__tok_kind {
    KF__TOK_EOF = 0,
    KF__TOK_END,    /* end of a statement: a newline or ';' (text says which) */
    KF__TOK_NAME,   /* [A-Za-z_][A-Za-z0-9_]* */
    KF__TOK_NUMBER, /* 12, 0.5, .5, 1e-6, 2.5E+3 (no sign: '-' is its own token) */
    KF__TOK_COLON,
    KF__TOK_EQUALS,
    KF__TOK_COMMA,
    KF__TOK_LPAREN,
    KF__TOK_RPAREN,
    KF__TOK_LBRACKET,
    KF__TOK_RBRACKET,
    KF__TOK_PIPE, /* |> */
    KF__TOK_MINUS
} kf__tok_kind;

typedef struct kf__token {
    kf__tok_kind kind;
    const char *text; /* into the program text; not NUL-terminated */
    uint32_t length;
    uint32_t line;   /* 1-based */
    uint32_t column; /* 1-based, counted in bytes (a tab is one column) */
} kf__token;

/* Splits text into tokens, ending with one KF__TOK_EOF. Comments ('#' to the end of the line),
 * spaces, tabs and '\r' are skipped. On success *tokens (free() it) holds *count tokens; on a
 * lexical error (a stray character, a malformed or over-long number or name) returns
 * KF_ERROR_PARSE with err filled and *tokens NULL. */
kf_status kf__spec_lex(const char *text, size_t length, kf__token **tokens, uint32_t *count,
                       kf_spec_error *err);

/* The token in words for messages: "name 'x'", "number 2.5", "')'", "end of line", "end of
 * file". Returns buf. */
const char *kf__spec_token_str(const kf__token *t, char *buf, size_t size);

/* Optimal-string-alignment distance (insertions, deletions, substitutions and swaps of two
 * neighbours each cost 1), capped: returns cap + 1 as soon as the distance must exceed cap.
 * Used for "did you mean" suggestions. */
uint32_t kf__spec_edit_distance(const char *a, size_t a_len, const char *b, size_t b_len,
                                uint32_t cap);

/* ---- mutation_plans.c: the fused plans of the mutation campaign (fuse/mutation.h) ---- */

#define KF__MUTATION_PLANS 8
/* Parses the campaign's plans into out (kf__mutation_options.plans); on failure (which a test
 * guards against) every graph is destroyed, out is all NULL and msg says which plan and why. */
kf_status kf__mutation_plans_parse(kf_graph *out[KF__MUTATION_PLANS], char *msg, size_t msg_size);
/* Destroys what kf__mutation_plans_parse made; NULL entries are skipped. */
void kf__mutation_plans_destroy(kf_graph *plans[KF__MUTATION_PLANS]);

#endif
