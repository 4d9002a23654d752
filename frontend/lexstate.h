/* frontend/lexstate.h — the scanner's extra state (shared by lexer.l and parser.y). */
#ifndef SHARDC_LEXSTATE_H
#define SHARDC_LEXSTATE_H

#include <stdbool.h>

#include "ast.h"

struct LexState {
  ParseCtx *ctx;
  int line, col; /* cursor, 1-based */
  int depth;     /* open ( and [ */
  int last;      /* last token returned (0 at start) */
  bool eof_nl;   /* the closing newline at end of input was sent */
  int nbad;      /* bad characters reported so far */
};

#endif
