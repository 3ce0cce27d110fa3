//! Test builds only (the `crash-points` feature): `--crash-point` / `INGOT_CRASH_POINT` abort
//! the process at named points, so that a test kills the operator at an exact line. The shipped
//! binary is built without the feature: it refuses the flag and holds none of this code.

/// Aborts the process at the armed crash point `point`.
pub(crate) fn abort_at(point: &str) {
    tracing::error!(point, "crash point reached: aborting");
    std::process::abort();
}
