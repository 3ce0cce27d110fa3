//! Pools' `maxUnhealthy` (a count or a percentage): parsing, the allowed number of a pool's
//! members, and the value printed in messages parses back to itself.
#![no_main]

// std-only: compiled from its source file rather than through the controllers crate (see
// go_duration.rs).
#[path = "../../crates/controllers/src/pools/budget.rs"]
mod budget;

use budget::MaxUnhealthy;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(([a, b], text)) = data.split_first_chunk::<2>() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let members = usize::from(u16::from_le_bytes([*a, *b]));
    if let Some(max) = MaxUnhealthy::parse(text) {
        assert_eq!(MaxUnhealthy::parse(&max.to_string()), Some(max));
        if let MaxUnhealthy::Percent(_) = max {
            assert!(max.allowed(members) <= members);
        }
    }
});
