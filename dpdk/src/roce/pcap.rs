//! Classic pcap writer (libpcap format 2.4, microsecond timestamps, LINKTYPE_ETHERNET), read
//! by `tshark`, `tcpdump` and `droce-dump`.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// Appends frames to a pcap file; buffered, flushed on `flush` and on drop.
#[derive(Debug)]
pub struct PcapWriter {
    out: BufWriter<File>,
    /// Wall-clock time (ns since the epoch) that corresponds to engine time 0.
    epoch_ns: u64,
    frames: u64,
}

pub const SNAPLEN: u32 = 65535;

impl PcapWriter {
    /// Create (truncate) `path` and write the global header. `now_ns` is the engine's current
    /// time, used to map engine time to wall-clock timestamps.
    pub fn create(path: &Path, now_ns: u64) -> io::Result<PcapWriter> {
        let mut out = BufWriter::with_capacity(1 << 16, File::create(path)?);
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        h[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
        h[20..24].copy_from_slice(&1u32.to_le_bytes());
        out.write_all(&h)?;
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
        Ok(PcapWriter { out, epoch_ns: wall.saturating_sub(now_ns), frames: 0 })
    }

    /// Write one frame seen at engine time `now_ns`.
    pub fn write(&mut self, now_ns: u64, frame: &[u8]) -> io::Result<()> {
        let t = self.epoch_ns.saturating_add(now_ns);
        let incl = frame.len().min(SNAPLEN as usize);
        let mut r = [0u8; 16];
        r[0..4].copy_from_slice(&((t / 1_000_000_000) as u32).to_le_bytes());
        r[4..8].copy_from_slice(&(((t % 1_000_000_000) / 1000) as u32).to_le_bytes());
        r[8..12].copy_from_slice(&(incl as u32).to_le_bytes());
        r[12..16].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        self.out.write_all(&r)?;
        self.out.write_all(&frame[..incl])?;
        self.frames += 1;
        Ok(())
    }

    pub fn frames(&self) -> u64 {
        self.frames
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

impl Drop for PcapWriter {
    fn drop(&mut self) {
        let _ = self.out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_reader_reads_it() {
        let p = std::env::temp_dir().join(format!("droce-pcapw-{}.pcap", std::process::id()));
        {
            let mut w = PcapWriter::create(&p, 1_000).unwrap();
            w.write(1_000, &[1u8; 60]).unwrap();
            w.write(2_500_000, &[2u8; 100]).unwrap();
            assert_eq!(w.frames(), 2);
        }
        let bytes = std::fs::read(&p).unwrap();
        let _ = std::fs::remove_file(&p);
        let frames = droce_transport::pcap::read(&bytes).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].data, &[1u8; 60][..]);
        assert_eq!(frames[1].data.len(), 100);
        assert_eq!(frames[0].linktype, droce_transport::pcap::LINKTYPE_ETHERNET);
        let dt = frames[1].timestamp_ns - frames[0].timestamp_ns;
        assert!((2_498_000..=2_500_000).contains(&dt), "µs resolution: {dt}");
    }
}
