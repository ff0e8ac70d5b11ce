/*
 * The receiving side of the ntb rings (DESIGN §4, a ring and finding
 * work): draining a peer's ring in our window (whole entries, halves and
 * quarters), the poll over few peers or by the ready bitmap with its hot
 * ring, the idle watch, and arming before sleep.
 */
#include "config.h"

#include "ntx_ntb_int.h"
#include "ntx/ntx_sha256.h"

#define NTX_NTB_DIRECT_POLL 4 /* peers polled without the ready bitmap */
#define NTX_NTB_DRAIN_MAX 64  /* entries one ring yields per poll */
#define NTX_NTB_BITS_CLEAR_NS 10000000ull /* idle ready bits kept 10 ms */
#define NTX_NTB_HOT_RUNS 16 /* drains of the hot ring in a row, at most */
/* Empty polls in a row before the watch is built: after the second, the
 * MPI 8-byte allreduce and alltoall at np 2 read about 1.0 of vader's;
 * after the third 0.97 (the watch is built in fewer of their short waits)
 * with the same latency; after the fourth 0.95, but the ping-pong's
 * latency 5 % worse. */
#define NTX_NTB_QUIET_AFTER 3

/* Tells the peer how far we consumed, every quarter ring (as soon as a
 * whole entry completes one, else after the drain): the sender
 * re-reads it only when the ring looks full, and at most n/4 - 1 lines are
 * ever unpublished, so it never stalls. Inline: every drain asks. */
static inline __attribute__((always_inline)) void
ntx_ntb_publish_cons(struct ntx_shm_conn *c)
{
	if (c->rx_pub_left > 0)
		return;
	/* release: we are done reading the lines before the peer may
	 * overwrite them */
	atomic_store_explicit(&ntx_win_ctl(&c->pwin, c->peer_slot)->cons,
			      c->rx_pos, memory_order_release);
	c->rx_pub_left = (int32_t)(c->be->win.g.ring_lines / 4);
}

/* A consumed entry's payload lines where a later entry can start must
 * never read as a header when the ring comes round: clear their sequence
 * words. Old header lines need nothing, their numbers are behind.
 * Ordered before the peer may reuse the lines by the release of our
 * consumer position. */
static void ntx_ntb_clear_payload(struct ntx_win_entry *e, uint32_t lines)
{
	for (uint32_t k = NTX_RING_ALIGN; k < lines; k += NTX_RING_ALIGN)
		atomic_store_explicit(&((struct ntx_win_entry *)
					((uint8_t *)e + (size_t)k *
					 NTX_CACHELINE))->seq, 0,
				      memory_order_relaxed);
}

/* The line at our position in the peer's ring. */
static inline struct ntx_win_entry *ntx_ntb_rx_entry(
	const struct ntx_shm_conn *c)
{
	return (struct ntx_win_entry *)((uint8_t *)c->rx_ring +
					(size_t)c->rx_pos * NTX_CACHELINE);
}

/* Asks for the line k lines past entry e, for a read: past the ring's
 * end it names lines outside the ring, which a prefetch may (it never
 * faults), and costs no test of the wrap on every entry. */
static inline void ntx_ntb_rx_prefetch(const struct ntx_win_entry *e,
				       uint32_t k)
{
	__builtin_prefetch((const uint8_t *)e + (size_t)k * NTX_CACHELINE);
}

/* The next entry is the part right after the last one, in its line.
 * Acquire, as below. */
static inline bool ntx_ntb_rx_pair_ready(const struct ntx_shm_conn *c)
{
	return c->rx_next &&
	       atomic_load_explicit(&c->rx_next->seq, memory_order_acquire) ==
		       c->rx_seq + 1;
}

/* The next entry is at our position. Acquire: its body was written
 * before its number; any other number (stale or garbage) means not yet. */
static inline bool ntx_ntb_rx_line_ready(const struct ntx_shm_conn *c)
{
	return atomic_load_explicit(&ntx_ntb_rx_entry(c)->seq,
				    memory_order_acquire) == c->rx_seq + 1;
}

/* The next entry is there, at our position or right after the last part
 * in its line. Inline,
 * so that polling an idle ring costs a load or two and no call. */
static inline bool ntx_ntb_rx_ready(const struct ntx_shm_conn *c)
{
	return ntx_ntb_rx_pair_ready(c) || ntx_ntb_rx_line_ready(c);
}

/* An entry no sender of ours writes: the connection fails. */
static void ntx_ntb_bad_entry(struct ntx_shm_conn *c)
{
	NTX_WARN(FI_LOG_EP_DATA, "peer pid %u sent a bad entry\n",
		 c->peer.pid);
	ntx_ntb_conn_fail(c, -FI_EREMOTEIO);
}

/* The part q, whose kind the caller read once: its fields copied out
 * once (the peer can still write them), checked, and handed on as the
 * eager message it stands for; a quarter's tag and CQ data are those of
 * the last half. The next part is looked for right after it. False when
 * it failed the connection. */
static inline __attribute__((always_inline)) bool
ntx_ntb_rx_part(struct ntx_shm_conn *c, struct ntx_win_quarter *q,
		uint32_t kind, bool first)
{
	const struct ntx_win_half *w = (const struct ntx_win_half *)q;
	uint32_t len = kind & 0xff;
	uint8_t flags = (uint8_t)(kind >> 8), *next;
	uint64_t bytes, tag, data;

	if ((kind & ~(NTX_WIN_HALF | NTX_WIN_SHORT |
		      (NTX_PF_TAGGED | NTX_PF_DATA) << 8 | 0xffu)) ||
	    len > NTX_WIN_HALF_MAX)
		goto bad;
	if (kind & NTX_WIN_SHORT) {
		next = (uint8_t *)(q + 1);
		memcpy(&bytes, q->bytes, sizeof(bytes));
		tag = c->rx_last_tag;
		data = c->rx_last_data;
	} else {
		/* a half fits where it starts at most half a line in (first:
		 * at the start; else lines are aligned: the offset in the
		 * line is the address's) */
		if (!first &&
		    (uintptr_t)q % NTX_CACHELINE > NTX_CACHELINE / 2)
			goto bad;
		next = (uint8_t *)(w + 1);
		memcpy(&bytes, w->bytes, sizeof(bytes));
		c->rx_last_tag = tag = w->tag;
		c->rx_last_data = data = w->data;
	}
	c->rx_next = (uintptr_t)next % NTX_CACHELINE
			     ? (struct ntx_win_quarter *)next
			     : NULL;
	c->be->cb.recv_small(c->vc, flags, tag, data, bytes, len);
	return true;
bad:
	ntx_ntb_bad_entry(c);
	return false;
}

static bool ntx_ntb_rx_bulk(struct ntx_shm_conn *c, struct ntx_win_entry *e,
			    uint32_t len);

/* Drains the peer's ring in our window; returns entries handled, at most
 * NTX_NTB_DRAIN_MAX, so one busy peer cannot hold the poll. Inline into
 * the poll of few peers (ntx_ntb_poll_from), out of line elsewhere. */
static inline __attribute__((always_inline)) int
ntx_ntb_drain_inline(struct ntx_shm_conn *c, bool ready)
{
	struct ntx_shm_ep *be = c->be;
	struct ntx_win_entry *e;
	struct ntx_wire_hdr hdr;
	uint32_t len, lines, n = be->win.g.ring_lines, seq0 = c->rx_seq;
	int cnt = 0;

	ntx_ntb_quiet_off(be); /* its position moves */
	while (c->state == NTX_CONN_CONNECTED && cnt < NTX_NTB_DRAIN_MAX) {
		/* the sender's next entry after a part is right after it
		 * or at our position: the part first, as it was only
		 * written if nothing was written after the last */
		if (ntx_ntb_rx_pair_ready(c)) {
			c->rx_seq++;
			ready = false;
			if (!ntx_ntb_rx_part(c, c->rx_next, c->rx_next->kind,
					     false))
				return cnt;
			cnt++;
			continue;
		}
		/* ready: the caller saw the first entry there (at our
		 * position: a part in the last line would have been taken
		 * above) */
		if (!ready && !ntx_ntb_rx_line_ready(c))
			break;
		ready = false;
		e = ntx_ntb_rx_entry(c);
		c->rx_seq++;
		c->rx_next = NULL;
		len = e->len;
		if (__builtin_expect(c->seal && c->seal->rx, 0)) {
			if (!ntx_ntb_rx_sealed(c, e, len))
				return cnt;
			cnt += len != NTX_WIN_SKIP;
			continue;
		}
		if (len == NTX_WIN_SKIP) { /* the rest of the lap is unused */
			c->rx_pub_left -= (int32_t)(n - c->rx_pos);
			c->rx_pos = 0;
			continue;
		}
		if (ntx_win_is_half(len)) { /* a part: len is its kind */
			c->rx_pos = ntx_ring_advance(c->rx_pos, NTX_RING_ALIGN,
						     n);
			c->rx_pub_left -= NTX_RING_ALIGN;
			ntx_ntb_rx_prefetch(e, 3 * NTX_RING_ALIGN);
			if (!ntx_ntb_rx_part(c, ntx_win_part(e, 0), len, true))
				return cnt;
			cnt++;
			continue;
		}
		if (__builtin_expect(len > be->win.max_payload, 0)) {
			if (!ntx_ntb_rx_bulk(c, e, len))
				return cnt;
			cnt++;
			continue;
		}
		lines = ntx_ring_lines(len);
		if (c->rx_pos + lines > n) {
			ntx_ntb_bad_entry(c);
			return cnt;
		}
		ntx_wire_hdr_load(&hdr, &e->hdr);
		c->rx_pos = ntx_ring_advance(c->rx_pos, lines, n);
		c->rx_pub_left -= (int32_t)lines;
		/* ask for the line two small entries past the next one
		 * while the engine handles this entry: a sender ahead of us
		 * has written it, and its miss then overlaps (8-byte windows
		 * 43.4 -> 38.6 ns a message); the next entry's own line may
		 * still be in the sender's store buffer. A read prefetch
		 * changes nothing the sender could see. */
		ntx_ntb_rx_prefetch(e, lines + 2 * NTX_RING_ALIGN);
		be->cb.recv(c->vc, &hdr, e->payload, len);
		ntx_ntb_clear_payload(e, lines);
		cnt++;
		/* a quarter ring consumed: told now, not after the drain, so
		 * a sender streaming a message (NTX_OP_SDATA) writes its next
		 * segment while we copy out this one */
		if (c->rx_pub_left <= 0 && c->state == NTX_CONN_CONNECTED)
			ntx_ntb_publish_cons(c);
	}
	/* nothing consumed, nothing new to tell */
	if (c->rx_seq != seq0 && c->state == NTX_CONN_CONNECTED)
		ntx_ntb_publish_cons(c);
	return cnt;
}

/* The entry e at our position, whose length word len is above any
 * ring entry's: a bulk entry (NTX_WIN_BULK), its payload taken from the
 * peer's bulk area in our window where both sides work out it lies
 * (ntx_ring.h), and how far we are done with the area told at once;
 * anything else fails the connection. False when it failed. */
static __attribute__((noinline)) bool
ntx_ntb_rx_bulk(struct ntx_shm_conn *c, struct ntx_win_entry *e, uint32_t len)
{
	struct ntx_shm_ep *be = c->be;
	uint32_t size = be->win.g.bulk_size, n = be->win.g.ring_lines;
	uint32_t blen = len & ~NTX_WIN_BULK, lines = ntx_ring_lines(0);
	uint32_t off, skip, used = (uint32_t)ntx_align(blen, NTX_CACHELINE);
	struct ntx_wire_hdr hdr;

	if (!(len & NTX_WIN_BULK) || !c->rx_bulk || !blen ||
	    blen > ntx_win_bulk_seg(size) || c->rx_pos + lines > n) {
		ntx_ntb_bad_entry(c);
		return false;
	}
	off = ntx_win_bulk_place(c->rx_bulk_pos, size, blen, &skip);
	ntx_wire_hdr_load(&hdr, &e->hdr);
	c->rx_pos = ntx_ring_advance(c->rx_pos, lines, n);
	c->rx_pub_left -= (int32_t)lines;
	be->cb.recv(c->vc, &hdr, c->rx_bulk + off, blen);
	c->rx_bulk_pos += skip + used;
	if (c->state != NTX_CONN_CONNECTED)
		return true;
	/* release: we are done reading the bytes before it */
	atomic_store_explicit(&ntx_win_ctl(&c->pwin, c->peer_slot)->bulk_cons,
			      c->rx_bulk_pos, memory_order_release);
	if (c->rx_pub_left <= 0)
		ntx_ntb_publish_cons(c);
	return true;
}

/* The entry e at our position on a connection whose peer's side is
 * sealed (len: its length word, read once): copied out of the window
 * whole, header first, with its MAC; checked; handed on from the copy.
 * Anything that is not a whole entry or a skip with the right MAC fails
 * the connection: nobody but the peer, which holds the session key,
 * writes an entry we take. False when it failed the connection. */
bool ntx_ntb_rx_sealed(struct ntx_shm_conn *c, struct ntx_win_entry *e,
		       uint32_t len)
{
	struct ntx_ntb_seal *s = c->seal;
	struct ntx_shm_ep *be = c->be;
	const size_t hl = sizeof(struct ntx_wire_hdr);
	uint32_t lines, n = be->win.g.ring_lines;
	uint8_t want[NTX_SEAL_TAG], got[NTX_SEAL_TAG];
	struct ntx_wire_hdr hdr;
	struct iovec iov;

	if (len == NTX_WIN_SKIP) {
		memcpy(got, &e->hdr, sizeof(got));
		ntx_ntb_seal_mac(s, s->rx_side, c->rx_seq, NTX_WIN_SKIP, NULL,
				 NULL, 0, want);
		if (!ntx_mem_equal(want, got, sizeof(want)))
			goto forged;
		c->rx_pub_left -= (int32_t)(n - c->rx_pos);
		c->rx_pos = 0;
		return true;
	}
	if (ntx_win_is_half(len) || len + NTX_SEAL_TAG > be->win.max_payload) {
		ntx_ntb_bad_entry(c);
		return false;
	}
	lines = ntx_ring_lines(len + NTX_SEAL_TAG);
	if (c->rx_pos + lines > n) {
		ntx_ntb_bad_entry(c);
		return false;
	}
	memcpy(s->buf, &e->hdr, hl);
	memcpy(s->buf + hl, e->payload, len);
	memcpy(got, e->payload + len, sizeof(got));
	iov = (struct iovec){ s->buf + hl, len };
	ntx_ntb_seal_mac(s, s->rx_side, c->rx_seq, len, s->buf, &iov, 1,
			 want);
	if (!ntx_mem_equal(want, got, sizeof(want)))
		goto forged;
	ntx_wire_hdr_load(&hdr, (const struct ntx_wire_hdr *)s->buf);
	c->rx_pos = ntx_ring_advance(c->rx_pos, lines, n);
	c->rx_pub_left -= (int32_t)lines;
	be->cb.recv(c->vc, &hdr, s->buf + hl, len);
	ntx_ntb_clear_payload(e, lines);
	if (c->rx_pub_left <= 0 && c->state == NTX_CONN_CONNECTED)
		ntx_ntb_publish_cons(c);
	return true;
forged:
	NTX_WARN(FI_LOG_EP_DATA, "peer pid %u: an entry of a sealed "
		 "connection failed its MAC (written by someone without the "
		 "session key): the connection fails\n", c->peer.pid);
	ntx_ntb_conn_fail(c, -FI_EREMOTEIO);
	return false;
}

int ntx_ntb_drain(struct ntx_shm_conn *c)
{
	return ntx_ntb_drain_inline(c, false);
}

/* About to sleep: from now on senders write our eventfd. The caller then
 * polls once more before it blocks. */
void ntx_ntb_arm(struct ntx_be_ep *bep)
{
	struct ntx_shm_ep *be = ntx_shm_ep_of(bep);
	be->armed = true;
	atomic_store_explicit(&ntx_win_hdr(&be->win)->waiters, 1,
			      memory_order_seq_cst);
	/* every sender either sees us armed or our re-check sees its entry */
	be->wops->fence_peers();
	be->rescan = true;
	ntx_ntb_quiet_off(be);
	if (be->wops->armed)
		be->wops->armed(be, true);
}

/* Awake: drains the wake-ups and notes which peers died meanwhile (the
 * next poll fails them). */
void ntx_ntb_disarm(struct ntx_be_ep *bep)
{
	struct ntx_shm_ep *be = ntx_shm_ep_of(bep);
	if (!be->armed)
		return;
	be->armed = false;
	atomic_store_explicit(&ntx_win_hdr(&be->win)->waiters, 0,
			      memory_order_relaxed);
	if (be->wops->armed)
		be->wops->armed(be, false);
	be->wops->wait_take(be, true);
}

int ntx_ntb_wait_fd(struct ntx_be_ep *bep)
{
	struct ntx_shm_ep *be = ntx_shm_ep_of(bep);
	return be->epfd;
}

/* The connected peer behind a ready bit, or NULL. */
static struct ntx_shm_conn *ntx_ntb_slot_conn(struct ntx_shm_ep *be,
					      uint32_t w, uint64_t bit)
{
	uint32_t slot = w * 64 + (uint32_t)__builtin_ctzll(bit);
	struct ntx_shm_conn *c = slot < be->win.g.nslots ? be->slots[slot]
							: NULL;

	return c && c->state == NTX_CONN_CONNECTED ? c : NULL;
}

/* Drains the rings whose ready bits are set, from bit word w on, whose
 * bits still to take are b; one cache line per 512 slots whatever the
 * number of peers. A bit stays set while its ring is busy, so a busy
 * sender only reads it (no store, no fence, no cache line moving per
 * message); rings found empty are remembered in 'idle' and their bits
 * taken back by ntx_ntb_bits_clear. */
static __attribute__((noinline)) int
ntx_ntb_poll_bits(struct ntx_shm_ep *be, uint32_t w, uint64_t b)
{
	_Atomic uint64_t *bits = ntx_win_bits(&be->win);
	uint32_t words = be->bit_words;
	struct ntx_shm_conn *c;
	int cnt = 0, got;

	for (;;) {
		for (; b; b &= b - 1) {
			c = ntx_ntb_slot_conn(be, w, b & -b);
			got = c ? ntx_ntb_drain(c) : 0;
			if (got)
				be->idle[w] &= ~(b & -b);
			else
				be->idle[w] |= b & -b;
			cnt += got;
		}
		if (++w >= words)
			return cnt;
		/* acquire: pairs with the senders' fetch_or after their
		 * entries */
		b = atomic_load_explicit(&bits[w], memory_order_acquire);
	}
}

/* Takes back the bits of rings that stayed empty since the last pass,
 * every NTX_NTB_BITS_CLEAR_NS at most. A sender that still saw its bit
 * set may have skipped setting it for an entry we have not seen: the
 * fence on every peer after clearing makes such entries visible, and the
 * last drain below finds them; later entries find the bit clear and set
 * it again. */
static int ntx_ntb_bits_clear(struct ntx_shm_ep *be)
{
	_Atomic uint64_t *bits = ntx_win_bits(&be->win);
	uint32_t words = (be->win.g.nslots + 63) / 64;
	uint64_t now = ntx_now_ns(), m;
	bool any = false;
	int cnt = 0, got;

	if (now < be->bits_clear_ns)
		return 0;
	be->bits_clear_ns = now + NTX_NTB_BITS_CLEAR_NS;
	for (uint32_t w = 0; w < words; w++) {
		if (!be->idle[w])
			continue;
		/* seq_cst: the clear before the fence and the drain below */
		atomic_fetch_and_explicit(&bits[w], ~be->idle[w],
					  memory_order_seq_cst);
		any = true;
	}
	if (!any)
		return 0;
	ntx_ntb_quiet_off(be); /* the words the watch keeps change */
	be->wops->fence_peers();
	for (uint32_t w = 0; w < words; w++) {
		for (m = be->idle[w]; m; m &= m - 1) {
			struct ntx_shm_conn *c =
				ntx_ntb_slot_conn(be, w, m & -m);

			if (!c)
				continue;
			got = ntx_ntb_drain(c);
			cnt += got;
			if (got) /* busy again: make sure its bit is set */
				atomic_fetch_or_explicit(&bits[w], m & -m,
							 memory_order_relaxed);
		}
		be->idle[w] = 0;
	}
	return cnt;
}

/* Drains the ready rings of be's connections from 'it' on (a ring whose
 * drain fails its connection takes it off the list: the next is taken
 * first); ready: the caller saw the first one's next entry there. */
static __attribute__((noinline)) int ntx_ntb_poll_from(struct ntx_shm_ep *be,
							struct ntx_list *it,
							bool ready)
{
	struct ntx_list *tmp;
	int cnt = 0;

	for (tmp = it->next; it != &be->conns; it = tmp, tmp = it->next) {
		struct ntx_shm_conn *c =
			ntx_container_of(it, struct ntx_shm_conn, entry);
		if (ready || (c->state == NTX_CONN_CONNECTED &&
			      ntx_ntb_rx_ready(c)))
			cnt += ntx_ntb_drain_inline(c, ready);
		ready = false;
	}
	return cnt;
}

/* Adds the words c's next entry comes in to the watch: the part right
 * after the last one in its line, when that was a part that did not end
 * it, and the line at our position. False when they do not fit. */
static bool ntx_ntb_watch_ring(struct ntx_be_watch *w,
			       const struct ntx_shm_conn *c)
{
	if (w->n + (c->rx_next ? 2 : 1) > NTX_BE_WATCH_MAX)
		return false;
	if (c->rx_next) {
		w->word[w->n] = &c->rx_next->seq;
		w->busy[w->n++] = c->rx_seq + 1;
	}
	w->word[w->n] = &ntx_ntb_rx_entry(c)->seq;
	w->busy[w->n++] = c->rx_seq + 1;
	return true;
}

/* After NTX_NTB_QUIET_AFTER polls in a row that found nothing, with
 * nothing new on the connect bell: the words the next poll would read,
 * for the engine's ntx_be_quiet. With few peers, each connection's ring.
 * With the ready bitmap, the rings of the bits set now (a sender whose
 * bit is set writes no bit); a sender that finds its bit clear sets it,
 * then adds NTX_WIN_BITS_BELL to the connect bell, which the watch reads
 * instead of the bitmap. The bell's value kept (conn_bell_seen) was read
 * by the poll, before the bitmap here: a bit seen clear is set later, and
 * its ring of the bell comes after that value (acquire: a value that
 * counts a sender's ring makes its bit visible to the reads after it).
 * On only if none of those rings has an entry now. No watch when the
 * rings do not fit. */
static __attribute__((noinline)) void ntx_ntb_quiet_on(struct ntx_shm_ep *be)
{
	struct ntx_be_watch *w = &be->head.watch;
	struct ntx_shm_conn *c;
	struct ntx_list *it;

	w->n = 0;
	if (!be->bits_on) {
		ntx_list_foreach(&be->conns, it) {
			c = ntx_container_of(it, struct ntx_shm_conn, entry);
			if (c->state != NTX_CONN_CONNECTED ||
			    !ntx_ntb_watch_ring(w, c))
				return;
		}
	} else {
		_Atomic uint64_t *bits = ntx_win_bits(&be->win);

		/* a set bit of a slot with no connected peer is skipped by
		 * the poll too; its connecting turns the watch off */
		for (uint32_t i = 0; i < be->bit_words; i++) {
			/* acquire: as ntx_ntb_poll_bits */
			uint64_t b = atomic_load_explicit(&bits[i],
							  memory_order_acquire);

			for (; b; b &= b - 1) {
				c = ntx_ntb_slot_conn(be, i, b & -b);
				if (c && !ntx_ntb_watch_ring(w, c))
					return;
			}
		}
	}
	w->bell = &ntx_win_hdr(&be->win)->conn_bell;
	w->bell_seen = be->conn_bell_seen;
	w->on = true;
	/* an entry came since the poll: the next poll takes it */
	w->on = ntx_be_quiet(&be->head);
}

/* A poll by the ready bitmap found nothing: the watch is built after
 * NTX_NTB_QUIET_AFTER such polls in a row; one made while it is on (the
 * engine's rare work) keeps it only while its words are unchanged. */
static inline void ntx_ntb_bits_found_nothing(struct ntx_shm_ep *be)
{
	if (be->bulk_dirty)
		ntx_ntb_bulk_idle(be);
	if (!be->head.watch.on) {
		if (++be->empty_polls >= NTX_NTB_QUIET_AFTER)
			ntx_ntb_quiet_on(be);
	} else if (!ntx_be_quiet(&be->head)) {
		ntx_ntb_quiet_off(be);
	}
}

/* ntx_ntb_poll whenever there is more to do than read each ring's next
 * header line. */
static __attribute__((noinline)) int ntx_ntb_poll_any(struct ntx_shm_ep *be)
{
	uint64_t bell;
	int cnt = 0;

	if (be->check) { /* a peer died while we slept */
		ntx_ntb_quiet_off(be);
		be->head.ops->check_peers(&be->head);
	}
	bell = atomic_load_explicit(&ntx_win_hdr(&be->win)->conn_bell,
				    memory_order_acquire);
	/* its low half moved: connect work; the high half alone: a ring
	 * newly flagged in the bitmap, which the pass below drains */
	if (bell != be->conn_bell_seen) {
		ntx_ntb_quiet_off(be);
		if ((uint32_t)bell != (uint32_t)be->conn_bell_seen)
			be->rescan = true;
		be->conn_bell_seen = bell;
	}
	if (be->rescan) {
		ntx_ntb_quiet_off(be);
		be->rescan = false;
		ntx_ntb_poll_cells(be);
		ntx_ntb_poll_connecting(be);
		ntx_ntb_poll_closed(be);
	}
	/* With many peers, drain only the rings whose ready bits are set,
	 * so an idle peer costs nothing. With few, read each ring's next
	 * header line directly: the bitmap line then stays in the senders'
	 * caches and a message costs the receiver only its ring lines. */
	if ((be->nconns > NTX_NTB_DIRECT_POLL) != be->bits_on) {
		ntx_ntb_quiet_off(be);
		be->bits_on = !be->bits_on;
		atomic_store_explicit(&ntx_win_hdr(&be->win)->bits_on,
				      be->bits_on, memory_order_seq_cst);
		/* from here every sender sets its bit; entries of those that
		 * did not are found by the direct pass below */
		if (be->bits_on)
			be->wops->fence_peers();
	} else if (be->bits_on) {
		cnt += ntx_ntb_poll_bits(
			be, 0,
			atomic_load_explicit(&ntx_win_bits(&be->win)[0],
					     memory_order_acquire));
		/* the clock is read on one poll in 256: off the fast path */
		if (!(++be->polls & 255))
			cnt += ntx_ntb_bits_clear(be);
		if (!cnt) /* (a drain turned the watch off) */
			ntx_ntb_bits_found_nothing(be);
		return cnt;
	}
	return cnt + ntx_ntb_poll_from(be, be->conns.next, false);
}

/* The one ring the bitmap pass found ready, drained (its entry seen). */
static __attribute__((noinline)) int
ntx_ntb_drain_bit(struct ntx_shm_ep *be, struct ntx_shm_conn *c, uint32_t w,
		  uint64_t bit)
{
	int got = ntx_ntb_drain_inline(c, true);

	if (got)
		be->idle[w] &= ~bit;
	/* (a drain that failed its connection left it cold) */
	if (c->state == NTX_CONN_CONNECTED)
		be->hot = c;
	return got;
}

/* The hot ring, its next entry seen, drained ahead of the bitmap. */
static __attribute__((noinline)) int
ntx_ntb_drain_hot(struct ntx_shm_ep *be, struct ntx_shm_conn *c)
{
	uint32_t slot = c->my_slot;

	be->hot_runs++;
	be->idle[slot / 64] &= ~(1ull << (slot % 64));
	return ntx_ntb_drain_inline(c, true);
}

/* The poll with the ready bitmap when nothing else is due: its words
 * read and, for each bit set, its ring's next header line, with no call
 * and no frame; one ready ring is drained out of line, two or more by
 * the whole pass from the first, and the bitmap's upkeep (1 poll in 256)
 * is ntx_ntb_poll_any's. */
static inline int ntx_ntb_poll_bits_quick(struct ntx_shm_ep *be)
{
	_Atomic uint64_t *bits = ntx_win_bits(&be->win);
	uint32_t words = be->bit_words, fw = 0;
	struct ntx_shm_conn *c, *first = NULL;
	uint64_t b, fm = 0;

	be->hot_runs = 0;
	if (!((be->polls + 1) & 255)) /* counted there */
		return ntx_ntb_poll_any(be);
	be->polls++;
	for (uint32_t w = 0; w < words; w++) {
		/* acquire: as ntx_ntb_poll_bits */
		b = atomic_load_explicit(&bits[w], memory_order_acquire);
		if (!b)
			continue;
		for (uint64_t m = b; m; m &= m - 1) {
			c = ntx_ntb_slot_conn(be, w, m & -m);
			if (!c || !ntx_ntb_rx_ready(c))
				continue;
			if (first)
				return ntx_ntb_poll_bits(be, fw, fm);
			first = c;
			fw = w;
			fm = m;
		}
		be->idle[w] |= b; /* the drained one's bit is taken out */
	}
	if (first)
		return ntx_ntb_drain_bit(be, first, fw, fm & -fm);
	ntx_ntb_bits_found_nothing(be);
	return 0;
}

/* The common poll, a few loads with no call and no frame: nothing new
 * on the connect bell, few peers (no bitmap), and each ring's next header
 * line read directly; the first ready ring and any other case go out of
 * line. With many peers, the same by the ready bitmap. */
int ntx_ntb_poll(struct ntx_be_ep *bep)
{
	struct ntx_shm_ep *be = ntx_shm_ep_of(bep);
	struct ntx_list *it;

	if (be->check || be->rescan ||
	    (be->nconns > NTX_NTB_DIRECT_POLL) != be->bits_on ||
	    atomic_load_explicit(&ntx_win_hdr(&be->win)->conn_bell,
				 memory_order_acquire) != be->conn_bell_seen)
		return ntx_ntb_poll_any(be);
	if (be->bits_on) {
		struct ntx_shm_conn *c = be->hot;

		if (c && be->hot_runs < NTX_NTB_HOT_RUNS && ntx_ntb_rx_ready(c))
			return ntx_ntb_drain_hot(be, c);
		return ntx_ntb_poll_bits_quick(be);
	}
	ntx_list_foreach(&be->conns, it) {
		struct ntx_shm_conn *c =
			ntx_container_of(it, struct ntx_shm_conn, entry);
		if (c->state == NTX_CONN_CONNECTED && ntx_ntb_rx_ready(c))
			return ntx_ntb_poll_from(be, it, true);
	}
	if (!be->head.watch.on && ++be->empty_polls >= NTX_NTB_QUIET_AFTER)
		ntx_ntb_quiet_on(be);
	if (be->bulk_dirty)
		ntx_ntb_bulk_idle(be);
	return 0;
}
