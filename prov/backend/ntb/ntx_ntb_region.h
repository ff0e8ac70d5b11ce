/*
 * A memory region shared by several machines (DESIGN §4, "The pci
 * window"): the BAR2 of qemu's ivshmem PCI device in a guest, or the same
 * memory handed to a host process by an ivshmem server. Endpoints claim
 * fixed slices of it through a directory in its first slice; a claim
 * lives while its owner's heartbeat moves. Every machine attached can
 * write all of it: nothing read from the region is trusted (geometry
 * comes from the region's size, never from the region).
 */
#ifndef NTX_NTB_REGION_H
#define NTX_NTB_REGION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#include "ntx/ntx_base.h"

#define NTX_RGN_MAGIC 0x4e5458524547494eull /* "NTXREGIN" */
#define NTX_RGN_VERSION 1
#define NTX_RGN_SLICE (2u << 20) /* one endpoint's window at most */
#define NTX_RGN_DIR_OFF 4096     /* the directory, in the first slice */
#define NTX_RGN_ENTS_MAX 1024
/* an owner beats every NTX_RGN_BEAT_MS; a claim whose beat stood still
 * for NTX_RGN_DEAD_MS is its dead owner's, and its peers fail */
#define NTX_RGN_BEAT_MS 100
#define NTX_RGN_DEAD_MS 1500

/* The region's first line. id names the region in endpoint names (the
 * ip4 field), so that a name from another region is never taken for one
 * of this region's slices. */
struct ntx_rgn_hdr {
	_Atomic uint64_t magic;
	uint32_t version;
	_Atomic uint32_t id;
};

/* A directory entry: one per slice after the first. claim is the claim's
 * generation times 2, plus 1 while claimed; beat the owner's heartbeat;
 * the rest the owner's name and its doorbell (ivshmem peer ID). */
struct ntx_rgn_ent {
	_Atomic uint64_t claim;
	_Atomic uint64_t beat;
	uint64_t epoch;
	uint32_t host, pid;
	uint32_t service;
	uint16_t ep_id, bell_id;
	uint8_t pad[24];
};
_Static_assert(sizeof(struct ntx_rgn_ent) == 64, "a line per entry");

struct ntx_rgn;

/* Attached regions, each found by its domain name. */
int ntx_rgn_domains(char (*names)[64], int max);
struct ntx_rgn *ntx_rgn_get(const char *domain);
void ntx_rgn_put(struct ntx_rgn *r);

uint32_t ntx_rgn_id(const struct ntx_rgn *r);
uint32_t ntx_rgn_nents(const struct ntx_rgn *r);
/* Slice i (0 .. nents - 1) and its entry. */
uint8_t *ntx_rgn_slice(const struct ntx_rgn *r, uint32_t i);
struct ntx_rgn_ent *ntx_rgn_ent(const struct ntx_rgn *r, uint32_t i);

/* Claims a free slice (or a dead owner's) for the endpoint named a; its
 * index, or a negative error. The region beats for it from now on. */
int ntx_rgn_claim(struct ntx_rgn *r, const struct ntx_addr *a,
		  uint32_t *idx);
/* Our name in our entry (fi_setname: the engine's name is final). */
void ntx_rgn_publish(struct ntx_rgn *r, uint32_t idx,
		     const struct ntx_addr *a);
void ntx_rgn_release(struct ntx_rgn *r, uint32_t idx);
/* An unbound name (a service) made the name of the endpoint that holds
 * that service in a region this process attached, on the name's host
 * where it has one, other than the incarnation the name had (it
 * failed): 0, or -FI_EADDRNOTAVAIL. */
int ntx_rgn_resolve(struct ntx_addr *a);

/* A peer's claim as seen now: its value and its beat, to compare with
 * later (ntx_rgn_alive). */
struct ntx_rgn_seen {
	uint64_t claim, beat;
	uint64_t beat_ns; /* our clock when beat last moved */
};
void ntx_rgn_look(const struct ntx_rgn *r, uint32_t idx,
		  struct ntx_rgn_seen *s);
bool ntx_rgn_alive(const struct ntx_rgn *r, uint32_t idx,
		   struct ntx_rgn_seen *s);

/* The doorbell: rings peer bell_id's vector 0 (a BAR0 write in a guest,
 * the peer's eventfd on a host); our own bell's fd, readable when a peer
 * rang it (-1 where we cannot receive: guests without vfio poll). */
void ntx_rgn_ring(const struct ntx_rgn *r, uint16_t bell_id);
int ntx_rgn_bell_fd(const struct ntx_rgn *r);
uint16_t ntx_rgn_bell_id(const struct ntx_rgn *r);

#endif /* NTX_NTB_REGION_H */
