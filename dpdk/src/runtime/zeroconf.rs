//! The zero-config default: up to [`MESH_MAX`] processes on one machine find each other over a
//! memif mesh (slot locks in `/tmp/droce-<uid>`), and the watch that reports a peer process
//! gone when its memif link goes down (see the module docs of [`super`]).
//!
//! This module knows the mesh (slots, locks, addresses, memif vdevs) and nothing of how a
//! config is read: [`default_link`] hands `config` the conf text of this process's end, and its
//! errors are messages that `config` reports as config errors.

use super::*;
// ------------------------------------------------------------------------------ zero-config

/// Most processes on one zero-config link (slots 0 .. MESH_MAX-1): each has a memif port per
/// other slot, and DPDK 22.11's Debian build allows 32 ports per process.
pub const MESH_MAX: u32 = 16;

/// How long [`Runtime::open`] waits for a lower slot that is alive to start its ports, and then
/// for the links to the lower slots to come up (bounded: a process alone, or one whose peers
/// are stuck, opens all the same and connects to them when they come).
pub const MESH_OPEN_WAIT: Duration = Duration::from_secs(10);

/// A zero-config client port whose link did not come up this long after its start, and whose
/// connection memif has closed (the server refused it, e.g. "Already connected" while it had
/// not yet seen the slot's previous process go), connects again. One still open is left to
/// finish, however long the server takes.
pub(super) const MESH_CLIENT_RETRY: Duration = Duration::from_secs(5);

/// How often the lock directory is looked at for new ready slots.
pub(super) const MESH_SCAN_EVERY: Duration = Duration::from_millis(100);

/// The address of zero-config slot `slot`: 10.77.<slot/250>.<slot%250+1>.
pub fn mesh_ip(slot: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, (slot / 250) as u8, (slot % 250 + 1) as u8)
}

/// The MAC of zero-config slot `slot`: 02:64:72:63:<slot+1, 16 bits>.
pub fn mesh_mac(slot: u32) -> [u8; 6] {
    let n = slot + 1;
    [0x02, 0x64, 0x72, 0x63, (n >> 8) as u8, n as u8]
}

/// The slot's lock file, held for the life of the process (`<pid>`, then `<pid> ready`).
pub(super) static SLOT_LOCK: Mutex<Option<std::fs::File>> = Mutex::new(None);

/// Marks this process's slot ready: its server ports are started, higher slots may connect (a memif client that connects to a server port not started yet is refused for good
/// in DPDK 22.11, so clients wait for this mark).
pub(super) fn mark_slot_ready() {
    use std::io::{Seek, Write};
    if let Some(f) = SLOT_LOCK.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
        let _ = f.set_len(0).and_then(|_| f.rewind()).and_then(|_| writeln!(f, "{} ready", std::process::id()));
    }
}

/// What a slot's lock file says: the pid of its holder (when that process is alive) and
/// whether it marked itself ready. A file left by a process that has gone reads as free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SlotState {
    Free,
    Alive { pid: u32, ready: bool },
}

pub(super) fn slot_state(path: &std::path::Path) -> SlotState {
    let Ok(t) = std::fs::read_to_string(path) else { return SlotState::Free };
    let mut w = t.split_whitespace();
    match w.next().and_then(|p| p.parse::<u32>().ok()) {
        Some(pid) if std::path::Path::new(&format!("/proc/{pid}")).exists() => SlotState::Alive { pid, ready: w.next() == Some("ready") },
        _ => SlotState::Free,
    }
}

pub(super) fn slot_lock_path(dir: &std::path::Path, link: &str, slot: u32) -> PathBuf {
    dir.join(format!("{link}.{slot}.lock"))
}

/// The slot this process would get on `link` now, without keeping a lock.
pub(super) fn probe_slot(link: &str) -> Result<u32, String> {
    let dir = lock_dir()?;
    for slot in 0..MESH_MAX {
        let path = slot_lock_path(&dir, link, slot);
        match sys::probe_lock(&path) {
            Ok(true) => return Ok(slot),
            Ok(false) => {}
            Err(e) => return Err(format!("zero-config default: lock file {}: {e}", path.display())),
        }
    }
    Err(all_taken(link))
}

/// Takes the lowest free slot on `link` (the lock stays held for the life of the process).
pub(super) fn take_slot(link: &str) -> Result<u32, String> {
    let dir = lock_dir()?;
    for slot in 0..MESH_MAX {
        let path = slot_lock_path(&dir, link, slot);
        match sys::try_lock(&path) {
            Ok(Some(f)) => {
                *SLOT_LOCK.lock().unwrap_or_else(PoisonError::into_inner) = Some(f);
                return Ok(slot);
            }
            Ok(None) => {}
            Err(e) => return Err(format!("zero-config default: lock file {}: {e}", path.display())),
        }
    }
    Err(all_taken(link))
}

/// The error of a process beyond [`MESH_MAX`] on one zero-config link.
pub(super) fn all_taken(link: &str) -> String {
    format!(
        "zero-config default link '{link}' already has {MESH_MAX} processes, the most one zero-config link serves: use DROCE_LINK=<other name> for a separate group, or DROCE_CONF for more processes (see docs/runtime.md)"
    )
}

/// The slot this process took on its zero-config link (decided once; the lock stays held).
pub(super) static DEFAULT_SLOT: OnceLock<Result<(u32, String), String>> = OnceLock::new();

pub(super) fn mac_str(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// This process's end of the zero-config memif mesh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultLink {
    /// `DROCE_LINK` or "default".
    pub name: String,
    /// This process's slot (its address is [`mesh_ip`] of it).
    pub slot: u32,
    /// `/tmp/droce-<uid>`: the slots' lock files `<name>.<slot>.lock`.
    pub lock_dir: PathBuf,
}

impl DefaultLink {
    pub(super) fn lock(&self, slot: u32) -> PathBuf {
        slot_lock_path(&self.lock_dir, &self.name, slot)
    }
}

/// The memif vdev of slot `me` towards slot `peer`: port `net_memif<peer>`; the lower slot of
/// the two serves on its own socket `@/droce-<uid>-<link>-<slot>` with the client's slot as the
/// interface id, the higher one is the client.
pub(super) fn mesh_vdev(uid: u32, link: &str, me: u32, peer: u32) -> String {
    let (role, server_slot, id) = if me < peer { ("server", me, peer) } else { ("client", peer, me) };
    format!("net_memif{peer},role={role},id={id},socket=/droce-{uid}-{link}-{server_slot},socket-abstract=yes,bsize=8192,mac={}", mac_str(mesh_mac(me)))
}

/// This process's end of the zero-config mesh on `DROCE_LINK` (or "default"), and the conf text
/// that brings it up: a memif vdev and a static neighbour per other slot, its address, its
/// pair's other end. The slot is taken once and kept; with `peek`, a process that has none yet
/// is told the one it would get now and keeps none.
pub(super) fn default_link(peek: bool) -> Result<(DefaultLink, String), String> {
    let link = std::env::var("DROCE_LINK").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "default".into());
    if link.len() > 40 || !link.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(format!("DROCE_LINK='{link}': use at most 40 letters, digits, '-', '_' or '.'"));
    }
    let (slot, link) = match DEFAULT_SLOT.get() {
        Some(r) => r.clone()?,
        None if peek => (probe_slot(&link)?, link),
        None => DEFAULT_SLOT.get_or_init(|| take_slot(&link).map(|s| (s, link.clone()))).clone()?,
    };
    let uid = sys::uid();
    let ip = mesh_ip(slot);
    // what a loopback destination means: the pair's other end (slot 0 <-> 1), slot 0 for the rest
    let peer = if slot == 0 { mesh_ip(1) } else { mesh_ip(0) };
    // abstract sockets: nothing on disk, released when their process ends; 8 KiB buffers carry
    // every frame of path MTU 4096 in one buffer (MEMIF_JUMBO_BSIZE)
    let mut text = String::new();
    for j in (0..MESH_MAX).filter(|&j| j != slot) {
        text.push_str(&format!("vdev = {}\nneighbour = {} {}\n", mesh_vdev(uid, &link, slot, j), mesh_ip(j), mac_str(mesh_mac(j))));
    }
    text.push_str(&format!("ip = {ip}\npeer = {peer}\n"));
    Ok((DefaultLink { name: link, slot, lock_dir: lock_dir()? }, text))
}

pub(super) fn lock_dir() -> Result<PathBuf, String> {
    let dir = PathBuf::from(format!("/tmp/droce-{}", sys::uid()));
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("zero-config default: cannot create {}: {e}", dir.display())),
    }
    sys::check_private_dir(&dir).map_err(|m| format!("zero-config default: {}: {m}", dir.display()))?;
    Ok(dir)
}

/// The link to one other slot of the mesh.
#[derive(Debug)]
pub(super) struct MeshPeer {
    pub(super) slot: u32,
    pub(super) ip: IpAddr,
    pub(super) port: Port,
    /// Index in the device's [`MeshWire`].
    pub(super) idx: usize,
    /// This process serves the link (the peer's slot is higher): the port stays started and
    /// takes whichever process holds the peer's slot next.
    pub(super) server: bool,
    /// Client: the server process it connected to (started) or last had (stopped).
    pub(super) server_pid: Option<u32>,
    /// Client: the port is started (connecting or connected), since when.
    pub(super) started: Option<Instant>,
    pub(super) up: bool,
}

/// The zero-config mesh of this process: its slot and one link per other slot.
#[derive(Debug)]
pub(super) struct Mesh {
    pub(super) link: DefaultLink,
    pub(super) peers: Vec<MeshPeer>,
    pub(super) next_scan: Instant,
    pub(super) next_watch: Instant,
    /// Progress calls since the clock was last read.
    pub(super) calls: u32,
}


impl Runtime {

    /// Whether some peer behind a point-to-point memif link (a zero-config mesh link, or a conf
    /// with `peer` on a memif port) has gone: its link was up and went down. A memif link goes
    /// down only when the other side closes its control socket (exit, kill, port stop), so the
    /// process is gone. Frontends use [`Runtime::lost_peers_since`] to fail only the connections
    /// to the peers that went, at once, instead of waiting for retries that only come when
    /// something is outstanding (a ping-pong side waiting for the reply of a dead peer waited
    /// forever, as over UCX tcp). Looked at every [`LINK_WATCH_EVERY`] by the progress calls.
    pub fn peer_lost(&self) -> bool {
        !self.lost.is_empty()
    }

    /// The peers found gone since the caller last asked (`*seen` keeps its place; start at
    /// 0): on the zero-config mesh the process behind each memif link that went down (one link
    /// per peer, so only that peer's connections are affected), on a configured
    /// point-to-point memif link its `peer`. A zero-config slot taken again by a new process
    /// later has the same address: its new connections are unaffected by the old loss.
    pub fn lost_peers_since(&self, seen: &mut usize) -> &[IpAddr] {
        let from = (*seen).min(self.lost.len());
        *seen = self.lost.len();
        &self.lost[from..]
    }

    /// Whether `ip` is a zero-config peer with no process behind it now: its link is down and
    /// its slot is free. A connection to it can only time out; callers fail it at once, as a
    /// TCP connect to a port nobody listens on does.
    pub fn peer_gone(&self, ip: IpAddr) -> bool {
        let Some(m) = self.mesh.as_ref() else { return false };
        m.peers.iter().find(|p| p.ip == ip).is_some_and(|p| !p.up && slot_state(&m.link.lock(p.slot)) == SlotState::Free)
    }

    /// The zero-config peers whose memif link is up now (empty elsewhere).
    pub fn mesh_peers_up(&self) -> Vec<IpAddr> {
        self.mesh.as_ref().map(|m| m.peers.iter().filter(|p| p.up).map(|p| p.ip).collect()).unwrap_or_default()
    }

    /// This process's zero-config slot, if on the zero-config mesh.
    pub fn mesh_slot(&self) -> Option<u32> {
        self.mesh.as_ref().map(|m| m.link.slot)
    }

    /// At open: waits (bounded by [`MESH_OPEN_WAIT`]) for the lower slots that are alive to
    /// mark themselves ready, connects to them and waits for those links to come up, so that
    /// the first sends to processes already running find their links. Higher slots connect
    /// to this process themselves; slots that appear later are connected by the progress calls.
    pub(super) fn open_mesh(&mut self) {
        let Some(m) = self.mesh.as_ref() else { return };
        let lower: Vec<u32> = m.peers.iter().filter(|p| !p.server).map(|p| p.slot).collect();
        let t0 = Instant::now();
        while t0.elapsed() < MESH_OPEN_WAIT {
            let Some(m) = self.mesh.as_ref() else { return };
            let waiting = lower.iter().any(|&j| {
                let p = m.peers.iter().find(|p| p.slot == j);
                match slot_state(&m.link.lock(j)) {
                    SlotState::Free => false,
                    // alive: not ready yet, or the link to it is not up yet
                    SlotState::Alive { ready, .. } => !ready || p.is_some_and(|p| !p.up),
                }
            });
            if !waiting {
                break;
            }
            if let Some(m) = self.mesh.as_mut() {
                m.next_scan = Instant::now();
            }
            self.watch_mesh(true);
            std::thread::sleep(Duration::from_millis(2));
        }
        self.watch_mesh(true);
    }

    /// Looks at every mesh link (every [`LINK_WATCH_EVERY`]) and the lock directory (every
    /// [`MESH_SCAN_EVERY`]): links that came up are used, links that went down are reported
    /// lost (their peer process has gone), client ports are started towards slots that became
    /// ready (a new process in a slot) and stopped when their server went. Port start and stop
    /// run under the interrupt-thread gate (`Port`); no port is ever created or removed here.
    pub(super) fn watch_mesh(&mut self, scan_now: bool) {
        let Some(m) = self.mesh.as_mut() else { return };
        let now = Instant::now();
        let scan = scan_now || now >= m.next_scan;
        if scan {
            m.next_scan = now + MESH_SCAN_EVERY;
        }
        for p in m.peers.iter_mut() {
            let up = (p.server || p.started.is_some()) && p.port.link_quiet().map(|l| l.up).unwrap_or(false);
            if up && !p.up {
                p.up = true;
                populate_memif_regions();
                if let Some(w) = self.dev.mesh_mut() {
                    w.set_up(p.idx, true);
                }
            } else if !up && p.up {
                p.up = false;
                if let Some(w) = self.dev.mesh_mut() {
                    w.set_up(p.idx, false);
                }
                self.lost.push(p.ip);
                eprintln!("droce: the memif link to {} (zero-config slot {}) went down: that process has gone", p.ip, p.slot);
                if !p.server {
                    // a client does not reconnect to the same server process; a new process in
                    // that slot is connected when it marks itself ready
                    let _ = p.port.stop();
                    p.started = None;
                }
            }
            if p.server || !scan {
                continue;
            }
            let st = slot_state(&m.link.lock(p.slot));
            match (p.started, st) {
                (None, SlotState::Alive { pid, ready: true }) if p.server_pid != Some(pid) && p.port.start().is_ok() => {
                    p.server_pid = Some(pid);
                    p.started = Some(now);
                }
                (Some(since), _) if !p.up => {
                    let gone = match st {
                        SlotState::Alive { pid, .. } => Some(pid) != p.server_pid,
                        SlotState::Free => true,
                    };
                    // a connection memif still holds open is a handshake the server has not
                    // finished (its interrupt thread runs late on a loaded machine): dropping
                    // it broke the server (Port::memif_control_open), so only one memif
                    // closed (refused) is made again
                    let refused = now.duration_since(since) >= MESH_CLIENT_RETRY && p.port.memif_control_open() != Some(true);
                    if gone || refused {
                        // its server went before the link came up, or refused the connection:
                        // start again when (a process in) that slot is ready
                        let _ = p.port.stop();
                        p.started = None;
                        if gone {
                            // a process that died before its link came up has gone all the
                            // same: what was connecting to it fails now (no link went down)
                            self.lost.push(p.ip);
                            eprintln!("droce: zero-config slot {} ({}) ended before its memif link came up: that process has gone", p.slot, p.ip);
                        } else {
                            p.server_pid = None;
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// [`Runtime::watch_mesh`] at most every [`LINK_WATCH_EVERY`] (the clock read once in 64 calls).
    #[inline]
    pub(super) fn tick_mesh(&mut self) {
        let Some(m) = self.mesh.as_mut() else { return };
        m.calls = m.calls.wrapping_add(1);
        if m.calls % 64 != 0 {
            return;
        }
        let now = Instant::now();
        if now < m.next_watch {
            return;
        }
        m.next_watch = now + LINK_WATCH_EVERY;
        self.watch_mesh(false);
    }

    pub(super) fn watch_link(&mut self) {
        let Some(w) = self.link_watch.as_mut() else { return };
        w.calls = w.calls.wrapping_add(1);
        if w.lost || w.calls % 64 != 0 {
            return;
        }
        let now = Instant::now();
        if now < w.next {
            return;
        }
        w.next = now + LINK_WATCH_EVERY;
        let up = w.port.link().map(|l| l.up).unwrap_or(false);
        if w.was_up && !up {
            w.lost = true;
            if let Some(p) = self.cfg.peer {
                self.lost.push(p);
            }
            eprintln!("droce: the memif link to the peer ({}) went down: the peer process has gone", self.cfg.peer.map(|p| p.to_string()).unwrap_or_default());
        }
        if up && !w.was_up {
            populate_memif_regions();
        }
        w.was_up |= up;
    }

}

/// The control socket a memif client port connects to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct MemifSocket {
    pub(super) path: String,
    pub(super) abstract_: bool,
}

impl MemifSocket {
    pub(super) fn describe(&self) -> String {
        if self.abstract_ {
            format!("abstract socket @{}", self.path)
        } else {
            self.path.clone()
        }
    }

    /// Why no memif server can ever listen at this path, if none can: something other than a
    /// socket is there (a directory, a regular file). A server's bind() fails on it ("exists
    /// and is not a socket: remove it"), so a client that waited for one would wait its whole
    /// timeout for nothing.
    pub(super) fn not_a_socket(&self) -> Option<String> {
        use std::os::unix::fs::FileTypeExt;
        if self.abstract_ {
            return None;
        }
        let t = std::fs::metadata(&self.path).ok()?.file_type();
        let what = if t.is_socket() {
            return None;
        } else if t.is_dir() {
            "a directory"
        } else if t.is_file() {
            "a regular file"
        } else {
            "a special file"
        };
        Some(format!("{} is {what}, not a memif server's socket: no server can listen there; remove it or give socket=PATH the server's socket", self.path))
    }

    /// Whether a server listens there (abstract: /proc/net/unix of this network namespace;
    /// a path: the socket file exists).
    pub(super) fn listening(&self) -> bool {
        if !self.abstract_ {
            return std::path::Path::new(&self.path).exists();
        }
        let want = format!("@{}", self.path);
        let Ok(t) = std::fs::read_to_string("/proc/net/unix") else { return true };
        t.lines().skip(1).any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Num RefCount Protocol Flags Type St Inode Path; Flags 00010000 = listening
            f.len() >= 8 && f[3] == "00010000" && f[7] == want
        })
    }
}

/// The socket of `--vdev=<port>,role=client,...` among the EAL args (DPDK 22.11 defaults:
/// /run/memif.sock, abstract).
pub(super) fn memif_client_socket(eal_args: &[String], port: &str) -> Option<MemifSocket> {
    let specs = crate::devargs::vdev_specs(eal_args);
    let v = specs.iter().find(|v| v.split(',').next() == Some(port))?;
    memif_socket(v, "client")
}

/// The socket of a memif vdev string (`net_memifN,key=value,...`) whose role is `role`
/// (DPDK's default role is server).
fn memif_socket(vdev: &str, role: &str) -> Option<MemifSocket> {
    let kv: Vec<(&str, &str)> = vdev.split(',').skip(1).filter_map(|p| p.split_once('=')).collect();
    let get = |k: &str| kv.iter().find(|(a, _)| *a == k).map(|(_, b)| *b);
    if get("role").unwrap_or("server") != role {
        return None;
    }
    Some(MemifSocket {
        path: get("socket").unwrap_or("/run/memif.sock").to_string(),
        abstract_: get("socket-abstract").map(|a| a != "no").unwrap_or(true),
    })
}

/// Removes the socket files of memif servers among `eal_args` that no process listens on
/// any more: a server that was killed leaves its file behind, and DPDK's server then fails
/// with "Address already in use". Only a file that is a Unix socket and stays stale by
/// [`stale_socket_file`] is removed, and the removal is named on stderr; a live server's
/// socket, one a starting server has bound and not yet listens on, a regular file, a
/// symbolic link, a path DPDK would refuse (relative: `socket=./d.sock`) or any other error
/// is left for EAL init to report. Returns the paths removed.
pub fn remove_stale_memif_sockets(eal_args: &[String]) -> Vec<String> {
    let specs = crate::devargs::vdev_specs(eal_args);
    let servers = specs
        .iter()
        .filter(|v| v.starts_with("net_memif"))
        .filter_map(|v| memif_socket(v, "server"))
        .filter(|s| !s.abstract_)
        // a path DPDK refuses (a relative one: resolved here against the current directory)
        // is Eal::init's clear error, not a file to remove
        .filter(|s| crate::devargs::memif_socket_path_problem(&s.path).is_none());
    let mut removed = Vec::new();
    for s in servers {
        if stale_socket_file(&s.path) && std::fs::remove_file(&s.path).is_ok() {
            eprintln!("droce: removed the stale memif socket file {} (no server listens on it: the one that made it is gone)", s.path);
            removed.push(s.path);
        }
    }
    removed
}

/// Re-checks of a socket file that refused a connection, and the pause before each: a server
/// between bind() and listen() refuses too, and on a loaded machine it can be descheduled
/// there for many milliseconds.
const STALE_RECHECKS: u32 = 3;
const STALE_RECHECK_GAP: std::time::Duration = std::time::Duration::from_millis(10);

/// Whether the Unix socket file at `path` was left by a server that is gone. A connection
/// that is accepted (a live server: the common case) or fails other than with ECONNREFUSED
/// says no at once, at the cost of one connect(). A refusal is only believed when
///  - no socket of this network namespace is bound to the path (/proc/net/unix lists a
///    bound socket with its path from bind() on, before listen(): that is how a starting
///    server is told from a dead one), and
///  - connect() is still refused, the path unbound and the file the same (device, inode) at
///    each of [`STALE_RECHECKS`] re-checks [`STALE_RECHECK_GAP`] apart (the only check
///    when /proc/net/unix cannot be read, and the one for a server in another network
///    namespace sharing the file system, which this namespace's table does not show).
///
/// Residual window: a server that binds the path after the last check and before the
/// caller's unlink (microseconds) loses its file; DPDK's memif server fails to bind an
/// existing file, so that needs a second server started on the same path at that moment.
fn stale_socket_file(path: &str) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let id = |m: std::fs::Metadata| m.file_type().is_socket().then(|| (m.dev(), m.ino()));
    let Some(first) = std::fs::symlink_metadata(path).ok().and_then(id) else { return false };
    for i in 0..=STALE_RECHECKS {
        if i > 0 {
            std::thread::sleep(STALE_RECHECK_GAP);
            if std::fs::symlink_metadata(path).ok().and_then(id) != Some(first) {
                return false;
            }
        }
        let refused = matches!(std::os::unix::net::UnixStream::connect(path), Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused);
        if !refused || unix_path_bound(path).unwrap_or(false) {
            return false;
        }
    }
    true
}

/// Whether a Unix socket of this network namespace is bound to `path` (listening or not),
/// from /proc/net/unix; None when the table cannot be read.
fn unix_path_bound(path: &str) -> Option<bool> {
    let t = std::fs::read_to_string("/proc/net/unix").ok()?;
    // Num RefCount Protocol Flags Type St Inode Path (a path with spaces is not matched: the
    // re-checks then decide alone)
    Some(t.lines().skip(1).any(|l| l.split_whitespace().nth(7) == Some(path)))
}

/// Maps in every page of the memif shared regions (`memfd:memif_region_N`: rings and
/// buffers) once, when a memif link comes up. The PMD maps them lazily and each process then
/// faulted them in page by page on first use: the first ~1000 frames each way (one ring) ran at
/// a tenth of the speed, ~3.5 ms per 1 MiB round trip instead of ~0.4 (BENCHMARKS.md).
/// `MADV_POPULATE_WRITE` faults the pages in without changing them; a kernel without it
/// (before 5.14) answers EINVAL and the pages fault in as before.
pub(super) fn populate_memif_regions() {
    const MADV_POPULATE_WRITE: libc::c_int = 23;
    static DONE: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return };
    let mut done = DONE.lock().unwrap_or_else(PoisonError::into_inner);
    for line in maps.lines().filter(|l| l.contains("memif_region") && l.split_whitespace().nth(1).is_some_and(|p| p.starts_with("rw"))) {
        let Some((a, b)) = line.split_whitespace().next().and_then(|r| r.split_once('-')) else { continue };
        let (Ok(start), Ok(end)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else { continue };
        if end <= start || done.contains(&(start, end)) {
            continue;
        }
        if sys::madvise(start, end - start, MADV_POPULATE_WRITE) {
            done.push((start, end));
        }
    }
}

#[cfg(test)]
#[allow(unsafe_code)]
mod populate_tests {
    /// A shared mapping named like memif's regions is resident after populate_memif_regions,
    /// not before (mincore).
    #[test]
    pub(super) fn memif_regions_are_mapped_in_at_link_up() {
        const LEN: usize = 64 * 4096;
        // SAFETY: a fresh memfd of LEN bytes mapped shared; mincore reads its residency into a
        // vector of one byte per page; everything is released at the end.
        unsafe {
            let fd = libc::memfd_create(c"memif_region_test".as_ptr(), 0);
            assert!(fd >= 0);
            assert_eq!(libc::ftruncate(fd, LEN as libc::off_t), 0);
            let p = libc::mmap(std::ptr::null_mut(), LEN, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
            assert_ne!(p, libc::MAP_FAILED);
            let resident = || {
                let mut v = vec![0u8; LEN / 4096];
                assert_eq!(libc::mincore(p, LEN, v.as_mut_ptr()), 0);
                v.iter().filter(|&&b| b & 1 != 0).count()
            };
            assert_eq!(resident(), 0, "a fresh memfd has no pages");
            super::populate_memif_regions();
            assert_eq!(resident(), LEN / 4096, "every page mapped in");
            assert!(std::slice::from_raw_parts(p as *const u8, LEN).iter().all(|&b| b == 0), "contents unchanged");
            libc::munmap(p, LEN);
            libc::close(fd);
        }
    }
}

