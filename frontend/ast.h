/* frontend/ast.h — the syntax tree of .model files (arena-allocated, built by parser.y). */
#ifndef SHARDC_AST_H
#define SHARDC_AST_H

#include <stdbool.h>

#include "arena.h"
#include "ir.h"

/* A growable array of pointers in the arena. */
typedef struct {
  void **v; /* [n] */
  int n, cap;
} PtrVec;

void vec_push(Arena *a, PtrVec *vec, void *p);

/* ---- expressions ---------------------------------------------------------- */
typedef enum {
  E_NUM,   /* num, is_int */
  E_BOOL,  /* num: 0 or 1 */
  E_STR,   /* name: the string's contents */
  E_IDENT, /* name */
  E_BIN,   /* op: '+', '-', '*', '/', '@', 'p' (pad), '<', '>', 'l' (<=), 'g' (>=), 'e' (==), 'n' (!=); a, b */
  E_NEG,   /* -a */
  E_NOT,   /* not a */
  E_CALL,  /* name(args) */
  E_LIST,  /* [items] */
  E_TUPLE, /* (items) with at least two items */
  E_ERROR, /* an expression the parser refused (and reported): lowers to nothing, silently */
} ExprKind;

typedef struct Expr Expr;

typedef struct {
  const char *name; /* NULL: positional */
  Expr *value;
  SrcLoc loc;
} Arg;

struct Expr {
  ExprKind kind;
  SrcLoc loc;
  double num;       /* E_NUM, E_BOOL */
  bool is_int;      /* E_NUM written without '.' or exponent */
  const char *name; /* E_IDENT, E_CALL callee, E_STR contents */
  int op;           /* E_BIN */
  Expr *a, *b;      /* E_BIN, E_NEG, E_NOT */
  PtrVec args;      /* E_CALL: Arg* */
  PtrVec items;     /* E_LIST, E_TUPLE: Expr* */
  int depth;        /* 1 + the deepest operand's: lowering recurses this deep (FE_MAX_EXPR_DEPTH) */
};

/* Deeper expressions are refused at parse time: lowering and constant folding recurse over the
 * tree, and a 20,000-term chain `a + a + ...` would overflow the stack. */
enum { FE_MAX_EXPR_DEPTH = 1000 };

/* ---- statements (model and layer bodies) ----------------------------------- */
typedef enum {
  S_CONST,  /* names[i] = values[i] */
  S_INPUT,  /* name : dtype[dims] */
  S_PARAM,  /* name : [dims] init init */
  S_ASSIGN, /* names = value */
  S_REPEAT, /* repeat count (as name) { body } */
  S_RETURN, /* return values */
  S_IF,     /* if value { body } else { els } */
} StmtKind;

typedef struct Stmt Stmt;
struct Stmt {
  StmtKind kind;
  SrcLoc loc;
  const char *name;  /* S_INPUT, S_PARAM; S_REPEAT: `as` name or NULL */
  const char *dtype; /* S_INPUT: dtype name or NULL (f32) */
  SrcLoc dtype_loc;
  PtrVec names;      /* S_CONST, S_ASSIGN: const char* */
  PtrVec name_locs;  /* S_CONST, S_ASSIGN: SrcLoc* */
  PtrVec values;     /* S_CONST, S_RETURN: Expr* */
  Expr *value;       /* S_ASSIGN value, S_REPEAT count, S_IF condition */
  PtrVec dims;       /* S_INPUT, S_PARAM: Expr* */
  Expr *init;        /* S_PARAM: NULL for the default */
  PtrVec body;       /* S_REPEAT, S_IF: Stmt* */
  PtrVec els;        /* S_IF: Stmt* */
};

/* ---- layers ---------------------------------------------------------------- */
typedef enum { PAT_NAME, PAT_NUM, PAT_ELLIPSIS } PatKind;

typedef struct {
  PatKind kind;
  const char *name; /* PAT_NAME */
  double num;       /* PAT_NUM */
  SrcLoc loc;
} DimPat;

typedef struct {
  const char *name;
  SrcLoc loc;
  bool has_pattern; /* x: [b, s, d] */
  PtrVec pattern;   /* DimPat* */
  Expr *def;        /* default value or NULL */
} LayerParam;

typedef struct {
  const char *name;
  SrcLoc loc;
  PtrVec params; /* LayerParam* */
  PtrVec body;   /* Stmt* */
} LayerDecl;

/* ---- settings (topology, parallel, train) ------------------------------------- */
typedef enum { W_NUM, W_IDENT, W_STR, W_CALL, W_SLASH } WordKind;

typedef struct {
  WordKind kind;
  SrcLoc loc;
  double num;       /* W_NUM */
  bool is_int;
  const char *s;    /* W_IDENT, W_STR, W_CALL callee */
  PtrVec args;      /* W_CALL: Arg* */
} Word;

/* One line of a settings block: words, and an optional nested block. */
typedef struct {
  SrcLoc loc;
  PtrVec words; /* Word* */
  bool has_block;
  PtrVec block; /* Setting* */
  SrcLoc block_loc;
} Setting;

/* ---- top level ------------------------------------------------------------ */
typedef enum { D_IMPORT, D_MODEL, D_LAYER, D_TOPOLOGY, D_PARALLEL, D_TRAIN, D_CONST } DeclKind;

typedef struct {
  DeclKind kind;
  SrcLoc loc;
  const char *name;  /* D_IMPORT: path; D_MODEL, D_TOPOLOGY: name */
  PtrVec body;       /* D_MODEL: Stmt*; D_TOPOLOGY, D_PARALLEL, D_TRAIN: Setting* */
  LayerDecl *layer;  /* D_LAYER */
  Stmt *stmt;        /* D_CONST */
} Decl;

/* What the parser hands back for one file. */
typedef struct {
  Arena *arena;
  const char *file; /* the name used in diagnostics */
  PtrVec decls;     /* Decl* */
} ParseCtx;

/* Parses text (NUL-terminated) into ctx->decls; reports syntax errors through diag. */
void fe_parse(ParseCtx *ctx, const char *text);

#endif
