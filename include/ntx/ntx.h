/*
 * The API header (DESIGN §2, top layer), for prov/api only: getinfo, the
 * fabric, the objects' open functions, the EQ, wait objects and the fi_ops
 * stubs. The objects' state lives below: ntx_core.h and ntx_engine.h.
 */
#ifndef NTX_H
#define NTX_H

#include "ntx/ntx_engine.h"

/* ---- getinfo (ntx_getinfo.c; the templates: ntx_getinfo_attr.c) ------------ */
int ntx_getinfo(uint32_t version, const char *node, const char *service,
		uint64_t flags, const struct fi_info *hints, struct fi_info **info);
extern const struct fi_tx_attr ntx_tx_attr;
extern const struct fi_rx_attr ntx_rx_attr;

/* ---- common object helpers --------------------------------------------- */
struct ntx_fabric {
	struct fid_fabric fab;
	atomic_int ref;
};


/* The network back end of a domain name: 0 and *ops NULL for shm,
 * -FI_EINVAL for a name ntx does not serve. */
struct ntx_be_ops;
int ntx_domain_net(const char *name, const struct ntx_be_ops **ops);

int ntx_fabric_open(struct fi_fabric_attr *attr, struct fid_fabric **fabric,
		    void *context);
int ntx_domain_open(struct fid_fabric *fabric, struct fi_info *info,
		    struct fid_domain **dom, void *context);
int ntx_av_open(struct fid_domain *domain, struct fi_av_attr *attr,
		struct fid_av **av, void *context);
int ntx_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr,
		struct fid_cq **cq, void *context);
int ntx_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr,
		struct fid_eq **eq, void *context);
/* The CQ holds an entry or an error (takes its lock). */
bool ntx_cq_pending(struct ntx_cq *cq);
int ntx_poll_open(struct fid_domain *domain, struct fi_poll_attr *attr,
		  struct fid_poll **pollset);
int ntx_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr,
		  struct fid_cntr **cntr, void *context);
int ntx_ep_open(struct fid_domain *domain, struct fi_info *info,
		struct fid_ep **ep, void *context);
int ntx_ep_getname(fid_t fid, void *addr, size_t *addrlen);
/* fi_ep_bind of an AV, CQ, counter, context or EQ, enabled or not. */
int ntx_ep_bind_obj(struct ntx_ep *ep, struct fid *bfid, uint64_t flags);
void ntx_ep_unbind_dir(struct ntx_ep *ep, bool tx);
/* ---- scalable endpoints (ntx_sep.c, DESIGN §3) --------------------------- */
int ntx_sep_open(struct fid_domain *domain, struct fi_info *info,
		 struct fid_ep **sep, void *context);
/* The domain of a scalable endpoint or of one of its contexts. */
struct ntx_domain *ntx_sep_domain(struct fid *fid);
extern struct fi_ops ntx_sep_ctx_fi_ops;
/* Domains whose names can list a scalable endpoint's contexts: ntx
 * names (not FI_SOCKADDR_IN) without flag bits of the back end's. */
static inline bool ntx_domain_sep_ok(const struct ntx_domain *dom)
{
	return !dom->sockaddr &&
	       !(dom->net_ops && dom->net_ops->names_use_flags);
}
ssize_t ntx_ep_cancel(fid_t fid, void *context);
/* An endpoint's attributes from fi_info and its empty engine state. */
void ntx_ep_init(struct ntx_ep *ep, struct ntx_domain *dom,
		 const struct fi_info *info);

/* ---- FI_MSG_PREFIX (ntx_prefix.c) ---------------------------------------- */
#define NTX_MSG_PREFIX 8 /* bytes, ep_attr->msg_prefix_size */
void ntx_prefix_ep_init(struct ntx_ep *ep, const struct fi_info *info);

/* ---- shared contexts (ntx_ctx.c) ----------------------------------------- */
int ntx_srx_open(struct fid_domain *domain, struct fi_rx_attr *attr,
		 struct fid_ep **rx_ep, void *context);
int ntx_stx_open(struct fid_domain *domain, struct fi_tx_attr *attr,
		 struct fid_stx **stx, void *context);
/* fi_ep_bind of a shared context, before fi_enable. */
int ntx_ctx_bind(struct ntx_ep *ep, struct fid *ctx, uint64_t flags);
/* At close: the references the bindings hold. */
void ntx_ctx_unbind(struct ntx_ep *ep);

/* ---- FI_EP_MSG (ntx_cm.c; passive endpoints: ntx_pep.c) ------------------ */
int ntx_pep_open(struct fid_fabric *fabric, struct fi_info *info,
		 struct fid_pep **pep, void *context);
/* A client's fi_info handle, when it is one of our open passive
 * endpoints (looked up, never read: it may be a connection request
 * already answered): 0 and its name, which it gives up (fi_msg_sockets'
 * "stolen" source address); 1 when it is none; -FI_EOPBADSTATE when it
 * listens or gave its name already. */
int ntx_pep_take_name(struct fid *handle, struct ntx_addr *name);
/* A MSG endpoint's name request: no service (the passive ep's). */
void ntx_msg_want(const struct fi_info *info, struct ntx_addr *want);
/* Makes an opened engine endpoint a MSG one (its private AV, its
 * fi_ops_cm); from_pep: its fi_info's handle was a passive endpoint whose
 * name it took (ntx_pep_take_name); any other handle must be a pending
 * connection request. */
int ntx_msg_ep_init(struct ntx_ep *ep, const struct fi_info *info,
		    bool from_pep);
int ntx_msg_bind_eq(struct ntx_ep *ep, struct fid_eq *eq);
void ntx_msg_ep_closing(struct ntx_ep *ep);
/* The MSG state of a closed endpoint (NULL: none). */
void ntx_msg_ep_free(void *ctx);
void *ntx_msg_ctx(struct ntx_ep *ep);
int ntx_msg_getopt(fid_t fid, int level, int optname, void *optval,
		   size_t *optlen);
int ntx_mr_reg(struct fid *fid, const void *buf, size_t len, uint64_t access,
	       uint64_t offset, uint64_t requested_key, uint64_t flags,
	       struct fid_mr **mr, void *context);
int ntx_mr_regv(struct fid *fid, const struct iovec *iov, size_t count,
		uint64_t access, uint64_t offset, uint64_t requested_key,
		uint64_t flags, struct fid_mr **mr, void *context);
int ntx_mr_regattr(struct fid *fid, const struct fi_mr_attr *attr,
		   uint64_t flags, struct fid_mr **mr);
int ntx_query_atomic(struct fid_domain *domain, enum fi_datatype datatype,
		     enum fi_op op, struct fi_atomic_attr *attr,
		     uint64_t flags);

extern struct fi_ops_msg ntx_msg_ops;
extern struct fi_ops_rma ntx_rma_ops;
extern struct fi_ops_atomic ntx_atomic_ops;
extern struct fi_ops_tagged ntx_tagged_ops;

/* ---- endpoints and their aliases (ntx_trigger.c) ------------------------- */
/* fi_ep_alias: the same endpoint with its own operation flags. An
 * alias, a scalable endpoint and its contexts (DESIGN §3, "Scalable
 * endpoints") start with one; its head is an endpoint's (struct
 * ntx_fep). */
struct ntx_alias {
	NTX_FEP_HEAD;
};
_Static_assert(offsetof(struct ntx_alias, real) ==
		       offsetof(struct ntx_alias, fep.real) &&
	       offsetof(struct ntx_alias, rx_op_flags) ==
		       offsetof(struct ntx_alias, fep.rx_op_flags),
	       "an alias's head read as struct ntx_fep (ntx_ep_of)");
extern struct fi_ops ntx_alias_fi_ops;

/* The endpoint an operation posted through fep acts on, and the default
 * flags of its operations: one load each, whatever fep is. */
static inline struct ntx_ep *ntx_ep_of(struct fid_ep *fep)
{
	return ntx_container_of(fep, struct ntx_fep, ep)->real;
}

static inline uint64_t ntx_fep_tx_flags(struct fid_ep *fep)
{
	return ntx_container_of(fep, struct ntx_fep, ep)->tx_op_flags;
}

static inline uint64_t ntx_fep_rx_flags(struct fid_ep *fep)
{
	return ntx_container_of(fep, struct ntx_fep, ep)->rx_op_flags;
}

/* FI_ALIAS (fi_ep_alias) of an endpoint. */
int ntx_ep_alias(struct ntx_ep *ep, struct fi_alias *alias);
/* fi_ops_ep calls of an alias, passed to its endpoint; a scalable
 * endpoint's context, an alias of its engine endpoint, uses them too. */
int ntx_alias_getopt(fid_t fid, int level, int name, void *val, size_t *len);
int ntx_alias_setopt(fid_t fid, int level, int name, const void *val,
		     size_t len);
ssize_t ntx_alias_rx_size_left(struct fid_ep *fep);
ssize_t ntx_alias_tx_size_left(struct fid_ep *fep);
/* Triggered operations (FI_TRIGGER): an RMA, send or atomic operation
 * deferred until a counter reaches a threshold; run from the API's
 * progress calls. Each takes the arguments of the call (copied). */
ssize_t ntx_trig_rma(struct ntx_ep *ep, uint8_t op, const struct iovec *iov,
		     size_t count, const struct fi_rma_iov *riov,
		     size_t rcount, fi_addr_t dest, uint64_t data,
		     void *context, uint64_t flags);
ssize_t ntx_trig_send(struct ntx_ep *ep, const struct iovec *iov,
		      size_t count, fi_addr_t dest, uint64_t tag,
		      uint64_t data, void *context, uint64_t flags);
ssize_t ntx_trig_atomic(struct ntx_ep *ep, int fn,
			const struct fi_msg_atomic *m,
			const struct fi_ioc *cmp, size_t cmp_count,
			const struct fi_ioc *res, size_t res_count,
			uint64_t flags);
/* The calls a trigger makes when it fires (ntx_msg.c, ntx_atomic.c). */
ssize_t ntx_msg_post_send(struct ntx_ep *ep, const struct iovec *iov,
			  size_t count, fi_addr_t dest, uint64_t tag,
			  uint64_t data, void *context, uint64_t flags);
ssize_t ntx_atomic_post(struct ntx_ep *ep, int fn,
			const struct fi_msg_atomic *m,
			const struct fi_ioc *cmp, size_t cmp_count,
			struct fi_ioc *res, size_t res_count, uint64_t flags);
void ntx_trig_run_slow(struct ntx_domain *dom);
static inline void ntx_trig_run(struct ntx_domain *dom)
{
	if (atomic_load_explicit(&dom->ntrig, memory_order_relaxed))
		ntx_trig_run_slow(dom);
}
/* Drops the endpoint's deferred operations (fi_close). */
void ntx_trig_purge(struct ntx_ep *ep);
/* ntx_rma_start of ntx_rma.c: the operation now. */
ssize_t ntx_rma_start(struct ntx_ep *ep, uint8_t op, const struct iovec *iov,
		      size_t count, const struct fi_rma_iov *riov,
		      size_t rcount, fi_addr_t dest, uint64_t data,
		      void *context, uint64_t flags, bool silent);

/* ---- EQ ------------------------------------------------------------------- */
struct ntx_eq;
int ntx_eq_report(struct fid_eq *eq, uint32_t event, const void *buf,
		  size_t len, int err, void *context);
/* An error event with error data (copied), e.g. a rejection's. */
int ntx_eq_report_err(struct fid_eq *eq, fid_t fid, int err,
		      const void *data, size_t len);
/* An endpoint whose connection events the EQ carries: reading the EQ
 * progresses it (manual control progress). */
struct ntx_eq_src {
	struct ntx_list entry;
	struct ntx_ep *ep;
	bool passive; /* a passive endpoint's: polled first, reported last */
};
void ntx_eq_src_add(struct fid_eq *eq, struct ntx_eq_src *src);
void ntx_eq_src_del(struct fid_eq *eq, struct ntx_eq_src *src);
/* fi_trywait for one object: -FI_EAGAIN when it has something to read. */
int ntx_cq_trywait(struct fid *fid);
int ntx_eq_trywait(struct fid *fid);
int ntx_cntr_trywait(struct fid *fid);
int ntx_wait_trywait(struct fid *fid);

/* ---- wait objects (ntx_waitobj.c, DESIGN §3 "Wait objects") ----------- */
/* What an object sleeps on: the hook a new kind of wake-up plugs into
 * (a doorbell eventfd of a back end's own joins a scope's sleep as that
 * back end's wait_fd; anything else gets ops of its own). */
struct ntx_waitobj_ops {
	/* Sleeps until the object may have news or timeout_ms passes (-1:
	 * no limit). ready(arg), when given, is asked once everything is
	 * armed and before sleeping: news that came while arming. */
	void (*sleep)(struct ntx_waitobj *w, int timeout_ms,
		      bool (*ready)(void *arg), void *arg);
	/* The fd FI_GETWAIT gives and a wait set holds, set up so that
	 * anything new makes it readable; 0 or -FI_ENOMEM. */
	int (*fd)(struct ntx_waitobj *w, int *fd);
	void (*close)(struct ntx_waitobj *w); /* undoes fd(); may be NULL */
};
/* A CQ's or counter's: its scope's back ends' wait fds and its signal;
 * FI_WAIT_YIELD and FI_WAIT_NONE yield the CPU instead. */
extern const struct ntx_waitobj_ops ntx_waitobj_scope_ops;
/* The signal alone, armed: an EQ's fd. */
int ntx_waitobj_signal_fd(struct ntx_waitobj *w, int *fd);

/* One blocking call: done(arg, &ret) makes progress and says whether
 * the call is over, with its answer; expired is the answer at the
 * deadline (-FI_EAGAIN, -FI_ETIMEDOUT); ready goes to ops->sleep. */
struct ntx_waitobj_call {
	bool (*done)(void *arg, ssize_t *ret);
	bool (*ready)(void *arg);
	void *arg;
	ssize_t expired;
};

/* Checks an open's wait_obj: -FI_ENOSYS for a kind ntx lacks,
 * -FI_EINVAL for FI_WAIT_SET without a set; logs under sub as what. */
int ntx_waitobj_check(enum fi_wait_obj kind, const struct fid_wait *set,
		      enum fi_log_subsys sub, const char *what);
/* Opens the signal; domain and scope are a CQ's or counter's, else
 * NULL. 0 or -FI_ENOMEM. */
int ntx_waitobj_init(struct ntx_waitobj *w, const struct ntx_waitobj_ops *ops,
		     enum fi_wait_obj kind, struct ntx_domain *domain,
		     struct ntx_scope *scope);
/* Over an fd of the caller's (fd < 0: -FI_ENOMEM), owned from now on:
 * FI_WAIT_FD, without a signal (a wait set's epoll set). */
int ntx_waitobj_init_fd(struct ntx_waitobj *w,
			const struct ntx_waitobj_ops *ops, int fd);
/* Last step of an open: FI_WAIT_SET joins set as member. */
int ntx_waitobj_join(struct ntx_waitobj *w, struct fid_wait *set,
		     struct fid *member);
void ntx_waitobj_fini(struct ntx_waitobj *w, struct fid *member);
/* Until c->done or timeout_ms (-1: no limit, 0: one try). */
ssize_t ntx_waitobj_wait(struct ntx_waitobj *w, int timeout_ms,
			 const struct ntx_waitobj_call *c);
/* FI_GETWAIT (FI_WAIT_FD only, else -FI_ENODATA) and FI_GETWAITOBJ;
 * -FI_ENOSYS for other commands. */
int ntx_waitobj_control(struct ntx_waitobj *w, int command, void *arg);

/* ---- wait sets (ntx_wait.c) ------------------------------------------------ */
int ntx_wait_open(struct fid_fabric *fabric, struct fi_wait_attr *attr,
		  struct fid_wait **waitset);
/* A CQ, counter or EQ opened with FI_WAIT_SET joins its set at open
 * (-FI_EINVAL: not an ntx wait set; its wait object's fd goes into the
 * set) and leaves it at close (ntx_waitobj_join, ntx_waitobj_fini). */
int ntx_wait_attach(struct fid_wait *ws, struct fid *member,
		    struct ntx_waitobj *w);
void ntx_wait_detach(struct fid_wait *ws, struct fid *member);

/* ---- stubs (ntx_stub.c) ---------------------------------------------------- */
/* Ops an object does not offer, one stub of the member's own type each
 * (-FI_ENOSYS unless noted in ntx_stub.c). */
const char *ntx_strerror(int prov_errno, char *buf, size_t len);
int ntx_no_bind(struct fid *fid, struct fid *bfid, uint64_t flags);
int ntx_no_control(struct fid *fid, int command, void *arg);
int ntx_no_ops_open(struct fid *fid, const char *name, uint64_t flags,
		    void **ops, void *context);
int ntx_no_tostr(const struct fid *fid, char *buf, size_t len);
int ntx_no_ops_set(struct fid *fid, const char *name, uint64_t flags,
		   void *ops, void *context);
int ntx_no_wait_open(struct fid_fabric *fabric, struct fi_wait_attr *attr,
		     struct fid_wait **waitset);
int ntx_no_domain2(struct fid_fabric *fabric, struct fi_info *info,
		   struct fid_domain **dom, uint64_t flags, void *context);
int ntx_no_stx_ctx(struct fid_domain *domain, struct fi_tx_attr *attr,
		   struct fid_stx **stx, void *context);
int ntx_no_srx_ctx(struct fid_domain *domain, struct fi_rx_attr *attr,
		   struct fid_ep **rx_ep, void *context);
int ntx_no_query_collective(struct fid_domain *domain,
			    enum fi_collective_op coll,
			    struct fi_collective_attr *attr, uint64_t flags);
int ntx_no_endpoint2(struct fid_domain *domain, struct fi_info *info,
		     struct fid_ep **ep, uint64_t flags, void *context);
int ntx_no_av_set(struct fid_av *av, struct fi_av_set_attr *attr,
		  struct fid_av_set **av_set, void *context);
int ntx_no_tx_ctx(struct fid_ep *sep, int index, struct fi_tx_attr *attr,
		  struct fid_ep **tx_ep, void *context);
int ntx_no_rx_ctx(struct fid_ep *sep, int index, struct fi_rx_attr *attr,
		  struct fid_ep **rx_ep, void *context);
ssize_t ntx_no_cancel(fid_t fid, void *context);
int ntx_no_setopt(fid_t fid, int level, int optname, const void *optval,
		  size_t optlen);
int ntx_no_getopt(fid_t fid, int level, int optname, void *optval,
		  size_t *optlen);
ssize_t ntx_no_rx_size_left(struct fid_ep *ep);
ssize_t ntx_no_tx_size_left(struct fid_ep *ep);
int ntx_no_setname(fid_t fid, void *addr, size_t addrlen);
int ntx_no_getpeer(struct fid_ep *ep, void *addr, size_t *addrlen);
int ntx_no_connect(struct fid_ep *ep, const void *addr, const void *param,
		   size_t paramlen);
int ntx_no_listen(struct fid_pep *pep);
int ntx_no_accept(struct fid_ep *ep, const void *param, size_t paramlen);
int ntx_no_reject(struct fid_pep *pep, fid_t handle, const void *param,
		  size_t paramlen);
int ntx_no_shutdown(struct fid_ep *ep, uint64_t flags);
int ntx_no_join(struct fid_ep *ep, const void *addr, uint64_t flags,
		struct fid_mc **mc, void *context);
extern struct fi_ops_fabric ntx_fabric_ops;

#endif /* NTX_H */
