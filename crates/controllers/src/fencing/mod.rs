//! Fencing: see [`phase`].

pub mod phase;
