/*
 * Completion scopes (DESIGN §3, progress): the endpoints a CQ or counter
 * progresses, a list with no cap. Their progress is the engine's.
 */
#include "config.h"
#include <stdlib.h>

#include "ntx/ntx_core.h"

void ntx_scope_init(struct ntx_scope *s)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
}

void ntx_scope_fini(struct ntx_scope *s)
{
	free(s->eps);
	pthread_mutex_destroy(&s->lock);
}

int ntx_scope_add(struct ntx_domain *d, struct ntx_scope *s,
		  struct ntx_ep *ep)
{
	struct ntx_ep **eps;

	ntx_cmutex_lock_rank(d, &s->lock, NTX_LOCK_SCOPE);
	for (size_t i = 0; i < s->n; i++) {
		if (s->eps[i] == ep) {
			ntx_cmutex_unlock(d, &s->lock);
			return 0;
		}
	}
	eps = realloc(s->eps, (s->n + 1) * sizeof(*eps));
	if (eps) {
		eps[s->n++] = ep;
		s->eps = eps;
	}
	s->only = s->n == 1 && !s->whole_domain ? s->eps[0] : NULL;
	ntx_cmutex_unlock(d, &s->lock);
	return eps ? 0 : -FI_ENOMEM;
}

/* After this no progress of the scope touches the endpoint: a poller
 * that is progressing it holds the lock until it is done. */
void ntx_scope_del(struct ntx_domain *d, struct ntx_scope *s,
		   struct ntx_ep *ep)
{
	ntx_cmutex_lock_rank(d, &s->lock, NTX_LOCK_SCOPE);
	for (size_t i = 0; i < s->n; i++) {
		if (s->eps[i] == ep) {
			s->eps[i] = s->eps[--s->n];
			break;
		}
	}
	s->only = s->n == 1 && !s->whole_domain ? s->eps[0] : NULL;
	ntx_cmutex_unlock(d, &s->lock);
}
