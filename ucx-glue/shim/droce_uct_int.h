/*
 * Declarations shared by the files of the droce UCT component (droce_uct.c: layout check,
 * callbacks for Rust, memory domain, interface, registration; droce_uct_ep.c: endpoint
 * operations and the ops tables). Private to the shim: everything declared here is hidden
 * from the library's exported symbols.
 */
#ifndef DROCE_UCT_INT_H
#define DROCE_UCT_INT_H

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "droce_abi.h"

#include <uct/base/uct_iface.h>
#include <uct/base/uct_md.h>
#include <uct/base/uct_component.h>
#include <ucs/type/class.h>
#include <ucs/sys/string.h>
#include <ucs/debug/log.h>

#include <limits.h>
#include <string.h>

#define DROCE_COMPONENT_NAME "droce"
#define DROCE_DEVICE_NAME    "droce0"
#define DROCE_MAX_IOV        8

typedef struct droce_md {
    uct_md_t super;
    void     *rs;
} droce_md_t;

typedef struct droce_md_config {
    uct_md_config_t super;
} droce_md_config_t;

typedef struct droce_iface_config {
    uct_iface_config_t super;
    size_t             seg_size;
    unsigned           tx_queue_len;
    unsigned           rx_queue_len;
} droce_iface_config_t;

typedef struct droce_iface {
    uct_base_iface_t super;
    void             *rs;
    int              kind;
} droce_iface_t;

typedef struct droce_ep {
    uct_base_ep_t super;
    void          *rs;
} droce_ep_t;


#pragma GCC visibility push(hidden)

/* The ops tables (droce_uct_ep.c), used when an interface opens. */
extern uct_iface_ops_t droce_rc_iface_ops;
extern uct_iface_ops_t droce_ud_iface_ops;

/* Interface operations (droce_uct.c) the ops tables point at. */
ucs_status_t droce_iface_query(uct_iface_h tl_iface, uct_iface_attr_t *attr);
ucs_status_t droce_iface_get_device_address(uct_iface_h tl_iface, uct_device_addr_t *addr);
ucs_status_t droce_iface_get_address(uct_iface_h tl_iface, uct_iface_addr_t *addr);
int droce_iface_is_reachable(const uct_iface_h tl_iface, const uct_device_addr_t *dev_addr,
                             const uct_iface_addr_t *iface_addr);
unsigned droce_iface_progress(uct_iface_h tl_iface);
ucs_status_t droce_iface_flush(uct_iface_h tl_iface, unsigned flags, uct_completion_t *comp);
ucs_status_t droce_iface_fence(uct_iface_h tl_iface, unsigned flags);
UCS_CLASS_DECLARE_DELETE_FUNC(droce_iface_t, uct_iface_t);

#pragma GCC visibility pop

#endif
