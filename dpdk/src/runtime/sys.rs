//! Operating-system helpers of the runtime: library pinning, exit hooks, affinity, stdio, locks.
#![allow(unsafe_code)]
use std::ffi::c_int;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

extern "C" {
    // lib/log in DPDK 22.11 (librte_eal), not in dpdk-sys's bindgen allowlist
    pub(super) fn rte_openlog_stream(f: *mut libc::FILE) -> c_int;
}

/// Keeps the shared object this code is in (the libfabric provider, the UCX module)
/// loaded until the process exits: RTLD_NODELETE on the already loaded object. Nothing
/// happens in an executable or when the loader refuses.
pub fn pin_own_library() {
    // SAFETY: dladdr fills `info` for an address of our own code; dlopen with RTLD_NOLOAD
    // only looks up an object already loaded (the name dladdr gave) and marks it
    // NODELETE; the handle it returns is deliberately never closed.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let here = pin_own_library as *const libc::c_void;
        if libc::dladdr(here, &mut info) != 0 && !info.dli_fname.is_null() {
            libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE);
        }
    }
}

/// madvise(addr, len, advice) for a range of this process's own mappings; true on success.
pub fn madvise(addr: usize, len: usize, advice: libc::c_int) -> bool {
    // SAFETY: a range /proc/self/maps lists as one of our shared mappings; populating
    // changes no byte of it (a range unmapped meanwhile only makes madvise fail).
    unsafe { libc::madvise(addr as *mut libc::c_void, len, advice) == 0 }
}

/// Registers `f` to run at process exit (C `atexit`; with the library pinned it runs at
/// exit, before the libraries' destructors).
pub fn at_exit(f: extern "C" fn()) {
    // SAFETY: `f` is a plain function with no arguments, valid for the whole process.
    unsafe {
        libc::atexit(f);
    }
}

pub fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// Sends EAL's log lines to stderr (DPDK 22.11 writes them to stdout, which is the
/// application's output).
pub fn eal_log_to_stderr() {
    // SAFETY: dup of fd 2 and fdopen on the new fd; the FILE is handed to DPDK for the rest
    // of the process and never closed. A failure leaves DPDK's default stream.
    unsafe {
        let fd = libc::dup(2);
        if fd < 0 {
            return;
        }
        let f = libc::fdopen(fd, c"w".as_ptr());
        if f.is_null() {
            libc::close(fd);
            return;
        }
        rte_openlog_stream(f);
    }
}

/// Runs `f` with file descriptor 1 pointing at stderr (C stdio flushed before and after).
pub fn stdout_to_stderr<T>(f: impl FnOnce() -> T) -> T {
    let _ = std::io::stdout().flush();
    // SAFETY: plain fd calls on fds 1 and 2 and a dup we own and close; fflush(NULL)
    // flushes every C stream. If the dup fails nothing is redirected.
    let saved = unsafe {
        libc::fflush(std::ptr::null_mut());
        let saved = libc::dup(1);
        if saved >= 0 && libc::dup2(2, 1) < 0 {
            libc::close(saved);
            -1
        } else {
            saved
        }
    };
    let r = f();
    if saved >= 0 {
        // SAFETY: as above; `saved` is our dup of the original fd 1.
        unsafe {
            libc::fflush(std::ptr::null_mut());
            libc::dup2(saved, 1);
            libc::close(saved);
        }
    }
    r
}

pub fn get_affinity() -> Option<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is plain data (all-zero is a valid empty set); the call writes at
    // most size_of::<cpu_set_t>() bytes into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        (libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0).then_some(set)
    }
}

pub fn set_affinity(set: &libc::cpu_set_t) {
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 = the calling thread.
    unsafe {
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set);
    }
}

pub fn first_allowed_cpu() -> Option<u32> {
    let set = get_affinity()?;
    // SAFETY: CPU_ISSET reads the set within CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize).find(|&c| unsafe { libc::CPU_ISSET(c, &set) }).map(|c| c as u32)
}

/// With --no-shconf EAL puts nothing in its runtime directory but creates it; the global
/// host never ends EAL, so remove the empty directory now instead of leaving one per process.
pub fn remove_empty_runtime_dir() {
    // SAFETY: EAL is initialised; the returned string is owned by EAL and copied at once.
    let dir = unsafe {
        let p = crate::sys::rte_eal_get_runtime_dir();
        if p.is_null() {
            return;
        }
        std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
    };
    let _ = std::fs::remove_dir(dir);
}

/// The lock directory must be a real directory owned by us and not writable by others.
pub fn check_private_dir(dir: &Path) -> Result<(), String> {
    let md = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if !md.is_dir() {
        return Err("not a directory".into());
    }
    if md.uid() != uid() {
        return Err(format!("owned by uid {}, not by this user ({})", md.uid(), uid()));
    }
    if md.mode() & 0o022 != 0 {
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Opens `path` (created if missing, never truncated) and takes an exclusive flock on it
/// without waiting: the open file when taken (the lock lasts as long as it stays open),
/// Ok(None) when another process holds it.
pub(super) fn lock_file(path: &Path) -> std::io::Result<Option<std::fs::File>> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)?;
    // SAFETY: flock on a file descriptor we own; closing it (drop) releases the lock.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::EWOULDBLOCK) { Ok(None) } else { Err(e) };
    }
    Ok(Some(f))
}

/// Whether the flock on `path` is free now (taken and released at once; the file is not
/// written).
pub fn probe_lock(path: &Path) -> std::io::Result<bool> {
    Ok(lock_file(path)?.is_some())
}

/// Takes an exclusive flock on `path` (created if missing) without waiting: the open file
/// when taken (it then holds our pid; the lock lasts as long as the file stays open),
/// Ok(None) when another process holds it.
pub fn try_lock(path: &Path) -> std::io::Result<Option<std::fs::File>> {
    let Some(mut f) = lock_file(path)? else { return Ok(None) };
    f.set_len(0)?;
    let _ = writeln!(f, "{}", std::process::id());
    Ok(Some(f))
}
