/*
 * The tcp back end's wire format (DESIGN.md §4, "tcp"): every frame is a
 * 64-byte prefix (magic, type, payload length, engine header) and its
 * payload. The connecting side's first frame is a HELLO carrying its
 * 32-byte endpoint name; every later frame is one ring ENTRY. The
 * receiver validates the prefix before it uses anything that follows.
 */
#ifndef NTX_TCP_WIRE_H
#define NTX_TCP_WIRE_H

#include <stdint.h>

#include "ntx/ntx_wire.h"

#define NTX_TCP_MAGIC 0x4e54u /* "NT" */
#define NTX_TCP_HELLO 1
#define NTX_TCP_ENTRY 2
#define NTX_TCP_MAX_PAYLOAD (65536 - 64) /* a frame is at most 64 KiB */

struct ntx_tcp_frame {
	uint16_t magic;
	uint16_t type;
	uint32_t len; /* payload bytes after the engine header */
	struct ntx_wire_hdr hdr;
};
_Static_assert(sizeof(struct ntx_tcp_frame) == 64,
	       "a frame prefix is one cache line");

#endif /* NTX_TCP_WIRE_H */
