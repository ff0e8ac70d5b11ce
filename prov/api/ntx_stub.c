/*
 * Operations an object does not offer answer -FI_ENOSYS (or -FI_EOPNOTSUPP
 * for fid operations) instead of leaving a NULL pointer to crash on.
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

ssize_t ntx_nosys(void)
{
	return -FI_ENOSYS;
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
