//! Header prediction on the receive path against the full parser on arbitrary bytes: whatever
//! `RoceRepr::parse_predicted` accepts, `RoceRepr::parse_without_icrc` accepts with the same
//! record and payload range (the receive path uses either one's result alike).
#![no_main]

use droce_transport::wire::RoceRepr;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(p) = RoceRepr::parse_predicted(data) {
        assert_eq!(RoceRepr::parse_without_icrc(data).ok(), Some(p));
    }
});
