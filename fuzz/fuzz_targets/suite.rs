#![no_main]
//! `vauban::fuzz_targets::suite` under libFuzzer: see `scripts/fuzz.sh`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| vauban::fuzz_targets::suite(data));
