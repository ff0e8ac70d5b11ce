/*
 * Engine test fixture (DESIGN §8): engine objects built without prov/api
 * (a domain, an AV, a CQ and an endpoint per node) over the loopback back
 * end, and the calls prov/api would make to post operations.
 */
#ifndef NTX_ET_H
#define NTX_ET_H

#include <criterion/criterion.h>

#include "ntx/ntx_engine.h"
#include "ntx_loop_be.h"

#define ET_NODES 4

struct et_node {
	struct ntx_av av;
	struct ntx_cq cq;
	struct ntx_ep *ep;
	fi_addr_t addr[ET_NODES]; /* the other nodes in this node's AV */
};

extern struct ntx_domain et_dom;
extern struct et_node et[ET_NODES];

/* Opens nodes 0 .. n-1, each with every other one in its AV. */
void et_open(int n);
/* Closes them and checks nothing leaked into the loop back end. */
void et_close(void);
/* Opens node i again under a name of its own (restarted peer: name
 * given) and inserts it in the other nodes' AVs (new fi_addrs). */
void et_reopen(int i, const struct ntx_addr *name);

struct ntx_be_ep *et_be(int i);
/* Progress of every open node, rounds times. */
void et_progress(int rounds);

ssize_t et_sendv(int from, int to, const struct iovec *iov, size_t cnt,
		 uint64_t tag, void *ctx, uint64_t flags);
ssize_t et_send(int from, int to, const void *buf, size_t len, uint64_t tag,
		void *ctx, uint64_t flags);
ssize_t et_recvv(int at, fi_addr_t src, const struct iovec *iov, size_t cnt,
		 uint64_t tag, uint64_t ignore, void *ctx, uint64_t flags);
ssize_t et_recv(int at, fi_addr_t src, void *buf, size_t len, uint64_t tag,
		uint64_t ignore, void *ctx, uint64_t flags);

/* One completion (0 when none), or the next error completion. */
int et_cq_read(int at, struct fi_cq_tagged_entry *e, fi_addr_t *src);
int et_cq_err(int at, struct fi_cq_err_entry *e);
/* Reads every completion until n arrived (progress in between). */
void et_cq_wait(int at, struct fi_cq_tagged_entry *e, fi_addr_t *src,
		int n);

/* The engine VCs of node i that are not failed. */
int et_live_vcs(int i);
struct ntx_vc *et_vc_to(int from, int to);

#endif
