//! IB Communication Management (IBA vol 1, chapter 12) over QP1: the connection protocol that
//! Linux `ib_cm` (and so rdma_cm / librdmacm) speaks on rxe.
//!
//! CM messages are General Management Packets: one 256-byte MAD in a UD SEND_ONLY to QP 1
//! (the GSI), DETH Q_Key [`GSI_QKEY`], source QP 1. A MAD starts with the common header
//! ([`mad`]), then a fixed-size body whose layout depends on the attribute ID. Private data
//! always has its full size on the wire, zero-padded by the sender.
//!
//! Layout per module, smoltcp style: a `Packet<T>` byte view over the whole MAD (header
//! included, so offsets below are MAD offsets, `H + n` for IBA's CM byte `n`) and a `...Repr`
//! record with `parse`/`emit`. [`CmMad`] joins header and body; [`rdma_cm`] has the
//! rdma_cm service IDs and the private-data header librdmacm prepends to REQ private data.
//!
//! Sources of the layouts: IBA 1.4 vol 1 tables 106-120 as transcribed in Linux
//! `include/rdma/ibta_vol1_c12.h` and `drivers/infiniband/core/cm_msgs.h`; checked against
//! the MADs Linux 6.1 rxe sent in `tests/vectors/G_rping.pcap` (`tests/cm_golden.rs`).

mod field;
pub mod mad;

/// Generates a `Packet<T>` view over a full CM MAD with one getter/setter pair per field.
///
/// Field kinds: `u8(at)`, `u16(at)`, `u32(at)`, `u64(at)`, `bits8(at, shift, width) -> u8`,
/// `flag(at, shift) -> bool`, `bits32(at, shift, width) -> u32`, `gid(at) -> Gid`,
/// `bytes(at, N) -> [u8; N]`. `shift` counts the bits to the right of the field.
macro_rules! cm_view {
    (@get u8, $b:expr, $at:expr) => { $b[$at] };
    (@set u8, $b:expr, $v:expr, $at:expr) => { $b[$at] = $v };
    (@get u16, $b:expr, $at:expr) => { $crate::cm::field::u16_at($b, $at) };
    (@set u16, $b:expr, $v:expr, $at:expr) => { $crate::cm::field::set_u16_at($b, $at, $v) };
    (@get u32, $b:expr, $at:expr) => { $crate::cm::field::u32_at($b, $at) };
    (@set u32, $b:expr, $v:expr, $at:expr) => { $crate::cm::field::set_u32_at($b, $at, $v) };
    (@get u64, $b:expr, $at:expr) => { $crate::cm::field::u64_at($b, $at) };
    (@set u64, $b:expr, $v:expr, $at:expr) => { $crate::cm::field::set_u64_at($b, $at, $v) };
    (@get bits8, $b:expr, $at:expr, $s:expr, $w:expr) => {
        $crate::cm::field::bits8($b, $at, $s, $w)
    };
    (@set bits8, $b:expr, $v:expr, $at:expr, $s:expr, $w:expr) => {
        $crate::cm::field::set_bits8($b, $at, $s, $w, $v)
    };
    (@get flag, $b:expr, $at:expr, $s:expr) => { $crate::cm::field::bits8($b, $at, $s, 1) != 0 };
    (@set flag, $b:expr, $v:expr, $at:expr, $s:expr) => {
        $crate::cm::field::set_bits8($b, $at, $s, 1, u8::from($v))
    };
    (@get bits32, $b:expr, $at:expr, $s:expr, $w:expr) => {
        $crate::cm::field::bits32($b, $at, $s, $w)
    };
    (@set bits32, $b:expr, $v:expr, $at:expr, $s:expr, $w:expr) => {
        $crate::cm::field::set_bits32($b, $at, $s, $w, $v)
    };
    (@get gid, $b:expr, $at:expr) => { $crate::cm::field::gid_at($b, $at) };
    (@set gid, $b:expr, $v:expr, $at:expr) => { $crate::cm::field::set_gid_at($b, $at, $v) };
    (@get bytes, $b:expr, $at:expr, $n:expr) => { $crate::cm::field::array_at::<{ $n }>($b, $at) };
    (@set bytes, $b:expr, $v:expr, $at:expr, $n:expr) => {
        $b[$at..$at + $n].copy_from_slice(&$v[..])
    };
    ($( $(#[$m:meta])* $get:ident, $set:ident: $ty:ty => $kind:ident($($arg:expr),*); )*) => {
        /// Zero-copy view of this message in a full 256-byte MAD (MAD header included).
        #[derive(Debug, Clone)]
        pub struct Packet<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> Packet<T> {
            pub const fn new_unchecked(buffer: T) -> Self {
                Packet { buffer }
            }

            /// A view whose getters cannot panic: the buffer holds a whole MAD.
            pub fn new_checked(buffer: T) -> Result<Self, $crate::cm::Error> {
                let p = Self::new_unchecked(buffer);
                p.check_len()?;
                Ok(p)
            }

            pub fn check_len(&self) -> Result<(), $crate::cm::Error> {
                $crate::cm::mad::check_mad_len(self.buffer.as_ref())
            }

            pub fn into_inner(self) -> T {
                self.buffer
            }

            $(
                $(#[$m])*
                #[inline]
                pub fn $get(&self) -> $ty {
                    cm_view!(@get $kind, self.buffer.as_ref(), $($arg),*)
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            $(
                #[inline]
                pub fn $set(&mut self, v: $ty) {
                    cm_view!(@set $kind, self.buffer.as_mut(), v, $($arg),*)
                }
            )*

            /// Zero the body (everything after the MAD header), reserved bits included.
            pub fn clear_body(&mut self) {
                self.buffer.as_mut()[$crate::cm::mad::HEADER_LEN..$crate::cm::MAD_SIZE].fill(0);
            }
        }
    };
}

pub mod agent;
pub mod apr;
pub mod conn;
pub mod drep;
pub mod dreq;
pub mod endpoint;
pub mod lap;
pub mod mra;
pub mod path;
pub mod rdma_cm;
pub mod rej;
pub mod rep;
pub mod req;
pub mod rtu;
pub mod sidr;

pub use agent::{CmAgent, CmAgentConfig, CmAgentError, CmAgentEvent, ConnId, ConnectParams, SidrEvent, SidrId};
pub use conn::{CmConfig, CmEvent, CmState, ConnParams, Connection, Role};
pub use endpoint::{CmEndpoint, ConnHandle, EndpointEvent, Incoming};
pub use mad::{AttributeId, MadHeaderRepr, Method};
pub use path::PathRepr;

/// Size of every MAD block (IBA 13.4.1).
pub const MAD_SIZE: usize = 256;
/// Q_Key of the General Services Interface, QP1 (IBA 13.4.6.2, C13-13).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// QP number of the GSI, where CM MADs are sent.
pub const GSI_QPN: u32 = 1;
/// Offset of the CM body in a MAD (IBA 12.6: CM byte 0 is MAD byte 24).
pub(crate) const H: usize = mad::HEADER_LEN;

/// Why a CM MAD was refused. The caller drops the MAD and counts the reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// Shorter than a MAD header or a MAD block, or a private-data header too short.
    Truncated,
    /// Base version, management class or class version other than 1 / 0x07 / 2.
    NotCm,
    /// A CM attribute this crate has no layout for (ClassPortInfo, vendor ones, ...).
    UnknownAttribute(u16),
    /// A field has a value the format does not allow (e.g. an rdma_cm header version).
    Malformed,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated => f.write_str("truncated CM MAD"),
            Error::NotCm => f.write_str("not a CM MAD (base/class/class version)"),
            Error::UnknownAttribute(a) => write!(f, "unknown CM attribute 0x{a:04x}"),
            Error::Malformed => f.write_str("malformed CM field"),
        }
    }
}

impl std::error::Error for Error {}

/// The body of a CM MAD, by attribute ID.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CmMessage {
    Req(req::ReqRepr),
    Mra(mra::MraRepr),
    Rej(rej::RejRepr),
    Rep(rep::RepRepr),
    Rtu(rtu::RtuRepr),
    Dreq(dreq::DreqRepr),
    Drep(drep::DrepRepr),
    SidrReq(sidr::SidrReqRepr),
    SidrRep(sidr::SidrRepRepr),
    Lap(lap::LapRepr),
    Apr(apr::AprRepr),
}

impl CmMessage {
    pub const fn attribute_id(&self) -> AttributeId {
        match self {
            CmMessage::Req(_) => AttributeId::REQ,
            CmMessage::Mra(_) => AttributeId::MRA,
            CmMessage::Rej(_) => AttributeId::REJ,
            CmMessage::Rep(_) => AttributeId::REP,
            CmMessage::Rtu(_) => AttributeId::RTU,
            CmMessage::Dreq(_) => AttributeId::DREQ,
            CmMessage::Drep(_) => AttributeId::DREP,
            CmMessage::SidrReq(_) => AttributeId::SIDR_REQ,
            CmMessage::SidrRep(_) => AttributeId::SIDR_REP,
            CmMessage::Lap(_) => AttributeId::LAP,
            CmMessage::Apr(_) => AttributeId::APR,
        }
    }

    /// Parses the body of a whole MAD (`buf` starts at the MAD header) by `attribute_id`.
    pub fn parse(attribute_id: AttributeId, buf: &[u8]) -> Result<Self, Error> {
        Ok(match attribute_id {
            AttributeId::REQ => {
                CmMessage::Req(req::ReqRepr::parse(&req::Packet::new_checked(buf)?))
            }
            AttributeId::MRA => {
                CmMessage::Mra(mra::MraRepr::parse(&mra::Packet::new_checked(buf)?))
            }
            AttributeId::REJ => {
                CmMessage::Rej(rej::RejRepr::parse(&rej::Packet::new_checked(buf)?))
            }
            AttributeId::REP => {
                CmMessage::Rep(rep::RepRepr::parse(&rep::Packet::new_checked(buf)?))
            }
            AttributeId::RTU => {
                CmMessage::Rtu(rtu::RtuRepr::parse(&rtu::Packet::new_checked(buf)?))
            }
            AttributeId::DREQ => {
                CmMessage::Dreq(dreq::DreqRepr::parse(&dreq::Packet::new_checked(buf)?))
            }
            AttributeId::DREP => {
                CmMessage::Drep(drep::DrepRepr::parse(&drep::Packet::new_checked(buf)?))
            }
            AttributeId::SIDR_REQ => CmMessage::SidrReq(sidr::SidrReqRepr::parse(
                &sidr::req::Packet::new_checked(buf)?,
            )),
            AttributeId::SIDR_REP => CmMessage::SidrRep(sidr::SidrRepRepr::parse(
                &sidr::rep::Packet::new_checked(buf)?,
            )),
            AttributeId::LAP => {
                CmMessage::Lap(lap::LapRepr::parse(&lap::Packet::new_checked(buf)?))
            }
            AttributeId::APR => {
                CmMessage::Apr(apr::AprRepr::parse(&apr::Packet::new_checked(buf)?))
            }
            AttributeId(other) => return Err(Error::UnknownAttribute(other)),
        })
    }

    /// Writes the body into a whole MAD buffer (at least [`MAD_SIZE`] bytes; panics if shorter,
    /// like every smoltcp `emit`). Reserved bits are written as zero; the header is untouched.
    pub fn emit(&self, buf: &mut [u8]) {
        match self {
            CmMessage::Req(r) => r.emit(&mut req::Packet::new_unchecked(buf)),
            CmMessage::Mra(r) => r.emit(&mut mra::Packet::new_unchecked(buf)),
            CmMessage::Rej(r) => r.emit(&mut rej::Packet::new_unchecked(buf)),
            CmMessage::Rep(r) => r.emit(&mut rep::Packet::new_unchecked(buf)),
            CmMessage::Rtu(r) => r.emit(&mut rtu::Packet::new_unchecked(buf)),
            CmMessage::Dreq(r) => r.emit(&mut dreq::Packet::new_unchecked(buf)),
            CmMessage::Drep(r) => r.emit(&mut drep::Packet::new_unchecked(buf)),
            CmMessage::SidrReq(r) => r.emit(&mut sidr::req::Packet::new_unchecked(buf)),
            CmMessage::SidrRep(r) => r.emit(&mut sidr::rep::Packet::new_unchecked(buf)),
            CmMessage::Lap(r) => r.emit(&mut lap::Packet::new_unchecked(buf)),
            CmMessage::Apr(r) => r.emit(&mut apr::Packet::new_unchecked(buf)),
        }
    }
}

/// A whole CM MAD: common header plus message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CmMad {
    pub header: MadHeaderRepr,
    pub message: CmMessage,
}

impl CmMad {
    /// A CM message with the header Linux `ib_cm` puts on it (method Send, status 0).
    pub fn new(transaction_id: u64, message: CmMessage) -> Self {
        CmMad {
            header: MadHeaderRepr::cm_send(transaction_id, message.attribute_id()),
            message,
        }
    }

    /// Parses one MAD, e.g. the payload of a UD SEND to QP1. Bytes after the first
    /// [`MAD_SIZE`] are ignored.
    pub fn parse(buf: &[u8]) -> Result<Self, Error> {
        let header = MadHeaderRepr::parse(&mad::Packet::new_checked(buf)?)?;
        if header.base_version != mad::BASE_VERSION
            || header.mgmt_class != mad::MGMT_CLASS_CM
            || header.class_version != mad::CM_CLASS_VERSION
        {
            return Err(Error::NotCm);
        }
        let message = CmMessage::parse(header.attribute_id, buf)?;
        Ok(CmMad { header, message })
    }

    pub const fn buffer_len(&self) -> usize {
        MAD_SIZE
    }

    /// Writes the whole MAD into `buf[..MAD_SIZE]`; the attribute ID comes from the message.
    ///
    /// # Panics
    /// If `buf` is shorter than [`MAD_SIZE`].
    pub fn emit(&self, buf: &mut [u8]) {
        let buf = &mut buf[..MAD_SIZE];
        let mut header = self.header;
        header.attribute_id = self.message.attribute_id();
        header.emit(&mut mad::Packet::new_unchecked(&mut *buf));
        self.message.emit(buf);
    }
}

#[cfg(test)]
mod tests;
