//! TCP exchange codecs: perftest 4.5 (version, sys data, MTU code, 108-byte key message,
//! bw reports) and rdma-core's ibv_*_pingpong 52-byte address message (docs/interop.md).

use droce_transport::Gid;

/// perftest's exchanged version string (tag v4.5-0.17 announces "6.06"), 16 bytes zero padded.
pub const PERFTEST_VERSION: &str = "6.06";
pub const VERSION_LEN: usize = 16;
/// `KEY_PRINT_FMT_GID`: 107 characters and the NUL.
pub const KEY_MSG_LEN: usize = 108;
/// `"%04x:%06x:%06x:%s"` with a 32-digit GID, plus the NUL.
pub const PP_MSG_LEN: usize = 52;
/// perftest and the pingpongs: `write("done", 5)`.
pub const DONE: &[u8; 5] = b"done\0";

pub fn version_msg() -> [u8; VERSION_LEN] {
    let mut m = [0u8; VERSION_LEN];
    m[..PERFTEST_VERSION.len()].copy_from_slice(PERFTEST_VERSION.as_bytes());
    m
}

/// What a droce-pmd peer runs, carried in the version message after perftest's NUL (perftest
/// reads the string with `atof` and never looks past it): `'D'`, the test's index in
/// [`super::opts::TESTS`] as a letter, `'R'`/`'U'`, the atomic op `'F'`/`'C'`, and the
/// message size (32 bits, big endian). Two droce-pmd processes running different tests then
/// both stop at the first exchange with one clear error, where perftest pairs would run on
/// (a `write_bw` server and a `read_bw` client both ended with status 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerMode {
    pub test: u8,
    pub ud: bool,
    pub cmp_swap: bool,
    pub size: u32,
}

const MODE_AT: usize = PERFTEST_VERSION.len() + 1;

pub fn version_msg_with_mode(mode: PeerMode) -> [u8; VERSION_LEN] {
    let mut m = version_msg();
    m[MODE_AT] = b'D';
    m[MODE_AT + 1] = b'a' + mode.test;
    m[MODE_AT + 2] = if mode.ud { b'U' } else { b'R' };
    m[MODE_AT + 3] = if mode.cmp_swap { b'C' } else { b'F' };
    m[MODE_AT + 4..MODE_AT + 8].copy_from_slice(&mode.size.to_be_bytes());
    m
}

/// Byte of the version message after the mode: droce transport extensions this side offers,
/// one bit each. perftest sends zeros there and never reads it; a droce-pmd from before the
/// byte existed sends zero too, so an extension is used only when both sides set its bit.
const FEATURES_AT: usize = MODE_AT + 8;

/// Transport extensions a droce-pmd peer offers (docs/selective-repeat.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Features {
    /// Selective repeat on RC QPs (`QpAttr::selective_repeat`).
    pub selective_repeat: bool,
}

impl Features {
    const SELECTIVE_REPEAT: u8 = 1 << 0;

    /// What both sides offer.
    pub fn common(self, other: Features) -> Features {
        Features { selective_repeat: self.selective_repeat && other.selective_repeat }
    }
}

/// [`version_msg_with_mode`] plus the extensions this side offers.
pub fn version_msg_with_features(mode: PeerMode, f: Features) -> [u8; VERSION_LEN] {
    let mut m = version_msg_with_mode(mode);
    m[FEATURES_AT] = if f.selective_repeat { Features::SELECTIVE_REPEAT } else { 0 };
    m
}

/// The two bytes after the features: the QP count (`-q`) and the data check (`--verify`, bit 0),
/// which both sides must agree on: with different `-q` the sides waited for each other's QP
/// keys and messages until `--timeout` ("peer gone?"), and `--verify` on one side only either
/// reported a corruption that was not there (the sender had not written the pattern) or
/// printed "every byte verified" with nothing checked. perftest and a droce-pmd from before
/// these bytes send zeros: not compared.
const SHAPE_AT: usize = FEATURES_AT + 1;

/// What a test's two sides must have alike beyond the [`PeerMode`] (see `SHAPE_AT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// `-q`, 1..=255 (droce-pmd allows up to 64).
    pub qps: u8,
    pub verify: bool,
}

/// [`version_msg_with_features`] plus the [`Shape`].
pub fn version_msg_full(mode: PeerMode, f: Features, shape: Shape) -> [u8; VERSION_LEN] {
    let mut m = version_msg_with_features(mode, f);
    m[SHAPE_AT] = shape.qps;
    m[SHAPE_AT + 1] = shape.verify as u8;
    m
}

/// The peer's [`Shape`]: `None` for perftest or a droce-pmd that does not send it.
pub fn parse_shape(m: &[u8]) -> Option<Shape> {
    parse_mode(m)?;
    let qps = *m.get(SHAPE_AT).filter(|&&q| q != 0)?;
    Some(Shape { qps, verify: m.get(SHAPE_AT + 1).copied().unwrap_or(0) & 1 != 0 })
}

/// The extensions a peer offers: none for perftest or an older droce-pmd.
pub fn parse_features(m: &[u8]) -> Features {
    if parse_mode(m).is_none() {
        return Features::default();
    }
    let b = m.get(FEATURES_AT).copied().unwrap_or(0);
    Features { selective_repeat: b & Features::SELECTIVE_REPEAT != 0 }
}

/// The mode of a droce-pmd peer; `None` for perftest (zeros after the version).
pub fn parse_mode(m: &[u8]) -> Option<PeerMode> {
    let t = m.get(MODE_AT..MODE_AT + 8)?;
    if t[0] != b'D' || !(b'a'..=b'z').contains(&t[1]) {
        return None;
    }
    Some(PeerMode { test: t[1] - b'a', ud: t[2] == b'U', cmp_swap: t[3] == b'C', size: u32::from_be_bytes([t[4], t[5], t[6], t[7]]) })
}

/// The peer's version as a number (`atof`), from its 16-byte message.
pub fn parse_version(m: &[u8]) -> Option<f64> {
    let end = m.iter().position(|&b| b == 0).unwrap_or(m.len());
    let s = std::str::from_utf8(&m[..end]).ok()?;
    // atof: the longest numeric prefix
    let n = s.char_indices().take_while(|(_, c)| c.is_ascii_digit() || *c == '.').count();
    s[..n].parse().ok()
}

/// IB MTU code (`enum ibv_mtu`) of a byte MTU.
pub fn mtu_code(bytes: u32) -> Option<u8> {
    match bytes {
        256 => Some(1),
        512 => Some(2),
        1024 => Some(3),
        2048 => Some(4),
        4096 => Some(5),
        _ => None,
    }
}

pub fn mtu_bytes(code: u8) -> Option<u32> {
    (1..=5).contains(&code).then(|| 128u32 << code)
}

/// `check_mtu`'s 2-byte message: the code as a decimal digit and its NUL.
pub fn mtu_msg(code: u8) -> [u8; 2] {
    [b'0' + code, 0]
}

pub fn parse_mtu_msg(m: &[u8]) -> Option<u8> {
    let end = m.iter().position(|&b| b == 0).unwrap_or(m.len());
    std::str::from_utf8(&m[..end]).ok()?.trim().parse::<u8>().ok().filter(|c| (1..=5).contains(c))
}

/// perftest's per-QP key message (`struct pingpong_dest` on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyMsg {
    pub lid: u16,
    pub out_reads: u16,
    pub qpn: u32,
    pub psn: u32,
    pub rkey: u32,
    pub vaddr: u64,
    pub gid: Gid,
    pub srqn: u32,
}

impl KeyMsg {
    pub fn encode(&self) -> [u8; KEY_MSG_LEN] {
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid,
            self.out_reads,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.rkey,
            self.vaddr
        );
        for b in self.gid.0 {
            s.push_str(&format!("{b:02x}:"));
        }
        s.push_str(&format!("{:08x}:", self.srqn));
        debug_assert_eq!(s.len(), KEY_MSG_LEN - 1);
        let mut m = [0u8; KEY_MSG_LEN];
        m[..s.len()].copy_from_slice(s.as_bytes());
        m
    }

    pub fn decode(m: &[u8]) -> Result<KeyMsg, String> {
        let end = m.iter().position(|&b| b == 0).unwrap_or(m.len());
        let s = std::str::from_utf8(&m[..end]).map_err(|_| "key message is not ASCII".to_string())?;
        let f: Vec<&str> = s.split(':').collect();
        if f.len() < 22 {
            return Err(format!("key message has {} fields, expected 23 (with GID): {s:?}", f.len()));
        }
        let hex = |i: usize| u64::from_str_radix(f[i], 16).map_err(|_| format!("key message field {i} {:?} is not hex", f[i]));
        let mut gid = [0u8; 16];
        for (k, g) in gid.iter_mut().enumerate() {
            *g = hex(6 + k)? as u8;
        }
        Ok(KeyMsg {
            lid: hex(0)? as u16,
            out_reads: hex(1)? as u16,
            qpn: hex(2)? as u32,
            psn: hex(3)? as u32,
            rkey: hex(4)? as u32,
            vaddr: hex(5)?,
            gid: Gid(gid),
            srqn: if f.len() > 22 && !f[22].is_empty() { hex(22)? as u32 } else { 0 },
        })
    }
}

/// The ibv_*_pingpong address message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PpMsg {
    pub lid: u16,
    pub qpn: u32,
    pub psn: u32,
    pub gid: Gid,
}

impl PpMsg {
    pub fn encode(&self) -> [u8; PP_MSG_LEN] {
        let mut s = format!("{:04x}:{:06x}:{:06x}:", self.lid, self.qpn & 0xff_ffff, self.psn & 0xff_ffff);
        for b in self.gid.0 {
            s.push_str(&format!("{b:02x}"));
        }
        let mut m = [0u8; PP_MSG_LEN];
        m[..s.len()].copy_from_slice(s.as_bytes());
        m
    }

    pub fn decode(m: &[u8]) -> Result<PpMsg, String> {
        let end = m.iter().position(|&b| b == 0).unwrap_or(m.len());
        let s = std::str::from_utf8(&m[..end]).map_err(|_| "pingpong message is not ASCII".to_string())?;
        let f: Vec<&str> = s.splitn(4, ':').collect();
        if f.len() != 4 || f[3].len() != 32 {
            return Err(format!("malformed pingpong address message {s:?}"));
        }
        let hex = |t: &str| u32::from_str_radix(t, 16).map_err(|_| format!("pingpong message field {t:?} is not hex"));
        let mut gid = [0u8; 16];
        for (k, g) in gid.iter_mut().enumerate() {
            *g = u8::from_str_radix(&f[3][2 * k..2 * k + 2], 16).map_err(|_| format!("bad GID in {s:?}"))?;
        }
        Ok(PpMsg { lid: hex(f[0])? as u16, qpn: hex(f[1])?, psn: hex(f[2])?, gid: Gid(gid) })
    }
}

/// `xchg_bw_reports` payload (remote ≥ 5.33): size, iters (8 bytes each), peak, avg, msg rate
/// (doubles swapped as 64-bit integers), all network order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BwReport {
    pub size: u64,
    pub iters: u64,
    pub bw_peak: f64,
    pub bw_avg: f64,
    pub msg_rate: f64,
}

impl BwReport {
    pub fn parts(&self) -> [[u8; 8]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_bits().to_be_bytes(),
            self.bw_avg.to_bits().to_be_bytes(),
            self.msg_rate.to_bits().to_be_bytes(),
        ]
    }
    pub fn from_parts(p: &[[u8; 8]; 5]) -> BwReport {
        BwReport {
            size: u64::from_be_bytes(p[0]),
            iters: u64::from_be_bytes(p[1]),
            bw_peak: f64::from_bits(u64::from_be_bytes(p[2])),
            bw_avg: f64::from_bits(u64::from_be_bytes(p[3])),
            msg_rate: f64::from_bits(u64::from_be_bytes(p[4])),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn pingpong_message_matches_capture_a1() {
        // docs/interop.md (A1): the client's message, NUL included
        let want = b"0000:000023:735b2c:00000000000000000000ffffc0a84d0b\0";
        assert_eq!(want.len(), PP_MSG_LEN);
        let m = PpMsg { lid: 0, qpn: 0x23, psn: 0x735b2c, gid: Gid::from_ipv4(Ipv4Addr::new(192, 168, 77, 11)) };
        assert_eq!(&m.encode(), want);
        assert_eq!(PpMsg::decode(want).unwrap(), m);
        assert!(PpMsg::decode(b"0000:000023:zz5b2c:00000000000000000000ffffc0a84d0b\0").is_err());
        assert!(PpMsg::decode(b"0000:000023\0").is_err());
    }

    #[test]
    fn key_message_is_108_bytes_like_perftest() {
        let m = KeyMsg {
            lid: 0,
            out_reads: 0x80,
            qpn: 0x11,
            psn: 0x3b7e5a,
            rkey: 0x204,
            vaddr: 0x7f5d0b1e0000,
            gid: Gid::from_ipv4(Ipv4Addr::new(192, 168, 77, 10)),
            srqn: 0,
        };
        let want = b"0000:0080:000011:3b7e5a:00000204:00007f5d0b1e0000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:a8:4d:0a:00000000:\0";
        assert_eq!(want.len(), KEY_MSG_LEN);
        assert_eq!(&m.encode()[..], &want[..]);
        assert_eq!(KeyMsg::decode(want).unwrap(), m);
        assert!(KeyMsg::decode(b"0000:0001:000011\0").is_err());
    }

    #[test]
    fn mode_rides_behind_the_version() {
        let mode = PeerMode { test: 3, ud: false, cmp_swap: false, size: 65536 };
        let m = version_msg_with_mode(mode);
        assert_eq!(&m[..5], b"6.06\0", "perftest still reads 6.06");
        assert_eq!(parse_version(&m), Some(6.06));
        assert_eq!(parse_mode(&m), Some(mode));
        assert_eq!(parse_mode(&version_msg()), None, "perftest's message carries no mode");
        let ud = PeerMode { test: 9, ud: true, cmp_swap: true, size: 1 << 30 };
        assert_eq!(parse_mode(&version_msg_with_mode(ud)), Some(ud));
    }

    #[test]
    fn features_ride_behind_the_mode_and_need_both_sides() {
        let mode = PeerMode { test: 3, ud: false, cmp_swap: false, size: 65536 };
        let sr = Features { selective_repeat: true };
        let m = version_msg_with_features(mode, sr);
        assert_eq!(&m[..5], b"6.06\0", "perftest still reads 6.06");
        assert_eq!(parse_mode(&m), Some(mode), "the mode is unchanged, so an older droce-pmd accepts it");
        assert_eq!(parse_features(&m), sr);
        assert_eq!(m[FEATURES_AT], 1);
        // perftest and an older droce-pmd offer nothing
        assert_eq!(parse_features(&version_msg()), Features::default());
        assert_eq!(parse_features(&version_msg_with_mode(mode)), Features::default());
        // perftest's message with a stray byte there is still perftest's
        let mut p = version_msg();
        p[FEATURES_AT] = 1;
        assert_eq!(parse_features(&p), Features::default());
        let off = parse_features(&version_msg_with_features(mode, Features::default()));
        assert_eq!((sr.common(sr), sr.common(off), off.common(sr)), (sr, off, off));
    }

    #[test]
    fn shape_rides_behind_the_features() {
        let mode = PeerMode { test: 3, ud: false, cmp_swap: false, size: 65536 };
        let sr = Features { selective_repeat: true };
        let shape = Shape { qps: 64, verify: true };
        let m = version_msg_full(mode, sr, shape);
        assert_eq!(&m[..5], b"6.06\0", "perftest still reads 6.06");
        assert_eq!((parse_mode(&m), parse_features(&m), parse_shape(&m)), (Some(mode), sr, Some(shape)));
        let plain = Shape { qps: 1, verify: false };
        assert_eq!(parse_shape(&version_msg_full(mode, sr, plain)), Some(plain));
        // perftest and an older droce-pmd: nothing to compare
        assert_eq!(parse_shape(&version_msg()), None);
        assert_eq!(parse_shape(&version_msg_with_features(mode, sr)), None);
        let mut p = version_msg();
        p[SHAPE_AT] = 2;
        assert_eq!(parse_shape(&p), None, "perftest's message with a stray byte there is still perftest's");
    }

    #[test]
    fn version_sys_and_mtu_messages() {
        let v = version_msg();
        assert_eq!(&v[..5], b"6.06\0");
        assert!(v[4..].iter().all(|&b| b == 0));
        assert_eq!(parse_version(&v), Some(6.06));
        assert_eq!(parse_version(b"5.70\0\0\0\0\0\0\0\0\0\0\0\0"), Some(5.70));
        assert_eq!(mtu_msg(3), *b"3\0");
        assert_eq!(parse_mtu_msg(b"5\0"), Some(5));
        assert_eq!(parse_mtu_msg(b"9\0"), None);
        assert_eq!((mtu_code(1024), mtu_code(4096), mtu_code(1500)), (Some(3), Some(5), None));
        assert_eq!((mtu_bytes(1), mtu_bytes(5), mtu_bytes(6)), (Some(256), Some(4096), None));
    }

    #[test]
    fn bw_report_round_trip_network_order() {
        let r = BwReport { size: 65536, iters: 5000, bw_peak: 1042.3, bw_avg: 1041.72, msg_rate: 0.016668 };
        let p = r.parts();
        assert_eq!(p[0], [0, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(p[1], 5000u64.to_be_bytes());
        assert_eq!(p[2], 1042.3f64.to_bits().to_be_bytes());
        assert_eq!(BwReport::from_parts(&p), r);
    }
}
