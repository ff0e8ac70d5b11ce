/*
 * Inside FI_EP_MSG (prov/api only): what ntx_cm.c (MSG endpoints) and
 * ntx_pep.c (passive endpoints) share: the connection requests a passive
 * endpoint holds and a MSG endpoint answers, and the CM events.
 */
#ifndef NTX_CM_H
#define NTX_CM_H

#include "ntx/ntx.h"

#define NTX_CONNREQ_MAGIC 0x6e74785f63726571ull

/* A connection request, the handle of an FI_CONNREQ event's fi_info. The
 * live ones are listed, so that a handle is checked before use. */
struct ntx_connreq {
	struct fid fid;
	uint64_t magic;
	struct ntx_list entry;
	struct ntx_pep *pep; /* NULL once it closed */
	bool taken;          /* an endpoint was opened from it */
	struct ntx_addr client;
	uint64_t cid;
};

/* The live requests (ntx_creqs) and the open passive endpoints, with each
 * one's count of pending requests, are under ntx_creq_lock. */
extern pthread_mutex_t ntx_creq_lock;
extern struct ntx_list ntx_creqs;
/* ntx_creq_lock held: the live request of a handle, or NULL. */
struct ntx_connreq *ntx_creq_find(const struct fid *handle);
/* ntx_creq_lock held: the request answered or dropped, and freed. */
void ntx_creq_free(struct ntx_connreq *c);

/* A CM event (FI_CONNREQ, FI_CONNECTED, FI_SHUTDOWN) with its
 * connection data; info is the event's (freed if the event is lost). */
void ntx_cm_event(struct fid_eq *eq, uint32_t event, fid_t fid,
		  struct fi_info *info, const void *data, size_t len);
/* 1 when connection data fits what fi_connect, fi_accept and fi_reject
 * carry; 0 (logged) when not. */
int ntx_cm_data_ok(const void *param, size_t len);

#endif /* NTX_CM_H */
