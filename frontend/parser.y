/* frontend/parser.y — the grammar of .model files (reentrant bison parser).
 *
 * Builds the AST of ast.h in the compilation arena. Statements end at a newline
 * or ';' (or at the '}' closing their block); after a syntax error the parser
 * skips to the end of the line and goes on, so one run reports several errors.
 */
%define api.pure full
%locations
%param {yyscan_t scanner}
%parse-param {ParseCtx *ctx}
%define parse.error verbose

%code requires {
#include "ast.h"
typedef void *yyscan_t;
}

%code provides {
int yylex(YYSTYPE *lval, YYLTYPE *lloc, yyscan_t scanner);
}

%code {
#include <string.h>

#include "diag.h"
#include "lexstate.h"

#define YYMAXDEPTH 2000
#define LOC(l) ((SrcLoc){ctx->file, (l).first_line, (l).first_column})
#define A (ctx->arena)

static void yyerror(YYLTYPE *loc, yyscan_t scanner, ParseCtx *ctx, const char *msg) {
  (void)scanner;
  if (strcmp(msg, "memory exhausted") == 0) msg = "nesting too deep";
  if (strstr(msg, "unexpected invalid character")) return; /* the scanner reported it */
  error_at(LOC(*loc), "%s", msg);
}

static Expr *mk(ParseCtx *ctx, ExprKind k, YYLTYPE l) {
  Expr *e = ARENA_NEW(ctx->arena, Expr);
  e->kind = k;
  e->loc = LOC(l);
  e->depth = 1;
  return e;
}

static int deeper(int d, const Expr *x) { return x && x->depth > d ? x->depth : d; }

/* e with its depth set from its operands. Past FE_MAX_EXPR_DEPTH: one error, and an E_ERROR in the
 * enclosing expressions' place that stays too deep, so they neither report again nor get lowered. */
static Expr *sized(ParseCtx *ctx, Expr *e) {
  int d = deeper(deeper(0, e->a), e->b);
  for (int i = 0; i < e->args.n; i++) d = deeper(d, ((Arg *)e->args.v[i])->value);
  for (int i = 0; i < e->items.n; i++) d = deeper(d, e->items.v[i]);
  if (d > FE_MAX_EXPR_DEPTH) { /* an operand was already refused */
    Expr *t = mk(ctx, E_ERROR, (YYLTYPE){0});
    t->loc = e->loc;
    t->depth = d;
    return t;
  }
  e->depth = d + 1;
  if (e->depth > FE_MAX_EXPR_DEPTH) {
    error_at(e->loc, "expression nested too deeply (over %d levels of operators and calls)", FE_MAX_EXPR_DEPTH);
    note("give parts of it names (`s1 = a + b + ...`, then `s1 + ...`) or sum a list with a repeat");
    e->kind = E_ERROR;
  }
  return e;
}

static Expr *bin(ParseCtx *ctx, int op, Expr *a, Expr *b, YYLTYPE l) {
  Expr *e = mk(ctx, E_BIN, l);
  e->op = op;
  e->a = a;
  e->b = b;
  return sized(ctx, e);
}

static Stmt *stmt(ParseCtx *ctx, StmtKind k, YYLTYPE l) {
  Stmt *s = ARENA_NEW(ctx->arena, Stmt);
  s->kind = k;
  s->loc = LOC(l);
  return s;
}

static Decl *decl(ParseCtx *ctx, DeclKind k, YYLTYPE l) {
  Decl *d = ARENA_NEW(ctx->arena, Decl);
  d->kind = k;
  d->loc = LOC(l);
  return d;
}

static Word *word(ParseCtx *ctx, WordKind k, YYLTYPE l) {
  Word *w = ARENA_NEW(ctx->arena, Word);
  w->kind = k;
  w->loc = LOC(l);
  return w;
}

static SrcLoc *locp(ParseCtx *ctx, YYLTYPE l) {
  SrcLoc *p = ARENA_NEW(ctx->arena, SrcLoc);
  *p = LOC(l);
  return p;
}
}

%union {
  struct { double v; bool is_int; } num;
  const char *str;
  Expr *expr;
  Stmt *stmt;
  Arg *arg;
  PtrVec vec;
  Decl *decl;
  LayerParam *lparam;
  DimPat *pat;
  Word *word;
  Setting *setting;
}

%token <str> IDENT "identifier"
%token <str> STRING "string"
%token <num> NUMBER "number"
%token NL "end of line"
%token MODEL "model" LAYER "layer" TOPOLOGY "topology" PARALLEL "parallel" TRAIN "train"
%token IMPORT "import" CONST "const" INPUT "input" PARAM "param" INIT "init" REPEAT "repeat"
%token AS "as" RETURN "return" IF "if" ELSE "else" PAD "pad" TRUE "true" FALSE "false" NOT "not"
%token ELLIPSIS "..." EQ "==" NE "!=" LE "<=" GE ">="
%token BADCHAR "invalid character"

%left PAD
%precedence NOT
%nonassoc EQ NE '<' '>' LE GE
%left '+' '-'
%left '*' '/' '@'
%precedence UMINUS

%type <expr> expr primary
%type <vec> exprs exprs_opt args args_opt stmts block const_list names lparams lparams_opt pats pats_opt
%type <vec> settings sblock words
%type <arg> arg
%type <stmt> stmt if_stmt
%type <decl> decl
%type <lparam> lparam
%type <pat> pat
%type <word> word
%type <setting> setting
%type <str> opt_as opt_name opt_dtype

%start file

%%

file
  : %empty
  | file sep
  | file decl                { vec_push(A, &ctx->decls, $2); }
  | file error sep           { yyerrok; }
  ;

sep : NL | ';' ;

decl
  : IMPORT STRING            { $$ = decl(ctx, D_IMPORT, @2); $$->name = $2; }
  | MODEL opt_name block     { $$ = decl(ctx, D_MODEL, @1); $$->name = $2; $$->body = $3; }
  | LAYER IDENT '(' lparams_opt ')' block {
      $$ = decl(ctx, D_LAYER, @1);
      $$->name = $2;
      $$->layer = ARENA_NEW(A, LayerDecl);
      $$->layer->name = $2;
      $$->layer->loc = LOC(@2);
      $$->layer->params = $4;
      $$->layer->body = $6;
    }
  | TOPOLOGY opt_name sblock { $$ = decl(ctx, D_TOPOLOGY, @1); $$->name = $2; $$->body = $3; }
  | PARALLEL sblock          { $$ = decl(ctx, D_PARALLEL, @1); $$->body = $2; }
  | TRAIN sblock             { $$ = decl(ctx, D_TRAIN, @1); $$->body = $2; }
  | CONST const_list         {
      $$ = decl(ctx, D_CONST, @1);
      $$->stmt = $2.n ? (Stmt *)$2.v[0] : NULL;
    }
  ;

opt_name : %empty { $$ = NULL; } | IDENT { $$ = $1; } ;

/* ---- statements ---- */

block
  : '{' stmts '}'            { $$ = $2; }
  | '{' stmts stmt '}'       { $$ = $2; vec_push(A, &$$, $3); }
  ;

stmts
  : %empty                   { memset(&$$, 0, sizeof $$); }
  | stmts sep                { $$ = $1; }
  | stmts stmt sep           { $$ = $1; vec_push(A, &$$, $2); }
  | stmts error sep          { $$ = $1; yyerrok; }
  ;

stmt
  : CONST const_list         { $$ = (Stmt *)$2.v[0]; $$->loc = LOC(@1); }
  | INPUT IDENT ':' opt_dtype '[' exprs_opt ']' {
      $$ = stmt(ctx, S_INPUT, @2);
      $$->name = $2;
      $$->dtype = $4;
      $$->dtype_loc = LOC(@4);
      $$->dims = $6;
    }
  | PARAM IDENT ':' '[' exprs_opt ']' {
      $$ = stmt(ctx, S_PARAM, @2);
      $$->name = $2;
      $$->dims = $5;
    }
  | PARAM IDENT ':' '[' exprs_opt ']' INIT expr {
      $$ = stmt(ctx, S_PARAM, @2);
      $$->name = $2;
      $$->dims = $5;
      $$->init = $8;
    }
  | names '=' expr           {
      $$ = (Stmt *)$1.v[0];
      $$->value = $3;
    }
  | REPEAT expr opt_as block {
      $$ = stmt(ctx, S_REPEAT, @1);
      $$->value = $2;
      $$->name = $3;
      $$->body = $4;
    }
  | RETURN exprs             { $$ = stmt(ctx, S_RETURN, @1); $$->values = $2; }
  | if_stmt
  ;

/* A const statement is carried in the first slot of the vector while it is built. */
const_list
  : IDENT '=' expr           {
      Stmt *s = stmt(ctx, S_CONST, @1);
      vec_push(A, &s->names, (void *)$1);
      vec_push(A, &s->name_locs, locp(ctx, @1));
      vec_push(A, &s->values, $3);
      memset(&$$, 0, sizeof $$);
      vec_push(A, &$$, s);
    }
  | const_list ',' IDENT '=' expr {
      $$ = $1;
      Stmt *s = (Stmt *)$$.v[0];
      vec_push(A, &s->names, (void *)$3);
      vec_push(A, &s->name_locs, locp(ctx, @3));
      vec_push(A, &s->values, $5);
    }
  ;

/* Assignment targets, carried like const_list. */
names
  : IDENT                    {
      Stmt *s = stmt(ctx, S_ASSIGN, @1);
      vec_push(A, &s->names, (void *)$1);
      vec_push(A, &s->name_locs, locp(ctx, @1));
      memset(&$$, 0, sizeof $$);
      vec_push(A, &$$, s);
    }
  | names ',' IDENT          {
      $$ = $1;
      Stmt *s = (Stmt *)$$.v[0];
      vec_push(A, &s->names, (void *)$3);
      vec_push(A, &s->name_locs, locp(ctx, @3));
    }
  ;

opt_dtype : %empty { $$ = NULL; } | IDENT { $$ = $1; } ;
opt_as : %empty { $$ = NULL; } | AS IDENT { $$ = $2; } ;

if_stmt
  : IF expr block            { $$ = stmt(ctx, S_IF, @1); $$->value = $2; $$->body = $3; }
  | IF expr block ELSE block { $$ = stmt(ctx, S_IF, @1); $$->value = $2; $$->body = $3; $$->els = $5; }
  | IF expr block ELSE if_stmt {
      $$ = stmt(ctx, S_IF, @1);
      $$->value = $2;
      $$->body = $3;
      vec_push(A, &$$->els, $5);
    }
  ;

/* ---- layers ---- */

lparams_opt : %empty { memset(&$$, 0, sizeof $$); } | lparams ;
lparams
  : lparam                   { memset(&$$, 0, sizeof $$); vec_push(A, &$$, $1); }
  | lparams ',' lparam       { $$ = $1; vec_push(A, &$$, $3); }
  ;

lparam
  : IDENT                    { $$ = ARENA_NEW(A, LayerParam); $$->name = $1; $$->loc = LOC(@1); }
  | IDENT '=' expr           { $$ = ARENA_NEW(A, LayerParam); $$->name = $1; $$->loc = LOC(@1); $$->def = $3; }
  | IDENT ':' '[' pats_opt ']' {
      $$ = ARENA_NEW(A, LayerParam);
      $$->name = $1;
      $$->loc = LOC(@1);
      $$->has_pattern = true;
      $$->pattern = $4;
    }
  ;

pats_opt : %empty { memset(&$$, 0, sizeof $$); } | pats ;
pats
  : pat                      { memset(&$$, 0, sizeof $$); vec_push(A, &$$, $1); }
  | pats ',' pat             { $$ = $1; vec_push(A, &$$, $3); }
  ;

pat
  : IDENT                    { $$ = ARENA_NEW(A, DimPat); $$->kind = PAT_NAME; $$->name = $1; $$->loc = LOC(@1); }
  | NUMBER                   { $$ = ARENA_NEW(A, DimPat); $$->kind = PAT_NUM; $$->num = $1.v; $$->loc = LOC(@1); }
  | ELLIPSIS                 { $$ = ARENA_NEW(A, DimPat); $$->kind = PAT_ELLIPSIS; $$->loc = LOC(@1); }
  ;

/* ---- expressions ---- */

expr
  : expr '+' expr            { $$ = bin(ctx, '+', $1, $3, @2); }
  | expr '-' expr            { $$ = bin(ctx, '-', $1, $3, @2); }
  | expr '*' expr            { $$ = bin(ctx, '*', $1, $3, @2); }
  | expr '/' expr            { $$ = bin(ctx, '/', $1, $3, @2); }
  | expr '@' expr            { $$ = bin(ctx, '@', $1, $3, @2); }
  | expr PAD expr            { $$ = bin(ctx, 'p', $1, $3, @2); }
  | expr '<' expr            { $$ = bin(ctx, '<', $1, $3, @2); }
  | expr '>' expr            { $$ = bin(ctx, '>', $1, $3, @2); }
  | expr LE expr             { $$ = bin(ctx, 'l', $1, $3, @2); }
  | expr GE expr             { $$ = bin(ctx, 'g', $1, $3, @2); }
  | expr EQ expr             { $$ = bin(ctx, 'e', $1, $3, @2); }
  | expr NE expr             { $$ = bin(ctx, 'n', $1, $3, @2); }
  | '-' expr %prec UMINUS    { $$ = mk(ctx, E_NEG, @1); $$->a = $2; $$ = sized(ctx, $$); }
  | NOT expr                 { $$ = mk(ctx, E_NOT, @1); $$->a = $2; $$ = sized(ctx, $$); }
  | primary
  ;

primary
  : NUMBER                   { $$ = mk(ctx, E_NUM, @1); $$->num = $1.v; $$->is_int = $1.is_int; }
  | TRUE                     { $$ = mk(ctx, E_BOOL, @1); $$->num = 1; }
  | FALSE                    { $$ = mk(ctx, E_BOOL, @1); $$->num = 0; }
  | STRING                   { $$ = mk(ctx, E_STR, @1); $$->name = $1; }
  | IDENT                    { $$ = mk(ctx, E_IDENT, @1); $$->name = $1; }
  | IDENT '(' args_opt ')'   { $$ = mk(ctx, E_CALL, @1); $$->name = $1; $$->args = $3; $$ = sized(ctx, $$); }
  | '(' expr ')'             { $$ = $2; }
  | '(' expr ',' exprs ')'   {
      $$ = mk(ctx, E_TUPLE, @1);
      vec_push(A, &$$->items, $2);
      for (int i = 0; i < $4.n; i++) vec_push(A, &$$->items, $4.v[i]);
      $$ = sized(ctx, $$);
    }
  | '[' exprs_opt ']'        { $$ = mk(ctx, E_LIST, @1); $$->items = $2; $$ = sized(ctx, $$); }
  ;

exprs_opt : %empty { memset(&$$, 0, sizeof $$); } | exprs ;
exprs
  : expr                     { memset(&$$, 0, sizeof $$); vec_push(A, &$$, $1); }
  | exprs ',' expr           { $$ = $1; vec_push(A, &$$, $3); }
  ;

args_opt : %empty { memset(&$$, 0, sizeof $$); } | args ;
args
  : arg                      { memset(&$$, 0, sizeof $$); vec_push(A, &$$, $1); }
  | args ',' arg             { $$ = $1; vec_push(A, &$$, $3); }
  ;

arg
  : expr                     { $$ = ARENA_NEW(A, Arg); $$->value = $1; $$->loc = $1->loc; }
  | IDENT ':' expr           { $$ = ARENA_NEW(A, Arg); $$->name = $1; $$->value = $3; $$->loc = LOC(@1); }
  ;

/* ---- settings: topology, parallel, train ---- */

sblock
  : '{' settings '}'         { $$ = $2; }
  | '{' settings setting '}' { $$ = $2; vec_push(A, &$$, $3); }
  ;

settings
  : %empty                   { memset(&$$, 0, sizeof $$); }
  | settings sep             { $$ = $1; }
  | settings setting sep     { $$ = $1; vec_push(A, &$$, $2); }
  | settings error sep       { $$ = $1; yyerrok; }
  ;

setting
  : words                    { $$ = ARENA_NEW(A, Setting); $$->loc = LOC(@1); $$->words = $1; }
  | words sblock             {
      $$ = ARENA_NEW(A, Setting);
      $$->loc = LOC(@1);
      $$->words = $1;
      $$->has_block = true;
      $$->block = $2;
      $$->block_loc = LOC(@2);
    }
  ;

words
  : word                     { memset(&$$, 0, sizeof $$); vec_push(A, &$$, $1); }
  | words word               { $$ = $1; vec_push(A, &$$, $2); }
  ;

word
  : NUMBER                   { $$ = word(ctx, W_NUM, @1); $$->num = $1.v; $$->is_int = $1.is_int; }
  | '-' NUMBER               { $$ = word(ctx, W_NUM, @1); $$->num = -$2.v; $$->is_int = $2.is_int; }
  | IDENT                    { $$ = word(ctx, W_IDENT, @1); $$->s = $1; }
  | STRING                   { $$ = word(ctx, W_STR, @1); $$->s = $1; }
  | TRUE                     { $$ = word(ctx, W_IDENT, @1); $$->s = "true"; }
  | FALSE                    { $$ = word(ctx, W_IDENT, @1); $$->s = "false"; }
  | IDENT '(' args_opt ')'   { $$ = word(ctx, W_CALL, @1); $$->s = $1; $$->args = $3; }
  | '/'                      { $$ = word(ctx, W_SLASH, @1); }
  ;

%%

void vec_push(Arena *a, PtrVec *vec, void *p) {
  arena_grow(a, (void **)&vec->v, &vec->cap, vec->n + 1, sizeof(void *));
  vec->v[vec->n++] = p;
}
