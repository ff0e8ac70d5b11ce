/*
 * Helpers of the functional tests: a whole RDM endpoint through the public
 * libfabric API, bounded waits for completions, and two-process tests
 * (fork, then each process opens its own objects; names travel over a
 * socketpair).
 */
#ifndef NTX_TEST_H
#define NTX_TEST_H

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>

#define T_VERSION FI_VERSION(1, 17)
#define T_NAMELEN 32

struct tctx {
	struct fi_info *fi;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_ep *ep;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_cntr *cntr;
};

/* Hints that select ntx; caller may change them before t_open_hints. */
struct fi_info *t_hints(uint64_t caps);
int t_open(struct tctx *t, uint64_t caps);
int t_open_hints(struct tctx *t, struct fi_info *hints);
void t_close(struct tctx *t);
int t_insert(struct tctx *t, const void *name, fi_addr_t *addr);

/* Waits up to timeout_ms for one completion: 1 success, -FI_EAVAIL with
 * *err filled, -FI_ETIMEDOUT. */
int t_wait(struct tctx *t, struct fi_cq_tagged_entry *e, fi_addr_t *src,
	   struct fi_cq_err_entry *err, int timeout_ms);
/* Polls for timeout_ms and returns how many completions appeared. */
int t_drain(struct tctx *t, int timeout_ms);

/* Two processes: the child runs fn(sock) and exits with its result
 * (0 = pass, otherwise the failing line). */
typedef int (*t_child_fn)(int sock);
pid_t t_fork(int *sock, t_child_fn fn);
int t_join(pid_t pid);
int t_xchg_name(struct tctx *t, int sock, fi_addr_t *peer);
int t_sync(int sock); /* one byte each way */
/* The same while driving progress; fails if a completion shows up. */
int t_sync_progress(struct tctx *t, int sock, int timeout_ms);

void t_fill(void *buf, size_t len, unsigned seed);
size_t t_check(const void *buf, size_t len, unsigned seed);

/* In a child: fail with the line number. */
#define CHK(cond)                                                        \
	do {                                                             \
		if (!(cond)) {                                           \
			fprintf(stderr, "child %s:%d: %s\n", __FILE__,   \
				__LINE__, #cond);                        \
			return __LINE__ & 0x7f ? __LINE__ & 0x7f : 1;    \
		}                                                        \
	} while (0)

#endif
