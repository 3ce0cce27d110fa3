//! glibc's malloc with a fixed mmap threshold.
//!
//! glibc starts by mapping every block of 128 KiB or more on its own, but each time such a
//! block is freed it raises that threshold to the block's size (up to 32 MiB). After the first
//! large watch page or local Cluster (about 1 MB with 10,000 members) is freed, later large
//! blocks come from the heap, between long-lived small objects (the stores), and their memory
//! stays with the process once they are freed. With the threshold fixed at its initial value,
//! every large block is its own mapping and goes back to the system when freed: with 3,000
//! Inventories the operator's peak RSS went from 92 to 83 MiB (docs/seeder.md).

/// Blocks of this size or more are mapped on their own (glibc's initial threshold).
pub const MMAP_THRESHOLD: usize = 128 * 1024;

/// Fixes glibc's mmap threshold (setting it also stops glibc moving its trim threshold).
/// Called first in `main`, before any other thread exists. Returns whether glibc took it.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn fix_mmap_threshold() -> bool {
    let threshold = libc::c_int::try_from(MMAP_THRESHOLD).unwrap_or(libc::c_int::MAX);
    // SAFETY: mallopt sets one parameter of the allocator; it takes no pointer, and glibc
    // serialises it with allocations.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, threshold) == 1 }
}

/// Other C libraries keep their own policy.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn fix_mmap_threshold() -> bool {
    false
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;

    fn resident_bytes() -> usize {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
        let pages: usize = statm
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        pages * 4096
    }

    /// 64 MiB of 512 KiB blocks, each followed by a small block that stays, are freed after a
    /// 4 MiB block was: with glibc's moving threshold the 512 KiB blocks come from the heap
    /// and their 64 MiB stay resident; with the fixed threshold they go back to the system.
    #[test]
    fn freed_large_blocks_go_back_to_the_system() {
        assert!(fix_mmap_threshold());
        drop(std::hint::black_box(vec![1u8; 4 * MIB]));
        let before = resident_bytes();
        let mut large = Vec::new();
        let mut small = Vec::new();
        for _ in 0..128 {
            large.push(std::hint::black_box(vec![1u8; MIB / 2]));
            small.push(std::hint::black_box(Box::new([1u8; 64])));
        }
        let held = resident_bytes().saturating_sub(before);
        drop(large);
        let kept = resident_bytes().saturating_sub(before);
        drop(small);
        assert!(held >= 48 * MIB, "the blocks were not resident: {held}");
        // Half: the binary's other tests allocate at the same time; with the moving threshold
        // nearly all of it stays.
        assert!(
            kept < held / 2,
            "{} MiB of {} MiB freed stayed resident",
            kept / MIB,
            held / MIB
        );
    }
}
