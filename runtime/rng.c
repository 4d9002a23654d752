/* runtime/rng.c — counter-based initialisation RNG (see rng.h). */
#include "rng.h"

#include <math.h>

uint64_t rt_splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t rt_rng_key(uint64_t seed, const char *name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
    h ^= *p;
    h *= 0x100000001b3ULL;
  }
  return rt_splitmix64(h ^ rt_splitmix64(seed));
}

static double u01(uint64_t k) { return (double)(rt_splitmix64(k) >> 11) * 0x1.0p-53; }

double rt_rng_uniform(uint64_t key, int64_t i) { return u01(key + (uint64_t)i); }

double rt_rng_normal(uint64_t key, int64_t i, double mean, double std) {
  double u1 = u01(key + 2 * (uint64_t)i), u2 = u01(key + 2 * (uint64_t)i + 1);
  double r = sqrt(-2.0 * log(1.0 - u1)); /* 1 - u1 in (0, 1] */
  return mean + std * r * cos(2.0 * 3.14159265358979323846 * u2);
}
