//! EAL initialisation and cleanup (RAII).

use std::ffi::{c_char, c_int, CString};
use std::sync::atomic::{AtomicBool, Ordering};

use dpdk_sys as sys;

use crate::devargs::{vdev_names, vdev_specs, VDEVS};
use crate::error::{rte_errno, Error, Result};
use crate::running::RUNNING;

/// Set once `rte_eal_init` has been attempted successfully; never cleared (DPDK cannot re-init).
static INIT_DONE: AtomicBool = AtomicBool::new(false);

/// The initialised Environment Abstraction Layer. Dropping it waits for all worker lcores and
/// calls `rte_eal_cleanup`.
#[derive(Debug)]
pub struct Eal {
    consumed: usize,
    app_args: Vec<String>,
}

impl Eal {
    /// Initialises EAL with `args`, the process arguments *including* the program name in
    /// `args[0]` (as `std::env::args()` gives them; an empty slice uses `"droce"`), exactly as
    /// `rte_eal_init(argc, argv)` takes them. Arguments after a `--` are left for the
    /// application: see [`Eal::app_args`].
    ///
    /// Besides `rte_eal_init`'s own failures (bad or unknown option: `EINVAL`, ...) this checks
    /// that every `--vdev=net_*`/`eth_*` argument really created a port, since EAL only logs
    /// a vdev whose driver does not exist.
    #[allow(unsafe_code)]
    pub fn init(args: &[String]) -> Result<Eal> {
        if INIT_DONE.swap(true, Ordering::AcqRel) {
            return Err(Error::EalAlreadyInitialized);
        }
        let mut owned: Vec<String> = args.to_vec();
        if owned.is_empty() {
            owned.push("droce".to_string());
        }
        let cstrings: Vec<CString> = match owned.iter().map(|a| CString::new(a.as_bytes())).collect() {
            Ok(v) => v,
            Err(_) => {
                INIT_DONE.store(false, Ordering::Release);
                return Err(Error::InvalidArgument("EAL argument contains a NUL byte".into()));
            }
        };
        // EAL keeps pointers into argv (program name, and getopt permutes the array), so both the
        // strings and the pointer array are leaked on purpose: they must outlive EAL.
        let cstrings: &'static [CString] = Box::leak(cstrings.into_boxed_slice());
        let mut argv: Vec<*mut c_char> = cstrings.iter().map(|c| c.as_ptr() as *mut c_char).collect();
        argv.push(std::ptr::null_mut());
        let argv: &'static mut [*mut c_char] = Box::leak(argv.into_boxed_slice());
        let argc = (argv.len() - 1) as c_int;

        let eal_part: Vec<String> = owned[1..].iter().take_while(|a| a.as_str() != "--").cloned().collect();
        if let Err(e) = check_memif_args(&eal_part) {
            INIT_DONE.store(false, Ordering::Release);
            return Err(e);
        }
        let _ = VDEVS.set(vdev_specs(&eal_part));
        let guessed_dir = guess_runtime_dir(&owned[1..]);
        let dir_existed = guessed_dir.as_ref().map(|d| d.exists()).unwrap_or(true);
        // SAFETY: argv is a NULL-terminated array of argc valid C strings that lives forever.
        let ret = unsafe { sys::rte_eal_init(argc, argv.as_mut_ptr()) };
        if ret < 0 {
            let errno = rte_errno();
            // A failed init may already have created its runtime dir; leave no trace of it.
            if !dir_existed {
                if let Some(d) = guessed_dir {
                    let _ = std::fs::remove_dir_all(d);
                }
            }
            // rte_eal_init resets its run-once guard on argument errors, so a retry is allowed.
            INIT_DONE.store(false, Ordering::Release);
            return Err(Error::EalInit { errno: if errno == 0 { libc::EINVAL } else { errno }, args: owned[1..].join(" ") });
        }
        RUNNING.store(true, Ordering::Release);
        crate::intr_gate::arm();
        let consumed = ret as usize;
        // After init, argv[consumed] holds the program name and the application's arguments
        // follow it (getopt may have permuted them, so read them back from argv).
        let app_args = (consumed + 1..argc as usize)
            .map(|i| {
                // SAFETY: argv[i] for i < argc is one of our leaked, NUL-terminated strings.
                unsafe { std::ffi::CStr::from_ptr(argv[i]) }.to_string_lossy().into_owned()
            })
            .collect();
        let eal = Eal { consumed, app_args };

        for name in vdev_names(&eal_part) {
            if !(name.starts_with("net_") || name.starts_with("eth_")) {
                continue;
            }
            if crate::port::port_by_name(&name).is_none() {
                let ports = crate::port::port_ids()
                    .into_iter()
                    .map(|p| crate::port::port_name(p).unwrap_or_else(|_| p.to_string()))
                    .collect();
                drop(eal);
                return Err(Error::VdevNotCreated { name, ports });
            }
        }
        Ok(eal)
    }

    /// Number of arguments `rte_eal_init` consumed (its return value).
    pub fn consumed(&self) -> usize {
        self.consumed
    }

    /// Arguments after `--`, for the application (program name not included).
    pub fn app_args(&self) -> &[String] {
        &self.app_args
    }
}

impl Eal {
    /// Ends this process's use of EAL *without* `rte_eal_cleanup`, for a process that exits right
    /// after: waits for the worker lcores and removes the runtime directory like `Drop`, but
    /// leaves DPDK memory mapped until the process exits.
    ///
    /// Why: DPDK 22.11's `rte_eal_cleanup` (Linux) unmaps the DPDK heap (`rte_eal_memory_detach`)
    /// but never stops the interrupt thread (`eal-intr-thread`). A source still registered or
    /// being serviced there (net_memif's control channel whose handle lives in that heap, while
    /// the peer disconnects at the same moment) then makes that thread read unmapped memory:
    /// SIGSEGV in `rte_intr_fd_get` after the program finished its work. Process exit releases
    /// everything `rte_eal_cleanup` would; stop and close the ports before calling this.
    pub fn release_for_exit(mut self) {
        let runtime_dir = self.prepare_end();
        std::mem::take(&mut self.app_args);
        std::mem::forget(self);
        remove_runtime_dir(runtime_dir);
    }

    /// Marks EAL stopped, notes the runtime dir to remove (primary only) and waits for workers.
    #[allow(unsafe_code)]
    fn prepare_end(&mut self) -> Option<String> {
        RUNNING.store(false, Ordering::Release);
        crate::intr_gate::freeze();
        // SAFETY: EAL is initialised; the runtime dir string is copied before cleanup.
        let (primary, runtime_dir) = unsafe {
            let p = sys::rte_eal_get_runtime_dir();
            let dir = if p.is_null() { None } else { Some(std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()) };
            (sys::rte_eal_process_type() == sys::rte_proc_type_t_RTE_PROC_PRIMARY, dir)
        };
        // SAFETY: waiting for workers first keeps cleanup from freeing memory a worker still
        // uses. Called once, from the thread that owns the Eal.
        unsafe { sys::rte_eal_mp_wait_lcore() };
        runtime_dir.filter(|_| primary)
    }
}

/// EAL leaves its runtime directory (/var/run/dpdk/<file-prefix>) behind; the primary process
/// owns it, and nothing can attach to it after the program ends.
fn remove_runtime_dir(dir: Option<String>) {
    if let Some(dir) = dir.filter(|d| d.contains("/dpdk/")) {
        let _ = std::fs::remove_dir_all(dir);
    }
}

impl Drop for Eal {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        let runtime_dir = self.prepare_end();
        // SAFETY: workers are done (prepare_end). Called once, from the thread that owns the Eal.
        unsafe { sys::rte_eal_cleanup() };
        remove_runtime_dir(runtime_dir);
    }
}

/// Where EAL will put its runtime directory for these arguments (see eal_create_runtime_dir).
fn guess_runtime_dir(args: &[String]) -> Option<std::path::PathBuf> {
    let mut prefix = "rte".to_string();
    let mut it = args.iter().take_while(|a| a.as_str() != "--");
    while let Some(a) = it.next() {
        if let Some(v) = a.strip_prefix("--file-prefix=") {
            prefix = v.to_string();
        } else if a == "--file-prefix" {
            prefix = it.next()?.clone();
        }
    }
    // SAFETY: geteuid has no preconditions.
    #[allow(unsafe_code)]
    let root = unsafe { libc::geteuid() } == 0;
    let base = if root {
        "/var/run".to_string()
    } else {
        std::env::var("XDG_RUNTIME_DIR").unwrap_or_else(|_| "/tmp".to_string())
    };
    Some(std::path::Path::new(&base).join("dpdk").join(prefix))
}

/// Device arguments net_memif accepts (DPDK 22.11 `valid_arguments`).
const MEMIF_KEYS: &[&str] = &["id", "role", "bsize", "rsize", "socket", "socket-abstract", "mac", "zero-copy", "secret"];

/// net_memif parses its device arguments with `rte_kvargs_parse` and, when that fails (an
/// unknown key), goes on with its defaults: `sockett=/x` silently became the default
/// `/run/memif.sock`, and the error came later, naming that socket. Other PMDs refuse the
/// device. Checked before `rte_eal_init`: the first unknown key, with the valid ones.
fn check_memif_args(args: &[String]) -> Result<()> {
    for spec in vdev_specs(args) {
        let mut parts = spec.split(',');
        let name = parts.next().unwrap_or("").trim();
        if !(name.starts_with("net_memif") || name.starts_with("eth_memif")) {
            continue;
        }
        let (mut socket, mut abstract_) = (None, true);
        for kv in parts {
            let (key, value) = kv.split_once('=').map(|(k, v)| (k.trim(), v.trim())).unwrap_or((kv.trim(), ""));
            if !MEMIF_KEYS.contains(&key) {
                return Err(Error::InvalidArgument(format!(
                    "--vdev={spec}: net_memif has no argument '{key}' (it would ignore every argument of this device); valid: {}",
                    MEMIF_KEYS.join(", ")
                )));
            }
            match key {
                "socket" => socket = Some(value),
                // DPDK's own test: "yes" anywhere in the value
                "socket-abstract" => abstract_ = value.contains("yes"),
                _ => {}
            }
        }
        // DPDK would refuse the device with "Invalid socket directory" and nothing more
        if let Some(why) = socket.filter(|_| !abstract_).and_then(crate::devargs::memif_socket_path_problem) {
            return Err(Error::InvalidArgument(format!("--vdev={spec}: {why}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_memif_args;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn memif_keys_checked() {
        assert!(check_memif_args(&args(&["--vdev=net_memif0,role=client,socket=/tmp/x,socket-abstract=no,rsize=11"])).is_ok());
        // a path DPDK refuses ("Invalid socket directory") is named before EAL starts; as an
        // abstract name (the default) any name goes
        let e = check_memif_args(&args(&["--vdev=net_memif0,role=server,socket=./d.sock,socket-abstract=no"])).unwrap_err().to_string();
        assert!(e.contains("socket=./d.sock") && e.contains("absolute path"), "{e}");
        assert!(check_memif_args(&args(&["--vdev=net_memif0,socket=/x,socket-abstract=no"])).is_err());
        assert!(check_memif_args(&args(&["--vdev=net_memif0,role=server,socket=./d.sock"])).is_ok());
        assert!(check_memif_args(&args(&["--vdev=net_ring0,whatever=1"])).is_ok());
        let e = check_memif_args(&args(&["--vdev", "net_memif1,role=client,sockett=/tmp/x"])).unwrap_err().to_string();
        assert!(e.contains("'sockett'") && e.contains("valid: id, role"), "{e}");
        assert!(check_memif_args(&args(&["--vdev=net_memif0,rolee"])).is_err());
    }
}
