//! libfabric provider `droce`: `libdroce_fi.so`, loaded by libfabric 1.17 from
//! `FI_PROVIDER_PATH` through its `fi_prov_ini` entry point.
//!
//! ```text
//! FI_EP_MSG   on RC QPs: passive endpoint + listen, connect/accept/reject with up to 54 B of
//!             private data through IB CM over QP1 (the host's CmAgent), EQ events FI_CONNREQ,
//!             FI_CONNECTED, FI_SHUTDOWN and error entries (FI_ECONNREFUSED, FI_ETIMEDOUT),
//!             send/sendv/sendmsg/inject/senddata/injectdata, recv/recvv/recvmsg,
//!             RMA read/readv/readmsg/write/writev/writemsg/inject_write/writedata (immediate
//!             data = FI_REMOTE_CQ_DATA, 4 bytes), getname/getpeer, FI_OPT_CM_DATA_SIZE
//! FI_EP_DGRAM on UD QPs with an AV (insert, insertsvc, lookup, remove, straddr); receives carry
//!             the 40-byte GRH prefix (mode FI_MSG_PREFIX); names embed the QPN
//! CQ          formats CONTEXT/MSG/DATA/TAGGED, read/readfrom/readerr/sread/sreadfrom/strerror,
//!             FD wait object (fi_control FI_GETWAIT); counters; EQ read/readerr/sread/write
//! MR          FI_MR_LOCAL|FI_MR_VIRT_ADDR|FI_MR_ALLOCATED|FI_MR_PROV_KEY, keys = rkeys
//! progress    manual (inside CQ/EQ/counter reads) by default; FI_PROGRESS_AUTO domains and
//!             FD wait objects add a progress thread
//! ```
//!
//! Layout: [`info`] (getinfo matching), [`addr`] (sockaddr names), [`queue`] (CQ/EQ queues),
//! [`engine`] (the state behind the fids, the posting policy, completion translation,
//! connection management and the progress step, on the runtime's verbs) are safe Rust with
//! unit tests; `ffi` holds every `unsafe` line: bindgen types of /usr/include/rdma, one file
//! per libfabric object family with its ops table and `extern "C"` entries (each catches
//! panics), converting pointers and calling the engine.
#![deny(unsafe_code)]

pub mod addr;
pub mod engine;
#[allow(unsafe_code)]
mod ffi;
pub mod info;
pub mod mr_table;
pub mod queue;

pub use ffi::fi_prov_ini;
/// The bindgen view of the libfabric headers (for the tests that drive libfabric directly).
#[doc(hidden)]
pub use ffi::sys;
