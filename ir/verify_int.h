/* ir/verify_int.h — what ir/verify.c and ir/verify_memo.c share: the record each graph keeps of
 * its last passing verification, for ir_verify_changed (ir/ir.h). */
#ifndef SHARDC_VERIFY_INT_H
#define SHARDC_VERIFY_INT_H

#include "ir.h"

/* A value a graph's nodes (or results) read that another graph defines (a region body's capture of
 * an enclosing value), and its signature (vmemo_sig) when last verified. */
typedef struct {
  const Value *v;
  uint64_t sig;
} VExt;

typedef struct IrVerifyMemo {
  const Graph *graph; /* whose memo it is (for messages) */
  uint64_t hash;    /* vmemo_hash's hash of the graph's version and lists at its last passing verification; 0: none */
  uint64_t cur;     /* this verification's */
  uint64_t chash, ccur; /* the same of its contents (audit; 0: not known) */
  bool dirty;       /* the graph's own nodes verified again: cur != hash, or (audit) its contents changed */
  bool untouched;   /* audit: its contents changed, its version and lists not (a write without ir_touch) */
  bool subdirty;    /* vmemo_scan: dirty, or a body under it is */
  uint64_t round;   /* the verification (vmemo_round) that hashed it last */
  VExt *ext;        /* the values read from other graphs, as last verified (dirty: being rebuilt) */
  int next, capext;
  const Node **kids; /* the region nodes with a body, in order (this verification's) */
  int nkids, capkids;
} IrVerifyMemo;

/* The memos one verification scanned, to commit or forget them all at its end. */
typedef struct {
  IrVerifyMemo **m;
  int n, cap;
} VMemoList;

/* A number for one verification, none used before (the memos it hashes carry it). */
uint64_t vmemo_round(void);
/* Hashes g's version and lists into its memo's cur (a memo made on first sight; audit: its contents
 * into ccur), marks it dirty where they differ from the last passing verification's, then lists its
 * region nodes with a body (kids; an unchanged graph keeps its list), adds the memo to *list and
 * returns it; once per round (the memo then as the round's first call left it). */
IrVerifyMemo *vmemo_hash(const Graph *g, VMemoList *list, uint64_t round, unsigned flags);
/* vmemo_hash of g and of every body under it (the region nodes' bodies the verifier enters);
 * returns and records (subdirty) whether any of them is dirty. */
bool vmemo_scan(const Graph *g, VMemoList *list, uint64_t round, unsigned flags);
/* What the verifier reads of a value another graph defines, as one hash: its links to its node,
 * dtype, shape and memory space (v non-NULL). */
uint64_t vmemo_sig(const Value *v);
/* Records a read of v (defined outside g) in g's memo. */
void vmemo_add_ext(const Graph *g, const Value *v);
/* Ends a verification: the memos take this scan's hashes (ok) or forget every hash (a failure:
 * the next verification checks all again). Frees the list. */
void vmemo_finish(VMemoList *list, bool ok, unsigned flags);

#endif
