/*
 * droce UCT component, endpoint side: the endpoint class and every ep operation (active
 * messages, put, get, atomics, flush, pending), each forwarding to the Rust crate, and the ops
 * tables of the two transports (droce_rc, droce_ud) that pair them with the interface's.
 */
#include "droce_uct_int.h"

/* ------------------------------------------------------------------ endpoint */

#define DROCE_EP_IFACE(_tl_ep) ucs_derived_of((_tl_ep)->iface, droce_iface_t)
#define DROCE_EP(_tl_ep)       ucs_derived_of(_tl_ep, droce_ep_t)

static UCS_CLASS_INIT_FUNC(droce_ep_t, const uct_ep_params_t *params)
{
    droce_iface_t *iface = ucs_derived_of(params->iface, droce_iface_t);
    const uint8_t *dev_addr   = NULL;
    const uint8_t *iface_addr = NULL;

    UCS_CLASS_CALL_SUPER_INIT(uct_base_ep_t, &iface->super);
    if (params->field_mask & UCT_EP_PARAM_FIELD_DEV_ADDR) {
        dev_addr = (const uint8_t*)params->dev_addr;
    }
    if (params->field_mask & UCT_EP_PARAM_FIELD_IFACE_ADDR) {
        iface_addr = (const uint8_t*)params->iface_addr;
    }
    if (iface->kind == DROCE_KIND_UD && (dev_addr == NULL || iface_addr == NULL)) {
        return UCS_ERR_INVALID_PARAM;
    }
    self->rs = NULL;
    return (ucs_status_t)droce_rs_ep_create(iface->rs, self, dev_addr, iface_addr, &self->rs);
}

static UCS_CLASS_CLEANUP_FUNC(droce_ep_t)
{
    droce_iface_t *iface = DROCE_EP_IFACE(&self->super.super);
    if (self->rs != NULL) {
        droce_rs_ep_destroy(iface->rs, self->rs);
    }
}

UCS_CLASS_DEFINE(droce_ep_t, uct_base_ep_t);
static UCS_CLASS_DEFINE_NEW_FUNC(droce_ep_t, uct_ep_t, const uct_ep_params_t*);
static UCS_CLASS_DEFINE_DELETE_FUNC(droce_ep_t, uct_ep_t);

static ucs_status_t droce_ep_get_address(uct_ep_h tl_ep, uct_ep_addr_t *addr)
{
    return (ucs_status_t)droce_rs_ep_address(DROCE_EP_IFACE(tl_ep)->rs, DROCE_EP(tl_ep)->rs,
                                             (uint8_t*)addr);
}

static ucs_status_t droce_ep_connect_to_ep(uct_ep_h tl_ep, const uct_device_addr_t *dev_addr,
                                           const uct_ep_addr_t *ep_addr)
{
    return (ucs_status_t)droce_rs_ep_connect_to_ep(DROCE_EP_IFACE(tl_ep)->rs, DROCE_EP(tl_ep)->rs,
                                                   (const uint8_t*)dev_addr,
                                                   (const uint8_t*)ep_addr);
}

static ucs_status_t droce_ep_flush(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp)
{
    return (ucs_status_t)droce_rs_ep_flush(DROCE_EP_IFACE(tl_ep)->rs, DROCE_EP(tl_ep)->rs, flags, comp);
}

static ucs_status_t droce_ep_fence(uct_ep_h tl_ep, unsigned flags)
{
    return (ucs_status_t)droce_rs_ep_fence(DROCE_EP_IFACE(tl_ep)->rs, DROCE_EP(tl_ep)->rs);
}

static ucs_status_t droce_ep_check(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp)
{
    return (ucs_status_t)droce_rs_ep_check(DROCE_EP_IFACE(tl_ep)->rs, DROCE_EP(tl_ep)->rs);
}

static ucs_status_t droce_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req, unsigned flags)
{
    return (ucs_status_t)droce_rs_ep_pending_add(DROCE_EP_IFACE(tl_ep)->rs, DROCE_EP(tl_ep)->rs, req);
}

static void droce_ep_pending_purge(uct_ep_h tl_ep, uct_pending_purge_callback_t cb, void *arg)
{
    droce_rs_ep_pending_purge(DROCE_EP_IFACE(tl_ep)->rs, DROCE_EP(tl_ep)->rs, (void*)cb, arg);
}

/* uct_iov_t -> droce_iov_t; strided elements (count > 1) are expanded. */
static ucs_status_t droce_flatten_iov(const uct_iov_t *iov, size_t iovcnt, droce_iov_t *out,
                                      size_t *outcnt)
{
    size_t i, n = 0;
    unsigned c;

    for (i = 0; i < iovcnt; i++) {
        for (c = 0; c < iov[i].count; c++) {
            if (n == DROCE_MAX_IOV) {
                return UCS_ERR_INVALID_PARAM;
            }
            out[n].buffer = UCS_PTR_BYTE_OFFSET(iov[i].buffer, (size_t)c * iov[i].stride);
            out[n].length = iov[i].length;
            out[n].memh   = iov[i].memh;
            n++;
        }
    }
    *outcnt = n;
    return UCS_OK;
}

static ucs_status_t droce_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header,
                                      const void *payload, unsigned length)
{
    droce_iov_t iov = {(void*)payload, length, NULL};
    UCT_CHECK_AM_ID(id);
    return (ucs_status_t)droce_rs_am_send(DROCE_EP_IFACE(tl_ep)->rs, DROCE_EP(tl_ep)->rs, id,
                                          &header, sizeof(header), &iov, 1, 0, NULL);
}

/* An active message whose payload is an iov list: copied now (short), or read from the
 * registered buffers until the send completes through `comp` (zcopy). */
static ucs_status_t droce_ep_am_iov(uct_ep_h tl_ep, uint8_t id, const void *header,
                                    unsigned header_length, const uct_iov_t *iov, size_t iovcnt,
                                    int zcopy, uct_completion_t *comp)
{
    droce_iov_t flat[DROCE_MAX_IOV];
    size_t n;
    ucs_status_t status;

    UCT_CHECK_AM_ID(id);
    status = droce_flatten_iov(iov, iovcnt, flat, &n);
    if (status != UCS_OK) {
        return status;
    }
    return (ucs_status_t)droce_rs_am_send(DROCE_EP_IFACE(tl_ep)->rs, DROCE_EP(tl_ep)->rs, id,
                                          header, header_length, flat, n, zcopy, comp);
}

static ucs_status_t droce_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id, const uct_iov_t *iov,
                                          size_t iovcnt)
{
    return droce_ep_am_iov(tl_ep, id, NULL, 0, iov, iovcnt, 0, NULL);
}

static ssize_t droce_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id, uct_pack_callback_t pack_cb,
                                 void *arg, unsigned flags)
{
    UCT_CHECK_AM_ID(id);
    return droce_rs_am_bcopy(DROCE_EP_IFACE(tl_ep)->rs, DROCE_EP(tl_ep)->rs, id, (void*)pack_cb, arg);
}

static ucs_status_t droce_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id, const void *header,
                                      unsigned header_length, const uct_iov_t *iov, size_t iovcnt,
                                      unsigned flags, uct_completion_t *comp)
{
    return droce_ep_am_iov(tl_ep, id, header, header_length, iov, iovcnt, 1, comp);
}

static ucs_status_t droce_ep_put_short(uct_ep_h tl_ep, const void *buffer, unsigned length,
                                       uint64_t remote_addr, uct_rkey_t rkey)
{
    droce_iov_t iov = {(void*)buffer, length, NULL};
    return (ucs_status_t)droce_rs_put(DROCE_EP_IFACE(tl_ep)->rs, DROCE_EP(tl_ep)->rs, &iov, 1, 0,
                                      remote_addr, rkey, NULL);
}

static ssize_t droce_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb, void *arg,
                                  uint64_t remote_addr, uct_rkey_t rkey)
{
    return droce_rs_put_bcopy(DROCE_EP_IFACE(tl_ep)->rs, DROCE_EP(tl_ep)->rs, (void*)pack_cb, arg,
                              remote_addr, rkey);
}

static ucs_status_t droce_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt,
                                       uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp)
{
    droce_iov_t flat[DROCE_MAX_IOV];
    size_t n;
    ucs_status_t status = droce_flatten_iov(iov, iovcnt, flat, &n);
    if (status != UCS_OK) {
        return status;
    }
    return (ucs_status_t)droce_rs_put(DROCE_EP_IFACE(tl_ep)->rs, DROCE_EP(tl_ep)->rs, flat, n, 1,
                                      remote_addr, rkey, comp);
}

static ucs_status_t droce_ep_get_bcopy(uct_ep_h tl_ep, uct_unpack_callback_t unpack_cb, void *arg,
                                       size_t length, uint64_t remote_addr, uct_rkey_t rkey,
                                       uct_completion_t *comp)
{
    return (ucs_status_t)droce_rs_get_bcopy(DROCE_EP_IFACE(tl_ep)->rs, DROCE_EP(tl_ep)->rs,
                                            (void*)unpack_cb, arg, length, remote_addr, rkey, comp);
}

static ucs_status_t droce_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt,
                                       uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp)
{
    droce_iov_t flat[DROCE_MAX_IOV];
    size_t n;
    ucs_status_t status = droce_flatten_iov(iov, iovcnt, flat, &n);
    if (status != UCS_OK) {
        return status;
    }
    return (ucs_status_t)droce_rs_get_zcopy(DROCE_EP_IFACE(tl_ep)->rs, DROCE_EP(tl_ep)->rs, flat, n,
                                            remote_addr, rkey, comp);
}

static int droce_aop(unsigned opcode)
{
    switch (opcode) {
    case UCT_ATOMIC_OP_ADD:   return DROCE_AOP_ADD;
    case UCT_ATOMIC_OP_SWAP:  return DROCE_AOP_SWAP;
    case UCT_ATOMIC_OP_CSWAP: return DROCE_AOP_CSWAP;
    default:                  return -1;
    }
}

static ucs_status_t droce_atomic(uct_ep_h tl_ep, unsigned opcode, int width, uint64_t value,
                                 uint64_t compare, uint64_t remote_addr, uct_rkey_t rkey,
                                 void *result, uct_completion_t *comp)
{
    int op = droce_aop(opcode);
    if (op < 0 || (result == NULL && op != DROCE_AOP_ADD)) {
        return UCS_ERR_UNSUPPORTED;
    }
    return (ucs_status_t)droce_rs_atomic(DROCE_EP_IFACE(tl_ep)->rs, DROCE_EP(tl_ep)->rs, op, width,
                                         value, compare, remote_addr, rkey, result, comp);
}

static ucs_status_t droce_ep_atomic64_post(uct_ep_h ep, unsigned opcode, uint64_t value,
                                           uint64_t remote_addr, uct_rkey_t rkey)
{
    return droce_atomic(ep, opcode, 8, value, 0, remote_addr, rkey, NULL, NULL);
}

static ucs_status_t droce_ep_atomic32_post(uct_ep_h ep, unsigned opcode, uint32_t value,
                                           uint64_t remote_addr, uct_rkey_t rkey)
{
    return droce_atomic(ep, opcode, 4, value, 0, remote_addr, rkey, NULL, NULL);
}

static ucs_status_t droce_ep_atomic64_fetch(uct_ep_h ep, uct_atomic_op_t opcode, uint64_t value,
                                            uint64_t *result, uint64_t remote_addr,
                                            uct_rkey_t rkey, uct_completion_t *comp)
{
    return droce_atomic(ep, opcode, 8, value, 0, remote_addr, rkey, result, comp);
}

static ucs_status_t droce_ep_atomic32_fetch(uct_ep_h ep, uct_atomic_op_t opcode, uint32_t value,
                                            uint32_t *result, uint64_t remote_addr,
                                            uct_rkey_t rkey, uct_completion_t *comp)
{
    return droce_atomic(ep, opcode, 4, value, 0, remote_addr, rkey, result, comp);
}

static ucs_status_t droce_ep_atomic_cswap64(uct_ep_h ep, uint64_t compare, uint64_t swap,
                                            uint64_t remote_addr, uct_rkey_t rkey,
                                            uint64_t *result, uct_completion_t *comp)
{
    return droce_atomic(ep, UCT_ATOMIC_OP_CSWAP, 8, swap, compare, remote_addr, rkey, result, comp);
}

static ucs_status_t droce_ep_atomic_cswap32(uct_ep_h ep, uint32_t compare, uint32_t swap,
                                            uint64_t remote_addr, uct_rkey_t rkey,
                                            uint32_t *result, uct_completion_t *comp)
{
    return droce_atomic(ep, UCT_ATOMIC_OP_CSWAP, 4, swap, compare, remote_addr, rkey, result, comp);
}

/* ------------------------------------------------------------------ ops tables */

#define DROCE_COMMON_OPS \
    .ep_am_short              = droce_ep_am_short, \
    .ep_am_short_iov          = droce_ep_am_short_iov, \
    .ep_am_bcopy              = droce_ep_am_bcopy, \
    .ep_am_zcopy              = droce_ep_am_zcopy, \
    .ep_pending_add           = droce_ep_pending_add, \
    .ep_pending_purge         = droce_ep_pending_purge, \
    .ep_flush                 = droce_ep_flush, \
    .ep_fence                 = droce_ep_fence, \
    .ep_check                 = droce_ep_check, \
    .ep_create                = UCS_CLASS_NEW_FUNC_NAME(droce_ep_t), \
    .ep_destroy               = UCS_CLASS_DELETE_FUNC_NAME(droce_ep_t), \
    .iface_flush              = droce_iface_flush, \
    .iface_fence              = droce_iface_fence, \
    .iface_progress_enable    = uct_base_iface_progress_enable, \
    .iface_progress_disable   = uct_base_iface_progress_disable, \
    .iface_progress           = droce_iface_progress, \
    .iface_close              = UCS_CLASS_DELETE_FUNC_NAME(droce_iface_t), \
    .iface_query              = droce_iface_query, \
    .iface_get_device_address = droce_iface_get_device_address, \
    .iface_get_address        = droce_iface_get_address, \
    .iface_is_reachable       = droce_iface_is_reachable

uct_iface_ops_t droce_rc_iface_ops = {
    DROCE_COMMON_OPS,
    .ep_put_short      = droce_ep_put_short,
    .ep_put_bcopy      = droce_ep_put_bcopy,
    .ep_put_zcopy      = droce_ep_put_zcopy,
    .ep_get_bcopy      = droce_ep_get_bcopy,
    .ep_get_zcopy      = droce_ep_get_zcopy,
    .ep_atomic_cswap64 = droce_ep_atomic_cswap64,
    .ep_atomic_cswap32 = droce_ep_atomic_cswap32,
    .ep_atomic32_post  = droce_ep_atomic32_post,
    .ep_atomic64_post  = droce_ep_atomic64_post,
    .ep_atomic32_fetch = droce_ep_atomic32_fetch,
    .ep_atomic64_fetch = droce_ep_atomic64_fetch,
    .ep_get_address    = droce_ep_get_address,
    .ep_connect_to_ep  = droce_ep_connect_to_ep,
};

uct_iface_ops_t droce_ud_iface_ops = {
    DROCE_COMMON_OPS,
    .ep_get_address    = (uct_ep_get_address_func_t)ucs_empty_function_return_unsupported,
    .ep_connect_to_ep  = (uct_ep_connect_to_ep_func_t)ucs_empty_function_return_unsupported,
};
