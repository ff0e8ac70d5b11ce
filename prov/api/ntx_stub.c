/*
 * Operations an object does not offer answer -FI_ENOSYS (or -FI_EOPNOTSUPP
 * where the man page says so) instead of leaving a NULL pointer to crash
 * on. One stub per signature of an fi_ops member: a table entry called
 * through a pointer of another type would be undefined behaviour.
 */
#include "config.h"

#include "ntx/ntx.h"

/* prov_errno is an FI_E* code: its text, copied into buf when given. */
const char *ntx_strerror(int prov_errno, char *buf, size_t len)
{
	const char *s = fi_strerror(prov_errno < 0 ? -prov_errno : prov_errno);

	if (buf && len) {
		strncpy(buf, s, len - 1);
		buf[len - 1] = '\0';
		return buf;
	}
	return s;
}

int ntx_no_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	return -FI_ENOSYS;
}

int ntx_no_control(struct fid *fid, int command, void *arg)
{
	return -FI_ENOSYS;
}

int ntx_no_ops_open(struct fid *fid, const char *name, uint64_t flags,
		    void **ops, void *context)
{
	return -FI_ENOSYS;
}

int ntx_no_tostr(const struct fid *fid, char *buf, size_t len)
{
	return -FI_ENOSYS;
}

int ntx_no_ops_set(struct fid *fid, const char *name, uint64_t flags,
		   void *ops, void *context)
{
	return -FI_ENOSYS;
}

/* ---- fi_ops_fabric ---- */
int ntx_no_wait_open(struct fid_fabric *fabric, struct fi_wait_attr *attr,
		     struct fid_wait **waitset)
{
	return -FI_ENOSYS;
}

int ntx_no_domain2(struct fid_fabric *fabric, struct fi_info *info,
		   struct fid_domain **dom, uint64_t flags, void *context)
{
	return -FI_ENOSYS;
}

/* ---- fi_ops_domain ---- */
int ntx_no_stx_ctx(struct fid_domain *domain, struct fi_tx_attr *attr,
		   struct fid_stx **stx, void *context)
{
	return -FI_ENOSYS;
}

int ntx_no_srx_ctx(struct fid_domain *domain, struct fi_rx_attr *attr,
		   struct fid_ep **rx_ep, void *context)
{
	return -FI_ENOSYS;
}

/* fi_collective(3): a collective the provider does not offer is
 * -FI_EOPNOTSUPP, and ntx offers none. */
int ntx_no_query_collective(struct fid_domain *domain,
			    enum fi_collective_op coll,
			    struct fi_collective_attr *attr, uint64_t flags)
{
	return -FI_EOPNOTSUPP;
}

int ntx_no_endpoint2(struct fid_domain *domain, struct fi_info *info,
		     struct fid_ep **ep, uint64_t flags, void *context)
{
	return -FI_ENOSYS;
}

/* ---- fi_ops_av ---- */
int ntx_no_av_set(struct fid_av *av, struct fi_av_set_attr *attr,
		  struct fid_av_set **av_set, void *context)
{
	return -FI_ENOSYS;
}

/* ---- fi_ops_ep: contexts of endpoints that are not scalable ---- */
int ntx_no_tx_ctx(struct fid_ep *sep, int index, struct fi_tx_attr *attr,
		  struct fid_ep **tx_ep, void *context)
{
	return -FI_ENOSYS;
}

int ntx_no_rx_ctx(struct fid_ep *sep, int index, struct fi_rx_attr *attr,
		  struct fid_ep **rx_ep, void *context)
{
	return -FI_ENOSYS;
}

/* ---- fi_ops_ep: a passive endpoint moves no data ---- */
ssize_t ntx_no_cancel(fid_t fid, void *context)
{
	return -FI_ENOSYS;
}

int ntx_no_setopt(fid_t fid, int level, int optname, const void *optval,
		  size_t optlen)
{
	return -FI_ENOPROTOOPT;
}

int ntx_no_getopt(fid_t fid, int level, int optname, void *optval,
		  size_t *optlen)
{
	return -FI_ENOPROTOOPT;
}

ssize_t ntx_no_rx_size_left(struct fid_ep *ep)
{
	return -FI_ENOSYS;
}

ssize_t ntx_no_tx_size_left(struct fid_ep *ep)
{
	return -FI_ENOSYS;
}

/* ---- fi_ops_cm: RDM endpoints make no connections of their own ---- */
int ntx_no_setname(fid_t fid, void *addr, size_t addrlen)
{
	return -FI_ENOSYS;
}

int ntx_no_getpeer(struct fid_ep *ep, void *addr, size_t *addrlen)
{
	return -FI_ENOSYS;
}

int ntx_no_connect(struct fid_ep *ep, const void *addr, const void *param,
		   size_t paramlen)
{
	return -FI_ENOSYS;
}

int ntx_no_listen(struct fid_pep *pep)
{
	return -FI_ENOSYS;
}

int ntx_no_accept(struct fid_ep *ep, const void *param, size_t paramlen)
{
	return -FI_ENOSYS;
}

int ntx_no_reject(struct fid_pep *pep, fid_t handle, const void *param,
		  size_t paramlen)
{
	return -FI_ENOSYS;
}

int ntx_no_shutdown(struct fid_ep *ep, uint64_t flags)
{
	return -FI_ENOSYS;
}

int ntx_no_join(struct fid_ep *ep, const void *addr, uint64_t flags,
		struct fid_mc **mc, void *context)
{
	return -FI_ENOSYS;
}
