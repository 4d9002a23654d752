/* runtime/rng.h — counter-based random numbers for parameter initialisation.
 *
 * Element i of a tensor is a pure function of (key, i), so any rank can generate
 * any shard of a parameter without generating the rest, and the reference
 * interpreter (which links this file) initialises exactly what the trainer does.
 *   key   = rt_rng_key(seed, name)            FNV-1a 64 of name, mixed with seed
 *   u(k)  = (splitmix64(k) >> 11) * 2^-53     uniform in [0, 1)
 *   normal element i: Box–Muller on u(key + 2i), u(key + 2i + 1)
 */
#ifndef SHARDRT_RNG_H
#define SHARDRT_RNG_H

#include <stdint.h>

uint64_t rt_splitmix64(uint64_t x);
uint64_t rt_rng_key(uint64_t seed, const char *name);
double rt_rng_uniform(uint64_t key, int64_t i);                  /* [0, 1) */
double rt_rng_normal(uint64_t key, int64_t i, double mean, double std);

#endif
