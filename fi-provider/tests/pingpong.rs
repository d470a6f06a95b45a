//! fi_pingpong (libfabric-bin) between two processes over the zero-config memif wire, with
//! data checks (-c), on every endpoint type droce offers.

mod common;
use common::*;
use std::time::Duration;

fn check(ep: &str, port: u16, extra: &[&str], sizes: &[&str]) {
    assert!(have("fi_pingpong"), "fi_pingpong missing: apt-get install libfabric-bin");
    let ((src, sout), (crc, cout)) = pingpong(ep, ep, port, extra, Duration::from_secs(90));
    assert_eq!(crc, Some(0), "client failed:\n{cout}\nserver:\n{sout}");
    assert_eq!(src, Some(0), "server failed:\n{sout}\nclient:\n{cout}");
    for out in [&sout, &cout] {
        let rows = result_rows(out);
        let got: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(got, sizes, "{out}");
        for (size, sent, ack) in &rows {
            assert!(*sent > 0 && ack == &format!("={sent}"), "size {size}: {out}");
        }
    }
}

#[test]
fn msg_over_rc() {
    check("msg", 47611, &["-c", "-I", "20"], &["64", "256", "1k", "4k", "64k", "1m"]);
}

#[test]
fn dgram_over_ud() {
    check("dgram", 47612, &["-c", "-I", "20"], &["64", "256", "1k"]);
}

#[test]
fn rdm_through_ofi_rxm() {
    check("rdm", 47613, &["-c", "-I", "10"], &["64", "256", "1k", "4k", "64k", "1m"]);
}
