/* runtime/train/json.c — a small JSON reader (RFC 8259 values; depth-limited) and a string writer. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files.h"

typedef struct {
  const char *s; /* text */
  size_t n, i;   /* length, cursor (bytes) */
  char *err;     /* message buffer */
  size_t errn;   /* its size */
  int failed;    /* 1 once an error was recorded */
} JParser;

#define JSON_MAX_DEPTH 64

static void jfail(JParser *jp, const char *what) {
  if (!jp->failed) snprintf(jp->err, jp->errn, "at byte %zu: %s", jp->i, what);
  jp->failed = 1;
}

static void jskip(JParser *jp) {
  while (jp->i < jp->n && (jp->s[jp->i] == ' ' || jp->s[jp->i] == '\t' || jp->s[jp->i] == '\n' || jp->s[jp->i] == '\r'))
    jp->i++;
}

static RtJson *jnew(int kind) {
  RtJson *j = rt_xcalloc(1, sizeof *j);
  j->kind = kind;
  return j;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int read_hex4(JParser *jp, unsigned *out) {
  if (jp->i + 4 > jp->n) return 0;
  unsigned v = 0;
  for (int k = 0; k < 4; k++) {
    int h = hexval(jp->s[jp->i + k]);
    if (h < 0) return 0;
    v = v * 16 + (unsigned)h;
  }
  jp->i += 4;
  *out = v;
  return 1;
}

static size_t put_utf8(char *o, unsigned cp) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xc0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xe0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  o[0] = (char)(0xf0 | (cp >> 18));
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
  o[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

/* Parses a string literal at the cursor (on its opening quote); returns a malloc'd copy. */
static char *jstring(JParser *jp) {
  jp->i++; /* opening quote */
  size_t start = jp->i;
  /* decoded text is never longer than the literal */
  size_t end = start;
  while (end < jp->n && jp->s[end] != '"')
    end += (jp->s[end] == '\\') ? 2 : 1;
  if (end >= jp->n) {
    jfail(jp, "unterminated string");
    return NULL;
  }
  char *out = rt_xmalloc(end - start + 1), *o = out;
  while (jp->s[jp->i] != '"') {
    unsigned char c = (unsigned char)jp->s[jp->i];
    if (c < 0x20) {
      jfail(jp, "control character in string");
      free(out);
      return NULL;
    }
    if (c != '\\') {
      *o++ = (char)c;
      jp->i++;
      continue;
    }
    jp->i++;
    char e = jp->s[jp->i++];
    switch (e) {
    case '"': *o++ = '"'; break;
    case '\\': *o++ = '\\'; break;
    case '/': *o++ = '/'; break;
    case 'b': *o++ = '\b'; break;
    case 'f': *o++ = '\f'; break;
    case 'n': *o++ = '\n'; break;
    case 'r': *o++ = '\r'; break;
    case 't': *o++ = '\t'; break;
    case 'u': {
      unsigned cp;
      if (!read_hex4(jp, &cp)) {
        jfail(jp, "bad \\u escape");
        free(out);
        return NULL;
      }
      if (cp >= 0xd800 && cp < 0xdc00 && jp->i + 6 <= jp->n && jp->s[jp->i] == '\\' && jp->s[jp->i + 1] == 'u') {
        unsigned lo;
        jp->i += 2;
        if (!read_hex4(jp, &lo) || lo < 0xdc00 || lo > 0xdfff) {
          jfail(jp, "bad surrogate pair");
          free(out);
          return NULL;
        }
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
      }
      o += put_utf8(o, cp); /* at most 4 bytes for at least 6 bytes of escape */
      break;
    }
    default:
      jfail(jp, "bad escape in string");
      free(out);
      return NULL;
    }
  }
  jp->i++; /* closing quote */
  *o = 0;
  return out;
}

static RtJson *jvalue(JParser *jp, int depth);

static RtJson *jnumber(JParser *jp) {
  size_t start = jp->i;
  if (jp->i < jp->n && jp->s[jp->i] == '-') jp->i++;
  int digits = 0, is_int = 1;
  while (jp->i < jp->n && jp->s[jp->i] >= '0' && jp->s[jp->i] <= '9')
    jp->i++, digits++;
  if (jp->i < jp->n && jp->s[jp->i] == '.') {
    is_int = 0;
    jp->i++;
    while (jp->i < jp->n && jp->s[jp->i] >= '0' && jp->s[jp->i] <= '9')
      jp->i++;
  }
  if (jp->i < jp->n && (jp->s[jp->i] == 'e' || jp->s[jp->i] == 'E')) {
    is_int = 0;
    jp->i++;
    if (jp->i < jp->n && (jp->s[jp->i] == '+' || jp->s[jp->i] == '-')) jp->i++;
    while (jp->i < jp->n && jp->s[jp->i] >= '0' && jp->s[jp->i] <= '9')
      jp->i++;
  }
  if (!digits) {
    jfail(jp, "bad number");
    return NULL;
  }
  char buf[64];
  size_t len = jp->i - start;
  if (len >= sizeof buf) {
    jfail(jp, "number too long");
    return NULL;
  }
  memcpy(buf, jp->s + start, len);
  buf[len] = 0;
  RtJson *j = jnew(RT_JSON_NUM);
  j->num = strtod(buf, NULL);
  if (is_int) {
    errno = 0;
    long long v = strtoll(buf, NULL, 10);
    if (errno == 0) {
      j->is_int = 1;
      j->inum = v;
    }
  }
  return j;
}

static int jlit(JParser *jp, const char *lit) {
  size_t n = strlen(lit);
  if (jp->i + n > jp->n || memcmp(jp->s + jp->i, lit, n) != 0) return 0;
  jp->i += n;
  return 1;
}

static void jpush(RtJson *j, char *key, RtJson *v, int *cap) {
  if (j->n == *cap) {
    *cap = *cap ? 2 * *cap : 8;
    RtJson **items = realloc(j->items, (size_t)*cap * sizeof *items);
    if (!items) rt_user_error("out of memory parsing JSON");
    j->items = items;
    if (j->kind == RT_JSON_OBJ) {
      char **keys = realloc(j->keys, (size_t)*cap * sizeof *keys);
      if (!keys) rt_user_error("out of memory parsing JSON");
      j->keys = keys;
    }
  }
  if (j->kind == RT_JSON_OBJ) j->keys[j->n] = key;
  j->items[j->n++] = v;
}

static RtJson *jvalue(JParser *jp, int depth) {
  if (depth > JSON_MAX_DEPTH) {
    jfail(jp, "nesting too deep");
    return NULL;
  }
  jskip(jp);
  if (jp->i >= jp->n) {
    jfail(jp, "unexpected end of text");
    return NULL;
  }
  char c = jp->s[jp->i];
  if (c == '"') {
    char *s = jstring(jp);
    if (!s) return NULL;
    RtJson *j = jnew(RT_JSON_STR);
    j->str = s;
    return j;
  }
  if (c == '-' || (c >= '0' && c <= '9')) return jnumber(jp);
  if (jlit(jp, "true")) {
    RtJson *j = jnew(RT_JSON_BOOL);
    j->num = 1;
    return j;
  }
  if (jlit(jp, "false")) return jnew(RT_JSON_BOOL);
  if (jlit(jp, "null")) return jnew(RT_JSON_NULL);
  if (c != '[' && c != '{') {
    jfail(jp, "expected a value");
    return NULL;
  }
  int obj = c == '{', cap = 0;
  RtJson *j = jnew(obj ? RT_JSON_OBJ : RT_JSON_ARR);
  jp->i++;
  jskip(jp);
  if (jp->i < jp->n && jp->s[jp->i] == (obj ? '}' : ']')) {
    jp->i++;
    return j;
  }
  for (;;) {
    char *key = NULL;
    if (obj) {
      jskip(jp);
      if (jp->i >= jp->n || jp->s[jp->i] != '"') {
        jfail(jp, "expected a member name");
        break;
      }
      if (!(key = jstring(jp))) break;
      jskip(jp);
      if (jp->i >= jp->n || jp->s[jp->i] != ':') {
        jfail(jp, "expected ':'");
        free(key);
        break;
      }
      jp->i++;
    }
    RtJson *v = jvalue(jp, depth + 1);
    if (!v) {
      free(key);
      break;
    }
    jpush(j, key, v, &cap);
    jskip(jp);
    if (jp->i < jp->n && jp->s[jp->i] == ',') {
      jp->i++;
      continue;
    }
    if (jp->i < jp->n && jp->s[jp->i] == (obj ? '}' : ']')) {
      jp->i++;
      return j;
    }
    jfail(jp, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    break;
  }
  rt_json_free(j);
  return NULL;
}

RtJson *rt_json_parse(const char *text, size_t len, char *err, size_t errn) {
  JParser jp = {text, len, 0, err, errn, 0};
  RtJson *j = jvalue(&jp, 0);
  if (!j) return NULL;
  jskip(&jp);
  if (jp.i != len) {
    jfail(&jp, "text after the value");
    rt_json_free(j);
    return NULL;
  }
  return j;
}

const RtJson *rt_json_get(const RtJson *obj, const char *key) {
  if (!obj || obj->kind != RT_JSON_OBJ) return NULL;
  for (int i = 0; i < obj->n; i++)
    if (strcmp(obj->keys[i], key) == 0) return obj->items[i];
  return NULL;
}

void rt_json_free(RtJson *j) {
  if (!j) return;
  for (int i = 0; i < j->n; i++) {
    if (j->keys) free(j->keys[i]);
    rt_json_free(j->items[i]);
  }
  free(j->keys);
  free(j->items);
  free(j->str);
  free(j);
}

void rt_json_write_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p == '\n')
      fputs("\\n", f);
    else if (*p == '\t')
      fputs("\\t", f);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}
