/* Thin out-of-line wrappers around DPDK 22.11 static inline functions, so Rust can call them.
 * Each wrapper is one call; burst wrappers are called once per burst, not per packet. */
/* rte_intr_instance_alloc and friends are marked experimental in 22.11 (and stable since 23.11). */
#define ALLOW_EXPERIMENTAL_API 1
#include "shim.h"

uint16_t droce_rte_eth_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts,
                                uint16_t nb_pkts)
{
	return rte_eth_rx_burst(port_id, queue_id, rx_pkts, nb_pkts);
}

uint16_t droce_rte_eth_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts,
                                uint16_t nb_pkts)
{
	return rte_eth_tx_burst(port_id, queue_id, tx_pkts, nb_pkts);
}

uint16_t droce_rte_eth_tx_prepare(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts,
                                  uint16_t nb_pkts)
{
	return rte_eth_tx_prepare(port_id, queue_id, tx_pkts, nb_pkts);
}

int droce_rte_eth_rx_queue_count(uint16_t port_id, uint16_t queue_id)
{
	return rte_eth_rx_queue_count(port_id, queue_id);
}

struct rte_mbuf *droce_rte_pktmbuf_alloc(struct rte_mempool *mp) { return rte_pktmbuf_alloc(mp); }

int droce_rte_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned count)
{
	return rte_pktmbuf_alloc_bulk(mp, mbufs, count);
}

/* Bulk allocation for a transmit burst of single-segment frames of `len` bytes whose first
 * `hdr_len` bytes are `hdr`: mempool get + the fields a fresh TX mbuf needs (what
 * rte_pktmbuf_reset sets, minus those a freed mbuf already has: next = NULL and nb_segs = 1 are
 * restored by rte_pktmbuf_free) + the header copy, in one pass over the mbufs. 0 or -ENOENT. */
int droce_tx_alloc_fill(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned count,
			const uint8_t *hdr, uint16_t hdr_len, uint16_t len)
{
	if (rte_mempool_get_bulk(mp, (void **)mbufs, count) != 0)
		return -ENOENT;
	for (unsigned i = 0; i < count; i++) {
		struct rte_mbuf *m = mbufs[i];
		rte_pktmbuf_reset_headroom(m);
		m->data_len = len;
		m->pkt_len = len;
		m->ol_flags &= RTE_MBUF_F_EXTERNAL;
		m->packet_type = 0;
		m->vlan_tci = 0;
		m->vlan_tci_outer = 0;
		m->tx_offload = 0;
		m->port = RTE_MBUF_PORT_INVALID;
		rte_memcpy(rte_pktmbuf_mtod(m, uint8_t *), hdr, hdr_len);
	}
	return 0;
}

void droce_rte_pktmbuf_free(struct rte_mbuf *m) { rte_pktmbuf_free(m); }

/* Runs when the count of a memory range's shared info drops to zero. The owner holds one
 * reference for as long as the range is registered and frees the shared info itself once
 * only that reference is left, so DPDK never gets here; a free callback is still required. */
static void droce_ext_never_freed(void *addr, void *opaque)
{
	(void)addr;
	(void)opaque;
}

void droce_ext_shinfo_init(struct rte_mbuf_ext_shared_info *shinfo)
{
	shinfo->free_cb = droce_ext_never_freed;
	shinfo->fcb_opaque = NULL;
	rte_mbuf_ext_refcnt_set(shinfo, 1);
}

uint16_t droce_ext_shinfo_refcnt(const struct rte_mbuf_ext_shared_info *shinfo)
{
	return rte_mbuf_ext_refcnt_read(shinfo);
}

/* The EAL's IOVA mode, fixed once rte_eal_init returned: read once instead of a call into
 * librte_eal per zero-copy frame. 0 unknown, 1 VA, 2 not VA; every thread computes the same
 * value, so a race only repeats the call. */
static int droce_iova_va_cached;

static inline int droce_iova_is_va(void)
{
	int v = __atomic_load_n(&droce_iova_va_cached, __ATOMIC_RELAXED);
	if (v == 0) {
		v = rte_eal_iova_mode() == RTE_IOVA_VA ? 1 : 2;
		__atomic_store_n(&droce_iova_va_cached, v, __ATOMIC_RELAXED);
	}
	return v == 1;
}

void droce_tx_chain_extbuf(struct rte_mbuf *hdr, struct rte_mbuf *ext, struct rte_mbuf *tail, void *addr,
			   uint16_t len, struct rte_mbuf_ext_shared_info *shinfo, const uint8_t *trailer,
			   uint16_t tlen)
{
	/* one reference per frame: DPDK drops it when it frees the segment (any thread) */
	rte_mbuf_ext_refcnt_update(shinfo, 1);
	rte_iova_t iova = droce_iova_is_va() ? (rte_iova_t)(uintptr_t)addr : RTE_BAD_IOVA;
	rte_pktmbuf_attach_extbuf(ext, addr, iova, len, shinfo);
	ext->data_len = len;
	ext->pkt_len = len;
	rte_memcpy(rte_pktmbuf_mtod(tail, uint8_t *), trailer, tlen);
	tail->data_len = tlen;
	tail->pkt_len = tlen;
	ext->next = tail;
	hdr->next = ext;
	hdr->nb_segs = 3;
	hdr->pkt_len = (uint32_t)hdr->data_len + len + tlen;
}

void droce_rte_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned count)
{
	rte_pktmbuf_free_bulk(mbufs, count);
}

char *droce_rte_pktmbuf_append(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_append(m, len); }
char *droce_rte_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_prepend(m, len); }
char *droce_rte_pktmbuf_adj(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_adj(m, len); }
int droce_rte_pktmbuf_trim(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_trim(m, len); }
void *droce_rte_pktmbuf_mtod(struct rte_mbuf *m) { return rte_pktmbuf_mtod(m, void *); }
uint16_t droce_rte_pktmbuf_headroom(const struct rte_mbuf *m) { return rte_pktmbuf_headroom(m); }
uint16_t droce_rte_pktmbuf_tailroom(const struct rte_mbuf *m) { return rte_pktmbuf_tailroom(m); }
uint16_t droce_rte_pktmbuf_data_room_size(struct rte_mempool *mp) { return rte_pktmbuf_data_room_size(mp); }
void droce_rte_pktmbuf_reset(struct rte_mbuf *m) { rte_pktmbuf_reset(m); }
int droce_rte_pktmbuf_is_contiguous(const struct rte_mbuf *m) { return rte_pktmbuf_is_contiguous(m); }

struct rte_mbuf *droce_rte_pktmbuf_clone(struct rte_mbuf *md, struct rte_mempool *mp)
{
	return rte_pktmbuf_clone(md, mp);
}

uint16_t droce_rte_mbuf_refcnt_read(const struct rte_mbuf *m) { return rte_mbuf_refcnt_read(m); }
uint16_t droce_rte_mbuf_refcnt_update(struct rte_mbuf *m, int16_t value) { return rte_mbuf_refcnt_update(m, value); }
void droce_rte_mbuf_refcnt_set(struct rte_mbuf *m, uint16_t value) { rte_mbuf_refcnt_set(m, value); }
int droce_rte_pktmbuf_linearize(struct rte_mbuf *m) { return rte_pktmbuf_linearize(m); }

unsigned droce_rte_mempool_avail_count(const struct rte_mempool *mp) { return rte_mempool_avail_count(mp); }
unsigned droce_rte_mempool_in_use_count(const struct rte_mempool *mp) { return rte_mempool_in_use_count(mp); }

int droce_rte_errno(void) { return rte_errno; }
void droce_rte_errno_set(int value) { rte_errno = value; }
unsigned droce_rte_lcore_id(void) { return rte_lcore_id(); }
unsigned droce_rte_socket_id(void) { return rte_socket_id(); }
uint64_t droce_rte_rdtsc(void) { return rte_rdtsc(); }
uint64_t droce_rte_rdtsc_precise(void) { return rte_rdtsc_precise(); }
uint64_t droce_rte_get_tsc_hz(void) { return rte_get_tsc_hz(); }
void droce_rte_pause(void) { rte_pause(); }

int droce_intr_register_fd(int fd, void (*cb)(void *), void *arg)
{
	struct rte_intr_handle *h = rte_intr_instance_alloc(RTE_INTR_INSTANCE_F_PRIVATE);
	int r;

	if (h == NULL)
		return -ENOMEM;
	if (rte_intr_fd_set(h, fd) != 0 || rte_intr_type_set(h, RTE_INTR_HANDLE_EXT) != 0) {
		rte_intr_instance_free(h);
		return -EINVAL;
	}
	r = rte_intr_callback_register(h, cb, arg);
	if (r != 0) {
		rte_intr_instance_free(h);
		return r < 0 ? r : -EINVAL;
	}
	return 0;
}

uint64_t droce_rx_offload_ipv4_cksum(void) { return RTE_ETH_RX_OFFLOAD_IPV4_CKSUM; }
uint64_t droce_rx_offload_udp_cksum(void) { return RTE_ETH_RX_OFFLOAD_UDP_CKSUM; }
uint64_t droce_tx_offload_ipv4_cksum(void) { return RTE_ETH_TX_OFFLOAD_IPV4_CKSUM; }
uint64_t droce_tx_offload_udp_cksum(void) { return RTE_ETH_TX_OFFLOAD_UDP_CKSUM; }
uint64_t droce_rss_ip_udp(void) { return RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP; }

/* The Rust side (dpdk-sys src/lib.rs `consts`) hard-codes these flag values; keep them honest. */
_Static_assert(RTE_ETH_RX_OFFLOAD_VLAN_STRIP == (1ULL << 0), "rx vlan strip");
_Static_assert(RTE_ETH_RX_OFFLOAD_IPV4_CKSUM == (1ULL << 1), "rx ipv4 cksum");
_Static_assert(RTE_ETH_RX_OFFLOAD_UDP_CKSUM == (1ULL << 2), "rx udp cksum");
_Static_assert(RTE_ETH_RX_OFFLOAD_TCP_CKSUM == (1ULL << 3), "rx tcp cksum");
_Static_assert(RTE_ETH_RX_OFFLOAD_SCATTER == (1ULL << 13), "rx scatter");
_Static_assert(RTE_ETH_RX_OFFLOAD_RSS_HASH == (1ULL << 19), "rx rss hash");
_Static_assert(RTE_ETH_TX_OFFLOAD_VLAN_INSERT == (1ULL << 0), "tx vlan insert");
_Static_assert(RTE_ETH_TX_OFFLOAD_IPV4_CKSUM == (1ULL << 1), "tx ipv4 cksum");
_Static_assert(RTE_ETH_TX_OFFLOAD_UDP_CKSUM == (1ULL << 2), "tx udp cksum");
_Static_assert(RTE_ETH_TX_OFFLOAD_TCP_CKSUM == (1ULL << 3), "tx tcp cksum");
_Static_assert(RTE_ETH_TX_OFFLOAD_MULTI_SEGS == (1ULL << 15), "tx multi segs");
_Static_assert(RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE == (1ULL << 16), "tx mbuf fast free");
_Static_assert(RTE_MBUF_F_TX_IPV4 == (1ULL << 55), "mbuf tx ipv4");
_Static_assert(RTE_MBUF_F_TX_IP_CKSUM == (1ULL << 54), "mbuf tx ip cksum");
_Static_assert(RTE_MBUF_F_TX_UDP_CKSUM == (3ULL << 52), "mbuf tx udp cksum");
_Static_assert(RTE_MBUF_F_RX_IP_CKSUM_MASK == ((1ULL << 4) | (1ULL << 7)), "rx ip cksum mask");
_Static_assert(RTE_MBUF_F_RX_IP_CKSUM_GOOD == (1ULL << 7), "rx ip cksum good");
_Static_assert(RTE_MBUF_F_RX_IP_CKSUM_BAD == (1ULL << 4), "rx ip cksum bad");
_Static_assert(RTE_MBUF_F_RX_L4_CKSUM_MASK == ((1ULL << 3) | (1ULL << 8)), "rx l4 cksum mask");
_Static_assert(RTE_MBUF_F_RX_L4_CKSUM_GOOD == (1ULL << 8), "rx l4 cksum good");
_Static_assert(RTE_MBUF_F_RX_L4_CKSUM_BAD == (1ULL << 3), "rx l4 cksum bad");
_Static_assert(RTE_ETH_MQ_RX_NONE == 0, "mq rx none");
