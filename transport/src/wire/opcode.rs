//! The BTH opcode table (IBA 9.2.1, table 38, plus the RoCEv2 CNP of annex A17.9.3).
//!
//! Every opcode is described once by its transport class, operation, position in a message
//! and set of extension headers; everything else (offsets, header length, receive-WQE use)
//! is derived from that description, never typed by hand.

use core::fmt;

/// Transport service class, the top three bits of the opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransportClass {
    /// Reliable Connection, prefix `000`.
    Rc,
    /// Unreliable Connection, prefix `001`.
    Uc,
    /// Unreliable Datagram, prefix `011`.
    Ud,
    /// Congestion Notification Packet, prefix `100` (RoCEv2 annex A17.9.3).
    Cnp,
}

/// What a packet does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    Send,
    RdmaWrite,
    RdmaReadRequest,
    RdmaReadResponse,
    Acknowledge,
    AtomicAcknowledge,
    CompareSwap,
    FetchAdd,
    Cnp,
}

/// Place of a packet inside its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Position {
    First,
    Middle,
    Last,
    Only,
}

/// The extension headers that may follow the BTH, in IBA order (IBA 9.2, figure 96), plus
/// the 16 reserved bytes of a CNP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExtHeader {
    Rdeth,
    Deth,
    Reth,
    AtomicEth,
    Aeth,
    AtomicAckEth,
    ImmDt,
    Ieth,
    CnpReserved,
}

impl ExtHeader {
    /// IBA header order. Offsets are computed by walking this list.
    pub const ORDER: [ExtHeader; 9] = [
        ExtHeader::Rdeth,
        ExtHeader::Deth,
        ExtHeader::Reth,
        ExtHeader::AtomicEth,
        ExtHeader::Aeth,
        ExtHeader::AtomicAckEth,
        ExtHeader::ImmDt,
        ExtHeader::Ieth,
        ExtHeader::CnpReserved,
    ];

    /// Length in bytes (IBA 9.3-9.5).
    #[allow(clippy::len_without_is_empty)] // a header field, not a container
    pub const fn len(self) -> usize {
        match self {
            ExtHeader::Rdeth => 4,
            ExtHeader::Deth => 8,
            ExtHeader::Reth => 16,
            ExtHeader::AtomicEth => 28,
            ExtHeader::Aeth => 4,
            ExtHeader::AtomicAckEth => 8,
            ExtHeader::ImmDt => 4,
            ExtHeader::Ieth => 4,
            ExtHeader::CnpReserved => 16,
        }
    }

    const fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// A set of extension headers.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExtHeaders(u16);

impl ExtHeaders {
    pub const NONE: ExtHeaders = ExtHeaders(0);
    pub const RDETH: ExtHeaders = ExtHeaders(ExtHeader::Rdeth.bit());
    pub const DETH: ExtHeaders = ExtHeaders(ExtHeader::Deth.bit());
    pub const RETH: ExtHeaders = ExtHeaders(ExtHeader::Reth.bit());
    pub const ATOMIC_ETH: ExtHeaders = ExtHeaders(ExtHeader::AtomicEth.bit());
    pub const AETH: ExtHeaders = ExtHeaders(ExtHeader::Aeth.bit());
    pub const ATOMIC_ACK_ETH: ExtHeaders = ExtHeaders(ExtHeader::AtomicAckEth.bit());
    pub const IMMDT: ExtHeaders = ExtHeaders(ExtHeader::ImmDt.bit());
    pub const IETH: ExtHeaders = ExtHeaders(ExtHeader::Ieth.bit());
    pub const CNP_RESERVED: ExtHeaders = ExtHeaders(ExtHeader::CnpReserved.bit());

    pub const fn union(self, other: ExtHeaders) -> ExtHeaders {
        ExtHeaders(self.0 | other.0)
    }
    pub const fn contains(self, h: ExtHeader) -> bool {
        self.0 & h.bit() != 0
    }
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Offset of `h` from the start of the extension headers (i.e. from the end of the BTH),
    /// or `None` when `h` is not in the set.
    pub const fn offset(self, h: ExtHeader) -> Option<usize> {
        if !self.contains(h) {
            return None;
        }
        let mut off = 0;
        let mut i = 0;
        while i < ExtHeader::ORDER.len() {
            let e = ExtHeader::ORDER[i];
            if e as u16 == h as u16 {
                return Some(off);
            }
            if self.contains(e) {
                off += e.len();
            }
            i += 1;
        }
        None
    }

    /// Total length of all extension headers in the set.
    pub const fn len(self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < ExtHeader::ORDER.len() {
            if self.contains(ExtHeader::ORDER[i]) {
                n += ExtHeader::ORDER[i].len();
            }
            i += 1;
        }
        n
    }
}

impl core::ops::BitOr for ExtHeaders {
    type Output = ExtHeaders;
    fn bitor(self, o: ExtHeaders) -> ExtHeaders {
        self.union(o)
    }
}

impl fmt::Debug for ExtHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut l = f.debug_set();
        let mut i = 0;
        while i < ExtHeader::ORDER.len() {
            if self.contains(ExtHeader::ORDER[i]) {
                l.entry(&ExtHeader::ORDER[i]);
            }
            i += 1;
        }
        l.finish()
    }
}

/// Length of the Base Transport Header.
pub const BTH_LEN: usize = 12;

/// Everything the transport needs to know about an opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpInfo {
    pub class: TransportClass,
    pub operation: Operation,
    pub position: Position,
    pub headers: ExtHeaders,
}

impl OpInfo {
    const fn new(class: TransportClass, operation: Operation, position: Position) -> OpInfo {
        use ExtHeaders as H;
        // The extension headers follow from the operation and the position (IBA 9.2.1,
        // 9.4.1-9.4.5, 9.8.3.1; UD adds a DETH to every packet, IBA 9.3.2).
        let base = match operation {
            Operation::RdmaWrite => match position {
                Position::First | Position::Only => H::RETH,
                Position::Middle | Position::Last => H::NONE,
            },
            Operation::RdmaReadRequest => H::RETH,
            Operation::RdmaReadResponse => match position {
                Position::Middle => H::NONE,
                _ => H::AETH,
            },
            Operation::Acknowledge => H::AETH,
            Operation::AtomicAcknowledge => H::AETH.union(H::ATOMIC_ACK_ETH),
            Operation::CompareSwap | Operation::FetchAdd => H::ATOMIC_ETH,
            Operation::Send => H::NONE,
            Operation::Cnp => H::CNP_RESERVED,
        };
        let base = match class {
            TransportClass::Ud => base.union(H::DETH),
            _ => base,
        };
        OpInfo {
            class,
            operation,
            position,
            headers: base,
        }
    }
    const fn with(self, h: ExtHeaders) -> OpInfo {
        OpInfo {
            headers: self.headers.union(h),
            ..self
        }
    }

    pub const fn has(self, h: ExtHeader) -> bool {
        self.headers.contains(h)
    }
    pub const fn has_reth(self) -> bool {
        self.has(ExtHeader::Reth)
    }
    pub const fn has_aeth(self) -> bool {
        self.has(ExtHeader::Aeth)
    }
    pub const fn has_deth(self) -> bool {
        self.has(ExtHeader::Deth)
    }
    pub const fn has_atomic_eth(self) -> bool {
        self.has(ExtHeader::AtomicEth)
    }
    pub const fn has_atomic_ack_eth(self) -> bool {
        self.has(ExtHeader::AtomicAckEth)
    }
    pub const fn has_immdt(self) -> bool {
        self.has(ExtHeader::ImmDt)
    }
    pub const fn has_ieth(self) -> bool {
        self.has(ExtHeader::Ieth)
    }

    /// Offset of extension header `h` from the start of the BTH.
    pub const fn offset(self, h: ExtHeader) -> Option<usize> {
        match self.headers.offset(h) {
            Some(o) => Some(BTH_LEN + o),
            None => None,
        }
    }
    /// Length of BTH plus extension headers: where the payload starts, counted from the BTH.
    pub const fn header_len(self) -> usize {
        BTH_LEN + self.headers.len()
    }

    pub const fn is_first(self) -> bool {
        matches!(self.position, Position::First)
    }
    pub const fn is_middle(self) -> bool {
        matches!(self.position, Position::Middle)
    }
    pub const fn is_last(self) -> bool {
        matches!(self.position, Position::Last)
    }
    pub const fn is_only(self) -> bool {
        matches!(self.position, Position::Only)
    }
    /// First or only packet of a message.
    pub const fn starts_message(self) -> bool {
        matches!(self.position, Position::First | Position::Only)
    }
    /// Last or only packet of a message.
    pub const fn ends_message(self) -> bool {
        matches!(self.position, Position::Last | Position::Only)
    }

    /// Sent by a requester (SEND, WRITE, READ request, atomics; all of UC and UD).
    pub const fn is_request(self) -> bool {
        matches!(
            self.operation,
            Operation::Send
                | Operation::RdmaWrite
                | Operation::RdmaReadRequest
                | Operation::CompareSwap
                | Operation::FetchAdd
        )
    }
    /// Sent by a responder (READ response, ACK/NAK, ATOMIC ACK).
    pub const fn is_response(self) -> bool {
        matches!(
            self.operation,
            Operation::RdmaReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge
        )
    }
    /// Carries a payload field (possibly empty): SEND, WRITE, READ response.
    pub const fn has_payload(self) -> bool {
        matches!(
            self.operation,
            Operation::Send | Operation::RdmaWrite | Operation::RdmaReadResponse
        )
    }
    /// This packet takes a new receive WQE (rxe `RXE_RWR_MASK`): the first packet of a SEND,
    /// and the packet of a WRITE that carries the immediate (IBA 9.4.3: only a WRITE with
    /// immediate consumes a receive WQE, and it does so with its last or only packet).
    pub const fn consumes_recv_wqe(self) -> bool {
        match self.operation {
            Operation::Send => self.starts_message(),
            Operation::RdmaWrite => self.has_immdt(),
            _ => false,
        }
    }
    /// This packet completes a receive WQE: the last packet of a SEND, or a WRITE with immediate.
    pub const fn completes_recv_wqe(self) -> bool {
        match self.operation {
            Operation::Send => self.ends_message(),
            Operation::RdmaWrite => self.has_immdt(),
            _ => false,
        }
    }
    /// An RDMA READ or atomic request: needs responder resources (max_dest_rd_atomic).
    pub const fn is_read_or_atomic(self) -> bool {
        matches!(
            self.operation,
            Operation::RdmaReadRequest | Operation::CompareSwap | Operation::FetchAdd
        )
    }
}

macro_rules! opcodes {
    ($( $(#[$m:meta])* $name:ident = $val:literal, $tshark:literal, $info:expr; )*) => {
        /// A BTH opcode supported by droce (RC, UC, UD and CNP).
        ///
        /// RD (prefix `010`), XRC (prefix `101`), manufacturer-specific opcodes and the IBA 1.5
        /// additions FLUSH (0x1c) and ATOMIC WRITE (0x1d) are not supported: `TryFrom<u8>` fails
        /// for them.
        #[repr(u8)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Opcode {
            $( $(#[$m])* $name = $val, )*
        }

        impl Opcode {
            /// All supported opcodes, in numeric order.
            pub const ALL: &'static [Opcode] = &[$(Opcode::$name,)*];

            /// The description of this opcode: one load from a table built at compile time
            /// (the per-frame paths ask for it several times per packet).
            #[inline]
            pub const fn info(self) -> OpInfo {
                INFO_TABLE[self as u8 as usize]
            }

            /// [`info`](Self::info) computed from the opcode list (builds the table).
            const fn info_uncached(self) -> OpInfo {
                use TransportClass::*; use Operation::*; use Position::*;
                use ExtHeaders as H;
                #[allow(unused_imports)]
                let _ = H::NONE;
                match self { $( Opcode::$name => $info, )* }
            }

            /// The name Wireshark/tshark shows, with the transport class as prefix
            /// (`RC SEND Only`, `UD SEND only`, `RC Acknowledge`).
            pub const fn name(self) -> &'static str {
                match self { $( Opcode::$name => $tshark, )* }
            }

            pub const fn from_u8(v: u8) -> Option<Opcode> {
                match v { $( $val => Some(Opcode::$name), )* _ => None }
            }
        }
    };
}

/// [`Opcode::info`] for every byte value (unsupported values hold a placeholder never read:
/// an `Opcode` only exists for a supported value).
const INFO_TABLE: [OpInfo; 256] = {
    let mut t = [OpInfo::new(TransportClass::Cnp, Operation::Cnp, Position::Only); 256];
    let mut i = 0;
    while i < Opcode::ALL.len() {
        let o = Opcode::ALL[i];
        t[o as u8 as usize] = o.info_uncached();
        i += 1;
    }
    t
};

const fn op(c: TransportClass, o: Operation, p: Position) -> OpInfo {
    OpInfo::new(c, o, p)
}

opcodes! {
    RcSendFirst = 0x00, "RC SEND First", op(Rc, Send, First);
    RcSendMiddle = 0x01, "RC SEND Middle", op(Rc, Send, Middle);
    RcSendLast = 0x02, "RC SEND Last", op(Rc, Send, Last);
    RcSendLastImm = 0x03, "RC SEND Last Immediate", op(Rc, Send, Last).with(H::IMMDT);
    RcSendOnly = 0x04, "RC SEND Only", op(Rc, Send, Only);
    RcSendOnlyImm = 0x05, "RC SEND Only Immediate", op(Rc, Send, Only).with(H::IMMDT);
    RcWriteFirst = 0x06, "RC RDMA WRITE First", op(Rc, RdmaWrite, First);
    RcWriteMiddle = 0x07, "RC RDMA WRITE Middle", op(Rc, RdmaWrite, Middle);
    RcWriteLast = 0x08, "RC RDMA WRITE Last", op(Rc, RdmaWrite, Last);
    RcWriteLastImm = 0x09, "RC RDMA WRITE Last Immediate", op(Rc, RdmaWrite, Last).with(H::IMMDT);
    RcWriteOnly = 0x0a, "RC RDMA WRITE Only", op(Rc, RdmaWrite, Only);
    RcWriteOnlyImm = 0x0b, "RC RDMA WRITE Only Immediate", op(Rc, RdmaWrite, Only).with(H::IMMDT);
    RcReadRequest = 0x0c, "RC RDMA READ Request", op(Rc, RdmaReadRequest, Only);
    RcReadResponseFirst = 0x0d, "RC RDMA READ response First", op(Rc, RdmaReadResponse, First);
    RcReadResponseMiddle = 0x0e, "RC RDMA READ response Middle", op(Rc, RdmaReadResponse, Middle);
    RcReadResponseLast = 0x0f, "RC RDMA READ response Last", op(Rc, RdmaReadResponse, Last);
    RcReadResponseOnly = 0x10, "RC RDMA READ response Only", op(Rc, RdmaReadResponse, Only);
    RcAcknowledge = 0x11, "RC Acknowledge", op(Rc, Acknowledge, Only);
    RcAtomicAcknowledge = 0x12, "RC ATOMIC Acknowledge", op(Rc, AtomicAcknowledge, Only);
    RcCompareSwap = 0x13, "RC CmpSwap", op(Rc, CompareSwap, Only);
    RcFetchAdd = 0x14, "RC FetchAdd", op(Rc, FetchAdd, Only);
    RcSendLastInv = 0x16, "RC SEND Last Invalidate", op(Rc, Send, Last).with(H::IETH);
    RcSendOnlyInv = 0x17, "RC SEND Only Invalidate", op(Rc, Send, Only).with(H::IETH);
    UcSendFirst = 0x20, "UC SEND First", op(Uc, Send, First);
    UcSendMiddle = 0x21, "UC SEND Middle", op(Uc, Send, Middle);
    UcSendLast = 0x22, "UC SEND Last", op(Uc, Send, Last);
    UcSendLastImm = 0x23, "UC SEND Last Immediate", op(Uc, Send, Last).with(H::IMMDT);
    UcSendOnly = 0x24, "UC SEND Only", op(Uc, Send, Only);
    UcSendOnlyImm = 0x25, "UC SEND Only Immediate", op(Uc, Send, Only).with(H::IMMDT);
    UcWriteFirst = 0x26, "UC RDMA WRITE First", op(Uc, RdmaWrite, First);
    UcWriteMiddle = 0x27, "UC RDMA WRITE Middle", op(Uc, RdmaWrite, Middle);
    UcWriteLast = 0x28, "UC RDMA WRITE Last", op(Uc, RdmaWrite, Last);
    UcWriteLastImm = 0x29, "UC RDMA WRITE Last Immediate", op(Uc, RdmaWrite, Last).with(H::IMMDT);
    UcWriteOnly = 0x2a, "UC RDMA WRITE Only", op(Uc, RdmaWrite, Only);
    UcWriteOnlyImm = 0x2b, "UC RDMA WRITE Only Immediate", op(Uc, RdmaWrite, Only).with(H::IMMDT);
    UdSendOnly = 0x64, "UD SEND only", op(Ud, Send, Only);
    UdSendOnlyImm = 0x65, "UD SEND only Immediate", op(Ud, Send, Only).with(H::IMMDT);
    Cnp = 0x81, "CNP", op(TransportClass::Cnp, Operation::Cnp, Only);
}

impl TryFrom<u8> for Opcode {
    type Error = super::Error;
    fn try_from(v: u8) -> Result<Opcode, super::Error> {
        Opcode::from_u8(v).ok_or(super::Error)
    }
}

impl From<Opcode> for u8 {
    fn from(o: Opcode) -> u8 {
        o as u8
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// IBA 1.4 table 38 (opcode field), transcribed independently of the macro above as
    /// (value, class, headers in order, payload, position letter). Anything not listed is
    /// reserved, RD, XRC or manufacturer-specific and must be rejected.
    #[rustfmt::skip]
    const IBA_TABLE: &[(u8, &str, &[&str], bool, char)] = &[
        (0x00, "RC", &[], true, 'F'), (0x01, "RC", &[], true, 'M'), (0x02, "RC", &[], true, 'L'),
        (0x03, "RC", &["ImmDt"], true, 'L'), (0x04, "RC", &[], true, 'O'), (0x05, "RC", &["ImmDt"], true, 'O'),
        (0x06, "RC", &["RETH"], true, 'F'), (0x07, "RC", &[], true, 'M'), (0x08, "RC", &[], true, 'L'),
        (0x09, "RC", &["ImmDt"], true, 'L'), (0x0a, "RC", &["RETH"], true, 'O'),
        (0x0b, "RC", &["RETH", "ImmDt"], true, 'O'), (0x0c, "RC", &["RETH"], false, 'O'),
        (0x0d, "RC", &["AETH"], true, 'F'), (0x0e, "RC", &[], true, 'M'), (0x0f, "RC", &["AETH"], true, 'L'),
        (0x10, "RC", &["AETH"], true, 'O'), (0x11, "RC", &["AETH"], false, 'O'),
        (0x12, "RC", &["AETH", "AtomicAckETH"], false, 'O'), (0x13, "RC", &["AtomicETH"], false, 'O'),
        (0x14, "RC", &["AtomicETH"], false, 'O'), (0x16, "RC", &["IETH"], true, 'L'),
        (0x17, "RC", &["IETH"], true, 'O'),
        (0x20, "UC", &[], true, 'F'), (0x21, "UC", &[], true, 'M'), (0x22, "UC", &[], true, 'L'),
        (0x23, "UC", &["ImmDt"], true, 'L'), (0x24, "UC", &[], true, 'O'), (0x25, "UC", &["ImmDt"], true, 'O'),
        (0x26, "UC", &["RETH"], true, 'F'), (0x27, "UC", &[], true, 'M'), (0x28, "UC", &[], true, 'L'),
        (0x29, "UC", &["ImmDt"], true, 'L'), (0x2a, "UC", &["RETH"], true, 'O'),
        (0x2b, "UC", &["RETH", "ImmDt"], true, 'O'),
        (0x64, "UD", &["DETH"], true, 'O'), (0x65, "UD", &["DETH", "ImmDt"], true, 'O'),
        (0x81, "CNP", &["CNP reserved"], false, 'O'),
    ];

    fn hdr_name(h: ExtHeader) -> &'static str {
        match h {
            ExtHeader::Rdeth => "RDETH",
            ExtHeader::Deth => "DETH",
            ExtHeader::Reth => "RETH",
            ExtHeader::AtomicEth => "AtomicETH",
            ExtHeader::Aeth => "AETH",
            ExtHeader::AtomicAckEth => "AtomicAckETH",
            ExtHeader::ImmDt => "ImmDt",
            ExtHeader::Ieth => "IETH",
            ExtHeader::CnpReserved => "CNP reserved",
        }
    }

    fn hdr_len(n: &str) -> usize {
        match n {
            "RETH" => 16,
            "AETH" | "ImmDt" | "IETH" => 4,
            "DETH" | "AtomicAckETH" => 8,
            "AtomicETH" => 28,
            "CNP reserved" => 16,
            _ => unreachable!(),
        }
    }

    #[test]
    fn all_256_values_against_iba_table() {
        let mut supported = 0;
        for v in 0..=255u8 {
            let row = IBA_TABLE.iter().find(|r| r.0 == v);
            let op = Opcode::try_from(v);
            let Some(&(_, class, hdrs, payload, pos)) = row else {
                assert!(op.is_err(), "0x{v:02x} must be rejected");
                continue;
            };
            supported += 1;
            let op = op.unwrap_or_else(|_| panic!("0x{v:02x} must be accepted"));
            assert_eq!(op as u8, v);
            let i = op.info();
            let c = match i.class {
                TransportClass::Rc => "RC",
                TransportClass::Uc => "UC",
                TransportClass::Ud => "UD",
                TransportClass::Cnp => "CNP",
            };
            assert_eq!(c, class, "0x{v:02x}");
            assert_eq!(
                v >> 5,
                match class {
                    "RC" => 0,
                    "UC" => 1,
                    "UD" => 3,
                    _ => 4,
                }
            );
            assert!(op.name().starts_with(class), "{}", op.name());
            let got: Vec<&str> = ExtHeader::ORDER
                .iter()
                .filter(|h| i.has(**h))
                .map(|h| hdr_name(*h))
                .collect();
            assert_eq!(got, hdrs, "0x{v:02x} headers");
            assert_eq!(i.has_payload(), payload, "0x{v:02x} payload");
            let p = match i.position {
                Position::First => 'F',
                Position::Middle => 'M',
                Position::Last => 'L',
                Position::Only => 'O',
            };
            assert_eq!(p, pos, "0x{v:02x} position");
            // Offsets follow the listed order with the listed sizes.
            let mut off = BTH_LEN;
            for n in hdrs {
                let h = *ExtHeader::ORDER
                    .iter()
                    .find(|h| hdr_name(**h) == *n)
                    .unwrap();
                assert_eq!(i.offset(h), Some(off), "0x{v:02x} {n}");
                off += hdr_len(n);
            }
            assert_eq!(i.header_len(), off, "0x{v:02x} header_len");
            for h in ExtHeader::ORDER {
                if !hdrs.contains(&hdr_name(h)) {
                    assert_eq!(i.offset(h), None);
                }
            }
            assert_eq!(i.is_request() || i.is_response(), class != "CNP");
            assert!(!(i.is_request() && i.is_response()));
        }
        assert_eq!(supported, IBA_TABLE.len());
        assert_eq!(Opcode::ALL.len(), IBA_TABLE.len());
    }

    #[test]
    fn receive_wqe_use() {
        use Opcode::*;
        let consumes: Vec<Opcode> = Opcode::ALL
            .iter()
            .copied()
            .filter(|o| o.info().consumes_recv_wqe())
            .collect();
        assert_eq!(
            consumes,
            [
                RcSendFirst,
                RcSendOnly,
                RcSendOnlyImm,
                RcWriteLastImm,
                RcWriteOnlyImm,
                RcSendOnlyInv,
                UcSendFirst,
                UcSendOnly,
                UcSendOnlyImm,
                UcWriteLastImm,
                UcWriteOnlyImm,
                UdSendOnly,
                UdSendOnlyImm
            ]
        );
        let completes: Vec<Opcode> = Opcode::ALL
            .iter()
            .copied()
            .filter(|o| o.info().completes_recv_wqe())
            .collect();
        assert_eq!(
            completes,
            [
                RcSendLast,
                RcSendLastImm,
                RcSendOnly,
                RcSendOnlyImm,
                RcWriteLastImm,
                RcWriteOnlyImm,
                RcSendLastInv,
                RcSendOnlyInv,
                UcSendLast,
                UcSendLastImm,
                UcSendOnly,
                UcSendOnlyImm,
                UcWriteLastImm,
                UcWriteOnlyImm,
                UdSendOnly,
                UdSendOnlyImm
            ]
        );
        assert!(RcReadRequest.info().is_read_or_atomic());
        assert!(RcFetchAdd.info().is_read_or_atomic());
        assert!(!RcWriteOnly.info().is_read_or_atomic());
    }

    #[test]
    fn names() {
        assert_eq!(
            Opcode::RcReadResponseFirst.to_string(),
            "RC RDMA READ response First"
        );
        assert_eq!(Opcode::UdSendOnly.name(), "UD SEND only");
        assert_eq!(
            Opcode::RcAtomicAcknowledge
                .info()
                .offset(ExtHeader::AtomicAckEth),
            Some(16)
        );
        assert_eq!(
            Opcode::RcWriteOnlyImm.info().offset(ExtHeader::ImmDt),
            Some(28)
        );
        assert_eq!(Opcode::Cnp.info().header_len(), 28);
    }
}
