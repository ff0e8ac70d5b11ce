/*
 * Address vectors (FI_AV_MAP and FI_AV_TABLE alike: fi_addr is the slot
 * index). Inserts are validated; with an EQ bound they complete
 * asynchronously with an FI_AV_COMPLETE event.
 */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include <arpa/inet.h>
#include <ctype.h>
#include <netdb.h>
#include <netinet/in.h>

#include "ntx/ntx.h"

static int ntx_av_finish(struct ntx_av *av, int done, void *context)
{
	struct fi_eq_entry ev = { &av->av.fid, context, (uint64_t)done };

	if (!av->eq)
		return done;
	ntx_eq_report(av->eq, FI_AV_COMPLETE, &ev, sizeof(ev), 0, NULL);
	return 0;
}

/* Names in and out of the AV are FI_SOCKADDR_IN ones. */
static bool ntx_av_sin(const struct ntx_av *av)
{
	return av->domain->sockaddr && !av->ntx_names;
}

/* The next entry of an application's array, in the domain's format, at
 * *pos names into it: one name, or a scalable endpoint's list (DESIGN
 * §3, "Scalable endpoints") of *n names, which moves *pos past it. A
 * list that does not hold together leaves *n 0: where the next entry
 * would start is not known. */
static int ntx_av_parse(const struct ntx_av *av, const void *addr,
			size_t *pos, struct ntx_addr *out, size_t *n)
{
	const struct ntx_addr *a;
	int ret;

	*n = 1;
	if (ntx_av_sin(av))
		return ntx_addr_from_sin((const struct sockaddr_in *)addr +
					 (*pos)++, out);
	a = (const struct ntx_addr *)addr + *pos;
	if (a->magic != NTX_ADDR_MAGIC || a->version != NTX_ADDR_VERSION ||
	    ntx_addr_list_count(a) == 1) {
		(*pos)++;
		if (!ntx_addr_valid(a))
			return -FI_EINVAL;
		*out = *a;
		return 0;
	}
	*n = ntx_addr_list_count(a);
	ret = ntx_addr_list_parse(a, *n, out);
	if (ret) {
		NTX_WARN(FI_LOG_AV, "av insert: a scalable endpoint's name "
			 "list of %zu names does not hold together\n", *n);
		*n = 0;
		return ret;
	}
	*pos += *n;
	return 0;
}

/* With an EQ, an error event for the i-th address of an insert (the
 * entry's data is its index, as fi_av(3) says). */
static void ntx_av_report_err(struct ntx_av *av, size_t i, int err,
			      void *context)
{
	struct fi_eq_entry ev = { &av->av.fid, context, (uint64_t)i };

	if (av->eq)
		ntx_eq_report(av->eq, FI_AV_COMPLETE, &ev, sizeof(ev), -err,
			      context);
}

/* Stores the entry names[0..n) of insert i (ret 0) or records why it
 * could not (AV lock held). */
static int ntx_av_put(struct ntx_av *av, const struct ntx_addr *names,
		      size_t n, int ret, size_t i, fi_addr_t *fa,
		      void *context)
{
	if (!ret && n > 1 && av->shared.map)
		ret = -FI_EOPNOTSUPP; /* a named AV's slots hold one name */
	if (!ret)
		ret = ntx_av_table_add(av, names, fa);
	if (!ret && n > 1) {
		ret = ntx_av_table_set_list(av, *fa, names, (uint32_t)n);
		if (ret)
			ntx_av_table_del(av, *fa);
	}
	if (!ret && av->shared.map) {
		ret = ntx_av_shared_put(&av->shared, (uint32_t)*fa, names);
		if (ret)
			ntx_av_table_del(av, *fa);
	}
	if (!ret)
		return 0;
	NTX_WARN(FI_LOG_AV, "av insert %zu: %s\n", i, fi_strerror(-ret));
	*fa = FI_ADDR_NOTAVAIL;
	ntx_av_report_err(av, i, ret, context);
	return ret;
}

/* Inserts count entries: the application's (addr, parsed) or ours
 * (names, already checked, one name each). */
static int ntx_av_insert_n(struct ntx_av *av, const void *addr,
			   const struct ntx_addr *names, size_t count,
			   fi_addr_t *fi_addr, int *errs, void *context)
{
	struct ntx_addr list[NTX_SEP_CTX_MAX];
	size_t pos = 0, n = 1;
	int done = 0, ret = 0;
	fi_addr_t fa;

	ntx_mutex_lock(av->domain, &av->lock);
	for (size_t i = 0; i < count; i++) {
		if (names)
			list[0] = names[i];
		else if (n) /* after a broken list: the rest is unreadable */
			ret = ntx_av_parse(av, addr, &pos, list, &n);
		ret = ntx_av_put(av, list, n ? n : 1, ret, i, &fa, context);
		if (!ret)
			done++;
		if (fi_addr)
			fi_addr[i] = fa;
		if (errs)
			errs[i] = -ret;
	}
	ntx_mutex_unlock(av->domain, &av->lock);
	return ntx_av_finish(av, done, context);
}

static int ntx_av_insert(struct fid_av *fav, const void *addr, size_t count,
			 fi_addr_t *fi_addr, uint64_t flags, void *context)
{
	struct ntx_av *av = ntx_container_of(fav, struct ntx_av, av);
	int *errs = (flags & FI_SYNC_ERR) ? context : NULL;

	if ((count && !addr) || (flags & ~(FI_MORE | FI_SYNC_ERR)) ||
	    (errs && av->eq)) {
		NTX_WARN(FI_LOG_AV, "av insert: invalid arguments\n");
		return -FI_EINVAL;
	}
	if (av->read_only) {
		NTX_WARN(FI_LOG_AV, "av insert: AV opened FI_READ\n");
		return -FI_EOPBADSTATE;
	}
	return ntx_av_insert_n(av, addr, NULL, count, fi_addr, errs, context);
}

/* FI_SOCKADDR_IN: node's IPv4 address and the service as port. */
static int ntx_av_resolve_sin(const char *node, const char *service,
			      struct ntx_addr *out)
{
	struct addrinfo hints = { .ai_family = AF_INET,
				  .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV }, *ai;
	int ret;

	if (!node || !service || getaddrinfo(node, service, &hints, &ai))
		return -FI_EINVAL;
	ret = ntx_addr_from_sin((struct sockaddr_in *)ai->ai_addr, out);
	freeaddrinfo(ai);
	return ret;
}

/* node/service resolved the way fi_getinfo resolves them, in the AV's
 * domain. */
static int ntx_av_resolve(struct ntx_av *av, const char *node,
			  const char *service, struct ntx_addr *out)
{
	struct fi_domain_attr da = { .name = av->domain->name };
	struct fi_info hints = { .domain_attr = &da };
	struct fi_info *info = NULL;
	int ret;

	ret = ntx_av_sin(av)
		      ? ntx_av_resolve_sin(node, service, out)
		      : ntx_getinfo(NTX_FI_VERSION, node, service, 0, &hints, &info);
	if (ret) {
		NTX_WARN(FI_LOG_AV, "av: %s:%s does not resolve in domain "
			 "%s\n", node ? node : "", service ? service : "",
			 av->domain->name);
		return ret;
	}
	if (ntx_av_sin(av))
		return 0;
	*out = *(struct ntx_addr *)info->dest_addr;
	fi_freeinfo(info);
	return 0;
}

/* An address that did not resolve: FI_ADDR_NOTAVAIL, and with an EQ an
 * error event and a completion of none. */
static int ntx_av_unresolved(struct ntx_av *av, int err, fi_addr_t *fi_addr,
			     size_t n, void *context)
{
	for (size_t i = 0; i < n; i++) {
		if (fi_addr)
			fi_addr[i] = FI_ADDR_NOTAVAIL;
		ntx_av_report_err(av, i, err, context);
	}
	return ntx_av_finish(av, 0, context);
}

static int ntx_av_insertsvc(struct fid_av *fav, const char *node,
			    const char *service, fi_addr_t *fi_addr,
			    uint64_t flags, void *context)
{
	struct ntx_av *av = ntx_container_of(fav, struct ntx_av, av);
	struct ntx_addr name;
	int ret;

	if ((!node && !service) || (flags & ~FI_MORE) || av->read_only) {
		NTX_WARN(FI_LOG_AV, "av insertsvc: invalid arguments\n");
		return av->read_only ? -FI_EOPBADSTATE : -FI_EINVAL;
	}
	ret = ntx_av_resolve(av, node, service, &name);
	if (ret)
		return ntx_av_unresolved(av, ret, fi_addr, 1, context);
	return ntx_av_insert_n(av, NULL, &name, 1, fi_addr, NULL, context);
}

/* The i-th node of a symmetric range (fi_av_insertsym): an IPv4
 * address plus i, or a name whose trailing number (width kept) plus i. */
static int ntx_av_sym_node(const char *node, size_t i, char *buf,
			   size_t len)
{
	size_t n = strlen(node), d = n;
	struct in_addr in;
	unsigned long long v;

	if (inet_pton(AF_INET, node, &in) == 1) {
		in.s_addr = htonl(ntohl(in.s_addr) + (uint32_t)i);
		return inet_ntop(AF_INET, &in, buf, (socklen_t)len)
			       ? 0 : -FI_EINVAL;
	}
	while (d && isdigit((unsigned char)node[d - 1]))
		d--;
	if (d == n || n - d > 18) {
		if (i || snprintf(buf, len, "%s", node) >= (int)len)
			return -FI_EINVAL;
		return 0;
	}
	v = strtoull(node + d, NULL, 10) + i;
	if (snprintf(buf, len, "%.*s%0*llu", (int)d, node, (int)(n - d),
		     v) >= (int)len)
		return -FI_EINVAL;
	return 0;
}

/* Resolves nodecnt x svccnt names, node-major as the man page orders. */
static int ntx_av_sym_names(struct ntx_av *av, const char *node,
			    size_t nodecnt, unsigned long svc, size_t svccnt,
			    struct ntx_addr *names)
{
	char host[256], port[16];
	int ret;

	for (size_t i = 0; i < nodecnt; i++) {
		ret = ntx_av_sym_node(node, i, host, sizeof(host));
		if (ret) {
			NTX_WARN(FI_LOG_AV, "av insertsym: node %s + %zu has "
				 "no name\n", node, i);
			return -FI_EINVAL;
		}
		for (size_t j = 0; j < svccnt; j++) {
			snprintf(port, sizeof(port), "%lu", svc + j);
			ret = ntx_av_resolve(av, host, port,
					     &names[i * svccnt + j]);
			if (ret)
				return ret;
		}
	}
	return 0;
}

static int ntx_av_insertsym(struct fid_av *fav, const char *node,
			    size_t nodecnt, const char *service, size_t svccnt,
			    fi_addr_t *fi_addr, uint64_t flags, void *context)
{
	struct ntx_av *av = ntx_container_of(fav, struct ntx_av, av);
	unsigned long svc;
	struct ntx_addr *names;
	char *end;
	int ret;

	svc = service ? strtoul(service, &end, 10) : 0;
	if (!node || !service || !*service || *end || !nodecnt || !svccnt ||
	    nodecnt > NTX_IDTAB_MAX / svccnt || svc + svccnt > 65536 ||
	    (flags & ~FI_MORE) || av->read_only) {
		NTX_WARN(FI_LOG_AV, "av insertsym: invalid arguments\n");
		return av->read_only ? -FI_EOPBADSTATE : -FI_EINVAL;
	}
	names = calloc(nodecnt * svccnt, sizeof(*names));
	if (!names)
		return -FI_ENOMEM;
	ret = ntx_av_sym_names(av, node, nodecnt, svc, svccnt, names);
	if (ret)
		ret = ntx_av_unresolved(av, ret, fi_addr, nodecnt * svccnt,
					context);
	else
		ret = ntx_av_insert_n(av, NULL, names, nodecnt * svccnt,
				      fi_addr, NULL, context);
	free(names);
	return ret;
}

static int ntx_av_remove(struct fid_av *fav, fi_addr_t *fi_addr, size_t count,
			 uint64_t flags)
{
	struct ntx_av *av = ntx_container_of(fav, struct ntx_av, av);
	int ret = 0;

	if (flags || (count && !fi_addr) || av->read_only) {
		NTX_WARN(FI_LOG_AV, "av remove: invalid arguments\n");
		return av->read_only ? -FI_EOPBADSTATE : -FI_EINVAL;
	}
	ntx_mutex_lock(av->domain, &av->lock);
	for (size_t i = 0; i < count; i++) {
		if (ntx_av_table_del(av, fi_addr[i]))
			ret = -FI_EINVAL;
		else if (av->shared.map)
			ntx_av_shared_clear(&av->shared, (uint32_t)fi_addr[i]);
	}
	ntx_mutex_unlock(av->domain, &av->lock);
	return ret;
}

/* A name as the application sees it: ours, or FI_SOCKADDR_IN. */
static int ntx_av_export(const struct ntx_av *av, const struct ntx_addr *a,
			 void *out, size_t *len)
{
	struct sockaddr_in sin;
	int ret;

	if (!ntx_av_sin(av)) {
		memcpy(out, a, sizeof(*a));
		*len = sizeof(*a);
		return 0;
	}
	ret = ntx_addr_to_sin(a, &sin);
	if (ret)
		return ret;
	memcpy(out, &sin, sizeof(sin));
	*len = sizeof(sin);
	return 0;
}

static int ntx_av_lookup(struct fid_av *fav, fi_addr_t fi_addr, void *addr,
			 size_t *addrlen)
{
	struct ntx_av *av = ntx_container_of(fav, struct ntx_av, av);
	struct ntx_addr list[NTX_SEP_CTX_MAX];
	uint8_t buf[sizeof(list)];
	uint32_t n = 0;
	size_t len;
	int ret = 0;

	if (!addrlen || (*addrlen && !addr))
		return -FI_EINVAL;
	ntx_mutex_lock(av->domain, &av->lock);
	if (ntx_av_get(av, fi_addr)) {
		n = ntx_av_ctx_count(av, fi_addr);
		for (uint32_t i = 0; i < n; i++)
			list[i] = *ntx_av_get_ctx(av, fi_addr, i);
	}
	ntx_mutex_unlock(av->domain, &av->lock);
	if (!n)
		return -FI_ENOENT;
	if (n > 1 && !ntx_av_sin(av)) { /* the list fi_getname gave */
		ntx_addr_list_mark(list, n);
		len = n * sizeof(list[0]);
		memcpy(buf, list, len);
	} else {
		ret = ntx_av_export(av, &list[0], buf, &len);
	}
	if (ret)
		return ret;
	memcpy(addr, buf, *addrlen < len ? *addrlen : len);
	*addrlen = len;
	return 0;
}

/* fi_av_straddr: "fi_sockaddr_in://IP:PORT" or our fi_ntx:// form. */
static int ntx_av_tostr(const struct ntx_av *av, const void *addr, char *buf,
			size_t len)
{
	const struct sockaddr_in *sin = addr;
	char ip[INET_ADDRSTRLEN];

	if (!ntx_av_sin(av))
		return ntx_addr_to_str(addr, buf, len);
	if (sin->sin_family != AF_INET ||
	    !inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip))) {
		NTX_WARN(FI_LOG_AV, "av straddr: not an AF_INET address\n");
		return snprintf(buf, len, "fi_sockaddr_in://(invalid)");
	}
	return snprintf(buf, len, "fi_sockaddr_in://%s:%u", ip,
			ntohs(sin->sin_port));
}

static const char *ntx_av_straddr(struct fid_av *fav, const void *addr,
				  char *buf, size_t *len)
{
	struct ntx_av *av = ntx_container_of(fav, struct ntx_av, av);
	char tmp[NTX_ADDR_STRLEN];
	int n;

	if (!addr || !len) {
		NTX_WARN(FI_LOG_AV, "av straddr: no address or length\n");
		return NULL;
	}
	n = ntx_av_tostr(av, addr, tmp, sizeof(tmp));
	if (buf && *len)
		snprintf(buf, *len, "%s", tmp);
	*len = (size_t)n + 1;
	return buf;
}

static int ntx_av_close(struct fid *fid)
{
	struct ntx_av *av = ntx_container_of(fid, struct ntx_av, av.fid);

	if (atomic_load(&av->ref)) {
		NTX_WARN(FI_LOG_AV, "AV is still bound to an endpoint\n");
		return -FI_EBUSY;
	}
	ntx_ref_put(&av->domain->ref);
	ntx_av_table_fini(av);
	ntx_av_shared_close(&av->shared);
	pthread_mutex_destroy(&av->lock);
	free(av);
	return 0;
}

static int ntx_av_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	struct ntx_av *av = ntx_container_of(fid, struct ntx_av, av.fid);

	if (!bfid || bfid->fclass != FI_CLASS_EQ || flags)
		return -FI_EINVAL;
	av->eq = ntx_container_of(bfid, struct fid_eq, fid);
	return 0;
}

static struct fi_ops ntx_av_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ntx_av_close,
	.bind = ntx_av_bind,
	.control = ntx_no_control,
	.ops_open = ntx_no_ops_open,
	.tostr = ntx_no_tostr,
	.ops_set = ntx_no_ops_set,
};

static struct fi_ops_av ntx_av_ops = {
	.size = sizeof(struct fi_ops_av),
	.insert = ntx_av_insert,
	.insertsvc = ntx_av_insertsvc,
	.insertsym = ntx_av_insertsym,
	.remove = ntx_av_remove,
	.lookup = ntx_av_lookup,
	.straddr = ntx_av_straddr,
	.av_set = ntx_no_av_set,
};

/* A named AV (fi_av(3) name, FI_READ, map_addr): created here, or with
 * FI_READ opened read-only from the process that created it. */
static int ntx_av_open_shared(struct ntx_av *av, struct fi_av_attr *attr)
{
	uint32_t cap = attr->count ? (uint32_t)(attr->count < NTX_AVS_MAX
						 ? attr->count : NTX_AVS_MAX)
				   : NTX_AVS_DEFAULT;
	int ret;

	if (!attr->name)
		return 0;
	if (!ntx_named_valid(attr->name)) {
		NTX_WARN(FI_LOG_AV, "AV name: 1 to %d of [A-Za-z0-9._-]\n",
			 NTX_NAMED_MAX);
		return -FI_EINVAL;
	}
	av->read_only = attr->flags & FI_READ;
	ret = av->read_only ? ntx_av_shared_open(&av->shared, attr->name)
			    : ntx_av_shared_create(&av->shared, attr->name, cap);
	if (ret) {
		NTX_WARN(FI_LOG_AV, "AV %s: %s%s\n", attr->name,
			 fi_strerror(-ret), ret == -FI_EADDRINUSE
			 ? " (another process created it: open it FI_READ)"
			 : "");
		return ret;
	}
	if (!attr->map_addr)
		attr->map_addr = ntx_av_shared_order(&av->shared);
	return 0;
}

int ntx_av_open(struct fid_domain *domain, struct fi_av_attr *attr,
		struct fid_av **out, void *context)
{
	struct ntx_domain *dom = ntx_container_of(domain, struct ntx_domain,
						  dom);
	struct ntx_av *av;
	int ret;

	if (!attr || !out)
		return -FI_EINVAL;
	if ((attr->type != FI_AV_UNSPEC && attr->type != FI_AV_MAP &&
	     attr->type != FI_AV_TABLE) || attr->rx_ctx_bits < 0 ||
	    attr->rx_ctx_bits > NTX_AV_RX_CTX_BITS_MAX ||
	    (attr->flags & ~(FI_EVENT | FI_SYMMETRIC | FI_READ)) ||
	    ((attr->flags & FI_READ) && !attr->name)) {
		NTX_WARN(FI_LOG_AV, "unsupported AV attributes\n");
		return -FI_EINVAL;
	}
	av = calloc(1, sizeof(*av));
	if (!av)
		return -FI_ENOMEM;
	av->type = attr->type == FI_AV_UNSPEC ? FI_AV_MAP : attr->type;
	av->domain = dom;
	av->rx_ctx_bits = attr->rx_ctx_bits;
	ret = ntx_av_open_shared(av, attr);
	if (ret) {
		free(av);
		return ret;
	}
	pthread_mutex_init(&av->lock, NULL);
	av->av.fid.fclass = FI_CLASS_AV;
	av->av.fid.context = context;
	av->av.fid.ops = &ntx_av_fi_ops;
	av->av.ops = &ntx_av_ops;
	ntx_ref_get(&dom->ref);
	*out = &av->av;
	return 0;
}
