/* Recursive-descent JSON (RFC 8259) reader. Numbers are kept as their literal text so 64-bit byte
 * counters survive without passing through a double. */
#include "json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 64

typedef struct {
    const char *s;
    size_t len;
    size_t pos;
    char *err;
    size_t errlen;
} parser;

static int fail(parser *p, const char *fmt, ...) {
    char msg[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "%s at byte %zu", msg, p->pos);
    return -1;
}

static void skip_ws(parser *p) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int parse_value(parser *p, json_value *out, int depth);

static int hex4(parser *p, unsigned *out) {
    unsigned v = 0;
    if (p->pos + 4 > p->len) return fail(p, "truncated \\u escape");
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos++];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return fail(p, "bad hex digit in \\u escape");
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *dst, unsigned cp) {
    if (cp < 0x80) {
        dst[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        dst[0] = (char)(0xC0 | (cp >> 6));
        dst[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        dst[0] = (char)(0xE0 | (cp >> 12));
        dst[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        dst[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    dst[0] = (char)(0xF0 | (cp >> 18));
    dst[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    dst[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    dst[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int parse_string(parser *p, char **out) {
    /* the decoded string is never longer than the raw one */
    size_t start = ++p->pos, end = start;
    while (end < p->len && p->s[end] != '"') end += (p->s[end] == '\\') ? 2 : 1;
    if (end >= p->len) return fail(p, "unterminated string");
    char *buf = malloc(end - start + 1);
    if (!buf) return fail(p, "out of memory");
    size_t n = 0;
    while (p->s[p->pos] != '"') {
        unsigned char c = (unsigned char)p->s[p->pos++];
        if (c < 0x20) {
            free(buf);
            return fail(p, "control character in string");
        }
        if (c != '\\') {
            buf[n++] = (char)c;
            continue;
        }
        char e = p->s[p->pos++];
        switch (e) {
        case '"': buf[n++] = '"'; break;
        case '\\': buf[n++] = '\\'; break;
        case '/': buf[n++] = '/'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (hex4(p, &cp)) {
                free(buf);
                return -1;
            }
            if (cp >= 0xD800 && cp < 0xDC00 && p->pos + 6 <= p->len && p->s[p->pos] == '\\' &&
                p->s[p->pos + 1] == 'u') {
                unsigned lo;
                p->pos += 2;
                if (hex4(p, &lo)) {
                    free(buf);
                    return -1;
                }
                cp = (lo >= 0xDC00 && lo < 0xE000) ? 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00) : 0xFFFD;
            } else if (cp >= 0xD800 && cp < 0xE000) {
                cp = 0xFFFD;
            }
            n += put_utf8(buf + n, cp);
            break;
        }
        default: free(buf); return fail(p, "bad escape \\%c", e);
        }
    }
    p->pos++;
    buf[n] = '\0';
    *out = buf;
    return 0;
}

static int parse_number(parser *p, json_value *out) {
    size_t start = p->pos;
    if (p->s[p->pos] == '-') p->pos++;
    size_t digits = p->pos;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    if (p->pos == digits) return fail(p, "bad number");
    if (p->pos < p->len && p->s[p->pos] == '.') {
        p->pos++;
        size_t frac = p->pos;
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
        if (p->pos == frac) return fail(p, "bad number");
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        size_t exp = p->pos;
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
        if (p->pos == exp) return fail(p, "bad number");
    }
    size_t n = p->pos - start;
    out->type = JSON_NUMBER;
    out->text = malloc(n + 1);
    if (!out->text) return fail(p, "out of memory");
    memcpy(out->text, p->s + start, n);
    out->text[n] = '\0';
    return 0;
}

static int literal(parser *p, const char *word) {
    size_t n = strlen(word);
    if (p->pos + n > p->len || memcmp(p->s + p->pos, word, n) != 0) return fail(p, "unexpected token");
    p->pos += n;
    return 0;
}

/* Appends one slot to a growing array/object; returns the new item or NULL. */
static json_value *grow(json_value *v, size_t *cap, int with_key) {
    if (v->count == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        json_value *items = realloc(v->items, ncap * sizeof *items);
        if (!items) return NULL;
        v->items = items;
        if (with_key) {
            char **keys = realloc(v->keys, ncap * sizeof *keys);
            if (!keys) return NULL;
            v->keys = keys;
        }
        *cap = ncap;
    }
    json_value *item = &v->items[v->count];
    memset(item, 0, sizeof *item);
    if (with_key) v->keys[v->count] = NULL;
    v->count++;
    return item;
}

static int parse_container(parser *p, json_value *out, int depth, int object) {
    size_t cap = 0;
    char close = object ? '}' : ']';
    out->type = object ? JSON_OBJECT : JSON_ARRAY;
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
        return 0;
    }
    for (;;) {
        json_value *item = grow(out, &cap, object);
        if (!item) return fail(p, "out of memory");
        if (object) {
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != '"') return fail(p, "expected a string key");
            if (parse_string(p, &out->keys[out->count - 1])) return -1;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') return fail(p, "expected ':'");
            p->pos++;
        }
        if (parse_value(p, item, depth + 1)) return -1;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->len && p->s[p->pos] == close) {
            p->pos++;
            return 0;
        }
        return fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int parse_value(parser *p, json_value *out, int depth) {
    if (depth > JSON_MAX_DEPTH) return fail(p, "nested too deeply");
    skip_ws(p);
    if (p->pos >= p->len) return fail(p, "unexpected end of input");
    char c = p->s[p->pos];
    switch (c) {
    case '{': return parse_container(p, out, depth, 1);
    case '[': return parse_container(p, out, depth, 0);
    case '"': out->type = JSON_STRING; return parse_string(p, &out->text);
    case 't': out->type = JSON_BOOL; out->boolean = 1; return literal(p, "true");
    case 'f': out->type = JSON_BOOL; out->boolean = 0; return literal(p, "false");
    case 'n': out->type = JSON_NULL; return literal(p, "null");
    default:
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, out);
        return fail(p, "unexpected character '%c'", c);
    }
}

int json_parse(const char *text, size_t len, json_value *out, char *err, size_t errlen) {
    parser p = {text, len, 0, err, errlen};
    memset(out, 0, sizeof *out);
    if (parse_value(&p, out, 0) == 0) {
        skip_ws(&p);
        if (p.pos == p.len) return 0;
        fail(&p, "trailing data after the document");
    }
    json_free(out);
    return -1;
}

void json_free(json_value *v) {
    if (!v) return;
    for (size_t i = 0; i < v->count; i++) {
        json_free(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->text);
    memset(v, 0, sizeof *v);
}

const json_value *json_get(const json_value *obj, const char *key) {
    if (!obj || obj->type != JSON_OBJECT) return NULL;
    for (size_t i = 0; i < obj->count; i++)
        if (obj->keys[i] && strcmp(obj->keys[i], key) == 0) return &obj->items[i];
    return NULL;
}
