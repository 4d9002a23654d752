/* runtime/train/safetensors.c — safetensors files: writing one, and reading one defensively.
 *
 * The format: 8 bytes little-endian header length, a JSON header {name: {"dtype", "shape",
 * "data_offsets": [begin, end]}, "__metadata__": {string: string}}, then the data region. The
 * reader checks the whole header when it opens a file, before any tensor is read: every entry's
 * dtype is known, its offsets hold exactly dtype size x shape bytes, and the entries tile the data
 * region — sorted by offset they start at 0, each begins where the previous ends, the last ends
 * at the file's end (what the reference implementation requires). A file whose offsets are
 * shifted, overlap or leave gaps is refused with its name and the tensor, never read misaligned.
 * Floating-point tensors are checked for NaN / Inf as they are read (rt_st_read) and before they
 * are written by the trainer (rt_first_nonfinite).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"

#define ST_MAX_HEADER (256ll << 20) /* bytes: a header larger than this is malformed */

/* ---- dtypes ---- */

static const struct {
  const char *name; /* safetensors dtype */
  int bytes;        /* per element */
} st_dtypes[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2},
                 {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},    {"U32", 4},     {"F32", 4},
                 {"F64", 8},  {"I64", 8}, {"U64", 8}};

static int st_dtype_bytes(const char *name) {
  for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
    if (!strcmp(st_dtypes[i].name, name)) return st_dtypes[i].bytes;
  return 0;
}

/* Blocks of NF_BLOCK values are screened by a branch-free maximum of the values' magnitude bits
 * (a loop the compiler vectorises; NaN and Inf are the largest), and only a block that holds one
 * is searched for its first index: the check runs at the speed of the copy it follows. */
#define NF_BLOCK 4096
#define FIRST_NONFINITE(T, ABS, EXP)                                                                 \
  do {                                                                                           \
    const T *u = data;                                                                           \
    for (int64_t b = 0; b < n; b += NF_BLOCK) {                                                  \
      int64_t e = n - b < NF_BLOCK ? n - b : NF_BLOCK;                                           \
      T m = 0;                                                                                   \
      for (int64_t i = 0; i < e; i++) {                                                          \
        T a = u[b + i] & (ABS);                                                                  \
        m = a > m ? a : m;                                                                       \
      }                                                                                          \
      if (m >= (EXP))                                                                            \
        for (int64_t i = 0; i < e; i++)                                                          \
          if ((u[b + i] & (EXP)) == (EXP)) return b + i;                                         \
    }                                                                                            \
    return -1;                                                                                   \
  } while (0)

int64_t rt_first_nonfinite(const void *data, int dtype, int64_t n) {
  switch (dtype) {
  case RT_F32: FIRST_NONFINITE(uint32_t, 0x7fffffffu, 0x7f800000u);
  case RT_F64: FIRST_NONFINITE(uint64_t, 0x7fffffffffffffffull, 0x7ff0000000000000ull);
  case RT_BF16: FIRST_NONFINITE(uint16_t, 0x7fffu, 0x7f80u);
  case RT_F16: FIRST_NONFINITE(uint16_t, 0x7fffu, 0x7c00u);
  }
  return -1; /* integers are always finite */
}

const char *rt_nonfinite_name(const void *data, int dtype, int64_t i) {
  int nan = 0;
  switch (dtype) {
  case RT_F32: nan = (((const uint32_t *)data)[i] & 0x7fffffu) != 0; break;
  case RT_F64: nan = (((const uint64_t *)data)[i] & 0xfffffffffffffull) != 0; break;
  case RT_BF16: nan = (((const uint16_t *)data)[i] & 0x7fu) != 0; break;
  case RT_F16: nan = (((const uint16_t *)data)[i] & 0x3ffu) != 0; break;
  }
  return nan ? "NaN" : "Inf";
}

/* ---- writing ---- */

static void write_all(int fd, const char *path, const void *buf, size_t n) {
  const char *b = buf;
  while (n > 0) {
    ssize_t w = write(fd, b, n > (1u << 30) ? (1u << 30) : n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) rt_user_error("checkpoint: cannot write '%s': %s", path, strerror(errno));
    b += w;
    n -= (size_t)w;
  }
}

int64_t rt_st_write(const char *path, const RtStPiece *e, int n, const char *meta) {
  char *hdr = NULL;
  size_t hdr_len = 0;
  FILE *h = open_memstream(&hdr, &hdr_len);
  if (!h) rt_user_error("checkpoint: open_memstream: %s", strerror(errno));
  fputc('{', h);
  fputs(meta ? meta : "", h);
  int64_t off = 0;
  for (int i = 0; i < n; i++) {
    if (i || (meta && *meta)) fputc(',', h);
    rt_json_write_str(h, e[i].name);
    fprintf(h, ":{\"dtype\":\"%s\",\"shape\":[", rt_dtype_st_name(e[i].dtype));
    for (int d = 0; d < e[i].rank; d++)
      fprintf(h, "%s%lld", d ? "," : "", (long long)e[i].dims[d]);
    fprintf(h, "],\"data_offsets\":[%lld,%lld]}", (long long)off, (long long)(off + e[i].bytes));
    off += e[i].bytes;
  }
  fputc('}', h);
  while ((ftell(h) + 8) % 8 != 0)
    fputc(' ', h); /* pad so the data starts 8-byte aligned */
  if (fclose(h) != 0) rt_user_error("checkpoint: building the header failed");

  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) rt_user_error("checkpoint: cannot create '%s': %s", path, strerror(errno));
  unsigned char len8[8];
  for (int i = 0; i < 8; i++)
    len8[i] = (unsigned char)((uint64_t)hdr_len >> (8 * i));
  write_all(fd, path, len8, 8);
  write_all(fd, path, hdr, hdr_len);
  char *buf = NULL; /* one packed piece at a time */
  size_t cap = 0;
  for (int i = 0; i < n; i++) {
    const void *data = e[i].data;
    if (!data) {
      if ((size_t)e[i].bytes > cap) {
        free(buf);
        cap = (size_t)e[i].bytes;
        buf = rt_xmalloc(cap);
      }
      e[i].pack(e[i].pack_ctx, buf);
      data = buf;
    }
    write_all(fd, path, data, (size_t)e[i].bytes);
  }
  free(buf);
  if (fsync(fd) != 0) rt_user_error("checkpoint: cannot fsync '%s': %s", path, strerror(errno));
  if (close(fd) != 0) rt_user_error("checkpoint: cannot close '%s': %s", path, strerror(errno));
  free(hdr);
  return off;
}

/* ---- reading ---- */

static int64_t json_int(const RtJson *j, int *ok) {
  if (!j || j->kind != RT_JSON_NUM || !j->is_int) {
    *ok = 0;
    return 0;
  }
  return j->inum;
}

typedef struct {
  int64_t a, b;     /* data_offsets */
  const char *name; /* the tensor */
} Span;

static int cmp_span(const void *x, const void *y) {
  const Span *s = x, *t = y;
  if (s->a != t->a) return s->a < t->a ? -1 : 1;
  return s->b < t->b ? -1 : s->b > t->b;
}

/* Every entry well-formed, its bytes its dtype x shape, and all of them tiling the data region. */
static void check_entries(const RtStFile *s) {
  const RtJson *h = s->hdr;
  Span *sp = rt_xcalloc((size_t)h->n + 1, sizeof *sp);
  RtOnError c;
  rt_on_error(&c, free, sp);
  int n = 0;
  for (int i = 0; i < h->n; i++) {
    const char *name = h->keys[i];
    if (!strcmp(name, "__metadata__")) continue;
    const RtJson *e = h->items[i];
    const RtJson *dt = rt_json_get(e, "dtype"), *sh = rt_json_get(e, "shape"), *off = rt_json_get(e, "data_offsets");
    if (!dt || dt->kind != RT_JSON_STR || !sh || sh->kind != RT_JSON_ARR || !off || off->kind != RT_JSON_ARR ||
        off->n != 2)
      rt_user_error("'%s': tensor '%s': malformed entry (needs dtype, shape, data_offsets)", s->path, name);
    int64_t bytes = st_dtype_bytes(dt->str);
    if (!bytes) rt_user_error("'%s': tensor '%s' has an unknown dtype \"%s\"", s->path, name, dt->str);
    int ok = 1;
    for (int d = 0; d < sh->n; d++) {
      int64_t v = json_int(sh->items[d], &ok);
      if (!ok || v < 0 || (v > 0 && bytes > INT64_MAX / v))
        rt_user_error("'%s': tensor '%s': shape entry %d is not a dimension", s->path, name, d);
      bytes *= v;
    }
    int64_t a = json_int(off->items[0], &ok), b = json_int(off->items[1], &ok);
    if (!ok || a < 0 || b < a || b - a != bytes)
      rt_user_error("'%s': tensor '%s': data_offsets [%lld, %lld] do not hold its %lld bytes (%s x its shape)", s->path,
                    name, (long long)a, (long long)b, (long long)bytes, dt->str);
    sp[n++] = (Span){a, b, name};
  }
  qsort(sp, (size_t)n, sizeof *sp, cmp_span);
  int64_t end = 0;
  const char *prev = NULL;
  for (int i = 0; i < n; i++) {
    if (sp[i].a != end) {
      char before[300];
      if (prev)
        snprintf(before, sizeof before, "tensor '%s' ends at byte %lld", prev, (long long)end);
      else
        snprintf(before, sizeof before, "the data region starts at byte 0");
      rt_user_error("'%s': tensor '%s': data_offsets [%lld, %lld] %s %s: the tensors must tile the data region "
                    "exactly (offsets shifted or corrupted)",
                    s->path, sp[i].name, (long long)sp[i].a, (long long)sp[i].b,
                    sp[i].a < end ? "overlap:" : "leave a gap:", before);
    }
    end = sp[i].b;
    prev = sp[i].name;
  }
  if (end != s->data_bytes)
    rt_user_error("'%s': the tensors' data_offsets end at byte %lld, but the data region has %lld bytes: the tensors "
                  "must tile it exactly (offsets shifted, or the file truncated or padded)",
                  s->path, (long long)end, (long long)s->data_bytes);
  rt_on_error_pop(&c);
  free(sp);
}

static void st_close_v(void *s) { rt_st_close(s); }

void rt_st_open(RtStFile *s, const char *path) {
  memset(s, 0, sizeof *s);
  s->path = path;
  s->fd = open(path, O_RDONLY);
  if (s->fd < 0) rt_user_error("cannot open checkpoint '%s': %s", path, strerror(errno));
  RtOnError c, ct; /* (a refusal below closes s: rt_on_error) */
  rt_on_error(&c, st_close_v, s);
  struct stat st;
  if (fstat(s->fd, &st) != 0) rt_user_error("cannot stat '%s': %s", path, strerror(errno));
  unsigned char len8[8];
  if (st.st_size < 8 || pread(s->fd, len8, 8, 0) != 8)
    rt_user_error("'%s' is not a safetensors file: shorter than its 8-byte header length", path);
  uint64_t hl = 0;
  for (int i = 0; i < 8; i++)
    hl |= (uint64_t)len8[i] << (8 * i);
  if (hl < 2 || hl > (uint64_t)ST_MAX_HEADER || (int64_t)hl > st.st_size - 8)
    rt_user_error("'%s' is not a safetensors file: header length %llu does not fit the file (%lld bytes)", path,
                  (unsigned long long)hl, (long long)st.st_size);
  char *text = rt_xmalloc(hl + 1);
  rt_on_error(&ct, free, text);
  if (pread(s->fd, text, hl, 8) != (ssize_t)hl) rt_user_error("cannot read the header of '%s'", path);
  text[hl] = 0;
  char err[128];
  s->hdr = rt_json_parse(text, hl, err, sizeof err);
  rt_on_error_pop(&ct);
  free(text);
  if (!s->hdr) rt_user_error("'%s': malformed safetensors header: %s", path, err);
  if (s->hdr->kind != RT_JSON_OBJ) rt_user_error("'%s': malformed safetensors header: not a JSON object", path);
  s->data_start = 8 + (int64_t)hl;
  s->data_bytes = st.st_size - s->data_start;
  check_entries(s);
  rt_on_error_pop(&c);
}

void rt_st_close(RtStFile *s) {
  rt_json_free(s->hdr);
  if (s->fd >= 0) close(s->fd);
  s->hdr = NULL, s->fd = -1;
}

int64_t rt_st_find(RtStFile *s, const char *name, int dtype, const int64_t *dims, int rank) {
  const RtJson *e = rt_json_get(s->hdr, name);
  if (!e) rt_user_error("'%s': missing tensor '%s'", s->path, name);
  const RtJson *dt = rt_json_get(e, "dtype"), *sh = rt_json_get(e, "shape"), *off = rt_json_get(e, "data_offsets");
  if (strcmp(dt->str, rt_dtype_st_name(dtype)) != 0)
    rt_user_error("'%s': tensor '%s' has dtype %s, the model needs %s", s->path, name, dt->str,
                  rt_dtype_st_name(dtype));
  int ok = 1, same = sh->n == rank;
  for (int d = 0; same && d < rank; d++)
    same = json_int(sh->items[d], &ok) == dims[d] && ok;
  if (!same) {
    char want[160] = "", got[160] = "";
    for (int d = 0; d < rank; d++)
      snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "", (long long)dims[d]);
    for (int d = 0; d < sh->n; d++)
      snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "",
               (long long)json_int(sh->items[d], &ok));
    rt_user_error("'%s': tensor '%s' has shape [%s], the model needs [%s]", s->path, name, got, want);
  }
  return json_int(off->items[0], &ok); /* checked against the data region by rt_st_open */
}

void rt_st_pread(RtStFile *s, const char *name, int64_t off, void *dst, int64_t bytes) {
  char *out = dst;
  int64_t done = 0;
  while (done < bytes) {
    ssize_t r = pread(s->fd, out + done, (size_t)(bytes - done), s->data_start + off + done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      rt_user_error("'%s': cannot read tensor '%s': %s", s->path, name, r ? strerror(errno) : "file truncated");
    done += r;
  }
}

void rt_st_check_finite(const RtStFile *s, const char *name, const void *data, int dtype, int64_t n) {
  int64_t bad = rt_first_nonfinite(data, dtype, n);
  if (bad >= 0)
    rt_user_error("'%s': tensor '%s' holds %s at element %lld: a checkpoint with non-finite values is refused (the "
                  "run that wrote it diverged; resume from an earlier checkpoint)",
                  s->path, name, rt_nonfinite_name(data, dtype, bad), (long long)bad);
}

void rt_st_read(RtStFile *s, const char *name, int dtype, const int64_t *dims, int rank, void *dst) {
  int64_t off = rt_st_find(s, name, dtype, dims, rank), n = 1;
  for (int d = 0; d < rank; d++)
    n *= dims[d];
  rt_st_pread(s, name, off, dst, n * (int64_t)rt_dtype_size((RtDType)dtype));
  rt_st_check_finite(s, name, dst, dtype, n);
}

const char *rt_st_meta(const RtStFile *s, const char *key) {
  const RtJson *m = rt_json_get(s->hdr, "__metadata__");
  const RtJson *v = rt_json_get(m, key);
  if (!v || v->kind != RT_JSON_STR)
    rt_user_error("'%s' is not a shardc checkpoint: no \"%s\" in its __metadata__", s->path, key);
  return v->str;
}

uint64_t rt_st_meta_u64_or(const RtStFile *s, const char *key, uint64_t dflt) {
  const RtJson *v = rt_json_get(rt_json_get(s->hdr, "__metadata__"), key);
  return v ? rt_st_meta_u64(s, key) : dflt;
}

uint64_t rt_st_meta_u64(const RtStFile *s, const char *key) {
  const char *v = rt_st_meta(s, key);
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || end == v || *end || *v == '-')
    rt_user_error("'%s': metadata \"%s\" is \"%s\", not a number", s->path, key, v);
  return x;
}
