//! Options of the RDMA test modes (perftest / ibv_*_pingpong letters).

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    SendLat,
    SendBw,
    WriteLat,
    WriteBw,
    ReadLat,
    ReadBw,
    AtomicLat,
    AtomicBw,
    RcPingpong,
    UdPingpong,
}

pub const TESTS: &[(&str, Test)] = &[
    ("send_lat", Test::SendLat),
    ("send_bw", Test::SendBw),
    ("write_lat", Test::WriteLat),
    ("write_bw", Test::WriteBw),
    ("read_lat", Test::ReadLat),
    ("read_bw", Test::ReadBw),
    ("atomic_lat", Test::AtomicLat),
    ("atomic_bw", Test::AtomicBw),
    ("rc_pingpong", Test::RcPingpong),
    ("ud_pingpong", Test::UdPingpong),
];

impl Test {
    pub fn lookup(name: &str) -> Option<Test> {
        TESTS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
    }
    pub fn is_lat(self) -> bool {
        matches!(self, Test::SendLat | Test::WriteLat | Test::ReadLat | Test::AtomicLat)
    }
    pub fn is_pingpong(self) -> bool {
        matches!(self, Test::RcPingpong | Test::UdPingpong)
    }
    pub fn title(self) -> &'static str {
        match self {
            Test::SendLat => "Send Latency Test",
            Test::SendBw => "Send BW Test",
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::WriteBw => "RDMA_Write BW Test",
            Test::ReadLat => "RDMA_Read Latency Test",
            Test::ReadBw => "RDMA_Read BW Test",
            Test::AtomicLat => "Atomic FETCH_AND_ADD Latency Test",
            Test::AtomicBw => "Atomic FETCH_AND_ADD BW Test",
            Test::RcPingpong | Test::UdPingpong => "pingpong",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    FetchAdd,
    CmpSwap,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    Manual,
    Thread,
}

#[derive(Debug, Clone)]
pub struct Opts {
    pub test: Test,
    pub size: u64,
    pub iters: u64,
    pub ud: bool,
    /// `-m`: requested path MTU in bytes.
    pub mtu: Option<u32>,
    pub qps: usize,
    pub verify: bool,
    pub ip: Option<Ipv4Addr>,
    pub tcp_port: u16,
    pub atomic: AtomicOp,
    pub server: Option<String>,
    pub progress: Progress,
    pub faults: Option<String>,
    /// Congestion control text (`--cc`), checked at parse time; `None`: the runtime's default (on).
    pub cc: Option<String>,
    pub pcap: Option<PathBuf>,
    pub timeout: Duration,
    /// RC local ACK timeout exponent (perftest `-u/--qp-timeout`): 4.096 µs × 2^N, default 14.
    pub qp_timeout: u8,
    pub tx_depth: Option<usize>,
    pub rx_depth: Option<usize>,
    pub gid_index: u8,
    /// Hidden test flag: the client corrupts the peer's rkey (REM_ACCESS_ERR expected).
    pub bad_rkey: bool,
    /// DPDK port index used (default 0).
    pub port_index: usize,
    pub stats: bool,
    /// Offer selective repeat to the peer (used on RC QPs when a droce-pmd peer offers it too).
    pub selective_repeat: bool,
}

impl Opts {
    fn new(test: Test) -> Opts {
        Opts {
            test,
            size: 0,
            iters: 0,
            ud: test == Test::UdPingpong,
            mtu: None,
            qps: 1,
            verify: false,
            ip: None,
            tcp_port: 18515,
            atomic: AtomicOp::FetchAdd,
            server: None,
            progress: Progress::Manual,
            faults: None,
            cc: None,
            pcap: None,
            timeout: Duration::from_secs(10),
            qp_timeout: 14,
            tx_depth: None,
            rx_depth: None,
            gid_index: 1,
            bad_rkey: false,
            port_index: 0,
            stats: true,
            selective_repeat: true,
        }
    }
    pub fn is_server(&self) -> bool {
        self.server.is_none()
    }
    /// droce's own RoCE address: `--ip`, else 10.77.0.1 (server) / 10.77.0.2 (client), the
    /// embedded memif setup's pair.
    pub fn roce_ip(&self) -> Ipv4Addr {
        self.ip.unwrap_or(if self.is_server() { Ipv4Addr::new(10, 77, 0, 1) } else { Ipv4Addr::new(10, 77, 0, 2) })
    }
}

pub const USAGE: &str = "\
RDMA tests (perftest 4.5 / ibv_*_pingpong compatible TCP exchange):
  droce-pmd [EAL args] -- --test=NAME [options] [SERVER]
  NAME: send_lat send_bw write_lat write_bw read_lat read_bw atomic_lat atomic_bw rc_pingpong ud_pingpong
  without SERVER: server (listens on TCP -p); with SERVER (IPv4 of the peer's TCP): client
  -s SIZE          message size (default 65536 bw, 2 lat, 4096 rc_pingpong, 1024 ud_pingpong)
  -n ITERS         iterations (default 5000 write/read bw, 1000 otherwise)
  -c RC|UD         connection type (UD: send_* only)
  -m MTU           path MTU 256..4096 (4096: Ethernet MTU 9000, 8 KiB mbufs)
  -q QPS           number of QPs, 1-64 (default 1; both sides the same)
  -t DEPTH         TX depth (default 128 bw, 1 lat);  -r DEPTH  RX depth (default 512; 500 pingpong)
  -A OP            atomic op: FETCH_AND_ADD (default) or CMP_AND_SWAP
  -p PORT          TCP port (default 18515)
  -g/-x INDEX      accepted for compatibility (droce uses GID index 1, ::ffff:IP)
  --ip ADDR        droce's own RoCE IPv4 address (GID ::ffff:ADDR); default 10.77.0.1 server, 10.77.0.2 client
  --verify         fill every message with a per-iteration pattern and check every byte
  --progress=manual|thread   poll the device in the test loop (default) or in the runtime's progress thread
  --faults=SPEC    fault injection (test feature), e.g. 'both:drop=0.01,reorder=0.01;seed=3'
  --cc=SPEC        congestion control: on (default: ECN, CNPs, DCQCN), off, or key=value,... e.g.
                   'line_rate=10g,rpg_ai_rate=10' (keys and units: docs/dcqcn.md)
  --pcap FILE      capture RoCE/ARP frames;  --timeout SECS  bound on every wait (default 10)
  -u N             RC local ACK timeout 4.096 µs × 2^N, N 1..31 (default 14; retry_cnt is 7)
  --no-stats       do not print the RoCE statistics block at the end
  --no-selective-repeat  do not offer selective repeat (RC, droce-pmd peers only; default offered)
";

fn num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.parse().map_err(|_| format!("{flag}: '{v}' is not a valid number"))
}

/// Parses the app arguments (after `--`). `Ok(None)`: no `--test=` of ours.
pub fn parse(app: &[String]) -> Result<Option<Opts>, String> {
    let mut name = None;
    let mut i = 0;
    while i < app.len() {
        if let Some(n) = app[i].strip_prefix("--test=") {
            name = Some(n.to_string());
        } else if app[i] == "--test" {
            name = app.get(i + 1).cloned();
        }
        i += 1;
    }
    let Some(name) = name else { return Ok(None) };
    let Some(test) = Test::lookup(&name) else { return Ok(None) };
    let mut o = Opts::new(test);
    let mut i = 0;
    let mut explicit_ud = None;
    while i < app.len() {
        let a = app[i].as_str();
        // --flag=value and -f value / -fvalue
        let (flag, inline): (String, Option<String>) = if let Some(rest) = a.strip_prefix("--") {
            match rest.split_once('=') {
                Some((f, v)) => (format!("--{f}"), Some(v.to_string())),
                None => (a.to_string(), None),
            }
        } else if a.len() > 2 && a.starts_with('-') && !a[1..].starts_with(|c: char| c.is_ascii_digit()) {
            (a[..2].to_string(), Some(a[2..].to_string()))
        } else {
            (a.to_string(), None)
        };
        let takes = |f: &str| {
            matches!(
                f,
                "-s" | "--size"
                    | "-n" | "--iters"
                    | "-c" | "--connection"
                    | "-m" | "--mtu"
                    | "-q" | "--qp"
                    | "--ip" | "-p" | "--port"
                    | "-A" | "--atomic_type"
                    | "--progress" | "--faults" | "--cc" | "--pcap" | "--timeout"
                    | "-u" | "--qp-timeout"
                    | "-t" | "--tx-depth"
                    | "-r" | "--rx-depth"
                    | "-g" | "--gid-idx" | "-x"
                    | "--test" | "--port-index" | "-i" | "-l" | "-d" | "--ib-dev"
            )
        };
        // a known flag without a value given one (`--verify=1`): checked after the flag is
        // known, so that an unknown one with a value (`--tiemout=5`) is named unknown
        let stray_value = inline.is_some() && !takes(&flag);
        let val = if takes(&flag) {
            match inline {
                Some(v) => v,
                None => {
                    i += 1;
                    app.get(i).cloned().ok_or_else(|| format!("{flag} needs a value"))?
                }
            }
        } else {
            if inline.is_some() && !flag.starts_with("--") {
                return Err(format!("unknown option '{a}' for --test={name} (see droce-pmd -- --help)"));
            }
            String::new()
        };
        match flag.as_str() {
            "--test" => {}
            "-s" | "--size" => o.size = num(&flag, &val)?,
            "-n" | "--iters" => o.iters = num(&flag, &val)?,
            "-c" | "--connection" => match val.to_ascii_uppercase().as_str() {
                "RC" => explicit_ud = Some(false),
                "UD" => explicit_ud = Some(true),
                _ => return Err(format!("-c {val}: choose RC or UD")),
            },
            "-m" | "--mtu" => {
                let m: u32 = num(&flag, &val)?;
                if super::exchange::mtu_code(m).is_none() {
                    return Err(format!("-m {m}: the path MTU is one of 256, 512, 1024, 2048, 4096"));
                }
                o.mtu = Some(m);
            }
            "-q" | "--qp" => o.qps = num(&flag, &val)?,
            "--ip" => o.ip = Some(val.parse().map_err(|_| format!("--ip {val}: not an IPv4 address"))?),
            "-p" | "--port" => o.tcp_port = num(&flag, &val)?,
            "-u" | "--qp-timeout" => {
                o.qp_timeout = num(&flag, &val)?;
                if !(1..=31).contains(&o.qp_timeout) {
                    return Err(format!("-u {val}: the ACK timeout exponent is 1..31"));
                }
            }
            "-A" | "--atomic_type" => {
                o.atomic = match val.as_str() {
                    "FETCH_AND_ADD" => AtomicOp::FetchAdd,
                    "CMP_AND_SWAP" => AtomicOp::CmpSwap,
                    _ => return Err(format!("-A {val}: choose FETCH_AND_ADD or CMP_AND_SWAP")),
                }
            }
            "--progress" => {
                o.progress = match val.as_str() {
                    "manual" => Progress::Manual,
                    "thread" => Progress::Thread,
                    _ => return Err(format!("--progress={val}: choose manual or thread")),
                }
            }
            "--faults" => {
                val.parse::<droce_dpdk::roce::FaultConfig>().map_err(|e| format!("--faults={val}: {e}"))?;
                o.faults = Some(val);
            }
            "--cc" => {
                droce_dpdk::runtime::parse_cc(&val).map_err(|e| format!("--cc={val}: {e}"))?;
                o.cc = Some(val);
            }
            "--pcap" => o.pcap = Some(PathBuf::from(val)),
            "--timeout" => {
                let s: f64 = num(&flag, &val)?;
                if !(s > 0.0 && s < 1e6) {
                    return Err(format!("--timeout {val}: must be a positive number of seconds"));
                }
                o.timeout = Duration::from_secs_f64(s);
            }
            "-t" | "--tx-depth" => o.tx_depth = Some(num(&flag, &val)?),
            "-r" | "--rx-depth" => o.rx_depth = Some(num(&flag, &val)?),
            "-g" | "--gid-idx" | "-x" => o.gid_index = num(&flag, &val)?,
            "--port-index" => o.port_index = num(&flag, &val)?,
            "-i" | "-l" | "-d" | "--ib-dev" => {} // IB port / SL / device name: accepted, meaningless here
            "--verify" => o.verify = true,
            "--test-bad-rkey" => o.bad_rkey = true,
            "--no-stats" => o.stats = false,
            "--no-selective-repeat" => o.selective_repeat = false,
            "-e" => {}
            _ if !a.starts_with('-') => {
                if o.server.is_some() {
                    return Err(format!("unexpected argument '{a}': only one SERVER address"));
                }
                // the control connection is IPv4 (servers listen on 0.0.0.0): an IPv6 literal
                // failed only after EAL and the port came up (`::1`) or waited for --timeout
                // on a refused connection (`[::1]`)
                if a.trim_start_matches('[').trim_end_matches(']').parse::<std::net::Ipv6Addr>().is_ok() {
                    return Err(format!("server address '{a}': the TCP control connection is IPv4 (servers listen on 0.0.0.0): give the server's IPv4 address"));
                }
                o.server = Some(a.to_string());
            }
            _ => return Err(format!("unknown option '{a}' for --test={name} (see droce-pmd -- --help)")),
        }
        if stray_value {
            return Err(format!("{flag} takes no value"));
        }
        i += 1;
    }
    if let Some(ud) = explicit_ud {
        if ud && !matches!(test, Test::SendLat | Test::SendBw | Test::UdPingpong) {
            return Err(format!("-c UD works with send_lat, send_bw and ud_pingpong only, not --test={name}"));
        }
        if !ud && test == Test::UdPingpong {
            return Err("ud_pingpong is UD only".into());
        }
        o.ud = ud;
    }
    if o.size == 0 {
        o.size = match test {
            Test::SendBw | Test::WriteBw | Test::ReadBw => 65536,
            Test::AtomicLat | Test::AtomicBw => 8,
            Test::RcPingpong => 4096,
            Test::UdPingpong => 1024,
            _ => 2,
        };
    }
    if matches!(test, Test::AtomicLat | Test::AtomicBw) {
        o.size = 8;
    }
    if o.iters == 0 {
        o.iters = match test {
            Test::WriteBw | Test::ReadBw => 5000,
            _ => 1000,
        };
    }
    if o.qps == 0 || o.qps > 64 {
        return Err(format!("-q {}: between 1 and 64 QPs", o.qps));
    }
    if o.test.is_pingpong() && o.qps != 1 {
        return Err("the pingpong tests use one QP".into());
    }
    if o.size > 1 << 30 {
        return Err(format!("-s {}: at most 1 GiB", o.size));
    }
    if o.test == Test::WriteLat && o.size == 0 {
        return Err("write_lat needs -s >= 1".into());
    }
    Ok(Some(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Option<Opts>, String> {
        parse(&s.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn perftest_style_lines() {
        let o = p("--test=write_bw -s 4096 -n 100 -q 2 --verify 10.0.0.1").unwrap().unwrap();
        assert_eq!((o.test, o.size, o.iters, o.qps, o.verify), (Test::WriteBw, 4096, 100, 2, true));
        assert_eq!(o.server.as_deref(), Some("10.0.0.1"));
        assert_eq!(o.roce_ip(), Ipv4Addr::new(10, 77, 0, 2));
        let o = p("--test send_lat -c UD -m 4096 --ip 10.1.1.1 -p 20000 --progress=thread --timeout 3").unwrap().unwrap();
        assert!(o.ud && o.is_server());
        assert_eq!((o.mtu, o.tcp_port, o.progress, o.size), (Some(4096), 20000, Progress::Thread, 2));
        assert_eq!(o.roce_ip(), Ipv4Addr::new(10, 1, 1, 1));
        let o = p("--test=atomic_lat -A CMP_AND_SWAP").unwrap().unwrap();
        assert_eq!((o.atomic, o.size, o.iters), (AtomicOp::CmpSwap, 8, 1000));
        let o = p("--test=ud_pingpong -g 1 -s 512 -n 10").unwrap().unwrap();
        assert!(o.ud && o.size == 512);
        assert_eq!(o.qp_timeout, 14, "perftest's default ACK timeout");
        assert_eq!(p("--test=write_lat -u 17").unwrap().unwrap().qp_timeout, 17);
        assert_eq!(p("--test=read_bw --qp-timeout=20").unwrap().unwrap().qp_timeout, 20);
        assert!(p("--forward-mode=io").unwrap().is_none());
        assert!(p("--test=rping").unwrap().is_none(), "other helpers' tests fall through");
    }

    #[test]
    fn bad_lines_are_clear() {
        for (line, want) in [
            ("--test=write_bw -c UD", "-c UD works with send_lat"),
            ("--test=write_bw -m 1500", "256, 512, 1024, 2048, 4096"),
            ("--test=write_bw -s", "-s needs a value"),
            ("--test=write_bw -s x", "not a valid number"),
            ("--test=write_bw --bogus", "unknown option '--bogus'"),
            ("--test=write_bw --tiemout=5", "unknown option '--tiemout=5'"),
            ("--test=write_bw --total-num-mbufs=1024", "unknown option '--total-num-mbufs=1024'"),
            ("--test=write_bw --verify=1", "--verify takes no value"),
            ("--test=write_bw ::1", "server address '::1': the TCP control connection is IPv4"),
            ("--test=write_bw [::1]", "server address '[::1]': the TCP control connection is IPv4"),
            ("--test=write_bw --faults=rx:drop=2", "--faults=rx:drop=2"),
            ("--test=write_bw --cc=rpg_gd=99", "--cc=rpg_gd=99: congestion-control key 'rpg_gd'"),
            ("--test=write_bw --cc=fast", "--cc=fast: unknown congestion-control key 'fast'"),
            ("--test=write_bw a b", "only one SERVER"),
            ("--test=write_bw -q 0", "between 1 and 64"),
            ("--test=write_bw -q 200", "between 1 and 64"),
            ("--test=write_lat -u 32", "exponent is 1..31"),
        ] {
            let e = p(line).unwrap_err();
            assert!(e.contains(want), "{line}: {e}");
        }
    }
}
