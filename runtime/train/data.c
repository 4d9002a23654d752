/* runtime/train/data.c — training data: llm.c token shards and raw bytes.
 *
 * Shard format (llm.c): a 1024-byte header of 256 little-endian int32 — [0] magic, [1] version,
 * [2] token count — then the tokens: magic 20240520 / version 1 holds uint16 tokens, magic
 * 20240801 / version 7 holds uint32 tokens. For a byte-level model, a file that does not start
 * with either magic is raw bytes, one token per byte.
 *
 * A sequence is a window of T+1 consecutive tokens of one file (inputs = the first T, targets =
 * the last T); windows start every T tokens. The training order is a fresh permutation of all
 * windows per epoch, a pure function of (seed, epoch), so the position in the data is a single
 * counter of sequences consumed: a checkpoint stores it and a resumed run reads the same batches.
 * Data-parallel rank r of a global batch starting at sequence pos reads pos + r*B .. pos + r*B+B-1.
 */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../rng.h"
#include "train.h"

#define SHARD_HEADER_BYTES 1024
#define MAGIC_U16 20240520
#define MAGIC_U32 20240801

static int has_glob_chars(const char *s) { return strpbrk(s, "*?[") != NULL; }

static int32_t le32(const unsigned char *b) {
  return (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
}

static uint32_t token_at(const RtDataFile *f, int64_t i) {
  const unsigned char *b = f->map + f->data_off + i * f->elem;
  switch (f->elem) {
  case 1: return b[0];
  case 2: return (uint32_t)b[0] | (uint32_t)b[1] << 8;
  default: return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
  }
}

/* Maps and validates one file. */
static void open_file(RtDataFile *f, const char *what, const char *path, const RtDataOpts *o) {
  memset(f, 0, sizeof *f);
  f->path = rt_xstrdup(path);
  int fd = open(path, O_RDONLY);
  if (fd < 0) rt_user_error("%s: cannot open '%s': %s", what, path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) rt_user_error("%s: cannot stat '%s': %s", what, path, strerror(errno));
  if (S_ISDIR(st.st_mode)) rt_user_error("%s: '%s' is a directory, not a data file", what, path);
  f->map_bytes = (size_t)st.st_size;
  if (f->map_bytes > 0) {
    f->map = mmap(NULL, f->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f->map == MAP_FAILED) rt_user_error("%s: cannot map '%s': %s", what, path, strerror(errno));
  }
  close(fd);

  int32_t magic = f->map_bytes >= 4 ? le32(f->map) : 0;
  if (magic == MAGIC_U16 || magic == MAGIC_U32) {
    if (f->map_bytes < SHARD_HEADER_BYTES)
      rt_user_error("%s: '%s': token shard is %zu bytes, shorter than its 1024-byte header", what, path, f->map_bytes);
    int32_t version = le32(f->map + 4), count = le32(f->map + 8);
    int32_t want = magic == MAGIC_U16 ? 1 : 7;
    if (version != want)
      rt_user_error("%s: '%s': unsupported shard version %d for magic %d (expected %d)", what, path, version, magic,
                    want);
    if (count < 0) rt_user_error("%s: '%s': negative token count %d in the header", what, path, count);
    f->elem = magic == MAGIC_U16 ? 2 : 4;
    f->data_off = SHARD_HEADER_BYTES;
    f->ntok = count;
    size_t want_bytes = SHARD_HEADER_BYTES + (size_t)count * (size_t)f->elem;
    if (f->map_bytes != want_bytes)
      rt_user_error("%s: '%s': header says %d tokens (%zu bytes with the header) but the file has %zu bytes", what,
                    path, count, want_bytes, f->map_bytes);
  } else if (o->byte_level) {
    f->elem = 1;
    f->data_off = 0;
    f->ntok = (int64_t)f->map_bytes;
  } else {
    rt_user_error("%s: '%s' is not a token shard: magic %d (expected %d for uint16 or %d for uint32 tokens)", what,
                  path, magic, MAGIC_U16, MAGIC_U32);
  }
  if (f->elem > 1 || o->vocab < 256) {
    /* Every token id is checked once, up front. The scanned pages are dropped from the resident set
     * as we go (they are file pages, read again on demand), so a large shard does not inflate the
     * measured peak memory. */
    const int64_t chunk = (64 << 20) / f->elem;
    for (int64_t i0 = 0; i0 < f->ntok; i0 += chunk) {
      int64_t i1 = i0 + chunk < f->ntok ? i0 + chunk : f->ntok;
      for (int64_t i = i0; i < i1; i++) {
        uint32_t t = token_at(f, i);
        if ((int64_t)t >= o->vocab)
          rt_user_error("%s: '%s': token %u at position %lld is not below the model's vocabulary size %lld", what, path,
                        t, (long long)i, (long long)o->vocab);
      }
      size_t page = (size_t)sysconf(_SC_PAGESIZE);
      size_t lo = (size_t)(f->data_off + i0 * f->elem) / page * page, hi = (size_t)(f->data_off + i1 * f->elem);
      if (hi > lo && madvise(f->map + lo, hi - lo, MADV_DONTNEED) != 0) rt_bug("madvise: %s", strerror(errno));
    }
  }
}

static void close_file(RtDataFile *f) {
  if (f->map && munmap(f->map, f->map_bytes) != 0) rt_bug("munmap: %s", strerror(errno));
  free(f->path);
  memset(f, 0, sizeof *f);
}

static void index_windows(RtData *d) {
  d->ntok = d->nwin = 0;
  for (int s = 0; s < d->nsegs; s++) {
    RtSegment *g = &d->segs[s];
    int64_t n = g->end - g->begin;
    g->first_win = d->nwin;
    g->nwin = n >= d->T + 1 ? (n - 1) / d->T : 0;
    d->nwin += g->nwin;
    d->ntok += n;
  }
  free(d->perm);
  d->perm = NULL;
  d->perm_epoch = -1;
}

void rt_data_open(RtData *d, const char *what, const char *spec, const RtDataOpts *o) {
  memset(d, 0, sizeof *d);
  d->what = what;
  d->T = o->T;
  d->perm_epoch = -1;
  glob_t g;
  memset(&g, 0, sizeof g);
  if (has_glob_chars(spec)) {
    int rc = glob(spec, 0, NULL, &g); /* sorted */
    if (rc == GLOB_NOMATCH) rt_user_error("%s: no file matches '%s'", what, spec);
    if (rc != 0) rt_user_error("%s: cannot expand '%s' (glob error %d)", what, spec, rc);
    d->nfiles = (int)g.gl_pathc;
  } else {
    d->nfiles = 1;
  }
  d->files = rt_xcalloc((size_t)d->nfiles, sizeof *d->files);
  d->segs = rt_xcalloc((size_t)d->nfiles, sizeof *d->segs);
  d->nsegs = d->nfiles;
  for (int i = 0; i < d->nfiles; i++) {
    open_file(&d->files[i], what, g.gl_pathc ? g.gl_pathv[i] : spec, o);
    d->segs[i] = (RtSegment){.file = i, .begin = 0, .end = d->files[i].ntok};
  }
  if (g.gl_pathc) globfree(&g);
  index_windows(d);
  if (d->nwin == 0)
    rt_user_error("%s: '%s' holds %lld tokens in %d file(s); each sequence needs %lld consecutive tokens "
                  "(sequence length + 1) within one file",
                  what, spec, (long long)d->ntok, d->nfiles, (long long)(d->T + 1));
}

int rt_data_hold_out(RtData *train, RtData *val, double frac, const RtDataOpts *o) {
  memset(val, 0, sizeof *val);
  val->what = "validation split";
  val->T = train->T;
  val->perm_epoch = -1;
  RtSegment *last = &train->segs[train->nsegs - 1];
  int64_t n = last->end - last->begin;
  int64_t held = (int64_t)((double)n * frac);
  if (held < train->T + 1) return 0;
  int64_t cut = last->end - held;
  /* the training part must keep at least one window overall */
  int64_t keep_last = cut - last->begin;
  int64_t other = train->nwin - last->nwin;
  if (other == 0 && keep_last < train->T + 1) return 0;
  val->nfiles = 1;
  val->files = rt_xcalloc(1, sizeof *val->files);
  open_file(&val->files[0], train->what, train->files[last->file].path, o);
  val->nsegs = 1;
  val->segs = rt_xcalloc(1, sizeof *val->segs);
  val->segs[0] = (RtSegment){.file = 0, .begin = cut, .end = last->end};
  last->end = cut;
  index_windows(train);
  index_windows(val);
  return 1;
}

/* Fisher-Yates over the windows with a counter-based stream of (seed, epoch). */
static void make_perm(RtData *d, int64_t epoch) {
  if (!d->perm) d->perm = rt_xmalloc((size_t)d->nwin * sizeof *d->perm);
  for (int64_t i = 0; i < d->nwin; i++)
    d->perm[i] = i;
  uint64_t key = rt_rng_key(d->seed, "data.order") ^ rt_splitmix64((uint64_t)epoch);
  for (int64_t i = d->nwin - 1; i > 0; i--) {
    uint64_t r = rt_splitmix64(key + (uint64_t)i);
    int64_t j = (int64_t)(((unsigned __int128)r * (uint64_t)(i + 1)) >> 64);
    int64_t t = d->perm[i];
    d->perm[i] = d->perm[j];
    d->perm[j] = t;
  }
  d->perm_epoch = epoch;
}

void rt_data_sequence(RtData *d, int64_t g, int32_t *tokens) {
  int64_t epoch = g / d->nwin, w = g % d->nwin;
  if (d->shuffle) {
    if (d->perm_epoch != epoch) make_perm(d, epoch);
    w = d->perm[w];
  }
  int lo = 0, hi = d->nsegs - 1; /* the segment holding window w */
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (d->segs[mid].first_win <= w)
      lo = mid;
    else
      hi = mid - 1;
  }
  const RtSegment *s = &d->segs[lo];
  while (s->nwin == 0 || w >= s->first_win + s->nwin)
    s++; /* skip empty segments */
  const RtDataFile *f = &d->files[s->file];
  int64_t start = s->begin + (w - s->first_win) * d->T;
  for (int64_t i = 0; i <= d->T; i++)
    tokens[i] = (int32_t)token_at(f, start + i);
}

void rt_data_batch(RtData *d, int64_t pos, int64_t B, int dp_rank, int32_t *inputs, int32_t *targets) {
  int32_t *seq = rt_xmalloc((size_t)(d->T + 1) * sizeof *seq);
  for (int64_t b = 0; b < B; b++) {
    rt_data_sequence(d, pos + (int64_t)dp_rank * B + b, seq);
    memcpy(inputs + b * d->T, seq, (size_t)d->T * sizeof *seq);
    memcpy(targets + b * d->T, seq + 1, (size_t)d->T * sizeof *seq);
  }
  free(seq);
}

void rt_data_free(RtData *d) {
  for (int i = 0; i < d->nfiles; i++)
    close_file(&d->files[i]);
  free(d->files);
  free(d->segs);
  free(d->perm);
  memset(d, 0, sizeof *d);
}
