//! Reading pcap and pcapng captures from memory (no I/O here, no libpcap).
//!
//! Classic pcap (both byte orders, micro- and nanosecond timestamps) and pcapng (section
//! header, interface description, enhanced and simple packet blocks; other blocks skipped;
//! both byte orders, several sections). Only what `droce-dump` and the golden tests need.

use core::fmt;

/// Link type of Ethernet captures (LINKTYPE_ETHERNET).
pub const LINKTYPE_ETHERNET: u32 = 1;

/// One captured frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedFrame<'a> {
    /// 1-based frame number, as Wireshark counts.
    pub number: usize,
    /// The captured bytes (possibly fewer than `orig_len`).
    pub data: &'a [u8],
    /// The length of the frame on the wire.
    pub orig_len: u32,
    /// Link type of the interface the frame was captured on.
    pub linktype: u32,
    /// Timestamp in nanoseconds since the epoch (as far as the file's resolution goes).
    pub timestamp_ns: u64,
}

impl CapturedFrame<'_> {
    /// True when the capture holds the whole frame.
    pub fn is_complete(&self) -> bool {
        self.data.len() as u64 >= self.orig_len as u64
    }
}

/// Why a capture file could not be read; `offset` is the byte offset in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PcapError {
    /// Neither a pcap nor a pcapng magic number.
    UnknownFormat,
    /// The file ends in the middle of a header or record.
    Truncated { offset: usize, frame: usize },
    /// A length field that cannot be right.
    Malformed { offset: usize, what: &'static str },
}

impl fmt::Display for PcapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PcapError::UnknownFormat => {
                f.write_str("not a pcap or pcapng file (unknown magic number)")
            }
            PcapError::Truncated { offset, frame } => {
                write!(f, "file truncated at byte {offset} (in frame {frame})")
            }
            PcapError::Malformed { offset, what } => {
                write!(f, "malformed file at byte {offset}: {what}")
            }
        }
    }
}

impl std::error::Error for PcapError {}

/// Which format a capture is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Pcap,
    PcapNg,
}

#[derive(Clone, Copy)]
struct Endian(bool /* big */);

impl Endian {
    fn u16(self, b: &[u8]) -> u16 {
        let a = [b[0], b[1]];
        if self.0 {
            u16::from_be_bytes(a)
        } else {
            u16::from_le_bytes(a)
        }
    }
    fn u32(self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        if self.0 {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        }
    }
}

/// Detects the format from the magic number.
pub fn detect(file: &[u8]) -> Result<Format, PcapError> {
    let m = file.get(..4).ok_or(PcapError::UnknownFormat)?;
    match m {
        [0xd4, 0xc3, 0xb2, 0xa1]
        | [0xa1, 0xb2, 0xc3, 0xd4]
        | [0x4d, 0x3c, 0xb2, 0xa1]
        | [0xa1, 0xb2, 0x3c, 0x4d] => Ok(Format::Pcap),
        [0x0a, 0x0d, 0x0d, 0x0a] => Ok(Format::PcapNg),
        _ => Err(PcapError::UnknownFormat),
    }
}

/// Reads every frame of a pcap or pcapng file held in memory.
pub fn read(file: &[u8]) -> Result<Vec<CapturedFrame<'_>>, PcapError> {
    match read_partial(file) {
        (frames, None) => Ok(frames),
        (_, Some(e)) => Err(e),
    }
}

/// Reads the frames of a pcap or pcapng file up to the first error, and the error if any
/// (so that a tool can show the frames before a truncation).
pub fn read_partial(file: &[u8]) -> (Vec<CapturedFrame<'_>>, Option<PcapError>) {
    let mut frames = Vec::new();
    let r = match detect(file) {
        Ok(Format::Pcap) => read_pcap(file, &mut frames),
        Ok(Format::PcapNg) => read_pcapng(file, &mut frames),
        Err(e) => Err(e),
    };
    (frames, r.err())
}

fn read_pcap<'a>(file: &'a [u8], frames: &mut Vec<CapturedFrame<'a>>) -> Result<(), PcapError> {
    let gh = file.get(..24).ok_or(PcapError::Truncated {
        offset: file.len(),
        frame: 0,
    })?;
    let (e, nanos) = match [gh[0], gh[1], gh[2], gh[3]] {
        [0xd4, 0xc3, 0xb2, 0xa1] => (Endian(false), false),
        [0xa1, 0xb2, 0xc3, 0xd4] => (Endian(true), false),
        [0x4d, 0x3c, 0xb2, 0xa1] => (Endian(false), true),
        _ => (Endian(true), true),
    };
    let snaplen = e.u32(&gh[16..20]);
    let linktype = e.u32(&gh[20..24]) & 0x0fff_ffff;
    let mut off = 24;
    while off < file.len() {
        let number = frames.len() + 1;
        let rh = file.get(off..off + 16).ok_or(PcapError::Truncated {
            offset: file.len(),
            frame: number,
        })?;
        let sec = e.u32(&rh[0..4]) as u64;
        let frac = e.u32(&rh[4..8]) as u64;
        let incl = e.u32(&rh[8..12]) as usize;
        let orig_len = e.u32(&rh[12..16]);
        // Tolerate files whose snaplen field is 0 or too small; cap at 256 KiB like Wireshark.
        if incl > (snaplen as usize).max(262_144) {
            return Err(PcapError::Malformed {
                offset: off + 8,
                what: "captured length larger than the snapshot length",
            });
        }
        let start = off + 16;
        let data = file.get(start..start + incl).ok_or(PcapError::Truncated {
            offset: file.len(),
            frame: number,
        })?;
        let timestamp_ns = sec * 1_000_000_000 + if nanos { frac } else { frac * 1000 };
        frames.push(CapturedFrame {
            number,
            data,
            orig_len,
            linktype,
            timestamp_ns,
        });
        off = start + incl;
    }
    Ok(())
}

fn read_pcapng<'a>(file: &'a [u8], frames: &mut Vec<CapturedFrame<'a>>) -> Result<(), PcapError> {
    let mut off = 0;
    let mut e = Endian(false);
    // (linktype, nanoseconds per timestamp unit) per interface of the current section.
    let mut ifaces: Vec<(u32, u64)> = Vec::new();
    while off < file.len() {
        let number = frames.len() + 1;
        let trunc = PcapError::Truncated {
            offset: file.len(),
            frame: number,
        };
        let bh = file.get(off..off + 12).ok_or(trunc.clone())?;
        let btype_raw = &bh[0..4];
        if btype_raw == [0x0a, 0x0d, 0x0d, 0x0a] {
            // Section header: the byte-order magic decides the endianness of the section.
            e = match &bh[8..12] {
                [0x1a, 0x2b, 0x3c, 0x4d] => Endian(true),
                [0x4d, 0x3c, 0x2b, 0x1a] => Endian(false),
                _ => {
                    return Err(PcapError::Malformed {
                        offset: off + 8,
                        what: "bad byte-order magic",
                    })
                }
            };
            ifaces.clear();
        }
        let btype = e.u32(btype_raw);
        let blen = e.u32(&bh[4..8]) as usize;
        if blen < 12 || blen & 3 != 0 {
            return Err(PcapError::Malformed {
                offset: off + 4,
                what: "bad block length",
            });
        }
        let block = file.get(off..off + blen).ok_or(trunc.clone())?;
        if e.u32(&block[blen - 4..]) as usize != blen {
            return Err(PcapError::Malformed {
                offset: off + blen - 4,
                what: "trailing block length differs",
            });
        }
        let body = &block[8..blen - 4];
        match btype {
            // Interface Description Block.
            0x0000_0001 => {
                if body.len() < 8 {
                    return Err(PcapError::Malformed {
                        offset: off,
                        what: "short interface block",
                    });
                }
                let linktype = e.u16(&body[0..2]) as u32;
                let mut unit_ns = 1000; // default resolution: microseconds
                let mut o = 8;
                while o + 4 <= body.len() {
                    let code = e.u16(&body[o..o + 2]);
                    let len = e.u16(&body[o + 2..o + 4]) as usize;
                    if code == 0 {
                        break;
                    }
                    let v = body.get(o + 4..o + 4 + len).ok_or(PcapError::Malformed {
                        offset: off + 8 + o,
                        what: "option runs past its block",
                    })?;
                    if code == 9 && len == 1 {
                        // if_tsresol: 10^-n or 2^-n seconds.
                        let r = v[0];
                        unit_ns = if r & 0x80 == 0 {
                            match r {
                                0..=9 => 10u64.pow(9 - r as u32),
                                _ => 1,
                            }
                        } else {
                            let n = (r & 0x7f) as u32;
                            if n >= 30 { 1 } else { 1_000_000_000 >> n }.max(1)
                        };
                    }
                    o += 4 + len.div_ceil(4) * 4;
                }
                ifaces.push((linktype, unit_ns));
            }
            // Enhanced Packet Block.
            0x0000_0006 => {
                if body.len() < 20 {
                    return Err(PcapError::Malformed {
                        offset: off,
                        what: "short enhanced packet block",
                    });
                }
                let ifid = e.u32(&body[0..4]) as usize;
                let &(linktype, unit_ns) = ifaces.get(ifid).ok_or(PcapError::Malformed {
                    offset: off + 8,
                    what: "packet on an undeclared interface",
                })?;
                let ts = ((e.u32(&body[4..8]) as u64) << 32) | e.u32(&body[8..12]) as u64;
                let caplen = e.u32(&body[12..16]) as usize;
                let orig_len = e.u32(&body[16..20]);
                let data = body.get(20..20 + caplen).ok_or(PcapError::Malformed {
                    offset: off + 20,
                    what: "captured length runs past its block",
                })?;
                frames.push(CapturedFrame {
                    number,
                    data,
                    orig_len,
                    linktype,
                    timestamp_ns: ts.saturating_mul(unit_ns),
                });
            }
            // Simple Packet Block: interface 0, no timestamp.
            0x0000_0003 => {
                if body.len() < 4 {
                    return Err(PcapError::Malformed {
                        offset: off,
                        what: "short simple packet block",
                    });
                }
                let &(linktype, _) = ifaces.first().ok_or(PcapError::Malformed {
                    offset: off,
                    what: "packet before any interface",
                })?;
                let orig_len = e.u32(&body[0..4]);
                let caplen = (orig_len as usize).min(body.len() - 4);
                frames.push(CapturedFrame {
                    number,
                    data: &body[4..4 + caplen],
                    orig_len,
                    linktype,
                    timestamp_ns: 0,
                });
            }
            _ => {}
        }
        off += blen;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pcap(records: &[&[u8]]) -> Vec<u8> {
        let mut f = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        f.extend_from_slice(&65535u32.to_le_bytes());
        f.extend_from_slice(&1u32.to_le_bytes());
        for (i, r) in records.iter().enumerate() {
            f.extend_from_slice(&(i as u32).to_le_bytes());
            f.extend_from_slice(&5u32.to_le_bytes());
            f.extend_from_slice(&(r.len() as u32).to_le_bytes());
            f.extend_from_slice(&(r.len() as u32).to_le_bytes());
            f.extend_from_slice(r);
        }
        f
    }

    #[test]
    fn classic_pcap() {
        let f = pcap(&[b"abc", b"", b"defgh"]);
        let fr = read(&f).unwrap();
        assert_eq!(fr.len(), 3);
        assert_eq!(fr[2].data, b"defgh");
        assert_eq!(fr[2].number, 3);
        assert_eq!(fr[1].timestamp_ns, 1_000_005_000);
        for n in 1..f.len() {
            if n == 24 || n == 24 + 16 + 3 || n == 24 + 16 + 3 + 16 {
                continue; // record boundaries: valid shorter files
            }
            assert!(read(&f[..n]).is_err(), "{n}");
        }
        assert_eq!(read(b"garbage!"), Err(PcapError::UnknownFormat));
        let (part, err) = read_partial(&f[..f.len() - 1]);
        assert_eq!(part.len(), 2);
        assert_eq!(
            err,
            Some(PcapError::Truncated {
                offset: f.len() - 1,
                frame: 3
            })
        );
    }

    fn block(t: u32, body: &[u8]) -> Vec<u8> {
        let len = 12 + body.len().div_ceil(4) * 4;
        let mut b = t.to_le_bytes().to_vec();
        b.extend_from_slice(&(len as u32).to_le_bytes());
        b.extend_from_slice(body);
        b.resize(len - 4, 0);
        b.extend_from_slice(&(len as u32).to_le_bytes());
        b
    }

    #[test]
    fn pcapng() {
        let mut f = block(
            0x0a0d0d0a,
            &[
                0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            ],
        );
        let mut idb = vec![1, 0, 0, 0, 0, 0, 0, 0];
        idb.extend_from_slice(&[9, 0, 1, 0, 9, 0, 0, 0, 0, 0, 0, 0]); // if_tsresol = 9 (ns)
        f.extend(block(1, &idb));
        let mut epb = vec![0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0];
        epb.extend_from_slice(b"xyz");
        f.extend(block(6, &epb));
        f.extend(block(5, b"stat")); // skipped
        let fr = read(&f).unwrap();
        assert_eq!(fr.len(), 1);
        assert_eq!(fr[0].data, b"xyz");
        assert_eq!(fr[0].timestamp_ns, 7);
        assert_eq!(fr[0].linktype, 1);
        assert!(read(&f[..f.len() - 1]).is_err());
        let mut bad = f.clone();
        bad[4] = 13;
        assert!(read(&bad).is_err());
    }
}
