/*
 * Tag-matching engine: posted-receive and unexpected-message queues per
 * endpoint, tagged and untagged apart, with libfabric's semantics
 * (tag/ignore, FI_ADDR_UNSPEC or directed source, FIFO per peer, claims).
 * Matching walks the queues in post/arrival order, which keeps the order
 * between wildcard and exact receives.
 */
#include "config.h"

#include "ntx/ntx_engine.h"

void ntx_tme_init(struct ntx_tme *tme)
{
	for (int i = 0; i < 2; i++) {
		ntx_list_init(&tme->posted[i]);
		ntx_list_init(&tme->unexp[i]);
	}
}

static bool ntx_tme_tag_match(uint64_t want, uint64_t ignore, uint64_t tag)
{
	return ((want ^ tag) & ~ignore) == 0;
}

static bool ntx_tme_src_match(fi_addr_t want, fi_addr_t src)
{
	return want == FI_ADDR_UNSPEC || want == src;
}

/* Finds and dequeues the first posted receive that takes this message
 * (a multi-receive buffer stays posted while it has room). */
struct ntx_req *ntx_tme_match_posted(struct ntx_tme *tme, bool tagged,
				     fi_addr_t src, uint64_t tag,
				     size_t msg_len)
{
	struct ntx_list *it;

	ntx_list_foreach(&tme->posted[tagged], it) {
		struct ntx_req *r = ntx_container_of(it, struct ntx_req, entry);

		if (!ntx_tme_src_match(r->addr, src))
			continue;
		if (tagged && !ntx_tme_tag_match(r->tag, r->ignore, tag))
			continue;
		if (!(r->flags & FI_MULTI_RECV))
			ntx_list_remove(&r->entry);
		return r;
	}
	return NULL;
}

struct ntx_unexp *ntx_tme_match_unexp(struct ntx_tme *tme, bool tagged,
				      fi_addr_t src, uint64_t tag,
				      uint64_t ignore, void *claim_ctx)
{
	struct ntx_list *it;

	ntx_list_foreach(&tme->unexp[tagged], it) {
		struct ntx_unexp *u = ntx_container_of(it, struct ntx_unexp,
						       entry);

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

void ntx_tme_post(struct ntx_tme *tme, struct ntx_req *req)
{
	req->state = NTX_RS_POSTED;
	ntx_list_insert_tail(&tme->posted[!!(req->flags & FI_TAGGED)],
			     &req->entry);
}

struct ntx_req *ntx_tme_cancel(struct ntx_tme *tme, void *context)
{
	struct ntx_list *it;

	for (int t = 0; t < 2; t++) {
		ntx_list_foreach(&tme->posted[t], it) {
			struct ntx_req *r = ntx_container_of(it, struct ntx_req,
							     entry);
			if (r->context == context) {
				ntx_list_remove(&r->entry);
				return r;
			}
		}
	}
	return NULL;
}
