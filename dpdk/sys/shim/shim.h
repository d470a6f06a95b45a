/* Headers for bindgen plus the droce shim: real symbols for DPDK's static inline API. */
#ifndef DROCE_DPDK_SHIM_H
#define DROCE_DPDK_SHIM_H

#include <stdint.h>
#include <rte_config.h>
#include <rte_common.h>
#include <rte_errno.h>
#include <rte_eal.h>
#include <rte_lcore.h>
#include <rte_launch.h>
#include <rte_cycles.h>
#include <rte_dev.h>
#include <rte_bus_vdev.h>
#include <rte_mempool.h>
#include <rte_mbuf.h>
#include <rte_ether.h>
#include <rte_ethdev.h>
#include <rte_interrupts.h>

/* ethdev fast path */
uint16_t droce_rte_eth_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts,
                                uint16_t nb_pkts);
uint16_t droce_rte_eth_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts,
                                uint16_t nb_pkts);
uint16_t droce_rte_eth_tx_prepare(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts,
                                  uint16_t nb_pkts);
int droce_rte_eth_rx_queue_count(uint16_t port_id, uint16_t queue_id);

/* mbuf */
struct rte_mbuf *droce_rte_pktmbuf_alloc(struct rte_mempool *mp);
int droce_rte_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned count);
int droce_tx_alloc_fill(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned count,
			const uint8_t *hdr, uint16_t hdr_len, uint16_t len);
void droce_rte_pktmbuf_free(struct rte_mbuf *m);
void droce_rte_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned count);
char *droce_rte_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
char *droce_rte_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len);
char *droce_rte_pktmbuf_adj(struct rte_mbuf *m, uint16_t len);
int droce_rte_pktmbuf_trim(struct rte_mbuf *m, uint16_t len);
void *droce_rte_pktmbuf_mtod(struct rte_mbuf *m);
uint16_t droce_rte_pktmbuf_headroom(const struct rte_mbuf *m);
uint16_t droce_rte_pktmbuf_tailroom(const struct rte_mbuf *m);
uint16_t droce_rte_pktmbuf_data_room_size(struct rte_mempool *mp);
void droce_rte_pktmbuf_reset(struct rte_mbuf *m);
int droce_rte_pktmbuf_is_contiguous(const struct rte_mbuf *m);
struct rte_mbuf *droce_rte_pktmbuf_clone(struct rte_mbuf *md, struct rte_mempool *mp);
uint16_t droce_rte_mbuf_refcnt_read(const struct rte_mbuf *m);
uint16_t droce_rte_mbuf_refcnt_update(struct rte_mbuf *m, int16_t value);
void droce_rte_mbuf_refcnt_set(struct rte_mbuf *m, uint16_t value);
int droce_rte_pktmbuf_linearize(struct rte_mbuf *m);

/* mempool */
unsigned droce_rte_mempool_avail_count(const struct rte_mempool *mp);
unsigned droce_rte_mempool_in_use_count(const struct rte_mempool *mp);

/* eal / lcore / time */
int droce_rte_errno(void);
void droce_rte_errno_set(int value);
unsigned droce_rte_lcore_id(void);
unsigned droce_rte_socket_id(void);
uint64_t droce_rte_rdtsc(void);
uint64_t droce_rte_rdtsc_precise(void);
uint64_t droce_rte_get_tsc_hz(void);
void droce_rte_pause(void);

/* EAL interrupt thread: registers `cb(arg)` to run on the interrupt thread whenever `fd` is
 * readable (an RTE_INTR_HANDLE_EXT source: EAL does not read the fd, the callback must).
 * 0 or a negative errno. The handle lives until the process exits. */
int droce_intr_register_fd(int fd, void (*cb)(void *), void *arg);

/* 64-bit flag macros (RTE_BIT64(...)) that bindgen cannot evaluate; checked by static asserts */
uint64_t droce_rx_offload_ipv4_cksum(void);
uint64_t droce_rx_offload_udp_cksum(void);
uint64_t droce_tx_offload_ipv4_cksum(void);
uint64_t droce_tx_offload_udp_cksum(void);
/* RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP: hash functions asked for when RSS is enabled */
uint64_t droce_rss_ip_udp(void);

/* zero-copy TX: a frame as header mbuf + external-buffer segment over registered memory +
 * trailer segment; the shared info counts the frames in flight over one memory range */
void droce_ext_shinfo_init(struct rte_mbuf_ext_shared_info *shinfo);
uint16_t droce_ext_shinfo_refcnt(const struct rte_mbuf_ext_shared_info *shinfo);
/* `ext` and `tail`: fresh mbufs (rte_pktmbuf_alloc_bulk'ed), taken over by the chain */
void droce_tx_chain_extbuf(struct rte_mbuf *hdr, struct rte_mbuf *ext, struct rte_mbuf *tail, void *addr,
			   uint16_t len, struct rte_mbuf_ext_shared_info *shinfo, const uint8_t *trailer,
			   uint16_t tlen);

#endif
