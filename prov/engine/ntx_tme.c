/*
 * Tag-matching engine: posted-receive and unexpected-message queues per
 * endpoint, tagged and untagged apart, with libfabric's semantics
 * (tag/ignore, FI_ADDR_UNSPEC or directed source, FIFO per peer, claims).
 * Exact tagged receives and tagged unexpected messages are hashed by tag;
 * a message matches the earliest-posted of the first candidate in its
 * bucket and the first candidate among wildcard receives. The message
 * path's receives wait in the lean ring first (struct ntx_tme), which
 * becomes requests on the queues here (ntx_tme_lean_flush) before
 * anything else uses them.
 */
#include "config.h"

#include "ntx/ntx_engine.h"

void ntx_tme_init(struct ntx_tme *tme)
{
	for (int i = 0; i < 2; i++) {
		ntx_list_init(&tme->posted[i]);
		ntx_list_init(&tme->unexp[i]);
	}
	for (int i = 0; i < NTX_TME_BUCKETS; i++) {
		ntx_list_init(&tme->posted_tag[i]);
		ntx_list_init(&tme->unexp_tag[i]);
	}
}

struct ntx_unexp *ntx_tme_find_unexp(struct ntx_tme *tme, bool tagged,
				     fi_addr_t src, uint64_t tag,
				     uint64_t ignore, void *claim_ctx)
{
	bool exact = tagged && !ignore && !claim_ctx;
	struct ntx_list *q, *it;

	q = exact ? &tme->unexp_tag[ntx_tme_bucket(tag)] : &tme->unexp[tagged];

	ntx_list_foreach(q, it) {
		struct ntx_unexp *u = exact
			? ntx_container_of(it, struct ntx_unexp, tag_entry)
			: ntx_container_of(it, struct ntx_unexp, entry);

		if (claim_ctx) {
			if (u->claim_ctx == claim_ctx)
				return u;
			continue;
		}
		if (u->claim_ctx)
			continue;
		if (!ntx_tme_src_match(src, ntx_vc_fi_addr(u->vc)))
			continue;
		if (tagged && !ntx_tme_tag_match(tag, ignore, u->hdr.tag))
			continue;
		return u;
	}
	return NULL;
}


void ntx_tme_add_unexp(struct ntx_tme *tme, struct ntx_unexp *u)
{
	bool tagged = u->hdr.flags & NTX_PF_TAGGED;

	ntx_list_insert_tail(&tme->unexp[tagged], &u->entry);
	if (tagged)
		ntx_list_insert_tail(&tme->unexp_tag[ntx_tme_bucket(u->hdr.tag)],
				     &u->tag_entry);
	else
		ntx_list_init(&u->tag_entry);
}

void ntx_tme_del_unexp(struct ntx_unexp *u)
{
	ntx_list_remove(&u->entry);
	ntx_list_remove(&u->tag_entry);
}

static struct ntx_req *ntx_tme_find_ctx(struct ntx_list *q, void *context)
{
	struct ntx_list *it;

	ntx_list_foreach(q, it) {
		struct ntx_req *r = ntx_container_of(it, struct ntx_req, entry);

		if (r->context == context)
			return r;
	}
	return NULL;
}

struct ntx_req *ntx_tme_cancel(struct ntx_tme *tme, void *context)
{
	struct ntx_req *r = NULL;

	ntx_tme_lean_check(tme);
	for (int t = 0; t < 2 && !r; t++)
		r = ntx_tme_find_ctx(&tme->posted[t], context);
	for (int b = 0; b < NTX_TME_BUCKETS && !r; b++)
		r = ntx_tme_find_ctx(&tme->posted_tag[b], context);
	if (r)
		ntx_tme_unpost(tme, r);
	return r;
}

/* A lean receive as a request, not yet posted; NULL when no request can
 * be had. */
static struct ntx_req *ntx_tme_lean_req(struct ntx_tme *tme,
					const struct ntx_lean_recv *l)
{
	struct ntx_ep *ep = ntx_container_of(tme, struct ntx_ep, tme);
	struct ntx_req *r = ntx_req_get(ep, NTX_REQ_RECV);

	if (!r)
		return NULL;
	r->iov[0].iov_base = l->buf;
	r->iov[0].iov_len = l->len;
	ntx_req_set_recv(ep, r, 1, l->len, l->src, l->tag, l->ignore,
			 l->context, l->flags);
	return r;
}

void ntx_tme_lean_flush(struct ntx_tme *tme)
{
	struct ntx_ep *ep = ntx_container_of(tme, struct ntx_ep, tme);

	while (ntx_tme_lean_any(tme)) {
		struct ntx_lean_recv *l = ntx_tme_lean_head(tme);
		struct ntx_req *r = ntx_tme_lean_req(tme, l);

		if (r) {
			ntx_tme_queue(tme, r);
		} else {
			NTX_WARN(FI_LOG_EP_DATA,
				 "no memory to keep a posted receive\n");
			if (ep->rx_cq)
				ntx_cq_push_err(ep->rx_cq, l->context,
						FI_RECV | FI_TAGGED, 0, NULL,
						0, l->tag, 0, FI_ENOMEM,
						FI_ADDR_NOTAVAIL, NULL);
		}
		ntx_tme_lean_pop(tme);
	}
}

struct ntx_req *ntx_tme_lean_match(struct ntx_tme *tme, fi_addr_t src,
				   uint64_t tag)
{
	const struct ntx_lean_recv *l = ntx_tme_lean_head(tme);
	struct ntx_req *r;

	if (ntx_tme_lean_takes(l, src, tag)) {
		r = ntx_tme_lean_req(tme, l);
		if (r) {
			r->state = NTX_RS_POSTED; /* and matched at once */
			r->seq = ++tme->seq;
			ntx_tme_lean_pop(tme);
			return r;
		}
	}
	ntx_tme_lean_flush(tme);
	return NULL;
}
