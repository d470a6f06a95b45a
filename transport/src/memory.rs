//! Application memory as seen by the transport.
//!
//! The transport never dereferences an address itself: the embedder implements [`Memory`]
//! (over a `Vec` in tests, over registered process memory in the FFI crates), so this crate
//! stays `forbid(unsafe_code)`. Addresses are the virtual addresses the application registered
//! and used in work requests; the transport has already checked them against a memory region
//! before it calls in here, so an error from the embedder means the region and the backing
//! store disagree (and is reported as a local protection or remote access error).

use crate::status::WcStatus;
use crate::verbs::Sge;

/// The embedder could not reach `(addr, len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryError;

/// Bytes per step of the default [`Memory::crc32`] and [`Memory::write_crc`]: a whole
/// payload of path MTU 4096, so that the CRC kernel runs over one span as long as the
/// payload (each call pays the kernel's final reduction, ~10 ns, once) and the copy that
/// follows it reads bytes the CRC has just brought into L1.
pub const CRC_CHUNK: usize = 4096;

/// The received message a part written with [`Memory::write_part`] belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message {
    /// Where the message goes: a WRITE's RETH address; the first SGE of a READ's scatter
    /// list or of the receive a SEND lands in.
    pub start: u64,
    /// Its length: a WRITE's RETH length, a READ's; for a SEND (whose length the first
    /// packet does not tell) the bytes placed so far with this part.
    pub len: u64,
    /// This part is the message's first.
    pub first: bool,
}

/// Reach application memory by virtual address.
pub trait Memory {
    /// Copy `buf.len()` bytes starting at `addr` into `buf`.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError>;
    /// Copy `data` to `addr..addr + data.len()`.
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemoryError>;
    /// [`write`](Self::write) of one part of the received message `msg`. An embedder may
    /// copy the parts of a large message past the caches (non-temporal stores): a transfer
    /// into memory the CPU has not touched lately moves about twice as fast when the copy does
    /// not read each destination line first. The bytes must be visible to every thread once
    /// the call returns (the completion may be polled from another one).
    fn write_part(&mut self, addr: u64, data: &[u8], msg: Message) -> Result<(), MemoryError> {
        let _ = msg;
        self.write(addr, data)
    }
    /// 64-bit compare-and-swap at an 8-byte aligned address in host byte order
    /// (IBA 9.4.5: the atomic is performed on the 64-bit value in the responder's memory).
    /// Returns the original value.
    fn cmp_swap(&mut self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemoryError>;
    /// 64-bit fetch-and-add at an 8-byte aligned address, wrapping. Returns the original value.
    fn fetch_add(&mut self, addr: u64, add: u64) -> Result<u64, MemoryError>;

    /// Continue the CRC-32 `state` (as [`crate::wire::icrc::crc32_update`]) over
    /// `addr..addr + len` without copying the bytes anywhere: the ICRC of a frame whose
    /// payload the embedder sends straight from this memory
    /// ([`Device::poll_transmit_split`](crate::Device::poll_transmit_split)). The default
    /// reads through [`read`](Self::read) in [`CRC_CHUNK`] steps; embedders that can see
    /// the bytes in place override it.
    fn crc32(&self, addr: u64, len: usize, state: u32) -> Result<u32, MemoryError> {
        let mut chunk = [0u8; 256];
        let mut crc = state;
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len());
            self.read(addr.checked_add(done as u64).ok_or(MemoryError)?, &mut chunk[..n])?;
            crc = crate::wire::icrc::crc32_update(crc, &chunk[..n]);
            done += n;
        }
        Ok(crc)
    }

    /// Copy `data` to `addr` and continue the CRC-32 `state` over it, in one pass over
    /// `data` (CRC then copy of each [`CRC_CHUNK`], while the chunk is in cache): the
    /// receive path's ICRC check fused with the placement of the payload. The bytes are
    /// written whatever the CRC turns out to be; the caller compares it afterwards.
    fn write_crc(&mut self, addr: u64, data: &[u8], state: u32) -> Result<u32, MemoryError> {
        let mut crc = state;
        let mut at = addr;
        for c in data.chunks(CRC_CHUNK) {
            crc = crate::wire::icrc::crc32_update(crc, c);
            self.write(at, c)?;
            at = at.wrapping_add(c.len() as u64);
        }
        Ok(crc)
    }
}

/// Lets an embedder pick the memory at run time: `Device<Box<dyn Memory>>`.
impl<T: Memory + ?Sized> Memory for Box<T> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        (**self).read(addr, buf)
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemoryError> {
        (**self).write(addr, data)
    }
    fn write_part(&mut self, addr: u64, data: &[u8], msg: Message) -> Result<(), MemoryError> {
        (**self).write_part(addr, data, msg)
    }
    fn cmp_swap(&mut self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemoryError> {
        (**self).cmp_swap(addr, compare, swap)
    }
    fn fetch_add(&mut self, addr: u64, add: u64) -> Result<u64, MemoryError> {
        (**self).fetch_add(addr, add)
    }
    fn crc32(&self, addr: u64, len: usize, state: u32) -> Result<u32, MemoryError> {
        (**self).crc32(addr, len, state)
    }
    fn write_crc(&mut self, addr: u64, data: &[u8], state: u32) -> Result<u32, MemoryError> {
        (**self).write_crc(addr, data, state)
    }
}

/// A flat memory backed by a `Vec<u8>` that starts at virtual address `base`.
/// Used by tests, the simulator and the fuzzer.
#[derive(Debug, Clone)]
pub struct VecMemory {
    base: u64,
    bytes: Vec<u8>,
    /// `(part length, message)` of every [`Memory::write_part`], once
    /// [`VecMemory::log_parts`] turned the log on (tests).
    parts: Option<Vec<(usize, Message)>>,
}

impl VecMemory {
    pub fn new(base: u64, len: usize) -> Self {
        VecMemory { base, bytes: vec![0; len], parts: None }
    }
    /// Keep `(part length, message)` of every message part written from now on.
    pub fn log_parts(&mut self) {
        self.parts = Some(Vec::new());
    }
    /// The parts logged since [`VecMemory::log_parts`], emptied.
    pub fn take_parts(&mut self) -> Vec<(usize, Message)> {
        self.parts.as_mut().map(std::mem::take).unwrap_or_default()
    }
    pub fn base(&self) -> u64 {
        self.base
    }
    pub fn len(&self) -> usize {
        self.bytes.len()
    }
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
    /// The bytes at `addr..addr+len`; panics when out of range (test helper).
    pub fn slice(&self, addr: u64, len: usize) -> &[u8] {
        let r = self.range(addr, len).expect("VecMemory::slice out of range");
        &self.bytes[r]
    }
    pub fn slice_mut(&mut self, addr: u64, len: usize) -> &mut [u8] {
        let r = self.range(addr, len).expect("VecMemory::slice_mut out of range");
        &mut self.bytes[r]
    }
    fn range(&self, addr: u64, len: usize) -> Option<core::ops::Range<usize>> {
        let off = addr.checked_sub(self.base)?;
        let off = usize::try_from(off).ok()?;
        let end = off.checked_add(len)?;
        (end <= self.bytes.len()).then_some(off..end)
    }
    fn word(&self, addr: u64) -> Result<core::ops::Range<usize>, MemoryError> {
        #[allow(clippy::manual_is_multiple_of)] // MSRV 1.75
        if addr % 8 != 0 {
            return Err(MemoryError);
        }
        self.range(addr, 8).ok_or(MemoryError)
    }
}

impl Memory for VecMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let r = self.range(addr, buf.len()).ok_or(MemoryError)?;
        buf.copy_from_slice(&self.bytes[r]);
        Ok(())
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemoryError> {
        let r = self.range(addr, data.len()).ok_or(MemoryError)?;
        self.bytes[r].copy_from_slice(data);
        Ok(())
    }
    fn write_part(&mut self, addr: u64, data: &[u8], msg: Message) -> Result<(), MemoryError> {
        if let Some(p) = &mut self.parts {
            p.push((data.len(), msg));
        }
        self.write(addr, data)
    }
    fn cmp_swap(&mut self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemoryError> {
        let r = self.word(addr)?;
        let orig = u64::from_ne_bytes(self.bytes[r.clone()].try_into().unwrap_or([0; 8]));
        if orig == compare {
            self.bytes[r].copy_from_slice(&swap.to_ne_bytes());
        }
        Ok(orig)
    }
    fn fetch_add(&mut self, addr: u64, add: u64) -> Result<u64, MemoryError> {
        let r = self.word(addr)?;
        let orig = u64::from_ne_bytes(self.bytes[r.clone()].try_into().unwrap_or([0; 8]));
        self.bytes[r].copy_from_slice(&orig.wrapping_add(add).to_ne_bytes());
        Ok(orig)
    }
    fn crc32(&self, addr: u64, len: usize, state: u32) -> Result<u32, MemoryError> {
        let r = self.range(addr, len).ok_or(MemoryError)?;
        Ok(crate::wire::icrc::crc32_update(state, &self.bytes[r]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_atomics() {
        let mut m = VecMemory::new(0x1000, 64);
        assert!(m.write(0x1000 + 60, &[1, 2, 3, 4]).is_ok());
        assert_eq!(m.write(0x1000 + 61, &[1, 2, 3, 4]), Err(MemoryError));
        assert_eq!(m.write(0xfff, &[1]), Err(MemoryError));
        let mut b = [0u8; 4];
        m.read(0x1000 + 60, &mut b).unwrap();
        assert_eq!(b, [1, 2, 3, 4]);
        assert_eq!(m.fetch_add(0x1008, 5), Ok(0));
        assert_eq!(m.fetch_add(0x1008, 5), Ok(5));
        assert_eq!(m.cmp_swap(0x1008, 3, 99), Ok(10));
        assert_eq!(m.cmp_swap(0x1008, 10, 99), Ok(10));
        assert_eq!(m.fetch_add(0x1008, 0), Ok(99));
        assert_eq!(m.fetch_add(0x1004, 0), Err(MemoryError), "unaligned");
        assert_eq!(m.fetch_add(0x1040, 0), Err(MemoryError), "out of range");
        let mut boxed: Box<dyn Memory> = Box::new(m);
        assert_eq!(boxed.fetch_add(0x1008, 1), Ok(99));
    }

    /// A memory that only implements the required methods: the trait's defaults.
    struct Plain(VecMemory);
    impl Memory for Plain {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
            self.0.read(addr, buf)
        }
        fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemoryError> {
            self.0.write(addr, data)
        }
        fn cmp_swap(&mut self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemoryError> {
            self.0.cmp_swap(addr, compare, swap)
        }
        fn fetch_add(&mut self, addr: u64, add: u64) -> Result<u64, MemoryError> {
            self.0.fetch_add(addr, add)
        }
    }

    #[test]
    fn crc_over_memory_and_fused_write() {
        use crate::wire::icrc::crc32_update;
        let data: Vec<u8> = (0..10_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for len in [0usize, 1, 255, 256, 257, 4096, 4097, 10_000] {
            let mut v = VecMemory::new(0x1000, 12_000);
            v.write(0x1010, &data[..len]).unwrap();
            let want = crc32_update(0x1234_5678, &data[..len]);
            // the kernel against the reference CRC
            let mut h = crc32fast::Hasher::new_with_initial(0x1234_5678);
            h.update(&data[..len]);
            assert_eq!(want, h.finalize(), "crc32_update {len}");
            assert_eq!(v.crc32(0x1010, len, 0x1234_5678), Ok(want), "VecMemory {len}");
            let p = Plain(v.clone());
            assert_eq!(p.crc32(0x1010, len, 0x1234_5678), Ok(want), "default {len}");
            for m in [&mut v as &mut dyn Memory, &mut Plain(VecMemory::new(0x1000, 12_000)) as &mut dyn Memory] {
                assert_eq!(m.write_crc(0x1100, &data[..len], 7), Ok(crc32_update(7, &data[..len])));
                let mut back = vec![0u8; len];
                m.read(0x1100, &mut back).unwrap();
                assert_eq!(back, data[..len]);
            }
        }
        let v = VecMemory::new(0x1000, 64);
        assert_eq!(v.crc32(0x1000, 65, 0), Err(MemoryError));
        assert_eq!(Plain(v.clone()).crc32(0x1000 + 60, 8, 0), Err(MemoryError));
        assert_eq!(Plain(v).write_crc(0x1000 + 60, &[0; 8], 0), Err(MemoryError));
    }
}

/// Copy `data` into a scatter list starting at byte `offset` of the list.
pub(crate) fn scatter<M: Memory>(
    mem: &mut M,
    sges: &[Sge],
    offset: u64,
    data: &[u8],
) -> Result<(), WcStatus> {
    all_placed(scatter_with(sges, offset, data, |addr, chunk| mem.write(addr, chunk).map_err(|_| WcStatus::LocProtErr)))
}

/// [`scatter`] of one part of the message `msg` ([`Memory::write_part`]).
pub(crate) fn scatter_part<M: Memory>(
    mem: &mut M,
    sges: &[Sge],
    offset: u64,
    data: &[u8],
    msg: Message,
) -> Result<(), WcStatus> {
    all_placed(scatter_with(sges, offset, data, |addr, chunk| mem.write_part(addr, chunk, msg).map_err(|_| WcStatus::LocProtErr)))
}

/// A scatter that ran out of list before the data ended is a local length error.
fn all_placed(walk: Result<bool, WcStatus>) -> Result<(), WcStatus> {
    if walk? {
        Ok(())
    } else {
        Err(WcStatus::LocLenErr)
    }
}

/// Walk a scatter list from byte `offset` of the list and hand `put` each piece of `data`
/// with the address it belongs at. `Ok(false)`: the list ended before `data` did.
pub(crate) fn scatter_with<E>(
    sges: &[Sge],
    mut offset: u64,
    mut data: &[u8],
    mut put: impl FnMut(u64, &[u8]) -> Result<(), E>,
) -> Result<bool, E> {
    for sge in sges {
        if data.is_empty() {
            break;
        }
        let l = sge.length as u64;
        if offset >= l {
            offset -= l;
            continue;
        }
        let n = ((l - offset) as usize).min(data.len());
        put(sge.addr + offset, &data[..n])?;
        data = &data[n..];
        offset = 0;
    }
    Ok(data.is_empty())
}
