//! A credential that never shows itself.

use std::fmt;

/// An API token. `Debug` and `Display` print `***`; only [`ApiToken::expose`] gives the value,
/// for the one place that puts it in a request header.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken(String);

impl ApiToken {
    /// Wraps a token; surrounding whitespace (a trailing newline from a Secret) is dropped.
    pub fn new(token: impl Into<String>) -> Self {
        ApiToken(token.into().trim().to_string())
    }

    /// The token itself. Use only to build the `X-Auth-Token` header.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiToken(***)")
    }
}

impl fmt::Display for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_is_redacted() {
        let t = ApiToken::new(" s3cr3t-token\n");
        assert_eq!(t.expose(), "s3cr3t-token");
        assert_eq!(format!("{t}"), "***");
        assert!(!format!("{t:?}").contains("s3cr3t"));
        assert!(!format!("{:?}", Some(&t)).contains("s3cr3t"));
    }
}
