//! Cluster primitives the controllers share: what they do to Nodes and pods, without the
//! policy (which pods, how long, when to force) each controller keeps for itself.

pub mod drain;
