//! Packet-buffer pools (`rte_pktmbuf_pool_create`).

use std::ffi::{CStr, CString};
use std::ptr::NonNull;

use dpdk_sys as sys;

use crate::error::{Error, Result};
use crate::mbuf::{Mbuf, MbufBatch};

/// `RTE_MEMPOOL_NAMESIZE` in 22.11 (32 - "RG_" - "MP_"), a macro bindgen cannot evaluate.
const MEMPOOL_NAMESIZE: usize = 26;

/// `SOCKET_ID_ANY`: let DPDK choose the NUMA socket.
pub const SOCKET_ANY: i32 = -1;

/// Parameters of a packet-mbuf pool; `Default` gives 8191 mbufs of 2048 B data room,
/// a per-lcore cache of 256, no private area, any socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MempoolConfig {
    /// Number of mbufs (best as 2^k - 1).
    pub n: u32,
    /// Per-lcore cache size (0 disables; at most 512).
    pub cache_size: u32,
    /// Application private area after each `rte_mbuf`, multiple of 8.
    pub priv_size: u16,
    /// Data room per mbuf including the 128 B headroom (`RTE_MBUF_DEFAULT_BUF_SIZE` = 2176).
    pub data_room: u16,
    /// NUMA socket, or [`SOCKET_ANY`].
    pub socket: i32,
}

impl Default for MempoolConfig {
    fn default() -> Self {
        MempoolConfig {
            n: 8191,
            cache_size: 256,
            priv_size: 0,
            data_room: sys::RTE_MBUF_DEFAULT_BUF_SIZE as u16,
            socket: SOCKET_ANY,
        }
    }
}

/// A packet-mbuf pool. `Drop` frees it with `rte_mempool_free` when no mbuf is in use;
/// if mbufs are still out (in a port's rings, in batches, in `Mbuf`s) the pool is leaked on
/// purpose rather than freed under them.
#[derive(Debug)]
pub struct Mempool {
    raw: NonNull<sys::rte_mempool>,
}

// SAFETY: rte_mempool get/put are thread-safe (lockless ring + per-lcore caches).
#[allow(unsafe_code)]
unsafe impl Send for Mempool {}
// SAFETY: as above; all &self methods are thread-safe DPDK calls.
#[allow(unsafe_code)]
unsafe impl Sync for Mempool {}

#[allow(unsafe_code)]
impl Mempool {
    /// Creates a packet-mbuf pool named `name` (unique per process, < 26 bytes).
    pub fn create(name: &str, cfg: &MempoolConfig) -> Result<Mempool> {
        crate::running::ensure_running()?;
        if name.len() >= MEMPOOL_NAMESIZE {
            return Err(Error::InvalidArgument(format!("mempool name '{name}' too long (max {} bytes)", MEMPOOL_NAMESIZE - 1)));
        }
        if cfg.n == 0 {
            return Err(Error::InvalidArgument("mempool size must be > 0".into()));
        }
        let cname = CString::new(name).map_err(|_| Error::InvalidArgument("mempool name contains NUL".into()))?;
        // SAFETY: valid C string; DPDK copies the name. Returns NULL with rte_errno on failure.
        let p = unsafe {
            sys::rte_pktmbuf_pool_create(cname.as_ptr(), cfg.n, cfg.cache_size, cfg.priv_size, cfg.data_room, cfg.socket)
        };
        NonNull::new(p)
            .map(|raw| Mempool { raw })
            .ok_or(Error::Dpdk { op: "rte_pktmbuf_pool_create", errno: crate::error::rte_errno() })
    }

    /// Raw pointer for dpdk-sys calls.
    #[inline]
    pub fn as_ptr(&self) -> *mut sys::rte_mempool {
        self.raw.as_ptr()
    }

    /// Pool name.
    pub fn name(&self) -> String {
        // SAFETY: `name` is a NUL-terminated array inside the live mempool.
        unsafe { CStr::from_ptr((*self.raw.as_ptr()).name.as_ptr()) }.to_string_lossy().into_owned()
    }

    /// Total number of mbufs.
    pub fn size(&self) -> u32 {
        // SAFETY: plain read of a field of the live mempool.
        unsafe { (*self.raw.as_ptr()).size }
    }

    /// Free mbufs (in the common pool and the per-lcore caches).
    pub fn avail_count(&self) -> u32 {
        // SAFETY: the pool is live.
        unsafe { sys::droce_rte_mempool_avail_count(self.raw.as_ptr()) }
    }

    /// Mbufs taken out of the pool (size - avail).
    pub fn in_use_count(&self) -> u32 {
        // SAFETY: the pool is live.
        unsafe { sys::droce_rte_mempool_in_use_count(self.raw.as_ptr()) }
    }

    /// Data room of each mbuf, headroom included.
    pub fn data_room_size(&self) -> u16 {
        // SAFETY: the pool is a pktmbuf pool (created by us).
        unsafe { sys::droce_rte_pktmbuf_data_room_size(self.raw.as_ptr()) }
    }

    /// Takes one reset mbuf (data_len 0, headroom 128 B).
    #[inline]
    pub fn alloc(&self) -> Result<Mbuf> {
        // SAFETY: the pool is live; NULL means exhausted.
        let p = unsafe { sys::droce_rte_pktmbuf_alloc(self.raw.as_ptr()) };
        // SAFETY: a non-NULL mbuf fresh from the pool is owned by nobody else.
        NonNull::new(p).map(|p| unsafe { Mbuf::from_raw(p.as_ptr()) }).ok_or(Error::NoMbufs)
    }

    /// Allocates an mbuf holding a copy of `bytes` (single segment).
    pub fn alloc_from_slice(&self, bytes: &[u8]) -> Result<Mbuf> {
        let mut m = self.alloc()?;
        let len = u16::try_from(bytes.len()).map_err(|_| Error::InvalidArgument("packet longer than 65535 B".into()))?;
        match m.append(len) {
            Some(dst) => {
                dst.copy_from_slice(bytes);
                Ok(m)
            }
            None => Err(Error::InvalidArgument(format!(
                "{} B do not fit in one mbuf (tailroom {})",
                bytes.len(),
                m.tailroom()
            ))),
        }
    }
}

impl Drop for Mempool {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if !crate::running::is_running() {
            return; // EAL cleanup already released its memory
        }
        let in_use = self.in_use_count();
        if in_use != 0 {
            log::warn!("mempool {} dropped with {in_use} mbufs in use: leaking it", self.name());
            return;
        }
        // SAFETY: the pool is live and no mbuf from it is outstanding.
        unsafe { sys::rte_mempool_free(self.raw.as_ptr()) }
    }
}

/// A batch's bulk fills are the pool's work (the pool makes mbufs; `mbuf.rs` knows a pool
/// only as the raw pointer inside each mbuf), so they stand here, beside `Mempool::alloc`.
#[allow(unsafe_code)]
impl<const N: usize> MbufBatch<N> {
    /// Allocates `n` fresh mbufs from `pool` at the end, all or nothing
    /// (`rte_pktmbuf_alloc_bulk`). `n` is capped by the free slots.
    #[inline]
    pub fn alloc_bulk(&mut self, pool: &Mempool, n: usize) -> Result<usize> {
        let n = n.min(self.free_slots());
        if n == 0 {
            return Ok(0);
        }
        let (pkts, len) = self.raw_parts();
        // SAFETY: slots len..len+n are free and inside the array; the pool is live.
        let r = unsafe { sys::droce_rte_pktmbuf_alloc_bulk(pool.as_ptr(), pkts.add(len), n as u32) };
        if r != 0 {
            return Err(Error::NoMbufs);
        }
        self.grow(n);
        Ok(n)
    }

    /// Allocates `n` mbufs (capped by the free slots) as single-segment frames of `len` bytes
    /// whose first bytes are `hdr`, all or nothing: a transmit generator's burst in one pass
    /// (mempool get, the reset fields, the header copy), as dpdk-testpmd's txonly builds its
    /// bursts. The rest of each frame is whatever the mbuf held. Fails with
    /// [`Error::NoMbufs`], or [`Error::InvalidArgument`] when `len` is shorter than `hdr` or does not
    /// fit the pool's data room.
    #[inline]
    pub fn alloc_frames(&mut self, pool: &Mempool, n: usize, hdr: &[u8], len: u16) -> Result<usize> {
        let n = n.min(self.free_slots());
        if n == 0 {
            return Ok(0);
        }
        let room = pool.data_room_size() as usize;
        if hdr.len() > len as usize || len as usize + sys::RTE_PKTMBUF_HEADROOM as usize > room {
            return Err(Error::InvalidArgument(format!("frame of {len} B with a {} B header in a {room} B data room", hdr.len())));
        }
        let (pkts, held) = self.raw_parts();
        // SAFETY: slots held..held+n are free and inside the array; the pool is live; every
        // frame fits the data room (checked above) and hdr is readable for hdr.len() bytes.
        let r = unsafe {
            // hdr.len() <= len fits a u16
            sys::droce_tx_alloc_fill(pool.as_ptr(), pkts.add(held), n as u32, hdr.as_ptr(), hdr.len() as u16, len)
        };
        if r != 0 {
            return Err(Error::NoMbufs);
        }
        self.grow(n);
        Ok(n)
    }
}
