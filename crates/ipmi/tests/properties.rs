//! Properties of the session layer, checked over generated inputs (proptest): the anti-replay
//! window takes each sequence number at most once and exactly those a reference model takes;
//! what a session seals opens to the same payload; a sealed packet changed anywhere the
//! AuthCode covers, or opened with other keys, is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;

use ingot_ipmi::CipherSuite;
use ingot_ipmi::fuzzing::{Keys, PAYLOAD_IPMI, Refused, SeqWindow, decode_packet};
use proptest::prelude::*;

fn suite() -> impl Strategy<Value = CipherSuite> {
    prop_oneof![Just(CipherSuite::Suite3), Just(CipherSuite::Suite17)]
}

/// Sequence numbers as a BMC sends them: mostly rising, some repeated, late, far ahead, 0 or
/// near the top of the range.
fn sequence() -> impl Strategy<Value = Vec<u32>> {
    let step = prop_oneof![
        4 => 0i64..3,
        3 => -40i64..0,
        1 => 30i64..40,
        1 => 1i64..100_000,
    ];
    (
        prop_oneof![Just(0u32), Just(1), 1u32..1000, Just(u32::MAX - 50)],
        prop::collection::vec(step, 1..200),
    )
        .prop_map(|(start, steps)| {
            let mut at = i64::from(start);
            steps
                .into_iter()
                .map(|s| {
                    at = (at + s).clamp(0, i64::from(u32::MAX));
                    u32::try_from(at).unwrap()
                })
                .collect()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_window_takes_each_number_once_and_only_recent_ones(seqs in sequence()) {
        let mut window = SeqWindow::default();
        let mut seen = HashSet::new();
        let mut highest = 0u32;
        for seq in seqs {
            // The model: never 0, never twice, and not more than 31 below the highest taken.
            let want = seq != 0
                && !seen.contains(&seq)
                && (highest == 0 || seq > highest || highest - seq < 32);
            prop_assert_eq!(window.accept(seq), want, "seq {} after highest {}", seq, highest);
            if want {
                seen.insert(seq);
                highest = highest.max(seq);
            }
        }
    }

    #[test]
    fn what_is_encrypted_decrypts_to_the_same_bytes(
        suite in suite(),
        sik in prop::collection::vec(any::<u8>(), 20..=32),
        iv in any::<[u8; 16]>(),
        data in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        let keys = Keys::derive(suite, &sik).unwrap();
        let sealed = keys.encrypt(iv, &data).unwrap();
        prop_assert_eq!(sealed.len() % 16, 0);
        prop_assert_eq!(keys.decrypt(&sealed).unwrap(), data);
    }

    #[test]
    fn a_sealed_packet_opens_only_unchanged_and_with_its_keys(
        suite in suite(),
        sik in prop::collection::vec(any::<u8>(), 20..=32),
        other_sik in prop::collection::vec(any::<u8>(), 20..=32),
        session_id in any::<u32>(),
        seq in any::<u32>(),
        iv in any::<[u8; 16]>(),
        data in prop::collection::vec(any::<u8>(), 0..300),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let keys = Keys::derive(suite, &sik).unwrap();
        let packet = keys.seal(PAYLOAD_IPMI, session_id, seq, &data, iv).unwrap();

        let opened = decode_packet(&packet, Some(&keys)).unwrap();
        prop_assert!(opened.authenticated);
        prop_assert_eq!(
            (opened.payload_type, opened.session_id, opened.seq),
            (PAYLOAD_IPMI, session_id, seq)
        );
        prop_assert_eq!(&opened.payload, &data);

        // Every byte after the RMCP header is covered by the AuthCode or is the AuthCode.
        let mut changed = packet.clone();
        let i = 4 + at.index(packet.len() - 4);
        changed[i] ^= flip;
        prop_assert!(decode_packet(&changed, Some(&keys)).is_err(), "byte {} changed", i);

        prop_assume!(other_sik != sik);
        let other = Keys::derive(suite, &other_sik).unwrap();
        prop_assert_eq!(decode_packet(&packet, Some(&other)), Err(Refused::Integrity));
        // Without a session an authenticated packet is never taken.
        prop_assert!(decode_packet(&packet, None).is_err());
    }
}
