/* frontend/fe.h — state shared by the front end's files (not part of the contract). */
#ifndef SHARDC_FE_H
#define SHARDC_FE_H

#include "ast.h"
#include "frontend.h"

typedef struct {
  Arena *a;
  const FeOptions *opt;
  Module *m;
  bool *define_used; /* [opt->ndefines] */
  int errors0;       /* diag_errors() when the compilation began */
  /* Declarations gathered from the main file and its imports, in import order. */
  PtrVec layers;     /* LayerDecl* */
  PtrVec consts;     /* top-level S_CONST Stmt* */
  Decl *model, *topology, *parallel, *train;
  PtrVec const_names; /* const char*: model constants, for -D hints */
  /* settings.c: fields of the parallel and train blocks that two keys set (`lr` and `adamw(lr: ..)`,
   * `ckpt_every` and `checkpoint every`, ...), and where the file set each (fe_set_once) */
  struct {
    const char *field;
    SrcLoc at;
  } set[32];
  int nset;
} Fe;

/* settings.c */
void fe_topology(Fe *fe, const Decl *d);
void fe_plan(Fe *fe, const Decl *d);
void fe_recipe(Fe *fe, const Decl *d);
/* Registers the -D definitions as the source DIAG_CMDLINE (before anything reports on them). */
void fe_define_source(Fe *fe);
/* Where -D number i is on that source: its value (at_value) or its key. */
SrcLoc fe_define_loc(const Fe *fe, int i, bool at_value);
/* Applies -D overrides of plan and recipe fields; marks the ones it used. */
void fe_apply_defines(Fe *fe);
void fe_check_plan(Fe *fe); /* ZeRO's settings: offload needs zero >= 1 */
/* Appends (const char*) every plan and recipe key -D accepts. */
void fe_push_setting_keys(Fe *fe, PtrVec *out);

/* lower.c: the model block to m->graph (CALL nodes for layer calls). */
void fe_lower(Fe *fe);

/* A -D value as a number: true when it parses completely. */
bool fe_parse_number(const char *s, double *out);

#endif
