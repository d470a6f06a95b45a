//! Device counters, named like rxe's hw_counters (`/sys/class/infiniband/rxe0/ports/1/hw_counters`)
//! where rxe has one.

macro_rules! counters {
    ($($(#[$m:meta])* $name:ident,)*) => {
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct Counters { $($(#[$m])* pub $name: u64,)* }
        impl Counters {
            /// `(name, value)` pairs for printing.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
                [$((stringify!($name), self.$name),)*].into_iter()
            }
        }
    };
}

counters! {
    /// RoCE frames transmitted.
    sent_pkts,
    /// RoCE frames received and accepted by a QP (after ICRC and addressing checks).
    rcvd_pkts,
    /// Requests received again (PSN before the expected one), answered by ACK/replay.
    duplicate_request,
    /// Requests received with a PSN after the expected one (a NAK is sent once per gap).
    out_of_seq_request,
    /// PSN sequence error NAKs received by a requester.
    rcvd_seq_err,
    /// Times the requester gave up after retry_cnt (RetryExcErr).
    retry_exceeded_err,
    /// Times the requester gave up after rnr_retry (RnrRetryExcErr).
    retry_rnr_exceeded_err,
    /// RNR NAKs received.
    rcvd_rnr_err,
    /// RNR NAKs sent.
    send_rnr_err,
    /// Retransmissions started by the local ACK timeout.
    completer_retry_err,
    /// ACKs the responder deferred (coalesced) instead of sending at once.
    ack_deferred,
    /// RDMA WRITE, READ and atomic messages executed by the responder, one per message
    /// whatever its packet count: a WRITE when its last packet is placed, a READ or an
    /// atomic when its request is accepted; a duplicate request, answered from the
    /// responder's saved resources, is not counted again. So a write_bw or read_bw server
    /// shows its message count here. Not rxe's meaning of the name: rxe counts as
    /// `rdma_sends` the SEND work requests its requester completes (`do_complete` in
    /// rxe_comp.c, SEND / SEND with immediate / SEND with invalidate) and no RDMA operation.
    rdma_sends,
    /// SEND messages delivered to a receive WQE.
    rdma_recvs,
    /// Frames whose ICRC did not verify.
    rcvd_icrc_err,
    /// Frames that were not RoCEv2 or did not parse.
    rcvd_malformed,
    /// Frames addressed to another MAC/IP.
    rcvd_not_for_us,
    /// Frames for a QPN that does not exist or is not receiving.
    rcvd_bad_qpn,
    /// UD datagrams dropped for a Q_Key mismatch (IBA 10.2.5).
    qkey_violation,
    /// Frames dropped for a P_Key mismatch (IBA 10.9.3).
    pkey_violation,
    /// UD datagrams dropped because no receive WQE was posted.
    ud_no_recv_wqe,
    /// Frames whose opcode does not belong to the QP's transport (or unsupported opcodes).
    rcvd_bad_opcode,
    /// NAKs other than sequence/RNR sent by a responder.
    send_nak,
    /// NAKs other than sequence/RNR received by a requester.
    rcvd_nak,
    /// Responses dropped because they matched no outstanding request (late duplicates).
    rcvd_ghost_response,
    /// CQ overruns.
    cq_overrun,
    /// Packets retransmitted (any cause), each counted as it leaves: a timeout or NAK that
    /// sends 16 packets again counts 16 (`completer_retry_err` counts the timeouts).
    retransmitted_pkts,
    /// Frames received with ECN CE (congestion experienced) in the IP header.
    ecn_ce_rcvd,
    /// CNPs sent by the notification point.
    cnp_sent,
    /// CE-marked frames not answered because their QP sent a CNP less than
    /// `cnp_interval` before.
    cnp_suppressed,
    /// CNPs received.
    cnp_rcvd,
    /// DCQCN rate cuts (CNPs outside a QP's `rate_reduce_monitor_period`).
    cc_rate_cuts,
    /// QPs whose rate recovered to the maximum (pacing off again).
    cc_rate_recovered,
    /// Times a QP with data to send waited for its pacer.
    cc_pacing_stalls,
    /// Selective repeat, responder: out-of-order packets kept for their turn.
    sr_held,
    /// Selective repeat, responder: copies of an already held packet, dropped.
    sr_held_duplicate,
    /// Selective repeat, requester: lost packets resent alone (no go-back-N).
    sr_resent_pkts,
    /// Selective repeat, requester: the responder's reminder NAKs for a gap already being
    /// repaired (the packet is sent alone again; no retry is counted).
    sr_reminders,
}

impl Counters {
    /// Received packets that moved a QP on: `rcvd_pkts` less those that left every QP as it
    /// was (duplicate and out-of-sequence requests, unless selective repeat kept them for
    /// their turn; RNR NAKs sent and received; responses to nothing outstanding). A peer that
    /// only repeats itself is alive, but its test goes nowhere: a waiter bounded by a timeout
    /// takes only these as the peer's progress. (A send_bw client with a larger `-n` than its
    /// server's retries its next SEND on RNR NAKs for ever, as IBA's rnr_retry 7 says; the
    /// server, counting every frame as life, never ended its wait for the report.)
    pub fn forward_pkts(&self) -> u64 {
        let repeats = [self.duplicate_request, self.out_of_seq_request.wrapping_sub(self.sr_held), self.send_rnr_err, self.rcvd_rnr_err, self.rcvd_ghost_response];
        repeats.iter().fold(self.rcvd_pkts, |n, r| n.wrapping_sub(*r))
    }
}
