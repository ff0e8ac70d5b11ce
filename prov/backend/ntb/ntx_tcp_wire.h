/*
 * The tcp back end's wire format (DESIGN.md §4, "tcp"): every frame is a
 * 64-byte prefix (magic, type, payload length, engine header) and its
 * payload. The connecting side's first frame is a HELLO carrying its
 * 32-byte endpoint name; every later frame is one ring ENTRY. The
 * receiver validates the prefix before it uses anything that follows.
 *
 * Proof of name (DESIGN §7): the accepting side binds a connection to
 * the name its HELLO claims only once the claimant proved it owns that
 * name. It sends a PROVE with a fresh nonce over a new connection to the
 * listener the claimed name names; the owner, which has a connection of
 * its own waiting for a WELCOME from us, sends the nonce back over it
 * (ECHO). Then we answer WELCOME and the connection carries ENTRY
 * frames. ECHO and WELCOME also carry each side's FI_NTX_TCP_EAGER_MAX.
 */
#ifndef NTX_TCP_WIRE_H
#define NTX_TCP_WIRE_H

#include <stdint.h>

#include "ntx/ntx_wire.h"

#define NTX_TCP_MAGIC 0x4e54u /* "NT" */
#define NTX_TCP_HELLO 1
#define NTX_TCP_ENTRY 2
#define NTX_TCP_PROVE 3   /* to the claimed name's listener */
#define NTX_TCP_ECHO 4    /* the claimant's answer, on its connection */
#define NTX_TCP_WELCOME 5 /* the acceptor's: the name is proven */
#define NTX_TCP_NONCE 16
/* payload bytes of a frame after its 64-byte prefix: a 64 KiB message
 * goes in one */
#define NTX_TCP_MAX_PAYLOAD 65536

struct ntx_tcp_frame {
	uint16_t magic;
	uint16_t type;
	uint32_t len; /* payload bytes after the engine header */
	struct ntx_wire_hdr hdr;
};
_Static_assert(sizeof(struct ntx_tcp_frame) == 64,
	       "a frame prefix is one cache line");

struct ntx_tcp_prove {
	uint8_t claimed[32]; /* the name the HELLO claimed (struct ntx_addr) */
	uint8_t prover[32];  /* the name of whoever asks */
	uint8_t nonce[NTX_TCP_NONCE];
};

/* ECHO (nonce, then the claimant's eager size) and WELCOME (eager size,
 * nonce unused): parameters both sides must know of each other. */
struct ntx_tcp_params {
	uint8_t nonce[NTX_TCP_NONCE];
	uint32_t eager_max; /* FI_NTX_TCP_EAGER_MAX of the sender */
	uint32_t pad;
};

#endif /* NTX_TCP_WIRE_H */
