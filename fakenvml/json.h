/* A small JSON reader for the fake's state file: a whole document into a tree, no dependencies. */
#ifndef FAKE_NVML_JSON_H
#define FAKE_NVML_JSON_H

#include <stddef.h>

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type;

typedef struct json_value {
    json_type type;
    int boolean;
    char *text;                /* JSON_STRING: decoded UTF-8; JSON_NUMBER: the literal as written */
    size_t count;              /* JSON_ARRAY / JSON_OBJECT: number of items */
    struct json_value *items;  /* array items or object values */
    char **keys;               /* JSON_OBJECT: keys, parallel to items */
} json_value;

/* Parses ``text`` (``len`` bytes). On success returns 0 and fills ``out``; on failure returns -1 and
 * writes a one-line reason with the byte offset into ``err``. */
int json_parse(const char *text, size_t len, json_value *out, char *err, size_t errlen);
void json_free(json_value *v);
/* The member ``key`` of an object, or NULL (also when ``obj`` is not an object). */
const json_value *json_get(const json_value *obj, const char *key);

#endif
