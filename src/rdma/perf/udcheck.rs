//! --verify for UD messages: each datagram says which message it is.
//!
//! UD is unreliable: a datagram may be lost (or, with injected faults, duplicated or reordered)
//! and nothing resends it, so the receiver cannot expect message `i` to be the `i`-th one that
//! arrives. Each UD message therefore starts with its sequence number (little endian, the first
//! `min(8, size)` bytes), and the rest is the data pattern of that number. The receiver reads
//! the number, checks every byte of the message against it, and counts the numbers that never
//! came as lost, as perftest reports UD loss rather than corruption. A wrong byte inside a
//! message still fails the check: the number only says which pattern to expect.
//!
//! A message shorter than 8 bytes carries only the low bytes of its number; the receiver takes
//! the number nearest to the next one it expects (serial-number arithmetic), which is right as
//! long as fewer than half the number space (128 messages at 1 byte) is lost or reordered in a row.

use super::report::pattern_byte;

/// Bytes of the sequence number at the start of a UD message.
pub const SEQ_BYTES: usize = 8;

/// Fills `buf` with UD message `seq` of QP `q`.
pub fn fill(buf: &mut [u8], q: usize, seq: u64) {
    let n = buf.len().min(SEQ_BYTES);
    buf[..n].copy_from_slice(&seq.to_le_bytes()[..n]);
    for (i, b) in buf.iter_mut().enumerate().skip(n) {
        *b = pattern_byte(q, seq, i);
    }
}

/// What one received message was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// The first copy of message `seq`.
    New(u64),
    /// Message `seq` again (a duplicated datagram): its data was right, it is not counted twice.
    Duplicate(u64),
}

/// The receiver's record of one QP's UD messages.
pub struct UdCheck {
    q: usize,
    expected: u64,
    /// One bit per message number `0..expected`.
    seen: Vec<u64>,
    received: u64,
    duplicates: u64,
    /// One past the highest number received.
    next: u64,
}

impl UdCheck {
    /// For QP `q`, whose sender sends messages `0..expected`.
    pub fn new(q: usize, expected: u64) -> UdCheck {
        UdCheck { q, expected, seen: vec![0; expected.div_ceil(64) as usize], received: 0, duplicates: 0, next: 0 }
    }

    /// Identifies and checks one received message. An error names the message and the first
    /// wrong byte; a number outside `0..expected` is an error too (a corrupted number).
    pub fn accept(&mut self, msg: &[u8]) -> Result<Seen, String> {
        let n = msg.len().min(SEQ_BYTES);
        let mut b = [0u8; SEQ_BYTES];
        b[..n].copy_from_slice(&msg[..n]);
        let low = u64::from_le_bytes(b);
        let seq = if n == SEQ_BYTES {
            low
        } else if n == 0 {
            self.next
        } else {
            // the number nearest to `next` whose low `8 n` bits are `low`
            let bits = 8 * n as u32;
            let mask = (1u64 << bits) - 1;
            let half = 1u64 << (bits - 1);
            let d = low.wrapping_sub(self.next) & mask;
            if d < half { self.next.wrapping_add(d) } else { self.next.wrapping_add(d).wrapping_sub(mask + 1) }
        };
        if seq >= self.expected {
            return Err(format!(
                "verify failed: UD message on QP {} carries number {seq}, but only 0..{} were sent (bytes 0..{n} are wrong)",
                self.q, self.expected
            ));
        }
        if let Some(off) = (n..msg.len()).find(|&i| msg[i] != pattern_byte(self.q, seq, i)) {
            return Err(format!(
                "verify failed: UD message {seq} on QP {}: byte {off} is {:#04x}, expected {:#04x}",
                self.q,
                msg[off],
                pattern_byte(self.q, seq, off)
            ));
        }
        let (w, bit) = ((seq / 64) as usize, 1u64 << (seq % 64));
        if self.seen[w] & bit != 0 {
            self.duplicates += 1;
            return Ok(Seen::Duplicate(seq));
        }
        self.seen[w] |= bit;
        self.received += 1;
        self.next = self.next.max(seq + 1);
        Ok(Seen::New(seq))
    }

    /// Distinct messages received.
    pub fn received(&self) -> u64 {
        self.received
    }
    /// Messages sent but never received.
    pub fn lost(&self) -> u64 {
        self.expected - self.received
    }
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(q: usize, seq: u64, size: usize) -> Vec<u8> {
        let mut v = vec![0u8; size];
        fill(&mut v, q, seq);
        v
    }

    #[test]
    fn lost_messages_are_counted_not_corruption() {
        let mut c = UdCheck::new(0, 10);
        for s in [0, 1, 2, 5, 6, 9] {
            assert_eq!(c.accept(&msg(0, s, 1024)), Ok(Seen::New(s)));
        }
        assert_eq!((c.received(), c.lost()), (6, 4));
    }

    #[test]
    fn duplicates_and_reordering_are_recognised() {
        let mut c = UdCheck::new(1, 4);
        assert_eq!(c.accept(&msg(1, 1, 100)), Ok(Seen::New(1)));
        assert_eq!(c.accept(&msg(1, 0, 100)), Ok(Seen::New(0)));
        assert_eq!(c.accept(&msg(1, 1, 100)), Ok(Seen::Duplicate(1)));
        assert_eq!(c.accept(&msg(1, 3, 100)), Ok(Seen::New(3)));
        assert_eq!(c.accept(&msg(1, 2, 100)), Ok(Seen::New(2)));
        assert_eq!(c.lost(), 0);
        assert_eq!(c.duplicates(), 1);
    }

    #[test]
    fn a_wrong_byte_in_a_well_formed_message_fails() {
        for (size, off) in [(1024, 1023), (1024, 8), (64, 30), (12, 9)] {
            let mut c = UdCheck::new(0, 100);
            let mut m = msg(0, 7, size);
            m[off] ^= 0x01;
            let e = c.accept(&m).unwrap_err();
            assert!(e.contains(&format!("UD message 7 on QP 0: byte {off}")), "{e}");
            assert_eq!(c.received(), 0);
        }
        // a message of another QP has the other QP's pattern
        let e = UdCheck::new(0, 100).accept(&msg(1, 7, 256)).unwrap_err();
        assert!(e.contains("UD message 7 on QP 0"), "{e}");
    }

    #[test]
    fn a_corrupted_number_fails() {
        let mut c = UdCheck::new(0, 100);
        let mut m = msg(0, 7, 256);
        m[3] = 0x40;
        assert!(c.accept(&m).unwrap_err().contains("only 0..100 were sent"));
        // a number within range but whose data belongs to another message fails on the data
        let mut m = msg(0, 7, 256);
        m[0] = 8;
        assert!(c.accept(&m).unwrap_err().contains("UD message 8 on QP 0: byte"));
    }

    #[test]
    fn short_messages_resolve_their_number_near_the_next_expected() {
        // 1-byte messages: numbers mod 256, losses of up to 127 in a row resolved
        let mut c = UdCheck::new(0, 1000);
        let mut want = vec![];
        let mut s = 0;
        while s < 1000 {
            want.push(s);
            s += 1 + (s % 7) * 17; // gaps of up to 103
        }
        for &s in &want {
            assert_eq!(c.accept(&msg(0, s, 1)), Ok(Seen::New(s)), "message {s}");
        }
        assert_eq!(c.received(), want.len() as u64);
        // a late message below the newest one is still identified
        let mut c = UdCheck::new(0, 1000);
        for s in [300, 302, 301] {
            assert_eq!(c.accept(&msg(0, s, 2)), Ok(Seen::New(s)));
        }
        // a zero-length message carries no number: it is message 0, or the next one
        assert_eq!(UdCheck::new(0, 5).accept(&[]), Ok(Seen::New(0)));
    }
}
