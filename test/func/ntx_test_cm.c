/* FI_EP_MSG helpers of the tests (ntx_test_cm.h). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ntx_test_cm.h"

struct fi_info *cm_hints(const char *domain)
{
	struct fi_info *h = t_hints(FI_MSG);

	free(h->domain_attr->name);
	h->domain_attr->name = strdup(domain);
	h->ep_attr->type = FI_EP_MSG;
	return h;
}

/* A domain's local peers through its network back end. */
void cm_domain(const char *domain)
{
	if (strcmp(domain, "shm"))
		setenv("FI_NTX_LOCAL_VIA_NETWORK", "1", 1);
}

/* Fabric, EQ and a listening passive endpoint. */
void cm_listen(struct cm *c, const char *domain)
{
	struct fi_eq_attr ea = { .wait_obj = FI_WAIT_UNSPEC };
	struct fi_info *h = cm_hints(domain);
	size_t len = sizeof(c->pname);

	memset(c, 0, sizeof(*c));
	cm_domain(domain);
	cr_assert_eq(fi_getinfo(T_VERSION, NULL, NULL, 0, h, &c->pfi), 0);
	fi_freeinfo(h);
	cr_assert_eq(c->pfi->ep_attr->type, FI_EP_MSG);
	cr_assert_eq(fi_fabric(c->pfi->fabric_attr, &c->fab, NULL), 0);
	cr_assert_eq(fi_eq_open(c->fab, &ea, &c->eq, NULL), 0);
	cr_assert_eq(fi_passive_ep(c->fab, c->pfi, &c->pep, NULL), 0);
	cr_assert_eq(fi_listen(c->pep), -FI_ENOEQ, "listen before an EQ");
	cr_assert_eq(fi_pep_bind(c->pep, &c->eq->fid, 0), 0);
	cr_assert_eq(fi_listen(c->pep), 0);
	cr_assert_eq(fi_getname(&c->pep->fid, c->pname, &len), 0);
}

/* An endpoint of fi (taken), its CQ and the EQ bound, enabled. */
void cm_open_ep(struct cm *c, struct cm_ep *e, struct fi_info *fi)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_DATA };

	e->fi = fi;
	cr_assert_eq(fi_domain(c->fab, fi, &e->dom, NULL), 0);
	cr_assert_eq(fi_endpoint(e->dom, fi, &e->ep, NULL), 0);
	cr_assert_eq(fi_cq_open(e->dom, &ca, &e->cq, NULL), 0);
	cr_assert_eq(fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV), 0);
	cr_assert_eq(fi_ep_bind(e->ep, &c->eq->fid, 0), 0);
	cr_assert_eq(fi_enable(e->ep), 0);
}

/* The client: an endpoint aimed at the passive endpoint's name. */
void cm_client(struct cm *c, const char *domain)
{
	struct fi_info *h = cm_hints(domain), *fi;

	h->dest_addr = malloc(T_NAMELEN);
	memcpy(h->dest_addr, c->pname, T_NAMELEN);
	h->dest_addrlen = T_NAMELEN;
	cr_assert_eq(fi_getinfo(T_VERSION, NULL, NULL, 0, h, &fi), 0);
	fi_freeinfo(h);
	cm_open_ep(c, &c->cli, fi);
}

/* The next event within CM_WAIT_MS: its size, or a negative code. */
ssize_t cm_event(struct cm *c, uint32_t *ev, void *buf, size_t len)
{
	return fi_eq_sread(c->eq, ev, buf, len, CM_WAIT_MS, 0);
}

void cm_close_ep(struct cm_ep *e)
{
	if (e->ep)
		cr_assert_eq(fi_close(&e->ep->fid), 0);
	if (e->cq)
		cr_assert_eq(fi_close(&e->cq->fid), 0);
	if (e->dom)
		cr_assert_eq(fi_close(&e->dom->fid), 0);
	fi_freeinfo(e->fi);
	memset(e, 0, sizeof(*e));
}

void cm_close(struct cm *c)
{
	cr_assert_eq(fi_close(&c->eq->fid), -FI_EBUSY, "endpoints bound");
	cm_close_ep(&c->cli);
	cm_close_ep(&c->srv);
	cr_assert_eq(fi_close(&c->pep->fid), 0);
	cr_assert_eq(fi_close(&c->eq->fid), 0);
	cr_assert_eq(fi_close(&c->fab->fid), 0);
	fi_freeinfo(c->pfi);
}

/* One completion on e's CQ within CM_WAIT_MS: 1, or a negative code. */
int cm_comp(struct cm_ep *e, struct fi_cq_data_entry *out)
{
	struct fi_cq_data_entry ent;
	struct fi_cq_err_entry err = { 0 };
	struct timespec t0, t;
	ssize_t n;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		n = fi_cq_read(e->cq, &ent, 1);
		if (n == -FI_EAVAIL) {
			fi_cq_readerr(e->cq, &err, 0);
			return -err.err;
		}
		if (n == 1) {
			if (out)
				*out = ent;
			return 1;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000 +
		 (t.tv_nsec - t0.tv_nsec) / 1000000 < CM_WAIT_MS);
	return -FI_ETIMEDOUT;
}
