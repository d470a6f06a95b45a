//! An unknown EAL option is an error with a message, not a panic or an abort.

mod common;

use droce_dpdk::*;

#[test]
fn unknown_eal_option_is_an_error() {
    let e = Eal::init(&common::eal_args(&["--no-such-eal-option", "--vdev=net_null0"])).unwrap_err();
    match &e {
        Error::EalInit { errno, args } => {
            assert_eq!(*errno, libc::EINVAL);
            assert!(args.contains("--no-such-eal-option"));
        }
        other => panic!("expected EalInit, got {other:?}"),
    }
    let text = e.to_string();
    assert!(text.contains("EAL initialisation failed") && text.contains("Invalid argument"), "{text}");
    assert!(!is_running());
    assert_eq!(port_count(), 0);
    // EAL allows a retry after an argument error; net_null then gives a port
    let eal = Eal::init(&common::eal_args(&["--vdev=net_null0"])).expect("retry with good args");
    assert_eq!(port_ids(), vec![PortId(0)]);
    let port = Port::new(PortId(0)).unwrap();
    assert_eq!(port.info().unwrap().driver_name, "net_null");
    let mac: MacAddr = "02:de:ad:be:ef:01".parse().unwrap();
    port.set_mac_addr(mac).unwrap();
    assert_eq!(port.mac_addr().unwrap(), mac);
    drop(eal);
}
