//! The timed loops of the perftest modes: bandwidth client and server, SEND / WRITE / READ /
//! atomic latency, and the server-side check of --verify.

use super::*;

/// The streaming requester of write_bw, read_bw, atomic_bw and send_bw.
/// The sender of the bandwidth tests. `ctrl` is watched for the server's exit: a killed server
/// sends nothing more, and its QP would otherwise only retry out.
pub(super) fn bw_client(r: &mut Run, dv: &mut Dev, ctrl: &mut Ctrl) -> R<(report::BwStats, f64)> {
    if r.o.progress == Progress::Thread {
        dv.start_thread()?;
    }
    let nq = r.qps.len();
    let iters = r.o.iters;
    let depth = r.tx_depth();
    let (mut posted, mut done) = (vec![0u64; nq], vec![0u64; nq]);
    // clock stamps every STAMP_STEP messages posted and completed (all QPs): the peak runs
    // from a post to a completion, as perftest's (report::bw_stats_posted)
    let stamps_max = ((iters as usize * nq) / STAMP_STEP as usize + 1).min(1 << 24);
    let mut stamps = Vec::with_capacity(stamps_max);
    let mut post_stamps = Vec::with_capacity(stamps_max);
    let mut posted_all = 0u64;
    let fill = r.o.verify && matches!(r.o.test, Test::WriteBw | Test::SendBw);
    // perftest's CQ moderation: signal one WR in CQ_MOD (not for READ/atomic, whose every
    // response is checked with --verify)
    let moderate = matches!(r.o.test, Test::WriteBw | Test::SendBw) && depth >= 2 * CQ_MOD;
    if !fill && matches!(r.o.test, Test::WriteBw | Test::SendBw) {
        for q in 0..nq {
            for k in 0..r.tx_slots {
                let p = vec![0x7bu8; r.o.size as usize];
                dv.write_mem(r.tslot(q, k), &p)?;
            }
        }
    }
    let mut wr = request(r, 0, 0, 0);
    let t0 = droce_dpdk::rdtsc();
    let mut last = Stall::new(r.o.timeout);
    let total = iters * nq as u64;
    let mut completed = 0u64;
    while completed < total {
        for q in 0..nq {
            while posted[q] < iters && posted[q] - done[q] < depth {
                let i = posted[q];
                if fill {
                    let p = r.payload(q, i);
                    dv.write_mem(r.tslot(q, i), &p)?;
                }
                request_into(r, q, i, i, &mut wr);
                if moderate && (i + 1) % CQ_MOD != 0 && i + 1 != iters {
                    wr.flags = SendFlags(0);
                }
                if posted_all % STAMP_STEP == 0 {
                    post_stamps.push(droce_dpdk::rdtsc());
                }
                dv.post_send_ref(r.qps[q].h, &wr)?;
                posted[q] += 1;
                posted_all += 1;
            }
        }
        if dv.progress() {
            last.reset();
        }
        while let Some(wc) = dv.poll_cq(r.cq)? {
            check_wc(r.side, &wc)?;
            let (q, i) = (wr_q(wc.wr_id), wr_i(wc.wr_id));
            if q >= nq || i < done[q] || (!moderate && i != done[q]) {
                return Err(format!("completion out of order at client: QP {q} wr {i}, expected {}", done.get(q).copied().unwrap_or(0)));
            }
            if r.o.verify {
                check_response(r, dv, q, i, i)?;
            }
            // with CQ moderation one completion stands for every earlier unsignaled WR
            let n = i + 1 - done[q];
            done[q] = i + 1;
            completed += n;
            // one stamp per STAMP_STEP boundary crossed: a moderated completion can stand for
            // several
            if stamps.len() < (completed / STAMP_STEP) as usize {
                let t = droce_dpdk::rdtsc();
                stamps.resize((completed / STAMP_STEP) as usize, t);
            }
            last.reset();
        }
        if ctrl.peer_closed() {
            return Err(format!("the server closed the control connection after {completed} of {total} completions: it exited or failed"));
        }
        if last.expired() {
            return Err(format!("timed out after {:?} at client: {completed} of {total} completions{}", r.o.timeout, dv.stall_cause()));
        }
    }
    let secs = tsc_secs(t0, droce_dpdk::rdtsc());
    let stamps: Vec<f64> = stamps.iter().map(|&t| tsc_secs(t0, t)).collect();
    let post_stamps: Vec<f64> = post_stamps.iter().map(|&t| tsc_secs(t0, t)).collect();
    Ok((report::bw_stats_posted(r.o.size, STAMP_STEP, &post_stamps, &stamps, total, secs), secs))
}

/// After the sender has finished (its closing handshake is waiting on the TCP connection), a
/// UD receiver keeps polling until this long passes without a message: what is still in the
/// receive ring arrives, and what did not by then was lost.
const UD_DRAIN: Duration = Duration::from_millis(50);

/// The receiver of send_bw. `ctrl` is watched for the client's exit: a client that ended in
/// an error (RETRY_EXC_ERR under heavy loss or load) or was killed sends nothing more.
pub(super) fn send_bw_server(r: &mut Run, dv: &mut Dev, ctrl: &mut Ctrl) -> R<report::BwStats> {
    let nq = r.qps.len();
    let iters = r.o.iters;
    let mut got = vec![0u64; nq];
    let total = iters * nq as u64;
    let mut completed = 0u64;
    let mut stamps = Vec::with_capacity((total as usize).min(1 << 24));
    let mut t0 = None;
    let mut t_last = 0u64;
    let mut last = Stall::new(r.o.timeout);
    let off = if r.o.ud { GRH } else { 0 };
    // UD: messages are identified by the number they carry, lost ones counted (udcheck.rs)
    let mut ud: Vec<udcheck::UdCheck> = if r.o.ud && r.o.verify { (0..nq).map(|q| udcheck::UdCheck::new(q, iters)).collect() } else { Vec::new() };
    let mut msg = vec![0u8; if ud.is_empty() { 0 } else { r.o.size as usize }];
    let mut idle_polls = 0u32;
    let mut sender_done: Option<Instant> = None;
    let mut rwr = RecvWr::new(0);
    while completed < total {
        if dv.progress() {
            last.reset();
        }
        let mut any = false;
        while let Some(wc) = dv.poll_cq(r.cq)? {
            check_wc(r.side, &wc)?;
            if wc.opcode != WcOpcode::Recv {
                continue;
            }
            any = true;
            let t = *t0.get_or_insert_with(droce_dpdk::rdtsc);
            let (q, k) = (wr_q(wc.wr_id), wr_i(wc.wr_id));
            if wc.byte_len as u64 != r.o.size + off {
                return Err(format!("server: received {} bytes, expected {}", wc.byte_len as u64 - off, r.o.size));
            }
            let mut new = true;
            if let Some(c) = ud.get_mut(q) {
                dv.read_mem(r.rslot(q, k) + off, &mut msg)?;
                new = matches!(c.accept(&msg).map_err(|e| format!("{e} (at server)"))?, udcheck::Seen::New(_));
            } else if r.o.verify {
                r.check(dv, r.rslot(q, k) + off, q, got[q], "message")?;
            }
            post_recv_with(r, dv, q, k, &mut rwr)?;
            last.reset();
            if !new {
                continue;
            }
            got[q] += 1;
            completed += 1;
            t_last = droce_dpdk::rdtsc();
            if completed & (STAMP_STEP - 1) == 0 || completed == total {
                stamps.push(tsc_secs(t, t_last));
            }
        }
        if r.o.ud {
            // a lost datagram is never resent: the end is the sender's closing handshake, then
            // a quiet UD_DRAIN. One socket check per 256 idle polls keeps system calls rare.
            if any {
                idle_polls = 0;
                if let Some(d) = sender_done.as_mut() {
                    *d = Instant::now();
                }
            } else {
                idle_polls += 1;
                if sender_done.is_none() && idle_polls % 256 == 0 && ctrl.peer_has_sent() {
                    sender_done = Some(Instant::now());
                }
                if sender_done.is_some_and(|d| d.elapsed() > UD_DRAIN) {
                    break;
                }
            }
        }
        if ctrl.peer_closed() {
            return Err(format!("the client closed the control connection after {completed} of {total} messages: it exited or failed"));
        }
        if last.expired() {
            return Err(format!(
                "timed out after {:?} at server: received {completed} of {total} messages{}",
                r.o.timeout,
                dv.stall_cause()
            ));
        }
    }
    if r.o.ud {
        // with --verify the numbers the messages carried say which arrived; without it, the count
        let (received, lost) = if ud.is_empty() {
            (completed, total.saturating_sub(completed))
        } else {
            (ud.iter().map(|c| c.received()).sum(), ud.iter().map(|c| c.lost()).sum())
        };
        let dup: u64 = ud.iter().map(|c| c.duplicates()).sum();
        // without --verify the payload is not read, so a duplicate counts as a message: the
        // figures are receives, and duplicates can hide losses
        let tail = if !ud.is_empty() {
            format!(", {dup} duplicated; every byte of what arrived verified")
        } else if received > total {
            format!(" ({} receives more than messages sent: duplicates, told apart only with --verify)", received - total)
        } else {
            " (receives counted; with --verify duplicates are told apart from messages)".to_string()
        };
        println!(
            " UD: received {} of {total} messages, {lost} lost ({:.2} %){tail}",
            received.min(total),
            lost as f64 * 100.0 / total.max(1) as f64
        );
        if let Some(t) = t0 {
            if completed & (STAMP_STEP - 1) != 0 && completed != total {
                stamps.push(tsc_secs(t, t_last));
            }
        }
    }
    let secs = stamps.last().copied().unwrap_or(0.0);
    Ok(report::bw_stats_sampled(r.o.size, STAMP_STEP, &stamps, completed, secs))
}

/// SEND ping-pong; `ctrl` is watched for the peer's exit while a message is awaited.
pub(super) fn send_lat(r: &mut Run, dv: &mut Dev, ctrl: &mut Ctrl, client: bool) -> R<Vec<f64>> {
    let nq = r.qps.len();
    let off = if r.o.ud { GRH } else { 0 };
    let mut samples = Vec::with_capacity(r.o.iters as usize);
    let mut got = vec![0u64; nq];
    let mut sends_out = 0u64;
    let data_fill = |r: &Run, dv: &mut Dev, q: usize, i: u64| -> R<()> {
        if r.o.verify {
            let p = r.payload(q, i);
            dv.write_mem(r.tslot(q, i), &p)?;
        }
        Ok(())
    };
    // work requests reused (post_*_ref: no allocation per message); TSC time stamps
    let (mut wr, mut rwr) = (request(r, 0, 0, 0), RecvWr::new(0));
    let mut last = Stall::new(r.o.timeout);
    for i in 0..r.o.iters {
        let q = (i % nq as u64) as usize;
        let t = droce_dpdk::rdtsc();
        if client {
            data_fill(r, dv, q, i)?;
            request_into(r, q, i, 0, &mut wr);
            dv.post_send_ref(r.qps[q].h, &wr)?;
            sends_out += 1;
        }
        // wait for the receive of iteration i (and reap send completions on the way)
        last.reset();
        loop {
            if dv.progress() {
                last.reset();
            }
            let mut recvd = false;
            while let Some(wc) = dv.poll_cq(r.cq)? {
                check_wc(r.side, &wc)?;
                last.reset();
                if wc.opcode != WcOpcode::Recv {
                    sends_out -= 1;
                    continue;
                }
                let (wq, k) = (wr_q(wc.wr_id), wr_i(wc.wr_id));
                if r.o.verify {
                    r.check(dv, r.rslot(wq, k) + off, wq, got[wq] * nq as u64 + wq as u64, "message")?;
                }
                got[wq] += 1;
                post_recv_with(r, dv, wq, k, &mut rwr)?;
                recvd = true;
            }
            if recvd {
                break;
            }
            if ctrl.peer_closed() {
                return Err(format!("{}: the peer closed the control connection in iteration {i}: it exited or failed", r.side));
            }
            if last.expired() {
                return Err(format!("timed out after {:?} at {} in iteration {i}{}", r.o.timeout, r.side, dv.stall_cause()));
            }
        }
        if !client {
            data_fill(r, dv, q, i)?;
            request_into(r, q, i, 0, &mut wr);
            dv.post_send_ref(r.qps[q].h, &wr)?;
            sends_out += 1;
        } else {
            samples.push(tsc_secs(t, droce_dpdk::rdtsc()) * 1e6 / 2.0);
        }
        while sends_out >= r.tx_slots {
            let wc = dv.wait_wc(r.cq, r.o.timeout, "a send completion")?;
            check_wc(r.side, &wc)?;
            if wc.opcode == WcOpcode::Recv {
                return Err(format!("{}: unexpected extra message", r.side));
            }
            sends_out -= 1;
        }
    }
    drain_sends(r, dv, sends_out)?;
    Ok(samples)
}

pub(super) fn drain_sends(r: &Run, dv: &mut Dev, mut n: u64) -> R<()> {
    while n > 0 {
        let wc = dv.wait_wc(r.cq, r.o.timeout, "the last send completions")?;
        check_wc(r.side, &wc)?;
        if wc.opcode != WcOpcode::Recv {
            n -= 1;
        }
    }
    Ok(())
}

/// WRITE ping-pong (each side polls the last byte of its slot); `ctrl` is watched for the
/// peer's exit while a WRITE is awaited.
pub(super) fn write_lat(r: &mut Run, dv: &mut Dev, ctrl: &mut Ctrl, client: bool) -> R<Vec<f64>> {
    if r.o.progress == Progress::Thread {
        dv.start_thread()?;
    }
    let nq = r.qps.len();
    let mut samples = Vec::with_capacity(r.o.iters as usize);
    let mut out = 0u64;
    let size = r.o.size as usize;
    // one work request reused (post_send_ref: no allocation per message)
    let mut wr = request(r, 0, 0, 0);
    let post = |r: &Run, dv: &mut Dev, q: usize, i: u64, wr: &mut SendWr| -> R<()> {
        if r.o.verify {
            let p = r.payload(q, i);
            dv.write_mem(r.tslot(q, 0), &p)?;
        } else {
            dv.write_mem(r.tslot(q, 0) + size as u64 - 1, &[marker(i)])?;
        }
        request_into(r, q, 0, 0, wr);
        wr.wr_id = wrid(q, i);
        dv.post_send_ref(r.qps[q].h, wr)
    };
    let mut last = Stall::new(r.o.timeout);
    for i in 0..r.o.iters {
        let q = (i % nq as u64) as usize;
        let t = droce_dpdk::rdtsc();
        if client {
            post(r, dv, q, i, &mut wr)?;
            out += 1;
        }
        // wait for the peer's WRITE i to land in our slot
        let want = marker(i);
        let at = r.rslot(q, 0) + size as u64 - 1;
        last.reset();
        let mut b = [0u8; 1];
        loop {
            if dv.progress() {
                last.reset();
            }
            dv.read_mem(at, &mut b)?;
            if b[0] == want {
                break;
            }
            while let Some(wc) = dv.poll_cq(r.cq)? {
                check_wc(r.side, &wc)?;
                out -= 1;
                last.reset();
            }
            if ctrl.peer_closed() {
                return Err(format!("the peer closed the control connection before WRITE {i}: it exited or failed"));
            }
            if last.expired() {
                return Err(format!("timed out after {:?} at {} waiting for WRITE {i}{}", r.o.timeout, r.side, dv.stall_cause()));
            }
        }
        if r.o.verify {
            r.check(dv, r.rslot(q, 0), q, i, "WRITE")?;
        }
        if client {
            samples.push(tsc_secs(t, droce_dpdk::rdtsc()) * 1e6 / 2.0);
        } else {
            post(r, dv, q, i, &mut wr)?;
            out += 1;
        }
        while out >= 8 {
            let wc = dv.wait_wc(r.cq, r.o.timeout, "a WRITE completion")?;
            check_wc(r.side, &wc)?;
            out -= 1;
        }
    }
    drain_sends(r, dv, out)?;
    // No closing exchange in write_lat (ib_write_lat has none: both sides just exit), so the
    // peer's last WRITE is acknowledged only while this side still polls. If that ACK is lost,
    // the peer resends its WRITE one local ACK timeout later (4.096 us x 2^-u, the same -u on
    // both sides as perftest's users give it): stay for two of them (a lost resend's ACK too),
    // at least 200 ms. The client left after 200 ms and the server at once: with -u 17 (0.54 s
    // per timeout) the other side ended in RETRY_EXC_ERR whenever that last ACK was lost.
    let ack_timeout = Duration::from_nanos(4096u64 << r.o.qp_timeout.min(31));
    let linger = (ack_timeout * 5 / 2).max(Duration::from_millis(200));
    let t = Instant::now();
    while t.elapsed() < linger {
        dv.progress();
    }
    Ok(samples)
}

pub(super) fn read_atomic_lat(r: &mut Run, dv: &mut Dev) -> R<Vec<f64>> {
    if r.o.progress == Progress::Thread {
        dv.start_thread()?;
    }
    let nq = r.qps.len();
    let mut n = vec![0u64; nq];
    let mut samples = Vec::with_capacity(r.o.iters as usize);
    for i in 0..r.o.iters {
        let q = (i % nq as u64) as usize;
        let t = Instant::now();
        let mut wr = request(r, q, i, n[q]);
        if matches!(r.o.test, Test::ReadLat) {
            wr.remote_addr = r.raddr(q, i);
        }
        dv.post_send(r.qps[q].h, wr)?;
        let wc = dv.wait_wc(r.cq, r.o.timeout, "a READ/atomic completion")?;
        check_wc(r.side, &wc)?;
        samples.push(t.elapsed().as_secs_f64() * 1e6);
        if r.o.verify {
            check_response(r, dv, q, i, n[q])?;
        }
        n[q] += 1;
    }
    Ok(samples)
}

/// Server-side checks after the client's test: the WRITE targets hold the last message of
/// each slot; atomic targets hold the number of operations.
pub(super) fn verify_server(r: &Run, dv: &mut Dev, iters: u64, lat: bool) -> R<()> {
    let nq = r.qps.len() as u64;
    for q in 0..r.qps.len() {
        match r.o.test {
            Test::WriteBw => {
                for k in 0..r.nslots.min(iters) {
                    let last = k + (iters - 1 - k) / r.nslots * r.nslots;
                    r.check(dv, r.rslot(q, k), q, last, "WRITE")?;
                }
            }
            Test::AtomicBw | Test::AtomicLat => {
                let ops = if lat { iters / nq + u64::from((q as u64) < iters % nq) } else { iters };
                let mut v = [0u8; 8];
                dv.read_mem(r.rslot(q, 0), &mut v)?;
                let got = u64::from_ne_bytes(v);
                if got != ops {
                    return Err(format!("verify failed at server: atomic target of QP {q} is {got}, expected {ops}"));
                }
            }
            _ => {}
        }
    }
    println!(" Data check at server: OK");
    Ok(())
}
