//! The pcap/pcapng reader behind droce-dump on arbitrary files: no panic, frames in bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(frames) = droce_transport::pcap::read(data) {
        for (i, f) in frames.iter().enumerate() {
            assert_eq!(f.number, i + 1);
            let _ = droce_transport::wire::RoceRepr::parse(f.data);
        }
    }
});
