/*
 * FI_EP_MSG helpers of the tests (DESIGN §3, "MSG endpoints"), shared by
 * the functional suite (test_cm.c) and the hostile-peer suite
 * (test_cm_adv.c): a fabric with an EQ and a listening passive endpoint,
 * a client aimed at it, endpoints with a CQ, bounded waits.
 */
#ifndef NTX_TEST_CM_H
#define NTX_TEST_CM_H

#include "ntx_test.h"

#define CM_WAIT_MS 20000

struct cm_ep {
	struct fi_info *fi;
	struct fid_domain *dom;
	struct fid_ep *ep;
	struct fid_cq *cq;
};

struct cm {
	struct fid_fabric *fab;
	struct fid_eq *eq;
	struct fid_pep *pep;
	struct fi_info *pfi;
	char pname[T_NAMELEN];
	struct cm_ep cli, srv;
};

struct fi_info *cm_hints(const char *domain);
void cm_domain(const char *domain);
void cm_listen(struct cm *c, const char *domain);
void cm_open_ep(struct cm *c, struct cm_ep *e, struct fi_info *fi);
void cm_client(struct cm *c, const char *domain);
ssize_t cm_event(struct cm *c, uint32_t *ev, void *buf, size_t len);
void cm_close_ep(struct cm_ep *e);
void cm_close(struct cm *c);
int cm_comp(struct cm_ep *e, struct fi_cq_data_entry *out);

#endif /* NTX_TEST_CM_H */
