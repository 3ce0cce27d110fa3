//! A password that never reaches logs, errors or `Debug` output.

use std::fmt;

/// A secret string. `Debug` and `Display` print `<redacted>`; the value is only reachable
/// through [`Password::expose`], which call sites use exactly where the protocol needs it.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Password(String);

impl Password {
    pub fn new(value: impl Into<String>) -> Self {
        Password(value.into())
    }

    /// The secret itself. Do not log the result.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

impl fmt::Display for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl From<String> for Password {
    fn from(value: String) -> Self {
        Password(value)
    }
}

impl From<&str> for Password {
    fn from(value: &str) -> Self {
        Password(value.to_owned())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn never_printed() {
        let p = Password::new("hunter2");
        assert!(!format!("{p:?}").contains("hunter2"));
        assert!(!format!("{p}").contains("hunter2"));
        assert_eq!(p.expose(), "hunter2");
    }
}
