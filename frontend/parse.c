/* frontend/parse.c — runs the scanner and parser over one source text. */
#include <string.h>

#include "ast.h"
#include "diag.h"
#include "lexstate.h"
#include "parser.h"
#include "lexer.h"

void fe_parse(ParseCtx *ctx, const char *text) {
  struct LexState st;
  memset(&st, 0, sizeof st);
  st.ctx = ctx;
  st.line = st.col = 1;
  yyscan_t scanner;
  if (yylex_init_extra(&st, &scanner) != 0) die("cannot start the scanner");
  YY_BUFFER_STATE buf = yy_scan_string(text, scanner);
  if (!buf) die("cannot scan %s", ctx->file);
  yyparse(scanner, ctx);
  yy_delete_buffer(buf, scanner);
  yylex_destroy(scanner);
}
