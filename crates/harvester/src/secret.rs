//! A string that never shows up in `Debug` or `Display` output.

use std::fmt;

/// A secret input (the cluster join token, the OS password). `Debug` prints `Secret(***)`,
/// so a config input can be logged or put in an error without leaking it; only
/// [`Secret::expose`] gives the value, where it is written into the rendered config.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself: call it only where the secret is meant to be written.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("Secret(<empty>)")
        } else {
            f.write_str("Secret(***)")
        }
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_value() {
        let s = Secret::new("K10abc::server:topsecret");
        assert_eq!(format!("{s:?}"), "Secret(***)");
        assert_eq!(format!("{:?}", Secret::default()), "Secret(<empty>)");
        assert_eq!(s.expose(), "K10abc::server:topsecret");
    }
}
