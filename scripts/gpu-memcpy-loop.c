/* The peer of dmalab's gpu engine in scripts/bench-gpu*.sh: the copies
 * dmalab issues (registered host memory, DEPTH streams, an event recorded
 * after each copy), with nothing around them, through the CUDA driver
 * alone (no toolkit: cc -O2 -o memcpy-loop gpu-memcpy-loop.c -ldl).
 * Prints bytes per second.
 *
 *   memcpy-loop GPU htod|dtoh BS BUFFER DEPTH SECS [spin|block]
 *
 * WAIT (default spin) is how it waits in cuEventSynchronize: spin = plain
 * events (the driver spins or yields as the context's scheduling flags
 * say; the primary context's default, CU_CTX_SCHED_AUTO, spins when there
 * are more CPUs than contexts); block = events made with
 * CU_EVENT_BLOCKING_SYNC (the thread sleeps until the interrupt). */

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
typedef int (*f_i)(unsigned);
typedef int (*f_pi)(int *);
typedef int (*f_dev)(int *, int);
typedef int (*f_ctx)(void **, int);
typedef int (*f_set)(void *);
typedef int (*f_alloc)(unsigned long long *, size_t);
typedef int (*f_reg)(void *, size_t, unsigned);
typedef int (*f_mk)(void **, unsigned);
typedef int (*f_htod)(unsigned long long, const void *, size_t, void *);
typedef int (*f_dtoh)(void *, unsigned long long, size_t, void *);
typedef int (*f_sync)(void *);
static void *sym(void *h, const char *n) {
  void *p = dlsym(h, n);
  if (!p) { fprintf(stderr, "memcpy-loop: no %s\n", n); exit(1); }
  return p;
}
#define CK(x) do { int r_ = (x); if (r_) { fprintf(stderr, "memcpy-loop: %s = %d\n", #x, r_); exit(1); } } while (0)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
  if (argc != 7 && argc != 8) { fprintf(stderr, "usage: memcpy-loop GPU htod|dtoh BS BUFFER DEPTH SECS [spin|block]\n"); return 2; }
  /* CU_EVENT_DISABLE_TIMING, plus CU_EVENT_BLOCKING_SYNC for block. */
  unsigned ev_flags = argc == 8 && !strcmp(argv[7], "block") ? 0x3 : 0x2;
  if (argc == 8 && strcmp(argv[7], "spin") && strcmp(argv[7], "block")) { fprintf(stderr, "memcpy-loop: WAIT is spin or block, not %s\n", argv[7]); return 2; }
  int gpu = atoi(argv[1]), htod = !strcmp(argv[2], "htod");
  size_t bs = strtoull(argv[3], 0, 10), buf = strtoull(argv[4], 0, 10);
  int depth = atoi(argv[5]); double secs = atof(argv[6]);
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) { fprintf(stderr, "memcpy-loop: %s\n", dlerror()); return 1; }
  int dev; void *ctx; unsigned long long d;
  CK(((f_i)sym(h, "cuInit"))(0));
  CK(((f_dev)sym(h, "cuDeviceGet"))(&dev, gpu));
  CK(((f_ctx)sym(h, "cuDevicePrimaryCtxRetain"))(&ctx, dev));
  CK(((f_set)sym(h, "cuCtxSetCurrent"))(ctx));
  CK(((f_alloc)sym(h, "cuMemAlloc_v2"))(&d, bs * depth));
  char *host = aligned_alloc(1 << 21, buf);
  memset(host, 1, buf);
  CK(((f_reg)sym(h, "cuMemHostRegister_v2"))(host, buf, 1));
  f_mk mks = (f_mk)sym(h, "cuStreamCreate"), mke = (f_mk)sym(h, "cuEventCreate");
  f_htod cp_in = (f_htod)sym(h, "cuMemcpyHtoDAsync_v2");
  f_dtoh cp_out = (f_dtoh)sym(h, "cuMemcpyDtoHAsync_v2");
  f_set rec_sync = (f_set)sym(h, "cuEventSynchronize");
  typedef int (*f_rec)(void *, void *);
  f_rec rec = (f_rec)sym(h, "cuEventRecord");
  void **st = calloc(depth, sizeof *st), **ev = calloc(depth, sizeof *ev);
  for (int i = 0; i < depth; i++) { CK(mks(&st[i], 1)); CK(mke(&ev[i], ev_flags)); }
  size_t slots = buf / bs, next = 0; unsigned long long copies = 0;
  double t0 = now(), end = t0 + secs;
  for (int i = 0; i < depth; i++) {
    char *p = host + (next++ % slots) * bs;
    CK(htod ? cp_in(d + i * bs, p, bs, st[i]) : cp_out(p, d + i * bs, bs, st[i]));
    CK(rec(ev[i], st[i]));
  }
  for (int i = 0;; i = (i + 1) % depth) {
    CK(rec_sync(ev[i]));
    copies++;
    if (now() >= end) break;
    char *p = host + (next++ % slots) * bs;
    CK(htod ? cp_in(d + i * bs, p, bs, st[i]) : cp_out(p, d + i * bs, bs, st[i]));
    CK(rec(ev[i], st[i]));
  }
  double t = now() - t0;
  printf("%.0f\n", copies * (double)bs / t);
  return 0;
}
