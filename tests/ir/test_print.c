/* tests/ir/test_print.c — the --dump-ir printer on a small hand-built module against an expected
 * text; parameter count and FLOPs per token against hand counts; the DOT output's shape. */
#include "../../ir/mesh.h"
#include "module.h"
#include "print.h"
#include "testutil.h"

static const char *FILE_NAME = "/somewhere/models/tiny.model";

static SrcLoc at(int line, int col) { return (SrcLoc){FILE_NAME, line, col}; }

static Module *build(Arena *A) {
  Module *m = ARENA_NEW(A, Module);
  m->arena = A;
  m->name = "tiny";
  static const char *syms[] = {"batch", "seq"};
  m->syms = syms;
  m->nsyms = 2;
  m->has_plan = true;
  ir_plan_defaults(&m->plan);
  m->plan.dp = 1;
  m->plan.tp = 2;
  CHECK(ir_mesh_resolve(m, 0)); /* dp 1 x tp 2 */
  Graph *g = ir_graph_new(A, NULL);
  m->graph = g;
  Shape bs = S(2, 2, 4);
  bs.sym[0] = 0;
  bs.sym[1] = 1;
  Value *tok = t_input(g, "tokens", DT_I32, bs), *tgt = t_input(g, "targets", DT_I32, bs);
  Attrs pa = {0};
  pa.name = "wte";
  pa.init = INIT_NORMAL;
  pa.init_b = 0.02;
  Value *wte = ir_emit(g, OP_PARAM, 0, NULL, DT_F32, S(2, 8, 8), &pa, at(3, 3)); /* local half of [16, 8] */
  wte->sharding.split[0] = RT_AX_TP;
  pa.name = "blocks.mlp.w";
  Value *w = ir_emit(g, OP_PARAM, 0, NULL, DT_F32, S(3, 3, 8, 8), &pa, at(4, 3));
  pa.name = "blocks.mlp.b";
  pa.init = INIT_ZEROS;
  Value *b = ir_emit(g, OP_PARAM, 0, NULL, DT_F32, S(2, 3, 8), &pa, at(5, 3));
  Node *e = ir_node_new(g, OP_EMBED, 2, (Value *[]){wte, tok}, 1, at(7, 7));
  CHECK(ir_infer(e));
  e->out[0]->sharding.partial = 1u << RT_AX_TP;
  Node *rep = ir_node_new(g, OP_REPEAT, 3, (Value *[]){e->out[0], w, b}, 1, at(8, 3));
  rep->a.count = 3;
  rep->a.ncarry = 1;
  rep->a.nxs = 2;
  rep->a.name = "blocks";
  Graph *body = ir_graph_new(A, g);
  body->owner = rep;
  rep->body = body;
  Value *x = ir_add_arg(body, DT_F32, e->out[0]->shape, "x")->out[0];
  Value *wa = ir_add_arg(body, DT_F32, S(2, 8, 8), "w")->out[0];
  Value *ba = ir_add_arg(body, DT_F32, S(1, 8), "b")->out[0];
  Node *mm = ir_node_new(body, OP_MATMUL, 2, (Value *[]){x, wa}, 1, at(9, 13));
  CHECK(ir_infer(mm));
  Node *ad = ir_node_new(body, OP_ADD, 2, (Value *[]){mm->out[0], ba}, 1, at(9, 20));
  CHECK(ir_infer(ad));
  Node *ge = ir_node_new(body, OP_GELU, 1, (Value *[]){ad->out[0]}, 1, at(9, 9));
  CHECK(ir_infer(ge));
  Node *res = ir_node_new(body, OP_ADD, 2, (Value *[]){x, ge->out[0]}, 1, at(9, 7));
  CHECK(ir_infer(res));
  ir_add_result(body, res->out[0], "x");
  CHECK(ir_infer(rep));
  Node *lg = ir_node_new(g, OP_MATMUL, 2, (Value *[]){rep->out[0], wte}, 1, at(11, 20));
  lg->a.tb = true;
  CHECK(ir_infer(lg));
  Node *ce = ir_node_new(g, OP_CROSS_ENTROPY, 2, (Value *[]){lg->out[0], tgt}, 1, at(11, 10));
  ce->a.len = 8;
  CHECK(ir_infer(ce));
  ir_add_result(g, ce->out[0], "loss");
  CHECK(ir_verify(g, "test"));
  return m;
}

static const char *EXPECTED =
    "module tiny\n"
    "  plan: dp 1 tp 2 pp 1 cp 1 sp off zero 0 microbatches 1 schedule 1f1b recompute none\n"
    "\n"
    "# rank class 1 of 1: ranks 0..1 (tp 0..1): one SPMD program, each rank reads its coordinates at start-up\n"
    "graph {\n"
    "  %0 : i32[batch=2, seq=4] = input  \"tokens\"\n"
    "  %1 : i32[batch=2, seq=4] = input  \"targets\"\n"
    "  %2 : f32[8, 8]{S(tp)@0} = param  \"wte\" init=normal(0, 0.02)                           # tiny.model:3:3\n"
    "  %3 : f32[3, 8, 8] = param  \"blocks.mlp.w\" init=normal(0, 0.02)                        # tiny.model:4:3\n"
    "  %4 : f32[3, 8] = param  \"blocks.mlp.b\" init=zeros                                     # tiny.model:5:3\n"
    "  %5 : f32[batch=2, seq=4, 8]{P(tp)} = embed(%2, %0)                                    # tiny.model:7:7\n"
    "  %6 : f32[batch=2, seq=4, 8] = repeat blocks x3 (%5 | %3, %4) {                        # tiny.model:8:3\n"
    "    %7 : f32[batch=2, seq=4, 8] = arg 0  \"x\"\n"
    "    %8 : f32[8, 8] = arg 1  \"w\"\n"
    "    %9 : f32[8] = arg 2  \"b\"\n"
    "    %10 : f32[batch=2, seq=4, 8] = matmul(%7, %8)  ta=0 tb=0                            # tiny.model:9:13\n"
    "    %11 : f32[batch=2, seq=4, 8] = add(%10, %9)                                         # tiny.model:9:20\n"
    "    %12 : f32[batch=2, seq=4, 8] = gelu(%11)                                            # tiny.model:9:9\n"
    "    %13 : f32[batch=2, seq=4, 8] = add(%7, %12)                                         # tiny.model:9:7\n"
    "    yield %13\n"
    "  }\n"
    "  %14 : f32[batch=2, seq=4, 8] = matmul(%6, %2)  ta=0 tb=1                              # tiny.model:11:20\n"
    "  %15 : f32[] = cross_entropy(%14, %1)  len=8                                           # tiny.model:11:10\n"
    "}\n"
    "results:\n"
    "  loss = %15\n"
    "\n"
    "parameters:\n"
    "  (model)                                                            128\n"
    "    wte                  f32[16, 8]                                  128\n"
    "  blocks.mlp                                                         216\n"
    "    w                    f32[3, 8, 8]                                192\n"
    "    b                    f32[3, 8]                                    24\n"
    "  total                                                              344\n"
    "flops per token: forward 512 FLOP, training 1.536 KFLOP (3 x forward)\n"
    "# communication per rank, per step (one step = one micro-batch through the graph)\n"
    "#   none\n"
    "#   and the trainer's own, after each step: one all_reduce of 16 B over the world's 2 ranks (they agree on "
    "non-finite values and stops)\n";

/* the module as ir_print_module writes it (with the IR or without), malloc'd */
static char *printed(Module *m, bool ir) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CHECK(f != NULL);
  if (!f) return strdup("");
  ir_print_module(f, m, ir);
  CHECK(fclose(f) == 0);
  return text;
}

int main(void) {
  Arena A;
  arena_init(&A);
  Module *m = build(&A);
  char *text = printed(m, true);
  if (strcmp(text, EXPECTED) != 0) {
    fprintf(stderr, "printer output differs; got:\n%s\n--- expected:\n%s\n", text, EXPECTED);
    t_failures++;
  }
  free(text);
  /* without the IR (shardc plan's default): the graph and its results become one line counting
   * the nodes, by hand 16: 7 at the top before the repeat's end (%0-%6), 7 in its body (%7-%13),
   * %14 and %15; the rest as above */
  {
    const char *g = strstr(EXPECTED, "graph {\n"), *r = strstr(EXPECTED, "  loss = %15\n");
    CHECK(g && r);
    char want[4096];
    snprintf(want, sizeof want, "%.*s# the program's IR: 16 nodes (shardc plan --ir prints it)\n%s", (int)(g - EXPECTED),
             EXPECTED, r + strlen("  loss = %15\n"));
    text = printed(m, false);
    if (strcmp(text, want) != 0) {
      fprintf(stderr, "printer output without the IR differs; got:\n%s\n--- expected:\n%s\n", text, want);
      t_failures++;
    }
    free(text);
  }
  /* hand counts: wte 16*8 (tp-split, logical) + 3*8*8 + 3*8 = 344; FLOPs: the repeat's matmul
   * 2*(2*4*8)*8 = 1024 x 3 iterations, the head 2*(2*4*8)*8 = 1024 -> 4096 over 8 tokens = 512 */
  CHECK(ir_param_count(m) == 344);
  CHECK(ir_flops_per_token(m, false) == 512);
  CHECK(ir_flops_per_token(m, true) == 1536);
  size_t len = 0;
  text = NULL;
  FILE *f = open_memstream(&text, &len);
  CHECK(f != NULL);
  ir_print_dot(f, m);
  CHECK(fclose(f) == 0);
  CHECK(strncmp(text, "digraph \"tiny\" {", 16) == 0);
  CHECK(strstr(text, "subgraph cluster_") != NULL && strstr(text, "label=\"repeat blocks x3\"") != NULL);
  free(text);
  arena_free(&A);
  return t_done("test_print");
}
