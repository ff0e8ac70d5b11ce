/*
 * What the files of the ntb back end over a shared-memory window share
 * (DESIGN §4): the endpoint, connection, peer and window structs, the
 * window's inline accessors, and the functions one file calls in another.
 * Everything a message passes through stays static in one file (tx, rx),
 * or inline here, so that the message path keeps its inlining.
 */
#ifndef NTX_NTB_INT_H
#define NTX_NTB_INT_H

#include <pthread.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "ntx/ntx_backend.h"
#include "ntx_ring.h"
#include "ntx_ntb_region.h"

enum ntx_conn_state { NTX_CONN_CONNECTING, NTX_CONN_CONNECTED, NTX_CONN_FAILED };
/* how a peer's liveness is watched (ntx_ntb_peer.c) */
enum ntx_watch { NTX_WATCH_NONE, NTX_WATCH_PIDFD, NTX_WATCH_PROC };

/* A mapped window: ours or a peer's. Geometry is copied and validated once
 * at map time; the peer can change its header later, we never re-read it. */
struct ntx_win {
	uint8_t *base;
	struct ntx_win_geom g; /* g.ring_lines: lines of each ring */
	uint32_t max_payload; /* largest entry payload the owner accepts */
	uint32_t flags;       /* NTX_WIN_F_* of the owner */
	uint64_t wake_key;    /* the owner's wake socket name (ntx_win_hdr) */
};

/* A peer process, shared by all endpoints of this process (see
 * "liveness"); found by its pid until it is found dead. */
struct ntx_ntb_proc {
	struct ntx_list entry; /* ntx_ntb_peers.procs while it is current */
	uint32_t pid;
	int pidfd;        /* -1: watched through /proc */
	uint64_t start;   /* without a pidfd: its start time */
	uint32_t refs;    /* its mapped windows */
	atomic_bool dead; /* its pidfd said it exited */
};

/* A peer window, mapped once for all endpoints of this process and found
 * by its owner's pid, window fd and epoch. */
struct ntx_ntb_pwin {
	struct ntx_list entry; /* a bucket of ntx_ntb_peers.wins */
	struct ntx_win win;
	uint32_t pid;
	int32_t win_fd;
	uint32_t epoch;
	uint32_t service;
	uint16_t ep_id;
	struct ntx_ntb_proc *proc; /* its owner; NULL: this process */
	uint32_t refs;             /* connections */
	const struct ntx_ntb_win_ops *wops; /* unmaps it */
};

/* An endpoint's registration of a peer process's pidfd in its wait set,
 * made by its first connection to that process. */
struct ntx_shm_watch {
	struct ntx_list entry; /* ntx_shm_ep.watches */
	struct ntx_ntb_proc *proc;
	uint32_t conns;
};

/* A connection sealed by the job-key exchange (ops->seal, the pci window
 * only): each entry in a sealed direction carries a MAC,
 * HMAC-SHA256(key, side, sequence number, length, engine header,
 * payload) cut to NTX_SEAL_TAG bytes, right after its payload (a skip
 * entry: in its header). A part (half or quarter entry) is never sealed:
 * a sealed sender writes whole entries only. DESIGN §4, "Sealed
 * connections". */
#define NTX_SEAL_TAG 16
struct ntx_ntb_seal {
	uint8_t key[32];
	bool tx, rx;		/* the directions sealed */
	uint8_t tx_side, rx_side; /* the side each direction's MACs name */
	/* rx: an entry copied out of the window, header first, checked
	 * and handed to the engine from here: the window can change under
	 * us, this cannot */
	uint8_t *buf;
};

struct ntx_shm_conn {
	struct ntx_be_conn head; /* first: what the engine holds */
	struct ntx_list entry; /* ntx_shm_ep.conns */
	struct ntx_shm_ep *be;
	void *vc;
	struct ntx_addr peer;
	enum ntx_conn_state state;
	bool cell_pending; /* connect request still to be posted */
	uint32_t my_slot;  /* our slot: the peer's ring to us */
	uint32_t peer_slot; /* the peer's slot: our ring to it */
	struct ntx_win pwin; /* a copy of pw->win, at hand */
	uint32_t tx_pos;  /* next line we write in the ring in pwin */
	uint32_t tx_seq;  /* entries we wrote, free running */
	/* right after our last entry in its line, when that was a part
	 * (struct ntx_win_half) that did not end the line and nothing
	 * followed it: where the next part goes if it fits */
	struct ntx_win_quarter *tx_next;
	/* the tag and CQ data of our last half entry: a part with the same
	 * is a quarter entry */
	uint64_t tx_last_tag, tx_last_data;
	/* lines we may still write before the peer's consumer position
	 * has to be read again: all but one of the lines it had not yet
	 * given back when we last read it, less what we wrote since */
	uint32_t tx_free;
	struct ntx_win_entry *tx_ring; /* line 0 of our ring in pwin */
	struct ntx_win_entry *rx_ring; /* line 0 of the ring in my_slot */
	uint32_t rx_pos;  /* next line we read in the ring in my_slot */
	uint32_t rx_seq;  /* entries we consumed, free running */
	/* right after the last entry we consumed in its line, when it was
	 * a part that did not end the line: where the next may be */
	struct ntx_win_quarter *rx_next;
	/* the tag and CQ data of the last half entry we consumed: a
	 * quarter entry's */
	uint64_t rx_last_tag, rx_last_data;
	/* lines to consume before rx_pos is written to the peer again
	 * (every quarter ring; 0 at first: the first drain writes it) */
	int32_t rx_pub_left;
	/* bulk areas (NTX_WIN_BULK; NULL: the window has none): ours in
	 * pwin, written, and the peer's in our window, read; the bytes of
	 * each that went by, skipped ends of laps included (free running,
	 * as bulk_cons; ntx_win_bulk_place) */
	uint8_t *tx_bulk, *rx_bulk;
	uint64_t tx_bulk_pos, rx_bulk_pos;
	uint64_t tx_bulk_cons; /* the peer's bulk_cons when last read */
	/* the sender's reclaim (ntx_ntb_bulk_idle): pages of tx_bulk may be
	 * in use; tx_bulk_pos when last looked at, and since when */
	bool bulk_dirty;
	uint64_t bulk_seen_pos, bulk_seen_ns;
	struct ntx_ntb_seal *seal; /* NULL: nothing sealed */
	_Atomic uint64_t *peer_bits; /* our ready bit's word in pwin */
	uint64_t peer_bit;
	bool light; /* the peer fences its senders with membarrier */
	enum ntx_watch watch;
	struct ntx_shm_watch *wreg; /* NTX_WATCH_PIDFD: its registration */
	uint64_t start; /* NTX_WATCH_PROC: the peer's start time */
	bool peered; /* peer_slot is known: we can tell the peer we close */
	/* set-up only: off the lines the data path reads */
	struct ntx_ntb_pwin *pw; /* the peer's window, shared */
	struct ntx_list centry; /* ntx_shm_ep.connecting, while connecting */
	/* the pci window: the peer's claim and beat, and its doorbell */
	struct ntx_rgn_seen seen;
	uint16_t bell_id;
};

struct ntx_shm_ep {
	struct ntx_be_ep head; /* first: what the engine holds */
	struct ntx_be_cb cb;
	struct ntx_win win;
	int fd;
	int svc_fd; /* listening socket that claims our service, or -1 */
	char *svc_path; /* its file, when not an abstract name (or NULL) */
	struct ntx_addr addr;
	struct ntx_shm_conn **slots; /* local slot -> connection */
	struct ntx_list conns;
	int wake;   /* datagram socket peers write to when we sleep */
	/* our wait fd: an epoll set of wake, the peers' pidfds and timer */
	int epfd;
	int timer;  /* timerfd: ticks while a peer is watched by /proc (-1
		     * until one is) */
	uint32_t proc_watched; /* peers without a pidfd */
	bool check; /* a peer may have died: check before the next poll */
	bool armed;
	uint64_t conn_bell_seen;
	/* polls in a row that found nothing since the watch went off: it is
	 * built at NTX_NTB_QUIET_AFTER (ntx_ntb_quiet_on), so that a short
	 * wait, the common one between two messages, does not pay for it */
	uint32_t empty_polls;
	uint32_t nconns;
	bool rescan; /* connect work left over: poll even without a bell */
	bool bits_on; /* we drain by the ready bitmap (hdr->bits_on) */
	uint64_t *idle; /* ready bits whose rings were empty last time */
	uint32_t bit_words; /* ready bit words of the slots ever taken */
	uint64_t *reused; /* slots released before: zeroed again at reuse */
	/* slots released before their peer closed its side: it may still
	 * write into them (entries, cons, bulk_cons, closed) until it sees
	 * our close, so they are taken again only when it has closed or
	 * no other slot is free (ntx_ntb_slot_alloc) */
	uint64_t *unacked;
	uint64_t bits_clear_ns; /* next ntx_ntb_bits_clear pass */
	uint32_t polls;
	/* connections whose bulk areas in their peers' windows may hold
	 * pages (ntx_ntb_bulk_idle gives them back); the polls that found
	 * nothing since it last looked */
	uint32_t bulk_dirty;
	uint32_t bulk_polls;
	/* with the bitmap: the connected ring the last pass found ready
	 * alone, looked at first by the next polls (ntx_ntb_poll), so that
	 * a peer that keeps talking costs what it costs with few peers;
	 * hot_runs of its drains in a row, at most NTX_NTB_HOT_RUNS before a
	 * pass over the bitmap */
	struct ntx_shm_conn *hot;
	uint32_t hot_runs;
	/* set-up and tear-down only: off the lines the data path reads */
	struct ntx_list connecting; /* connections we asked for, unanswered */
	struct ntx_list watches; /* peer processes whose pidfd is in epfd */
	/* how win is obtained, peers' windows mapped and rung (the ring
	 * protocol calls it on slow paths only) */
	const struct ntx_ntb_win_ops *wops;
	/* the pci window: the region and our slice in it */
	struct ntx_rgn *rgn;
	uint32_t rgn_idx;
};

/* Anything changed that the watch of the last quiet poll does not see:
 * the next progress polls (struct ntx_be_watch). */
static inline void ntx_ntb_quiet_off(struct ntx_shm_ep *be)
{
	be->head.watch.on = false;
	be->empty_polls = 0;
}

static inline struct ntx_shm_conn *ntx_shm_conn_of(struct ntx_be_conn *conn)
{
	return ntx_container_of(conn, struct ntx_shm_conn, head);
}

static inline struct ntx_shm_ep *ntx_shm_ep_of(struct ntx_be_ep *be)
{
	return ntx_container_of(be, struct ntx_shm_ep, head);
}

static inline struct ntx_win_hdr *ntx_win_hdr(const struct ntx_win *w)
{
	return (struct ntx_win_hdr *)w->base;
}

static inline struct ntx_win_cell *ntx_win_cell(const struct ntx_win *w,
						 uint32_t i)
{
	return (struct ntx_win_cell *)(w->base + w->g.cells_off) + i;
}

static inline struct ntx_win_ctl *ntx_win_ctl(const struct ntx_win *w,
					       uint32_t slot)
{
	return (struct ntx_win_ctl *)(w->base + w->g.ctl_off) + slot;
}

/* A slot's bulk area, or NULL where the window has none. */
static inline uint8_t *ntx_win_bulk(const struct ntx_win *w, uint32_t slot)
{
	return w->g.bulk_size ? w->base + w->g.bulk_off +
					(size_t)slot * w->g.bulk_size
			      : NULL;
}

static inline _Atomic uint64_t *ntx_win_bits(const struct ntx_win *w)
{
	return (_Atomic uint64_t *)(w->base + w->g.bits_off);
}

/* The entry at line pos of a slot's ring. */
static inline struct ntx_win_entry *ntx_win_entry(const struct ntx_win *w,
						   uint32_t slot, uint32_t pos)
{
	return (struct ntx_win_entry *)(w->base + w->g.ring_off +
					(size_t)slot * w->g.ring_size +
					(size_t)pos * NTX_CACHELINE);
}

/* Hidden: these are the library's own, so a file reaches another's data
 * directly, not through the GOT (the data bell reads
 * ntx_ntb_mb_registered on every message). */
#pragma GCC visibility push(hidden)

/* the ops table sets the heads' ops at creation (ntx_ntb_shm.c) */
extern const struct ntx_be_ops ntx_ntb_shm_ops;

/* ---- the window interface --------------------------------------------------
 * What the ring protocol (conn, rx, tx) needs of a window, and what
 * varies with how the window is obtained and its peers watched: shm
 * (ntx_ntb_win_shm.c: a memfd, peers mapped through pidfd_getfd or
 * /proc, membarrier, a wake socket, process_vm_readv/writev; its peers'
 * pidfds in ntx_ntb_peer.c) and, to come, pci (a BAR shared by several
 * hosts). Called on slow paths only: open and close, connect, a
 * connection's end and slot reuse, a sleeping peer's wake-up, arming and
 * disarming, the bitmap's upkeep, bulk moves; never per ring entry. The
 * layout inside a window (ntx_ring.h) is the protocol's and the same for
 * every provider. */
struct ntx_ntb_win_ops {
	const char *name;
	/* our window, its header written; unmapped and released */
	int (*create)(struct ntx_shm_ep *be);
	void (*destroy)(struct ntx_shm_ep *be);
	/* a peer's window, its header checked against the name (pidfd: the
	 * owner process's, or -1); the map ended */
	int (*map)(const struct ntx_addr *peer, int pidfd, struct ntx_win *w);
	void (*unmap)(struct ntx_win *w);
	/* the window of c's peer (c->peer) in c->pw and c->pwin, and the
	 * watch of the peer's liveness; the watch ended (once, at the
	 * connection's failure or end); the window given back */
	int (*peer_get)(struct ntx_shm_conn *c);
	void (*unwatch)(struct ntx_shm_conn *c);
	void (*peer_put)(struct ntx_shm_conn *c);
	/* what our wait set holds, taken without blocking: peers that died
	 * are marked for the next check; drain_wake: the doorbell's
	 * wake-ups too (only when disarmed) */
	void (*wait_take)(struct ntx_shm_ep *be, bool drain_wake);
	/* a released slot's ring in our window made zero (and free) again */
	void (*ring_zero)(struct ntx_shm_ep *be, uint32_t slot);
	/* our bulk area in the peer's window (c->tx_bulk) given back: zero
	 * pages that take no memory (a window with bulk areas only) */
	void (*bulk_release)(struct ntx_shm_conn *c);
	/* the doorbell: wakes the peer of c, which armed its window */
	void (*wake)(struct ntx_shm_conn *c);
	/* a full fence on every sender that may write our window (those
	 * whose windows say NTX_WIN_F_MEMBARRIER skip their own) */
	void (*fence_peers)(void);
	/* a connect request's sender may be a peer of this window (shm:
	 * this host; pci: this region) */
	bool (*peer_ok)(const struct ntx_shm_ep *be, const struct ntx_addr *a);
	/* c's peer is gone (checked every FI_NTX_PEER_CHECK_MS) */
	bool (*peer_dead)(struct ntx_shm_conn *c);
	/* optional: we go to sleep (on) or woke up; pci's guests without
	 * a doorbell of their own poll while asleep */
	void (*armed)(struct ntx_shm_ep *be, bool on);
	/* single copy between our buffers and the peer's; NULL where the
	 * window has none (the bytes then stream through the ring) */
	ssize_t (*read)(struct ntx_shm_conn *c, const struct iovec *local,
			size_t nlocal, const struct ntx_wire_iov *remote,
			size_t nremote);
	ssize_t (*write)(struct ntx_shm_conn *c, const struct iovec *local,
			 size_t nlocal, const struct ntx_wire_iov *remote,
			 size_t nremote);
};

extern const struct ntx_ntb_win_ops ntx_ntb_win_shm_ops;
extern const struct ntx_ntb_win_ops ntx_ntb_win_pci_ops;
extern const struct ntx_be_ops ntx_ntb_pci_ops;

/* ---- what the shm and pci endpoints share (ntx_ntb_shm.c) ----------------- */

void ntx_ntb_name_init(struct ntx_shm_ep *be, const struct ntx_addr *want);
/* A new endpoint of the window wops, its fds not open yet (-1); at close,
 * its connections ended and its window destroyed (ep_end), then its fds
 * and tables freed (ep_free). */
struct ntx_shm_ep *ntx_ntb_ep_new(const struct ntx_be_ops *ops,
				  const struct ntx_ntb_win_ops *wops,
				  const struct ntx_be_cb *cb,
				  const struct ntx_addr *want);
void ntx_ntb_ep_end(struct ntx_shm_ep *be);
void ntx_ntb_ep_free(struct ntx_shm_ep *be);
/* Our window's header, from be->win and our name. */
void ntx_ntb_hdr_fill(struct ntx_shm_ep *be, uint32_t flags,
		      uint64_t wake_key);
int ntx_ntb_slots_alloc(struct ntx_shm_ep *be);
void ntx_ntb_slots_free(struct ntx_shm_ep *be);
bool ntx_ntb_win_ops_valid(const struct ntx_ntb_win_ops *ops);

/* ---- the shm window (ntx_ntb_win_shm.c) ----------------------------------- */

/* this process is registered for membarrier: owners that fence their
 * peers fence our sends too (the data bell reads it per message) */
extern atomic_bool ntx_ntb_mb_registered;
void ntx_ntb_shm_fini(void);
int ntx_ntb_wake_open(struct ntx_shm_ep *be);

/* ---- peers: processes, their windows, the wait set (ntx_ntb_peer.c) ------- */

int ntx_ntb_peer_get(struct ntx_shm_conn *c);
void ntx_ntb_peer_put(struct ntx_shm_conn *c);
void ntx_ntb_unwatch(struct ntx_shm_conn *c);
int ntx_ntb_wait_open(struct ntx_shm_ep *be, uint32_t events);
void ntx_ntb_timer_set(struct ntx_shm_ep *be, bool on);
/* The timer ticked: empties it and asks for a check of the peers. */
void ntx_ntb_timer_tick(struct ntx_shm_ep *be);
bool ntx_ntb_peer_dead(struct ntx_shm_conn *c);
void ntx_ntb_events(struct ntx_shm_ep *be, bool drain_wake);
void ntx_ntb_check_peers(struct ntx_be_ep *bep);

/* ---- connections (ntx_ntb_conn.c) ----------------------------------------- */

int ntx_ntb_connect(struct ntx_be_ep *be, const struct ntx_addr *peer,
		    void *vc, struct ntx_be_conn **conn);
void ntx_ntb_disconnect(struct ntx_be_conn *conn);
void ntx_ntb_conn_free(struct ntx_shm_conn *c);
void ntx_ntb_conn_fail(struct ntx_shm_conn *c, int err);
void ntx_ntb_conn_end(struct ntx_shm_conn *c);
void ntx_ntb_poll_cells(struct ntx_shm_ep *be);
void ntx_ntb_poll_connecting(struct ntx_shm_ep *be);
void ntx_ntb_poll_closed(struct ntx_shm_ep *be);
ssize_t ntx_ntb_bulk_read(struct ntx_be_conn *conn,
			  const struct iovec *local, size_t nlocal,
			  const struct ntx_wire_iov *remote, size_t nremote);
ssize_t ntx_ntb_bulk_write(struct ntx_be_conn *conn,
			   const struct iovec *local, size_t nlocal,
			   const struct ntx_wire_iov *remote, size_t nremote);

/* ---- the rings: receiving (ntx_ntb_rx.c) and sending (ntx_ntb_tx.c) ------- */

int ntx_ntb_drain(struct ntx_shm_conn *c);
int ntx_ntb_poll(struct ntx_be_ep *bep);
void ntx_ntb_arm(struct ntx_be_ep *bep);
void ntx_ntb_disarm(struct ntx_be_ep *bep);
int ntx_ntb_wait_fd(struct ntx_be_ep *bep);
size_t ntx_ntb_conn_mtu(const struct ntx_be_conn *conn);
size_t ntx_ntb_stream_mtu(const struct ntx_be_conn *conn);
bool ntx_ntb_self_idle(struct ntx_be_conn *conn);
void ntx_ntb_bulk_idle(struct ntx_shm_ep *be);
int ntx_ntb_send(struct ntx_be_conn *conn, const void *hdr,
		 const struct iovec *iov, size_t iovcnt, size_t len);
int ntx_ntb_send_sealed(struct ntx_shm_conn *c, const void *hdr,
			const struct iovec *iov, size_t iovcnt, size_t len);
bool ntx_ntb_rx_sealed(struct ntx_shm_conn *c, struct ntx_win_entry *e,
		       uint32_t len);
/* ntx_ntb_seal.c */
void ntx_ntb_seal_mac(const struct ntx_ntb_seal *s, uint8_t side,
		      uint32_t seq, uint32_t len, const void *hdr,
		      const struct iovec *iov, size_t iovcnt,
		      uint8_t tag[NTX_SEAL_TAG]);
int ntx_ntb_seal(struct ntx_be_conn *conn, const uint8_t key[32], bool rx,
		 bool lower);
void ntx_ntb_seal_free(struct ntx_shm_conn *c);
int ntx_ntb_send_inline(struct ntx_be_conn *conn, uint8_t pflags,
			uint64_t tag, uint64_t data, const void *buf,
			size_t len);

/* ---- services (ntx_ntb_svc.c) --------------------------------------------- */

int ntx_ntb_svc_claim(struct ntx_shm_ep *be);
void ntx_ntb_svc_release(struct ntx_shm_ep *be);
void ntx_ntb_svc_drain(struct ntx_shm_ep *be);
int ntx_ntb_resolve(struct ntx_addr *a);

#pragma GCC visibility pop

#endif /* NTX_NTB_INT_H */
