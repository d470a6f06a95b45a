//! A --vdev naming a driver that does not exist, or with arguments its driver rejects, is an
//! error with a message, not a silently missing port.

mod common;

use droce_dpdk::*;

#[test]
fn nonexistent_vdev_is_an_error() {
    // no driver matches the name: EAL itself refuses the devargs (ENODEV)
    let e = Eal::init(&common::eal_args(&["--vdev=net_ring0", "--vdev=net_nosuchpmd0"])).unwrap_err();
    assert_eq!(e.errno(), Some(libc::ENODEV), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("net_nosuchpmd0") && text.contains("no driver"), "{text}");
    assert!(!is_running());

    // the driver exists but refuses its arguments: EAL only logs it, we report it
    let e = Eal::init(&common::eal_args(&["--vdev=net_ring0", "--vdev=net_memif7,role=bogus"])).unwrap_err();
    match &e {
        Error::VdevNotCreated { name, ports } => {
            assert_eq!(name, "net_memif7");
            assert_eq!(ports, &vec!["net_ring0".to_string()]);
        }
        other => panic!("expected VdevNotCreated, got {other:?}"),
    }
    assert!(e.to_string().contains("net_memif7"), "{e}");
    assert!(!is_running(), "EAL cleaned up after the failed check");
}
