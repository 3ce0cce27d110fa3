//! Go durations as manifests write them (`5m`, `1h30m`, `1.5h`): the controllers' parser, and
//! the formatter's output parses back to the same whole seconds.
#![no_main]

// The two functions are std-only: compiled from their source file rather than through the
// controllers crate, whose Kubernetes dependencies would add minutes to every fuzz build.
#[path = "../../crates/controllers/src/duration.rs"]
mod duration;

use libfuzzer_sys::fuzz_target;
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(d) = duration::parse_go_duration(text) {
        let whole = Duration::from_secs(d.as_secs());
        let printed = duration::go_duration(d);
        assert_eq!(
            duration::parse_go_duration(&printed),
            Some(whole),
            "{printed}"
        );
    }
});
