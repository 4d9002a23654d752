/* frontend/lower_ops.c — the operators on evaluated operands: numbers computed at compile time,
 * tensors combined with tensors or numbers as nodes (+ - * /, @, unary minus).
 */
#include <math.h>
#include <string.h>

#include "diag.h"
#include "lower.h"

static Val arith(Lower *L, int op, Val a, Val b, SrcLoc loc) {
  double x = a.num, y = b.num;
  switch (op) {
  case '+': return fe_num_val(x + y, a.is_int && b.is_int);
  case '-': return fe_num_val(x - y, a.is_int && b.is_int);
  case '*': return fe_num_val(x * y, a.is_int && b.is_int);
  case '/':
    if (y == 0) {
      error_at(loc, "division by zero");
      return fe_none_val;
    }
    return fe_num_val(x / y, a.is_int && b.is_int && fmod(x, y) == 0);
  case 'p': {
    if (!a.is_int || !b.is_int || x < 0 || y < 1) {
      error_at(loc, "`pad` needs a non-negative integer and a positive multiple, got %g pad %g", x, y);
      return fe_none_val;
    }
    double r = ceil(x / y) * y;
    return fe_num_val(r, true);
  }
  case '<': return fe_bool_val(x < y);
  case '>': return fe_bool_val(x > y);
  case 'l': return fe_bool_val(x <= y);
  case 'g': return fe_bool_val(x >= y);
  case 'e': return fe_bool_val(x == y);
  case 'n': return fe_bool_val(x != y);
  }
  unreachable();
}

static const char *op_text(int op) {
  switch (op) {
  case 'p': return "pad";
  case 'l': return "<=";
  case 'g': return ">=";
  case 'e': return "==";
  case 'n': return "!=";
  case '+': return "+";
  case '-': return "-";
  case '*': return "*";
  case '/': return "/";
  case '@': return "@";
  case '<': return "<";
  case '>': return ">";
  }
  return "?";
}

Val fe_binary(Lower *L, Scope *s, int op, Val a, Val b, SrcLoc loc) {
  if (a.kind == V_NONE || b.kind == V_NONE) return fe_none_val;
  if (a.kind == V_NUM && b.kind == V_NUM) return arith(L, op, a, b, loc);
  if ((op == 'e' || op == 'n') && a.kind == V_BOOL && b.kind == V_BOOL)
    return fe_bool_val((a.num == b.num) == (op == 'e'));
  bool ta = a.kind == V_TENSOR, tb = b.kind == V_TENSOR;
  bool arith_op = op == '+' || op == '-' || op == '*' || op == '/';
  if (!arith_op || !((ta && (tb || b.kind == V_NUM)) || (tb && a.kind == V_NUM))) {
    error_at(loc, "`%s` cannot combine %s and %s", op_text(op), fe_describe(L, &a), fe_describe(L, &b));
    return fe_none_val;
  }
  if (ta && tb) {
    OpKind k = op == '+' ? OP_ADD : op == '-' ? OP_SUB : op == '*' ? OP_MUL : OP_DIV;
    return fe_tensor_val(fe_emit2(L, s, k, a.t, b.t, loc));
  }
  Attrs at = {0};
  if (ta) { /* tensor op number */
    double y = b.num;
    switch (op) {
    case '+': at.scalar = y; return fe_tensor_val(fe_emit1(L, s, OP_ADD_SCALAR, a.t, &at, loc));
    case '-': at.scalar = -y; return fe_tensor_val(fe_emit1(L, s, OP_ADD_SCALAR, a.t, &at, loc));
    case '*': at.scalar = y; return fe_tensor_val(fe_emit1(L, s, OP_SCALE, a.t, &at, loc));
    default:
      if (y == 0) {
        error_at(loc, "division by zero");
        return fe_none_val;
      }
      at.scalar = 1.0 / y;
      return fe_tensor_val(fe_emit1(L, s, OP_SCALE, a.t, &at, loc));
    }
  }
  double x = a.num; /* number op tensor */
  switch (op) {
  case '+': at.scalar = x; return fe_tensor_val(fe_emit1(L, s, OP_ADD_SCALAR, b.t, &at, loc));
  case '*': at.scalar = x; return fe_tensor_val(fe_emit1(L, s, OP_SCALE, b.t, &at, loc));
  case '-': {
    Value *n = fe_emit1(L, s, OP_NEG, b.t, NULL, loc);
    if (!n) return fe_none_val;
    at.scalar = x;
    return fe_tensor_val(fe_emit1(L, s, OP_ADD_SCALAR, n, &at, loc));
  }
  default: {
    Value *c = fe_const_tensor(L, s, x, loc);
    return c ? fe_tensor_val(fe_emit2(L, s, OP_DIV, c, b.t, loc)) : fe_none_val;
  }
  }
}
