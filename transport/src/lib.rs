//! Sans-IO RoCEv2 transport.
//!
//! No I/O, no clock reads, no threads, no `unsafe`: frames go in through
//! [`Device::handle_rx`] and come out of [`Device::poll_transmit`], time arrives as an
//! [`Instant`] argument, randomness from [`DeviceConfig::seed`], and application memory is
//! reached through the [`Memory`] trait (a `Vec` in tests, process memory in the FFI crates).
//!
//! # What of the IBA (vol. 1, annex A17 for RoCEv2) is in
//!
//! - Wire: Ethernet, ARP, ICMPv6 NS/NA, IPv4 (options skipped), IPv6, UDP 4791, BTH, RETH, AETH, DETH,
//!   AtomicETH, AtomicAckETH, ImmDt, IETH, CNP (0x81, parsed and emitted); the RC, UC and UD
//!   opcode table with header offsets derived from it; ICRC per A17.3.3 (masked fields, the
//!   8-byte LRH seed, inverted); 24-bit PSN/QPN arithmetic mod 2^24.
//! - Verbs objects: PD, MR (lkey/rkey, LOCAL_WRITE, REMOTE_READ/WRITE/ATOMIC, bounds and PD
//!   checks), CQ (overrun: async error, QPs to ERR; solicited/any notification), SRQ (limit
//!   event), QP state machine RESET/INIT/RTR/RTS/SQD/SQE/ERR with the per-transition required
//!   and optional attributes of 11.2.5 (path MTU 256-4096, PSNs, timeout, retry_cnt,
//!   rnr_retry, min_rnr_timer, max_rd_atomic, max_dest_rd_atomic, Q_Key, P_Key index, AV with
//!   GID/flow label/hop limit/traffic class, UDP source port), SQD drain event.
//! - RC: SEND, SEND_IMM, SEND_INV (invalidates the named MR's rkey), WRITE, WRITE_IMM, READ,
//!   CMP_SWAP, FETCH_ADD; inline data, fences, max_rd_atomic limit; responder check pipeline
//!   (PSN, opcode sequence, validity, resources/RNR, length, rkey/access) with duplicate
//!   detection and replay of READ responses and atomic results, ACK coalescing (count and
//!   timer), NAK syndromes (PSN sequence error, invalid request, remote access error, remote
//!   operational error) and RNR NAK with the 5-bit timer encoding; completer with ACK/NAK
//!   handling, transport timer and retry_cnt, RNR retry (7 = infinite), go-back-N, in-order
//!   completions, flush errors in ERR; between droce peers that negotiated it
//!   (`QpAttr::selective_repeat`), selective repeat with the standard NAK as its only signal
//!   (docs/selective-repeat.md).
//! - UD: SEND, SEND_IMM with DETH, Q_Key rules (the high bit takes the QP's own Q_Key), the
//!   40-byte GRH at the head of the receive buffer, messages up to the path MTU; QP1 (GSI)
//!   for the IB CM (`cm`: REQ/REP/RTU/REJ/DREQ/DREP/MRA, SIDR, the rdma_cm private-data
//!   header, and `cm::agent`, which runs it on QP1 of a `Device` and moves RC QPs).
//! - Reliable UD (`ud::reliable`, above the verbs, for datagram frontends such as UCX's
//!   droce_ud): sequence numbers, cumulative acknowledgements, go-back-N retransmission.
//! - Device: QPN routing, timer heap, round-robin transmit among ready QPs, rxe-style
//!   counters ([`counters::Counters`]).
//! - Congestion control ([`cc`]): ECT(0) on sent frames, CNPs for CE-marked frames (the
//!   DCQCN notification point), the DCQCN reaction point per QP with pacing
//!   ([`DeviceConfig::cc`], `docs/dcqcn.md`).
//!
//! # What is out
//!
//! UC and XRC QPs (the UC opcodes parse, no UC QP type exists), memory windows (bind, type
//! 1/2), local invalidate and fast-register work requests, IBA 1.5 ATOMIC_WRITE and FLUSH,
//! extended/masked atomics, UD multicast, automatic path migration (MigReq is always 0, no
//! alternate path), FECN/BECN other than a CNP's BECN, the IB-native LRH/GRH (RoCEv1) framing, and on-demand paging.
#![forbid(unsafe_code)]

pub mod types;
pub use types::*;
pub mod wire;
pub mod pcap;
pub mod cm;
pub mod cc;

pub mod bottleneck;
pub mod counters;
pub mod device;
pub mod memory;
pub mod neigh;
pub mod qp;
pub mod rc;
pub(crate) mod rng;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub(crate) mod slab;
pub mod status;
pub mod time;
pub mod timer;
pub mod ud;
pub mod verbs;

pub use device::{AsyncEvent, Device, DeviceConfig};
pub use memory::{Memory, MemoryError, Message, VecMemory};
pub use time::{Duration, Instant};
