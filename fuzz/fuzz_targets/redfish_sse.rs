//! The EventService's server-sent event framing. The first byte sets how the stream is cut into
//! reads; the messages must be the same whether the stream arrives at once or cut up.
#![no_main]

use ingot_bmc::redfish::fuzzing::EventFramer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, stream)) = data.split_first() else {
        return;
    };
    let mut whole = EventFramer::default();
    whole.push(stream);
    let at_once = drain(&mut whole);

    let mut framer = EventFramer::default();
    let mut in_reads = Vec::new();
    let mut rest = stream;
    let mut step = usize::from(cut);
    while !rest.is_empty() {
        // Reads of 1 to 16 bytes, varying with the position.
        step = step.wrapping_mul(31).wrapping_add(7);
        let (read, next) = rest.split_at((step % 16 + 1).min(rest.len()));
        framer.push(read);
        in_reads.extend(drain(&mut framer));
        rest = next;
    }
    assert_eq!(
        at_once, in_reads,
        "the messages depend on how the stream was read"
    );
});

fn drain(f: &mut EventFramer) -> Vec<String> {
    std::iter::from_fn(|| f.next_message())
        .map(|m| format!("{m:?}"))
        .collect()
}
