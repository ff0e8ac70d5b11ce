/*
 * The attacker's tools of test_adversary.c, shared with the tcp part of
 * test_fuzz.c: a raw peer that speaks the tcp wire format (ntx_tcp_wire.h),
 * proves a name of its own and sends frames, and a victim endpoint on the
 * tcp domain with one registered buffer (key VKEY, VLEN bytes at 0).
 */
#ifndef NTX_ADV_H
#define NTX_ADV_H

#include "ntx_test.h"
#include "ntx/ntx.h"
#include "ntx_tcp_wire.h"

#define VKEY 7
#define VLEN 4096

/* One frame: the 64-byte prefix (type, len, engine header), then len
 * bytes of payload. 0 or -1. */
int adv_frame(int fd, uint16_t type, const struct ntx_wire_hdr *h,
	      const void *payload, uint32_t len);
/* The next frame's type and header (payload skipped); -1 at EOF or after
 * 10 s. */
int adv_next(int fd, struct ntx_wire_hdr *h);
/* A connection to the victim, hello said and name proved; -1 if refused. */
int adv_connect(const struct ntx_addr *victim);
/* The victim: an endpoint on the tcp domain, its buffer registered. */
int open_victim(struct tctx *t, struct fid_mr **mr, void *buf);
/* Progress until the attacker's one-byte verdict arrives on sock. */
int victim_serve(struct tctx *t, int sock, int *ncq);
/* The victim's name, to the attacker over sock. */
int send_name(struct tctx *t, int sock);
/* This process's resident memory (VmRSS), KiB; -1 if unknown. */
long adv_rss_kib(void);
/* Its peak resident memory so far (VmHWM), KiB; -1 if unknown. */
long adv_hwm_kib(void);

/* The fuzzers' generator (xorshift64, test_fuzz.c): its state, never 0 */
extern uint64_t g_rng;
static inline uint64_t rnd(void)
{
	g_rng ^= g_rng << 13;
	g_rng ^= g_rng >> 7;
	g_rng ^= g_rng << 17;
	return g_rng;
}
/* A fuzzer's run: seeds g_rng from NTX_FUZZ_SEED, else the clock, and
 * logs the seed so that a failure can be repeated; the run's end in ms
 * of t_ms() (NTX_FUZZ_SECONDS, default 3). */
uint64_t fuzz_start(const char *what);

#endif /* NTX_ADV_H */
