/*
 * The plain C ABI between the UCT shim (droce_uct*.c) and the Rust crate (src/ffi/).
 * No UCX type crosses it: UCX objects are opaque pointers on the Rust side, and every
 * callback into UCX (completion, AM handler, pending request, pack/unpack) goes through a
 * droce_c_* helper defined in the shim. Keep in sync with src/ffi/.
 */
#ifndef DROCE_ABI_H
#define DROCE_ABI_H

#include <stddef.h>
#include <stdint.h>

#define DROCE_KIND_RC 0
#define DROCE_KIND_UD 1

/* Sizes of the addresses the transports exchange. */
#define DROCE_DEV_ADDR_LEN   16 /* GID (IPv4-mapped or IPv6) */
#define DROCE_UD_IFACE_ADDR_LEN 4 /* UD QPN, little endian */
#define DROCE_RC_EP_ADDR_LEN 8  /* RC QPN (24 bits) with the path MTU code in its high byte, initial PSN (24 bits) with the extensions offered in its high byte; little endian */
#define DROCE_RKEY_PACKED_LEN 8 /* rkey (u32) + magic (u32) */

typedef struct droce_iface_cfg {
    size_t   seg_size;     /* AM bcopy / receive buffer size */
    unsigned tx_queue_len; /* send work requests in flight per interface */
    unsigned rx_queue_len; /* posted receive buffers per interface */
} droce_iface_cfg_t;

/* What an interface can do; the shim turns it into uct_iface_attr_t. */
typedef struct droce_iface_info {
    size_t am_max_short;
    size_t am_max_bcopy;
    size_t am_max_zcopy;
    size_t am_max_hdr;
    size_t put_max_short;
    size_t put_max_bcopy;
    size_t put_max_zcopy;
    size_t get_max_bcopy;
    size_t get_max_zcopy;
    size_t max_iov;
    double latency_s;      /* one-way small-message latency measured on this wire class */
    double bandwidth_Bps;
    double overhead_s;     /* CPU cost of one send call */
    unsigned path_mtu;
} droce_iface_info_t;

/* A flattened uct_iov_t element (count == 1). */
typedef struct droce_iov {
    void  *buffer;
    size_t length;
    void  *memh;
} droce_iov_t;

/* Callbacks into UCX (implemented in the shim). */
int    droce_c_invoke_am(void *iface_c, uint8_t id, void *data, unsigned length);
void   droce_c_complete(void *comp, int status);
int    droce_c_pending_call(void *req);
void   droce_c_pending_purge_cb(void *cb, void *req, void *arg);
size_t droce_c_pack(void *pack_cb, void *dest, void *arg);
void   droce_c_unpack(void *unpack_cb, void *arg, const void *data, size_t length);
int    droce_c_ep_failed(void *iface_c, void *ep_c, int status);
void   droce_c_log(int level, const char *msg); /* 0 error, 1 warn, 2 info, 3 debug */

/* Rust side. Every function catches panics and returns a UCS status (int). */
int  droce_rs_md_open(void **md_rs);
void droce_rs_md_close(void *md_rs);
int  droce_rs_mem_reg(void *md_rs, void *address, size_t length, void **memh);
int  droce_rs_mem_dereg(void *md_rs, void *memh);
int  droce_rs_mkey_pack(void *memh, void *rkey_buffer);
int  droce_rs_rkey_unpack(const void *rkey_buffer, uint64_t *rkey);

int  droce_rs_iface_open(void *iface_c, int kind, const droce_iface_cfg_t *cfg, void **rs);
void droce_rs_iface_close(void *rs);
void droce_rs_iface_info(void *rs, droce_iface_info_t *info);
int  droce_rs_iface_device_address(void *rs, uint8_t *addr);
int  droce_rs_iface_address(void *rs, uint8_t *addr);
int  droce_rs_iface_is_reachable(void *rs, const uint8_t *dev_addr, const uint8_t *iface_addr);
unsigned droce_rs_iface_progress(void *rs);
int  droce_rs_iface_flush(void *rs, unsigned flags, void *comp);
int  droce_rs_iface_fence(void *rs);

int  droce_rs_ep_create(void *rs, void *ep_c, const uint8_t *dev_addr, const uint8_t *iface_addr, void **ep_rs);
void droce_rs_ep_destroy(void *rs, void *ep_rs);
int  droce_rs_ep_address(void *rs, void *ep_rs, uint8_t *addr);
int  droce_rs_ep_connect_to_ep(void *rs, void *ep_rs, const uint8_t *dev_addr, const uint8_t *ep_addr);
int  droce_rs_ep_flush(void *rs, void *ep_rs, unsigned flags, void *comp);
int  droce_rs_ep_fence(void *rs, void *ep_rs);
int  droce_rs_ep_check(void *rs, void *ep_rs);
int  droce_rs_ep_pending_add(void *rs, void *ep_rs, void *req);
void droce_rs_ep_pending_purge(void *rs, void *ep_rs, void *cb, void *arg);

/* AM: `hdr`/`hdr_len` go first, then the iov elements. Short/bcopy copy before returning. */
int  droce_rs_am_send(void *rs, void *ep_rs, uint8_t id, const void *hdr, size_t hdr_len,
                      const droce_iov_t *iov, size_t iovcnt, int zcopy, void *comp);
/* bcopy: the Rust side calls pack_cb(dest, arg) into its own send buffer. Returns the length or a status (< 0). */
long droce_rs_am_bcopy(void *rs, void *ep_rs, uint8_t id, void *pack_cb, void *arg);
int  droce_rs_put(void *rs, void *ep_rs, const droce_iov_t *iov, size_t iovcnt, int zcopy,
                  uint64_t remote_addr, uint64_t rkey, void *comp);
long droce_rs_put_bcopy(void *rs, void *ep_rs, void *pack_cb, void *arg, uint64_t remote_addr, uint64_t rkey);
int  droce_rs_get_bcopy(void *rs, void *ep_rs, void *unpack_cb, void *arg, size_t length,
                        uint64_t remote_addr, uint64_t rkey, void *comp);
int  droce_rs_get_zcopy(void *rs, void *ep_rs, const droce_iov_t *iov, size_t iovcnt,
                        uint64_t remote_addr, uint64_t rkey, void *comp);

#define DROCE_AOP_ADD   0
#define DROCE_AOP_SWAP  1
#define DROCE_AOP_CSWAP 2
/* width 4 or 8; result NULL for a post (no fetch). */
int  droce_rs_atomic(void *rs, void *ep_rs, int op, int width, uint64_t value, uint64_t compare,
                     uint64_t remote_addr, uint64_t rkey, void *result, void *comp);

/* Layout check result of the shim, for the Rust side's diagnostics. */
const char *droce_c_layout_error(void);

#endif
