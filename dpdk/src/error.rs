//! One error type for the safe DPDK layer; `Display` carries DPDK's own `rte_strerror` text.

use std::ffi::CStr;
use std::fmt;

use dpdk_sys as sys;

/// Everything that can go wrong in the safe layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// `rte_eal_init` refused the arguments or could not set up the environment.
    EalInit { errno: i32, args: String },
    /// EAL was already initialised in this process (DPDK allows it once per process).
    EalAlreadyInitialized,
    /// An operation needs a running EAL.
    EalNotInitialized,
    /// A `--vdev` argument did not produce a port: unknown driver name or bad device arguments.
    VdevNotCreated { name: String, ports: Vec<String> },
    /// A port id that does not name an available port.
    PortOutOfRange { port: u16, available: Vec<u16> },
    /// A queue id beyond what the port has configured.
    QueueOutOfRange { port: u16, queue: u16, configured: u16 },
    /// A value that DPDK would reject, found before calling it.
    InvalidArgument(String),
    /// An offload was requested that the PMD does not offer.
    OffloadUnsupported { port: u16, what: &'static str, requested: u64, capa: u64 },
    /// Mempool had no free mbuf.
    NoMbufs,
    /// A DPDK call failed with an errno (positive value).
    Dpdk { op: &'static str, errno: i32 },
    /// An lcore id that is not enabled, is the caller itself, or is busy.
    Lcore { lcore: u32, reason: String },
    /// A closure launched on an lcore panicked; the panic was caught at the FFI boundary.
    LcorePanicked { lcore: u32, message: String },
}

impl Error {
    /// errno carried by this error, if any.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::EalInit { errno, .. } | Error::Dpdk { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    /// Builds `Error::Dpdk` from a DPDK return value: negative errno or -1 with `rte_errno` set.
    pub(crate) fn from_ret(op: &'static str, ret: i32) -> Error {
        let errno = if ret == -1 { rte_errno() } else { -ret };
        Error::Dpdk { op, errno: if errno == 0 { libc::EIO } else { errno } }
    }
}

/// Current value of `rte_errno` on this thread.
#[allow(unsafe_code)]
pub fn rte_errno() -> i32 {
    // SAFETY: reads a thread-local int through the shim.
    unsafe { sys::droce_rte_errno() }
}

/// DPDK's text for an errno value (covers both libc and `E_RTE_*` values).
#[allow(unsafe_code)]
pub fn strerror(errno: i32) -> String {
    // SAFETY: rte_strerror returns a pointer to a static or thread-local NUL-terminated string,
    // valid until the next call on this thread; it is copied at once.
    unsafe {
        let p = sys::rte_strerror(errno);
        if p.is_null() {
            return format!("errno {errno}");
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::EalInit { errno, args } => {
                write!(f, "EAL initialisation failed: {} (errno {errno})", strerror(*errno))?;
                if *errno == libc::ENODEV {
                    let words: Vec<String> = args.split_whitespace().map(str::to_string).collect();
                    let devs = crate::devargs::device_args(&words);
                    write!(
                        f,
                        ": a device argument names no driver or is malformed: [{}] (virtual devices look like \
                         --vdev=net_ring0, --vdev=net_null0, --vdev=net_memif0,role=server; PCI: -a 0000:01:00.0)",
                        devs.join(", ")
                    )?;
                } else {
                    write!(f, ": check the EAL arguments (usage printed above, or `dpdk-testpmd --help`)")?;
                }
                write!(f, "; EAL arguments were: {args}")
            }
            Error::EalAlreadyInitialized => {
                write!(f, "EAL is already initialised in this process (it can be initialised once)")
            }
            Error::EalNotInitialized => write!(f, "EAL is not initialised: call Eal::init first"),
            Error::VdevNotCreated { name, ports } => write!(
                f,
                "virtual device '{name}' was not created: its driver rejected the device arguments (see the \
                 driver's log line above; e.g. --vdev=net_ring0, --vdev=net_null0, \
                 --vdev=net_memif0,role=server,socket=/tmp/m.sock); ports present: [{}]",
                ports.join(", ")
            ),
            Error::PortOutOfRange { port, available } => {
                if available.is_empty() {
                    write!(f, "port {port} does not exist: no ports are available (add --vdev=... or -a <PCI address>)")
                } else {
                    let ids: Vec<String> = available.iter().map(u16::to_string).collect();
                    write!(f, "port {port} does not exist: valid port ids are {}", ids.join(", "))
                }
            }
            Error::QueueOutOfRange { port, queue, configured } => write!(
                f,
                "queue {queue} out of range on port {port}: {configured} queue(s) configured (0..{})",
                configured.saturating_sub(1)
            ),
            Error::InvalidArgument(msg) => write!(f, "invalid argument: {msg}"),
            Error::OffloadUnsupported { port, what, requested, capa } => write!(
                f,
                "port {port}: {what} offloads {requested:#x} not offered by the PMD (capabilities {capa:#x})"
            ),
            Error::NoMbufs => write!(f, "mempool exhausted: no free mbuf (raise the pool size)"),
            Error::Dpdk { op, errno } => write!(f, "{op} failed: {} (errno {errno})", strerror(*errno)),
            Error::Lcore { lcore, reason } => write!(f, "lcore {lcore}: {reason}"),
            Error::LcorePanicked { lcore, message } => write!(f, "closure on lcore {lcore} panicked: {message}"),
        }
    }
}

impl std::error::Error for Error {}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
