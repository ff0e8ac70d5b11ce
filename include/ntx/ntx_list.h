/*
 * Intrusive doubly linked list with a sentinel head. Every queue of the
 * engine (posted receives, unexpected messages, backlogs) is one of these.
 */
#ifndef NTX_LIST_H
#define NTX_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct ntx_list {
	struct ntx_list *next, *prev;
};

static inline void ntx_list_init(struct ntx_list *h)
{
	h->next = h->prev = h;
}

static inline bool ntx_list_empty(const struct ntx_list *h)
{
	return h->next == h;
}

static inline void ntx_list_insert_tail(struct ntx_list *h, struct ntx_list *e)
{
	e->prev = h->prev;
	e->next = h;
	h->prev->next = e;
	h->prev = e;
}

static inline void ntx_list_insert_head(struct ntx_list *h, struct ntx_list *e)
{
	e->next = h->next;
	e->prev = h;
	h->next->prev = e;
	h->next = e;
}

/* Takes e off its list and leaves its links as they were: for an entry
 * that goes straight onto another list (or a free stack). */
static inline void ntx_list_unlink(struct ntx_list *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
}

static inline void ntx_list_remove(struct ntx_list *e)
{
	ntx_list_unlink(e);
	e->next = e->prev = e;
}

/* Moves every entry of from, in order, to the tail of h; from is left
 * empty. */
static inline void ntx_list_splice_tail(struct ntx_list *h,
					struct ntx_list *from)
{
	if (ntx_list_empty(from))
		return;
	from->next->prev = h->prev;
	h->prev->next = from->next;
	from->prev->next = h;
	h->prev = from->prev;
	ntx_list_init(from);
}

#define ntx_list_first(h) ((h)->next)
#define ntx_list_foreach_safe(h, it, tmp) \
	for ((it) = (h)->next, (tmp) = (it)->next; (it) != (h); \
	     (it) = (tmp), (tmp) = (it)->next)
#define ntx_list_foreach(h, it) \
	for ((it) = (h)->next; (it) != (h); (it) = (it)->next)

#endif /* NTX_LIST_H */
