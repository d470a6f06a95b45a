/*
 * droce UCT component: the thin C layer UCX's registration macros and struct embedding need.
 * Every operation forwards to the Rust crate through droce_abi.h; the shim holds no transport
 * logic. This file: the layout check, the callbacks Rust makes into UCX, the memory domain, the
 * interface and the component's registration; the endpoint side is droce_uct_ep.c. Compiled against the internal headers of the installed UCX version (see
 * scripts/setup-ucx-src.sh); droce_layout_ok() refuses to register when the struct sizes this
 * file was compiled with differ from the ones the loaded libuct uses.
 */
#include "droce_uct_int.h"

static uct_component_t droce_component;

/* ------------------------------------------------------------------ layout check */

static const char *droce_layout_msg = NULL;
static char droce_layout_buf[256];

/* libuct exports the ucs_class_t of its base classes; their `size` is sizeof() as libuct was
 * built. A difference means this shim was compiled against other headers or build options. */
static int droce_layout_ok(void)
{
    extern ucs_class_t uct_base_iface_t_class;
    extern ucs_class_t uct_base_ep_t_class;

    if (uct_base_iface_t_class.size != sizeof(uct_base_iface_t) ||
        uct_base_ep_t_class.size != sizeof(uct_base_ep_t)) {
        snprintf(droce_layout_buf, sizeof(droce_layout_buf),
                 "droce: UCX layout mismatch (libuct uct_base_iface_t %zu B, uct_base_ep_t %zu B; "
                 "compiled with %zu B, %zu B): rebuild ucx-glue after scripts/setup-ucx-src.sh "
                 "for the installed UCX; transports not registered",
                 (size_t)uct_base_iface_t_class.size, (size_t)uct_base_ep_t_class.size,
                 sizeof(uct_base_iface_t), sizeof(uct_base_ep_t));
        droce_layout_msg = droce_layout_buf;
        return 0;
    }
    return 1;
}

const char *droce_c_layout_error(void)
{
    return droce_layout_msg;
}

/* ------------------------------------------------------------------ callbacks for Rust */

int droce_c_invoke_am(void *iface_c, uint8_t id, void *data, unsigned length)
{
    droce_iface_t *iface = iface_c;
    return uct_iface_invoke_am(&iface->super, id, data, length, 0);
}

void droce_c_complete(void *comp, int status)
{
    if (comp != NULL) {
        uct_invoke_completion((uct_completion_t*)comp, (ucs_status_t)status);
    }
}

int droce_c_pending_call(void *req)
{
    uct_pending_req_t *r = req;
    return r->func(r);
}

void droce_c_pending_purge_cb(void *cb, void *req, void *arg)
{
    if (cb != NULL) {
        ((uct_pending_purge_callback_t)cb)((uct_pending_req_t*)req, arg);
    }
}

size_t droce_c_pack(void *pack_cb, void *dest, void *arg)
{
    return ((uct_pack_callback_t)pack_cb)(dest, arg);
}

void droce_c_unpack(void *unpack_cb, void *arg, const void *data, size_t length)
{
    ((uct_unpack_callback_t)unpack_cb)(arg, data, length);
}

int droce_c_ep_failed(void *iface_c, void *ep_c, int status)
{
    droce_iface_t *iface = iface_c;
    return uct_iface_handle_ep_err(&iface->super.super, (uct_ep_h)ep_c, (ucs_status_t)status);
}

void droce_c_log(int level, const char *msg)
{
    switch (level) {
    case 0:  ucs_error("%s", msg); break;
    case 1:  ucs_warn("%s", msg); break;
    case 2:  ucs_info("%s", msg); break;
    default: ucs_debug("%s", msg); break;
    }
}

/* ------------------------------------------------------------------ memory domain */

static ucs_config_field_t droce_md_config_table[] = {
    {"", "", NULL, ucs_offsetof(droce_md_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},
    {NULL}
};

static void droce_md_close(uct_md_h md)
{
    droce_md_t *dmd = ucs_derived_of(md, droce_md_t);
    droce_rs_md_close(dmd->rs);
    ucs_free(dmd);
}

static ucs_status_t droce_md_query(uct_md_h md, uct_md_attr_t *attr)
{
    attr->cap.flags            = UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_MEMH | UCT_MD_FLAG_NEED_RKEY;
    attr->cap.reg_mem_types    = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->cap.alloc_mem_types  = 0;
    attr->cap.access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->cap.detect_mem_types = 0;
    attr->cap.max_alloc        = 0;
    attr->cap.max_reg          = ULONG_MAX;
    attr->rkey_packed_size     = DROCE_RKEY_PACKED_LEN;
    /* a registration is a table insert, no pinning: ~1 us regardless of size */
    attr->reg_cost             = ucs_linear_func_make(1e-6, 0);
    memset(&attr->local_cpus, 0xff, sizeof(attr->local_cpus));
    return UCS_OK;
}

static ucs_status_t droce_mem_reg(uct_md_h md, void *address, size_t length,
                                  unsigned flags, uct_mem_h *memh_p)
{
    droce_md_t *dmd = ucs_derived_of(md, droce_md_t);
    return (ucs_status_t)droce_rs_mem_reg(dmd->rs, address, length, memh_p);
}

static ucs_status_t droce_mem_dereg(uct_md_h md, const uct_md_mem_dereg_params_t *params)
{
    droce_md_t *dmd = ucs_derived_of(md, droce_md_t);
    if (!(params->field_mask & UCT_MD_MEM_DEREG_FIELD_MEMH) ||
        (params->field_mask & UCT_MD_MEM_DEREG_FIELD_FLAGS &&
         params->flags & UCT_MD_MEM_DEREG_FLAG_INVALIDATE)) {
        return UCS_ERR_UNSUPPORTED;
    }
    return (ucs_status_t)droce_rs_mem_dereg(dmd->rs, params->memh);
}

static ucs_status_t droce_mkey_pack(uct_md_h md, uct_mem_h memh,
                                    const uct_md_mkey_pack_params_t *params,
                                    void *rkey_buffer)
{
    return (ucs_status_t)droce_rs_mkey_pack(memh, rkey_buffer);
}

static uct_md_ops_t droce_md_ops = {
    .close              = droce_md_close,
    .query              = droce_md_query,
    .mem_alloc          = (uct_md_mem_alloc_func_t)ucs_empty_function_return_unsupported,
    .mem_free           = (uct_md_mem_free_func_t)ucs_empty_function_return_unsupported,
    .mem_advise         = (uct_md_mem_advise_func_t)ucs_empty_function_return_unsupported,
    .mem_reg            = droce_mem_reg,
    .mem_dereg          = droce_mem_dereg,
    .mem_query          = (uct_md_mem_query_func_t)ucs_empty_function_return_unsupported,
    .mkey_pack          = droce_mkey_pack,
    .is_sockaddr_accessible = (uct_md_is_sockaddr_accessible_func_t)ucs_empty_function_return_zero,
    .detect_memory_type = (uct_md_detect_memory_type_func_t)ucs_empty_function_return_unsupported,
};

static ucs_status_t droce_md_open(uct_component_t *component, const char *md_name,
                                  const uct_md_config_t *config, uct_md_h *md_p)
{
    droce_md_t *dmd = ucs_calloc(1, sizeof(*dmd), "droce_md");
    ucs_status_t status;

    if (dmd == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    status = (ucs_status_t)droce_rs_md_open(&dmd->rs);
    if (status != UCS_OK) {
        ucs_free(dmd);
        return status;
    }
    dmd->super.ops       = &droce_md_ops;
    dmd->super.component = &droce_component;
    *md_p = &dmd->super;
    return UCS_OK;
}

static ucs_status_t droce_rkey_unpack(uct_component_t *component, const void *rkey_buffer,
                                      uct_rkey_t *rkey_p, void **handle_p)
{
    uint64_t rkey;
    ucs_status_t status = (ucs_status_t)droce_rs_rkey_unpack(rkey_buffer, &rkey);
    if (status == UCS_OK) {
        *rkey_p   = (uct_rkey_t)rkey;
        *handle_p = NULL;
    }
    return status;
}

/* ------------------------------------------------------------------ devices and config */

static ucs_status_t droce_query_tl_devices(uct_md_h md, uct_tl_device_resource_t **devices_p,
                                           unsigned *num_devices_p)
{
    uct_tl_device_resource_t *dev = ucs_calloc(1, sizeof(*dev), "droce device");
    if (dev == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    ucs_snprintf_zero(dev->name, sizeof(dev->name), "%s", DROCE_DEVICE_NAME);
    dev->type       = UCT_DEVICE_TYPE_NET;
    dev->sys_device = UCS_SYS_DEVICE_ID_UNKNOWN;
    *devices_p      = dev;
    *num_devices_p  = 1;
    return UCS_OK;
}

static ucs_config_field_t droce_iface_config_table[] = {
    {"", "", NULL, ucs_offsetof(droce_iface_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},
    {"SEG_SIZE", "8k", "Largest AM bcopy message (receive buffer size); UD: capped at the path MTU",
     ucs_offsetof(droce_iface_config_t, seg_size), UCS_CONFIG_TYPE_MEMUNITS},
    {"TX_QUEUE_LEN", "256", "Send operations in flight per interface; more return UCS_ERR_NO_RESOURCE",
     ucs_offsetof(droce_iface_config_t, tx_queue_len), UCS_CONFIG_TYPE_UINT},
    {"RX_QUEUE_LEN", "1024", "Receive buffers posted per interface",
     ucs_offsetof(droce_iface_config_t, rx_queue_len), UCS_CONFIG_TYPE_UINT},
    {NULL}
};

/* ------------------------------------------------------------------ interface */

static UCS_CLASS_INIT_FUNC(droce_iface_t, uct_iface_ops_t *ops, int kind, uct_md_h md,
                           uct_worker_h worker, const uct_iface_params_t *params,
                           const uct_iface_config_t *tl_config)
{
    const droce_iface_config_t *config = ucs_derived_of(tl_config, droce_iface_config_t);
    droce_iface_cfg_t cfg;
    ucs_status_t status;

    UCT_CHECK_PARAM(params->field_mask & UCT_IFACE_PARAM_FIELD_OPEN_MODE,
                    "UCT_IFACE_PARAM_FIELD_OPEN_MODE is not defined");
    if (!(params->open_mode & UCT_IFACE_OPEN_MODE_DEVICE)) {
        ucs_error("droce supports only UCT_IFACE_OPEN_MODE_DEVICE");
        return UCS_ERR_UNSUPPORTED;
    }

    UCS_CLASS_CALL_SUPER_INIT(uct_base_iface_t, ops, &uct_base_iface_internal_ops, md, worker,
                              params, tl_config UCS_STATS_ARG(NULL) UCS_STATS_ARG("droce"));

    self->kind       = kind;
    self->rs         = NULL;
    cfg.seg_size     = config->seg_size;
    cfg.tx_queue_len = config->tx_queue_len;
    cfg.rx_queue_len = config->rx_queue_len;
    status = (ucs_status_t)droce_rs_iface_open(self, kind, &cfg, &self->rs);
    if (status != UCS_OK) {
        return status;
    }
    return UCS_OK;
}

static UCS_CLASS_CLEANUP_FUNC(droce_iface_t)
{
    /* The worker's progress queue must not call into a closed interface. */
    uct_base_iface_progress_disable(&self->super.super, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    if (self->rs != NULL) {
        droce_rs_iface_close(self->rs);
        self->rs = NULL;
    }
}

UCS_CLASS_DEFINE(droce_iface_t, uct_base_iface_t);
UCS_CLASS_DEFINE_DELETE_FUNC(droce_iface_t, uct_iface_t);

static ucs_status_t droce_iface_open(uct_iface_ops_t *ops, int kind, uct_md_h md,
                                     uct_worker_h worker, const uct_iface_params_t *params,
                                     const uct_iface_config_t *config, uct_iface_h *iface_p)
{
    droce_iface_t *iface;
    ucs_status_t status;

    if (droce_layout_msg != NULL) {
        ucs_error("%s", droce_layout_msg);
        return UCS_ERR_UNSUPPORTED;
    }
    status = UCS_CLASS_NEW(droce_iface_t, &iface, ops, kind, md, worker, params, config);
    if (status == UCS_OK) {
        *iface_p = &iface->super.super;
    }
    return status;
}

static ucs_status_t droce_rc_iface_open(uct_md_h md, uct_worker_h worker,
                                        const uct_iface_params_t *params,
                                        const uct_iface_config_t *config, uct_iface_h *iface_p)
{
    return droce_iface_open(&droce_rc_iface_ops, DROCE_KIND_RC, md, worker, params, config, iface_p);
}

static ucs_status_t droce_ud_iface_open(uct_md_h md, uct_worker_h worker,
                                        const uct_iface_params_t *params,
                                        const uct_iface_config_t *config, uct_iface_h *iface_p)
{
    return droce_iface_open(&droce_ud_iface_ops, DROCE_KIND_UD, md, worker, params, config, iface_p);
}

ucs_status_t droce_iface_query(uct_iface_h tl_iface, uct_iface_attr_t *attr)
{
    droce_iface_t *iface = ucs_derived_of(tl_iface, droce_iface_t);
    droce_iface_info_t info;
    uint64_t aops, afops;

    memset(&info, 0, sizeof(info));
    droce_rs_iface_info(iface->rs, &info);
    uct_base_iface_query(&iface->super, attr);

    attr->device_addr_len = DROCE_DEV_ADDR_LEN;
    attr->max_conn_priv   = 0;
    attr->cap.flags       = UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_AM_BCOPY |
                            UCT_IFACE_FLAG_AM_ZCOPY | UCT_IFACE_FLAG_PENDING |
                            UCT_IFACE_FLAG_CB_SYNC | UCT_IFACE_FLAG_EP_CHECK;
    attr->cap.event_flags = 0;

    attr->cap.am.max_short       = info.am_max_short;
    attr->cap.am.max_bcopy       = info.am_max_bcopy;
    attr->cap.am.min_zcopy       = 0;
    attr->cap.am.max_zcopy       = info.am_max_zcopy;
    attr->cap.am.opt_zcopy_align = 1;
    attr->cap.am.align_mtu       = 1;
    attr->cap.am.max_hdr         = info.am_max_hdr;
    attr->cap.am.max_iov         = info.max_iov;

    if (iface->kind == DROCE_KIND_RC) {
        attr->iface_addr_len = 0;
        attr->ep_addr_len    = DROCE_RC_EP_ADDR_LEN;
        attr->cap.flags     |= UCT_IFACE_FLAG_CONNECT_TO_EP | UCT_IFACE_FLAG_PUT_SHORT |
                               UCT_IFACE_FLAG_PUT_BCOPY | UCT_IFACE_FLAG_PUT_ZCOPY |
                               UCT_IFACE_FLAG_GET_BCOPY | UCT_IFACE_FLAG_GET_ZCOPY |
                               UCT_IFACE_FLAG_ATOMIC_DEVICE |
                               UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE;
        attr->cap.put.max_short       = info.put_max_short;
        attr->cap.put.max_bcopy       = info.put_max_bcopy;
        attr->cap.put.min_zcopy       = 0;
        attr->cap.put.max_zcopy       = info.put_max_zcopy;
        attr->cap.put.opt_zcopy_align = 1;
        attr->cap.put.align_mtu       = info.path_mtu;
        attr->cap.put.max_iov         = info.max_iov;
        attr->cap.get.max_short       = 0;
        attr->cap.get.max_bcopy       = info.get_max_bcopy;
        attr->cap.get.min_zcopy       = 0;
        attr->cap.get.max_zcopy       = info.get_max_zcopy;
        attr->cap.get.opt_zcopy_align = 1;
        attr->cap.get.align_mtu       = info.path_mtu;
        attr->cap.get.max_iov         = info.max_iov;
        aops  = UCS_BIT(UCT_ATOMIC_OP_ADD);
        afops = UCS_BIT(UCT_ATOMIC_OP_ADD) | UCS_BIT(UCT_ATOMIC_OP_SWAP) |
                UCS_BIT(UCT_ATOMIC_OP_CSWAP);
        attr->cap.atomic32.op_flags  = aops;
        attr->cap.atomic32.fop_flags = afops;
        attr->cap.atomic64.op_flags  = aops;
        attr->cap.atomic64.fop_flags = afops;
    } else {
        attr->iface_addr_len = DROCE_UD_IFACE_ADDR_LEN;
        attr->ep_addr_len    = 0;
        /* CB_ASYNC: UCP's wire-up picks an auxiliary transport only if its AM handlers may be
         * "async"; droce invokes them from the progress call, which such a handler accepts. */
        attr->cap.flags     |= UCT_IFACE_FLAG_CONNECT_TO_IFACE | UCT_IFACE_FLAG_CB_ASYNC;
    }

    attr->latency             = ucs_linear_func_make(info.latency_s, 0);
    attr->bandwidth.dedicated = info.bandwidth_Bps; /* one port per process */
    attr->bandwidth.shared    = 0;
    attr->overhead            = info.overhead_s;
    attr->priority            = 0;
    return UCS_OK;
}

ucs_status_t droce_iface_get_device_address(uct_iface_h tl_iface, uct_device_addr_t *addr)
{
    droce_iface_t *iface = ucs_derived_of(tl_iface, droce_iface_t);
    return (ucs_status_t)droce_rs_iface_device_address(iface->rs, (uint8_t*)addr);
}

ucs_status_t droce_iface_get_address(uct_iface_h tl_iface, uct_iface_addr_t *addr)
{
    droce_iface_t *iface = ucs_derived_of(tl_iface, droce_iface_t);
    return (ucs_status_t)droce_rs_iface_address(iface->rs, (uint8_t*)addr);
}

int droce_iface_is_reachable(const uct_iface_h tl_iface, const uct_device_addr_t *dev_addr,
                             const uct_iface_addr_t *iface_addr)
{
    droce_iface_t *iface = ucs_derived_of(tl_iface, droce_iface_t);
    return droce_rs_iface_is_reachable(iface->rs, (const uint8_t*)dev_addr,
                                       (const uint8_t*)iface_addr);
}

unsigned droce_iface_progress(uct_iface_h tl_iface)
{
    droce_iface_t *iface = ucs_derived_of(tl_iface, droce_iface_t);
    return droce_rs_iface_progress(iface->rs);
}

ucs_status_t droce_iface_flush(uct_iface_h tl_iface, unsigned flags, uct_completion_t *comp)
{
    droce_iface_t *iface = ucs_derived_of(tl_iface, droce_iface_t);
    return (ucs_status_t)droce_rs_iface_flush(iface->rs, flags, comp);
}

ucs_status_t droce_iface_fence(uct_iface_h tl_iface, unsigned flags)
{
    droce_iface_t *iface = ucs_derived_of(tl_iface, droce_iface_t);
    return (ucs_status_t)droce_rs_iface_fence(iface->rs);
}

/* ------------------------------------------------------------------ registration */

static uct_component_t droce_component = {
    .query_md_resources = uct_md_query_single_md_resource,
    .md_open            = droce_md_open,
    .cm_open            = (uct_component_cm_open_func_t)ucs_empty_function_return_unsupported,
    .rkey_unpack        = droce_rkey_unpack,
    .rkey_ptr           = (uct_component_rkey_ptr_func_t)ucs_empty_function_return_unsupported,
    .rkey_release       = (uct_component_rkey_release_func_t)ucs_empty_function_return_success,
    .name               = DROCE_COMPONENT_NAME,
    .md_config          = {
        .name           = "droce memory domain",
        .prefix         = "DROCE_",
        .table          = droce_md_config_table,
        .size           = sizeof(droce_md_config_t),
    },
    .cm_config          = UCS_CONFIG_EMPTY_GLOBAL_LIST_ENTRY,
    .tl_list            = UCT_COMPONENT_TL_LIST_INITIALIZER(&droce_component),
    .flags              = 0,
    .md_vfs_init        = (uct_component_md_vfs_init_func_t)ucs_empty_function,
};

static uct_tl_t droce_rc_tl = {
    .name          = "droce_rc",
    .query_devices = droce_query_tl_devices,
    .iface_open    = droce_rc_iface_open,
    .config = {
        .name   = "droce_rc transport",
        .prefix = "DROCE_RC_",
        .table  = droce_iface_config_table,
        .size   = sizeof(droce_iface_config_t),
    },
};

static uct_tl_t droce_ud_tl = {
    .name          = "droce_ud",
    .query_devices = droce_query_tl_devices,
    .iface_open    = droce_ud_iface_open,
    .config = {
        .name   = "droce_ud transport",
        .prefix = "DROCE_UD_",
        .table  = droce_iface_config_table,
        .size   = sizeof(droce_iface_config_t),
    },
};

static int droce_registered = 0;

/* Runs when the library is loaded (LD_PRELOAD or linked by the application), after libuct's
 * own constructors: the component then shows up in uct_query_components(). */
UCS_F_CTOR static void droce_uct_init(void)
{
    if (!droce_layout_ok()) {
        ucs_error("%s", droce_layout_msg);
        return;
    }
    uct_component_register(&droce_component);
    uct_tl_register(&droce_component, &droce_rc_tl);
    uct_tl_register(&droce_component, &droce_ud_tl);
    droce_registered = 1;
}

UCS_F_DTOR static void droce_uct_cleanup(void)
{
    if (droce_registered) {
        uct_tl_unregister(&droce_ud_tl);
        uct_tl_unregister(&droce_rc_tl);
        uct_component_unregister(&droce_component);
    }
}

/* Whether the constructor registered the component (for debuggers and tests; the object is
 * kept by the whole-archive link, not by a reference). */
int droce_uct_registered(void)
{
    return droce_registered;
}
