//! Output capture around `rte_eal_init`.
//!
//! EAL writes its messages with `printf` to stdout (its usage text too) and to stderr before its
//! log is set up. On failure, droce-pmd must print one clear line instead of that flood, so the
//! two file descriptors are pointed at an unlinked temporary file while EAL initialises; the
//! text is then echoed (success) or mined for the reason (failure).
#![allow(unsafe_code)]

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;

extern "C" {
    // glibc's FILE* for fflush(NULL) is not needed: fflush(NULL) flushes every C stream.
    fn fflush(stream: *mut libc::FILE) -> libc::c_int;
}

/// Runs `f` with fds 1 and 2 redirected into a temporary file; returns `f`'s result and what
/// was written. If the redirection cannot be set up, `f` runs uncaptured.
pub fn capture_stdio<T>(f: impl FnOnce() -> T) -> (T, String) {
    let path = std::env::temp_dir().join(format!("droce-pmd-eal-{}.log", std::process::id()));
    let file = match File::options().read(true).write(true).create(true).truncate(true).open(&path) {
        Ok(file) => file,
        Err(_) => return (f(), String::new()),
    };
    let _ = std::fs::remove_file(&path);
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: dup/dup2/close on fds this process owns; fflush(NULL) flushes C stdio buffers so
    // that nothing written before or during the capture lands on the wrong side of the switch.
    let saved = unsafe {
        fflush(std::ptr::null_mut());
        let out = libc::dup(1);
        let err = libc::dup(2);
        if out < 0 || err < 0 {
            if out >= 0 {
                libc::close(out);
            }
            if err >= 0 {
                libc::close(err);
            }
            None
        } else {
            libc::dup2(file.as_raw_fd(), 1);
            libc::dup2(file.as_raw_fd(), 2);
            Some((out, err))
        }
    };
    let r = f();
    if let Some((out, err)) = saved {
        // SAFETY: restores the fds saved above and closes the copies.
        unsafe {
            fflush(std::ptr::null_mut());
            libc::dup2(out, 1);
            libc::dup2(err, 2);
            libc::close(out);
            libc::close(err);
        }
    }
    let mut text = String::new();
    let mut file = file;
    if file.seek(SeekFrom::Start(0)).is_ok() {
        let mut bytes = Vec::new();
        let _ = file.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    (r, text)
}

/// Lines of EAL / driver messages (`EAL: ...`, `func(): ...`), without EAL's usage text.
fn messages(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| !l.starts_with(char::is_whitespace))
        .map(str::trim)
        .filter(|l| l.starts_with("EAL:") || l.contains("(): "))
        .collect()
}

/// Makes one line out of EAL's failure output: the most telling message, plus what to do.
pub fn eal_failure_line(log: &str, fallback: &str) -> String {
    let lines = messages(log);
    let find = |pat: &str| lines.iter().find(|l| l.contains(pat)).map(|l| l.trim_start_matches("EAL: ").to_string());
    if let Some(m) = memif_socket_in_use(log) {
        return m;
    }
    if let Some(l) = find("failed to parse device").or_else(|| find("Unable to parse device")) {
        return format!(
            "EAL could not create a device ({l}); check the --vdev driver name and its key=value arguments, \
             e.g. --vdev=net_ring0, --vdev=net_null0, --vdev=net_memif0,role=server,socket=/tmp/memif.sock"
        );
    }
    // a driver's refusal (with EAL's log at debug level, many lines come before it)
    if let Some(line) = lines.iter().find_map(|l| l.split("failed to initialize ").nth(1)?.strip_suffix(" device")).and_then(|name| vdev_refused(log, name)) {
        return line;
    }
    if let Some(l) = find("Cannot create lock").or_else(|| find("Is another primary process running")) {
        return format!("EAL files are in use by another process ({l}); give this process its own --file-prefix=NAME");
    }
    // "lcore 7 unavailable", never "Physical addresses are unavailable, selecting IOVA as VA
    // mode" (an informational line at debug level)
    let lcore = lines.iter().find(|l| l.contains("lcore") && l.contains("unavailable")).map(|l| l.trim_start_matches("EAL: ").to_string());
    if let Some(l) = find("invalid core list").or(lcore) {
        return format!("EAL rejected the core list ({l}); use cores that exist on this machine, e.g. -l 0-{}", available_cpus().saturating_sub(1));
    }
    if let Some(l) = find("for rte_mem_config").filter(|_| log.contains("Cannot init config")) {
        return format!(
            "EAL found no primary process to join ({l}); a --proc-type=secondary process needs a running primary with the same --file-prefix"
        );
    }
    if let Some(l) = find("invalid parameters for").or_else(|| find("invalid")).filter(|l| !l.contains("'command line'") && !l.contains("Unregistering")) {
        return format!("EAL rejected an argument ({l}); see droce-pmd --help for the EAL options and their syntax");
    }
    if let Some(l) = find("hugepage") {
        return format!("EAL found no usable hugepages ({l}); add --no-huge -m 512 or reserve hugepages (see conf/real-nic.conf)");
    }
    if let Some(l) = find("Cannot allocate memory").or_else(|| find("Cannot init memory")) {
        return format!("EAL could not set up memory ({l}); with --no-huge give enough with -m, e.g. -m 512");
    }
    let boring = ["Detected", "Selected", "IOVA", "Error - exiting", "Unregistering", "'command line'", "mp action callback"];
    let telling = lines
        .iter()
        .filter(|l| !l.contains("mp action callback"))
        .find(|l| ["FATAL", "Cannot", "cannot", "failed", "Failed"].iter().any(|w| l.contains(w)));
    if let Some(l) = telling.or_else(|| lines.iter().rev().find(|l| !boring.iter().any(|b| l.contains(b)))) {
        return format!("EAL initialisation failed: {} ({fallback})", l.trim_start_matches("EAL: "));
    }
    format!("EAL initialisation failed ({fallback})")
}

/// A memif server whose socket path is taken (`memif_socket_create(): Failed to setup socket
/// PATH: Address already in use`): what is in the way and what to do. For EAL failures and
/// for a vdev that was not created alike.
pub fn memif_socket_in_use(log: &str) -> Option<String> {
    let l = messages(log).into_iter().find(|l| l.contains("Address already in use") && l.contains("memif"))?;
    // "memif_socket_create(): Failed to setup socket PATH: Address already in use"
    let path = l.split("socket ").last().and_then(|r| r.split(": ").next()).unwrap_or("");
    let md = std::fs::symlink_metadata(path);
    if let (Ok(true), Ok(to)) = (md.as_ref().map(|m| m.file_type().is_symlink()), std::fs::read_link(path)) {
        // bind(2) never follows or replaces a link, and droce removes only a stale socket
        // file itself, never a link (it may point at another server's socket)
        let what = match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => "a socket a server listens on",
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => "a socket nobody listens on (its server is gone)",
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => "nothing (a dangling link)",
            Err(_) => "something that is not a listening socket",
        };
        return Some(format!(
            "a memif server could not create its socket ({l}): {path} is a symbolic link to {}, {what}; a server binds its own \
             socket at the path and cannot replace a link: remove the link (rm {path}) or give socket=PATH another path",
            to.display()
        ));
    }
    let is_socket = md.map(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type())).unwrap_or(true);
    if !is_socket {
        return Some(format!("a memif server could not create its socket ({l}): {path} exists and is not a socket: remove it or give socket=PATH another path"));
    }
    Some(format!(
        "a memif server could not create its socket ({l}); another server listens on it (droce removes a \
         socket file only when nothing listens on it): stop that server or give socket=PATH another path"
    ))
}

/// The one line for vdev `name` that its driver refused, with the driver's own reason, if
/// EAL's log has one.
pub fn vdev_refused(log: &str, name: &str) -> Option<String> {
    let why = vdev_failure_reason(log, name)?;
    Some(format!(
        "virtual device '{name}' was not created: {}; check its key=value arguments \
         (e.g. --vdev=net_memif0,role=server,socket=/tmp/memif.sock, --vdev=net_ring0)",
        why.trim_end_matches('.')
    ))
}

/// The driver's own reason for not creating vdev `name` (the message logged just before
/// `failed to initialize <name> device`), if EAL's log has one.
pub fn vdev_failure_reason(log: &str, name: &str) -> Option<String> {
    let lines = messages(log);
    let i = lines.iter().position(|l| l.contains("failed to initialize") && l.contains(name))?;
    lines[..i]
        .iter()
        .rev()
        .find(|l| !l.contains("mp action callback"))
        .or_else(|| lines[..i].last())
        .map(|l| l.trim_start_matches("EAL: ").to_string())
}

fn available_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_eal_failures() {
        let l = eal_failure_line("EAL: Detected CPU lcores: 2\nEAL: failed to parse device \"net_bogus0\"\nEAL: Unable to parse device 'net_bogus0'\n", "x");
        assert!(l.contains("net_bogus0") && l.contains("--vdev=net_ring0"), "{l}");
        assert!(!l.contains('\n'));
        let l = eal_failure_line("EAL: Cannot create lock on '/var/run/dpdk/rte/config'. Is another primary process running?\n", "x");
        assert!(l.contains("--file-prefix"), "{l}");
        let l = eal_failure_line("EAL: Detected CPU lcores: 2\nEAL: lcore 7 unavailable\nEAL: invalid core list, please check\n\nUsage: x\n  --file-prefix  Prefix for hugepage filenames\n", "x");
        assert!(l.starts_with("EAL rejected the core list (invalid core list"), "{l}");
        let log = "rte_pmd_memif_probe(): Failed to register mp action callback: Operation not supported\nmemif_set_role(): Unknown role: bogus.\nvdev_probe(): failed to initialize net_memif0 device\n";
        // a stale socket file: the harmless mp-callback line comes first and must not be the reason
        let stale = "rte_pmd_memif_probe(): Failed to register mp action callback: Operation not supported\nmemif_socket_create(): Failed to setup socket /tmp/m.sock: Address already in use\n";
        let l = eal_failure_line(stale, "x");
        assert!(l.contains("/tmp/m.sock: Address already in use") && l.contains("another server listens on it"), "{l}");
        // a regular file in the way is named as such
        let f = std::env::temp_dir().join(format!("droce-notsock-{}", std::process::id()));
        std::fs::write(&f, b"").unwrap();
        let not_socket = format!("memif_socket_create(): Failed to setup socket {}: Address already in use\n", f.display());
        let l = eal_failure_line(&not_socket, "x");
        std::fs::remove_file(&f).unwrap();
        assert!(l.contains("exists and is not a socket: remove it"), "{l}");
        // a symbolic link (here to the socket file of a server that is gone) is named as one
        let dir = std::env::temp_dir().join(format!("droce-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (target, link) = (dir.join("dead.sock"), dir.join("link.sock"));
        drop(std::os::unix::net::UnixListener::bind(&target).unwrap());
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let in_use = format!("memif_socket_create(): Failed to setup socket {}: Address already in use\n", link.display());
        let l = eal_failure_line(&in_use, "x");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(l.contains(&format!("{} is a symbolic link to {}", link.display(), target.display())) && l.contains("nobody listens on") && l.contains("rm "), "{l}");
        let l = eal_failure_line("rte_pmd_memif_probe(): Failed to register mp action callback: Operation not supported\nEAL: FATAL: odd\n", "x");
        assert!(l.contains("FATAL: odd"), "{l}");
        assert_eq!(vdev_failure_reason(log, "net_memif0").as_deref(), Some("memif_set_role(): Unknown role: bogus."));
        // EAL's log at debug level (`--log-level=lib.eal:debug`): its informational lines say
        // nothing about the failure, the driver's line does
        let debug = "EAL: Detected CPU lcores: 2\nEAL: Physical addresses are unavailable, selecting IOVA as VA mode.\n\
                     EAL: Selected IOVA mode 'VA'\nmemif_set_zc(): Zero-copy is not supported here.\n\
                     vdev_probe(): failed to initialize net_memif0 device\nEAL: Bus (vdev) probe failed.\n";
        let l = eal_failure_line(debug, "x");
        assert!(l.starts_with("virtual device 'net_memif0' was not created: memif_set_zc(): Zero-copy is not supported here;"), "{l}");
        let l = eal_failure_line("EAL: Physical addresses are unavailable, selecting IOVA as VA mode.\nEAL: FATAL: odd\n", "x");
        assert!(l.contains("FATAL: odd") && !l.contains("core list"), "{l}");
        // a device the driver refused is named with the driver's reason, not taken for a core
        // list problem from EAL's "Physical addresses are unavailable"
        let refused = "EAL: Detected CPU lcores: 2\nEAL: Physical addresses are unavailable, selecting IOVA as VA mode.\n\
                       rte_pmd_memif_probe(): Failed to register mp action callback: Operation not supported\n\
                       memif_check_socket_filename(): Invalid socket directory.\nvdev_probe(): failed to initialize net_memif0 device\n\
                       EAL: Bus (vdev) probe failed.\n";
        let l = eal_failure_line(refused, "x");
        assert!(l.starts_with("virtual device 'net_memif0' was not created: memif_check_socket_filename(): Invalid socket directory;"), "{l}");
        let l = eal_failure_line("EAL: Detected CPU lcores: 2\nEAL: invalid parameters for --socket-mem\nUsage: x\nEAL: Invalid 'command line' arguments.\n", "x");
        assert!(l.starts_with("EAL rejected an argument (invalid parameters for --socket-mem)"), "{l}");
        let l = eal_failure_line("EAL: Detected CPU lcores: 2\nEAL: Cannot open '/var/run/dpdk/p/config' for rte_mem_config\nEAL: FATAL: Cannot init config\nEAL: Cannot init config\n", "x");
        assert!(l.contains("--proc-type=secondary"), "{l}");
        let l = eal_failure_line("EAL: Detected CPU lcores: 2\nEAL: FATAL: something odd\nEAL: Error - exiting with code: 1\n", "x");
        assert_eq!(l, "EAL initialisation failed: FATAL: something odd (x)");
        let l = eal_failure_line("", "Invalid argument");
        assert_eq!(l, "EAL initialisation failed (Invalid argument)");
    }

    #[test]
    fn capture_roundtrip() {
        let (v, text) = capture_stdio(|| {
            // SAFETY: writing a static buffer to fd 1.
            unsafe { libc::write(1, b"hello from fd1\n".as_ptr().cast(), 15) };
            7
        });
        assert_eq!(v, 7);
        assert!(text.contains("hello from fd1"), "{text:?}");
    }
}

/// Restores the default SIGPIPE action (Rust ignores it, which turns `droce-pmd | head` into a
/// panic on the next `println!`); like dpdk-testpmd, the process then ends quietly.
pub fn default_sigpipe() {
    // SAFETY: setting a signal disposition to SIG_DFL at start-up, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
