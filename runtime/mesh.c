/* runtime/mesh.c — mesh coordinates, nodes, devices and groups (see mesh.h). */
#include "mesh.h"

#include <stddef.h>
#include <string.h>

/* Nesting order from outermost to innermost: pp, dp, cp, tp. */
static const int nest[RT_AX_COUNT] = {RT_AX_PP, RT_AX_DP, RT_AX_CP, RT_AX_TP};

bool rt_mesh_init(MeshMap *m, int dp, int pp, int cp, int tp, int devices_per_node) {
  if (dp < 1 || pp < 1 || cp < 1 || tp < 1 || devices_per_node < 1) return false;
  memset(m->stage_rows, 0, sizeof m->stage_rows);
  m->stage_chunks = 0;
  m->dim[RT_AX_DP] = dp;
  m->dim[RT_AX_PP] = pp;
  m->dim[RT_AX_CP] = cp;
  m->dim[RT_AX_TP] = tp;
  m->world = dp * pp * cp * tp;
  m->devices_per_node = devices_per_node;
  m->nodes = (m->world + devices_per_node - 1) / devices_per_node;
  return true;
}

const char *rt_mesh_axis_name(int axis) {
  static const char *const names[RT_AX_COUNT] = {"dp", "pp", "cp", "tp"};
  if (axis > RT_AX_COUNT && axis < RT_AX_GROUP(16)) return rt_mesh_mask_name((unsigned)(axis - RT_AX_COUNT));
  return axis >= 0 && axis < RT_AX_COUNT ? names[axis] : "?";
}

const char *rt_mesh_mask_name(unsigned mask) {
  static const char *const names[16] = {
      "self",     "dp",       "pp",       "dp*pp",       "cp",    "dp*cp",    "pp*cp",    "dp*pp*cp",
      "tp",       "dp*tp",    "pp*tp",    "dp*pp*tp",    "cp*tp", "dp*cp*tp", "pp*cp*tp", "world",
  };
  return names[mask & 0xf];
}

int rt_mesh_rank(const MeshMap *m, const int coord[RT_AX_COUNT]) {
  int r = 0;
  for (int i = 0; i < RT_AX_COUNT; i++) r = r * m->dim[nest[i]] + coord[nest[i]];
  return r;
}

void rt_mesh_coords(const MeshMap *m, int rank, int coord[RT_AX_COUNT]) {
  for (int i = RT_AX_COUNT - 1; i >= 0; i--) {
    int ax = nest[i];
    coord[ax] = rank % m->dim[ax];
    rank /= m->dim[ax];
  }
}

int rt_mesh_node(const MeshMap *m, int rank) { return rank / m->devices_per_node; }
int rt_mesh_device(const MeshMap *m, int rank) { return rank % m->devices_per_node; }

int rt_mesh_group_size(const MeshMap *m, unsigned mask) {
  int n = 1;
  for (int ax = 0; ax < RT_AX_COUNT; ax++)
    if (mask & (1u << ax)) n *= m->dim[ax];
  return n;
}

/* The k-th member (row-major over the group's axes in nesting order) of rank's group. */
static int member(const MeshMap *m, const int base[RT_AX_COUNT], unsigned mask, int k) {
  int c[RT_AX_COUNT];
  for (int ax = 0; ax < RT_AX_COUNT; ax++) c[ax] = base[ax];
  for (int i = RT_AX_COUNT - 1; i >= 0; i--) {
    int ax = nest[i];
    if (!(mask & (1u << ax))) continue;
    c[ax] = k % m->dim[ax];
    k /= m->dim[ax];
  }
  return rt_mesh_rank(m, c);
}

int rt_mesh_group(const MeshMap *m, int rank, unsigned mask, int *members) {
  int base[RT_AX_COUNT];
  rt_mesh_coords(m, rank, base);
  int n = rt_mesh_group_size(m, mask);
  for (int k = 0; k < n; k++) members[k] = member(m, base, mask, k);
  return n;
}

int rt_mesh_group_index(const MeshMap *m, int rank, unsigned mask) {
  int c[RT_AX_COUNT];
  rt_mesh_coords(m, rank, c);
  int k = 0;
  for (int i = 0; i < RT_AX_COUNT; i++) {
    int ax = nest[i];
    if (mask & (1u << ax)) k = k * m->dim[ax] + c[ax];
  }
  return k;
}

int rt_mesh_group_color(const MeshMap *m, int rank, unsigned mask) {
  return rt_mesh_group_index(m, rank, ~mask & RT_MESH_ALL);
}

int64_t rt_stage_chunk_rows(const int *rows, int degree, int j) {
  int64_t most = 0;
  for (int s = 0; s < degree; s++) most = rows[j * degree + s] > most ? rows[j * degree + s] : most;
  return most;
}

int64_t rt_stage_chunk_start(const int *rows, int degree, int j) {
  int64_t at = 0;
  for (int i = 0; i < j; i++) at += rt_stage_chunk_rows(rows, degree, i);
  return at;
}

int64_t rt_stage_local_rows(const int *rows, int degree, int chunks) {
  return rt_stage_chunk_start(rows, degree, chunks > 1 ? chunks : 1);
}

int64_t rt_stage_index(const int *rows, int degree, int chunks, int c, int64_t l) {
  int j = 0;
  int64_t r = l;
  for (int64_t m; j < chunks - 1 && r >= (m = rt_stage_chunk_rows(rows, degree, j)); j++) r -= m; /* its chunk */
  int k = j * degree + c;
  if (r >= rows[k]) return -1;
  int64_t at = 0;
  for (int s = 0; s < k; s++) at += rows[s];
  return at + r;
}

int64_t rt_stage_logical(const int *rows, int degree, int chunks) {
  int64_t n = 0;
  for (int s = 0; s < degree * (chunks > 1 ? chunks : 1); s++) n += rows[s];
  return n;
}

int rt_blocks_count(int blocks) {
  return blocks == RT_BLOCKS_ZIGZAG ? 2 : blocks == RT_BLOCKS_STAGES ? 1 : blocks > 1 ? blocks : 1;
}

int64_t rt_pack_rows(int64_t outer, int blocks, int64_t whole_bytes) {
  if (outer == 1 && blocks <= 1) return 0;
  int64_t row = outer > 0 ? whole_bytes / outer : 0, k = row > 0 ? RT_PACK_CHUNK / row : outer;
  return k < 1 ? 1 : k > outer ? outer : k;
}

int64_t rt_pack_bytes(int64_t outer, int blocks, int64_t whole_bytes) {
  int64_t k = rt_pack_rows(outer, blocks, whole_bytes);
  return k == outer ? whole_bytes : k * (whole_bytes / outer);
}

int64_t rt_all_to_all_pack_bytes(int64_t x_bytes) { return 2 * x_bytes; }

int64_t rt_block_index(int64_t n_local, int blocks, int degree, int c, int64_t l) {
  if (blocks <= 1) return (int64_t)c * n_local + l;
  if (blocks == RT_BLOCKS_ZIGZAG) {
    int64_t per = n_local / 2;
    return l < per ? (int64_t)c * per + l : (int64_t)(2 * degree - 1 - c) * per + l - per;
  }
  int64_t per = n_local / blocks; /* local elements per block */
  return (l / per) * per * degree + (int64_t)c * per + l % per;
}

int64_t rt_sharded_index(int64_t n_local, int blocks, int degree, int c, int ideg, int ic, int64_t l) {
  if (ideg > 1) {
    l += (int64_t)ic * n_local;
    n_local *= ideg;
  }
  return degree > 1 ? rt_block_index(n_local, blocks, degree, c, l) : l;
}

bool rt_mesh_group_in_node(const MeshMap *m, unsigned mask) {
  /* Nodes are contiguous rank ranges, so a group lies in one node when its first
   * and last members do. */
  int n = rt_mesh_group_size(m, mask);
  for (int r = 0; r < m->world; r++) {
    if (rt_mesh_group_index(m, r, mask) != 0) continue;
    int base[RT_AX_COUNT];
    rt_mesh_coords(m, r, base);
    if (rt_mesh_node(m, r) != rt_mesh_node(m, member(m, base, mask, n - 1))) return false;
  }
  return true;
}

bool rt_stage_holds(uint64_t stages, int pp_degree, int pp_coord) {
  return !stages || pp_degree <= 1 || (pp_coord >= 0 && pp_coord < 64 && (stages >> pp_coord & 1));
}

bool rt_ckpt_writer(const int dim[RT_AX_COUNT], const int coord[RT_AX_COUNT], unsigned split_mask, uint64_t stages,
                    int ti) {
  if (!rt_stage_holds(stages, dim[RT_AX_PP], coord[RT_AX_PP])) return false;
  for (int a = 0; a < RT_AX_COUNT; a++) {
    if (split_mask >> a & 1) continue;
    int want = a == RT_AX_DP ? ti % dim[RT_AX_DP] : a == RT_AX_PP && stages ? __builtin_ctzll(stages) : 0;
    if (coord[a] != want) return false;
  }
  return true;
}
