//! Harvester release versions, parsed strictly, and the install-config schema each one reads.

use std::fmt;
use std::str::FromStr;

/// The release used when an InstancePool names none: a current stable line (Harvester v1.4),
/// so new pools get the current config schema and the 443 join port.
pub const DEFAULT_VERSION: &str = "v1.4.2";

/// The install-config schema a Harvester release reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schema {
    /// Harvester v1.0.x: `install.networks.harvester-mgmt`, join port 8443, no `scheme_version`.
    V1_0,
    /// Harvester v1.1 and later: `scheme_version: 1`, `install.management_interface`, port 443.
    Current,
}

impl Schema {
    /// The port of the join URL (`server_url`): rancherd's 8443 on v1.0, 443 afterwards.
    pub fn join_port(self) -> u16 {
        match self {
            Schema::V1_0 => 8443,
            Schema::Current => 443,
        }
    }
}

/// A Harvester release such as `v1.3.2` or `v1.4.0-rc1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HarvesterVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
    /// The pre-release suffix without its dash (`rc1`), if any.
    pub pre: Option<String>,
}

/// A version string that is not `vMAJOR.MINOR.PATCH[-PRERELEASE]`, or a release ingot cannot
/// install.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "harvesterVersion {value:?} is not usable: {reason}; write a Harvester release such as {DEFAULT_VERSION} or v1.0.3"
)]
pub struct VersionError {
    pub value: String,
    pub reason: &'static str,
}

impl HarvesterVersion {
    /// Parses `vMAJOR.MINOR.PATCH` with an optional `-PRERELEASE` (letters, digits, dots).
    /// The leading `v` is required, as in Harvester's release names and artifact URLs.
    pub fn parse(value: &str) -> Result<Self, VersionError> {
        let err = |reason| VersionError {
            value: value.to_owned(),
            reason,
        };
        let rest = value
            .strip_prefix('v')
            .ok_or_else(|| err("it must start with 'v'"))?;
        let (core, pre) = match rest.split_once('-') {
            Some((core, pre)) => (core, Some(pre)),
            None => (rest, None),
        };
        let mut parts = core.split('.');
        let mut number = || -> Result<u32, VersionError> {
            let part = parts
                .next()
                .ok_or_else(|| err("it needs three numbers, MAJOR.MINOR.PATCH"))?;
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err("MAJOR, MINOR and PATCH must be decimal numbers"));
            }
            if part.len() > 1 && part.starts_with('0') {
                return Err(err("numbers must not have leading zeros"));
            }
            part.parse().map_err(|_| err("a number is too large"))
        };
        let (major, minor, patch) = (number()?, number()?, number()?);
        if parts.next().is_some() {
            return Err(err("it has more than three numbers"));
        }
        let pre = match pre {
            None => None,
            Some(p)
                if !p.is_empty()
                    && p.split('.').all(|id| {
                        !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric())
                    }) =>
            {
                Some(p.to_owned())
            }
            Some(_) => {
                return Err(err(
                    "the pre-release suffix must be letters and digits, e.g. -rc1",
                ));
            }
        };
        if major == 0 {
            return Err(err(
                "releases before v1.0.0 cannot look up NICs by MAC address and are not supported",
            ));
        }
        Ok(Self {
            major,
            minor,
            patch,
            pre,
        })
    }

    /// The version used when none is given ([`DEFAULT_VERSION`]).
    pub fn default_release() -> Self {
        Self {
            major: 1,
            minor: 4,
            patch: 2,
            pre: None,
        }
    }

    /// Parses `value`, or returns the default release when it is absent or empty.
    pub fn parse_or_default(value: Option<&str>) -> Result<Self, VersionError> {
        match value {
            None | Some("") => Ok(Self::default_release()),
            Some(v) => Self::parse(v),
        }
    }

    /// The config schema this release reads: v1.0.x the old one, v1.1.0 and later (including
    /// their release candidates) the current one.
    pub fn schema(&self) -> Schema {
        if self.major == 1 && self.minor == 0 {
            Schema::V1_0
        } else {
            Schema::Current
        }
    }

    /// Whether the installer reads `harvester.install.management_interface.*` kernel
    /// arguments, which the single-boot flow needs (v1.1 and later).
    pub fn supports_single_boot(&self) -> bool {
        self.schema() == Schema::Current
    }
}

impl fmt::Display for HarvesterVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)?;
        if let Some(pre) = &self.pre {
            write!(f, "-{pre}")?;
        }
        Ok(())
    }
}

impl FromStr for HarvesterVersion {
    type Err = VersionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_releases_and_picks_the_schema() {
        let v = HarvesterVersion::parse("v1.0.3").unwrap();
        assert_eq!(
            (v.major, v.minor, v.patch, v.pre.as_deref()),
            (1, 0, 3, None)
        );
        assert_eq!(v.schema(), Schema::V1_0);
        assert_eq!(v.schema().join_port(), 8443);
        assert!(!v.supports_single_boot());

        let v = HarvesterVersion::parse("v1.3.2").unwrap();
        assert_eq!(v.schema(), Schema::Current);
        assert_eq!(v.schema().join_port(), 443);
        assert_eq!(v.to_string(), "v1.3.2");

        let v = HarvesterVersion::parse("v1.1.0-rc1").unwrap();
        assert_eq!(v.schema(), Schema::Current);
        assert_eq!(v.to_string(), "v1.1.0-rc1");
        assert_eq!(
            HarvesterVersion::parse("v2.0.0").unwrap().schema(),
            Schema::Current
        );
    }

    #[test]
    fn default_is_the_documented_release() {
        let d = HarvesterVersion::parse_or_default(None).unwrap();
        assert_eq!(d.to_string(), DEFAULT_VERSION);
        assert_eq!(HarvesterVersion::parse(DEFAULT_VERSION).unwrap(), d);
        assert_eq!(HarvesterVersion::parse_or_default(Some("")).unwrap(), d);
        assert_eq!(d.schema(), Schema::Current);
    }

    #[test]
    fn rejects_loose_versions_with_a_reason() {
        for (bad, reason) in [
            ("1.3.2", "it must start with 'v'"),
            ("v1.3", "it needs three numbers, MAJOR.MINOR.PATCH"),
            ("v1.3.2.1", "it has more than three numbers"),
            ("v1.03.2", "numbers must not have leading zeros"),
            ("v1.x.2", "MAJOR, MINOR and PATCH must be decimal numbers"),
            (
                "v1.3.2-",
                "the pre-release suffix must be letters and digits, e.g. -rc1",
            ),
            (
                "v1.3.2-rc 1",
                "the pre-release suffix must be letters and digits, e.g. -rc1",
            ),
            ("master", "it must start with 'v'"),
            (
                "v0.3.0",
                "releases before v1.0.0 cannot look up NICs by MAC address and are not supported",
            ),
        ] {
            let e = HarvesterVersion::parse(bad).unwrap_err();
            assert_eq!(e.reason, reason, "{bad}");
            assert!(e.to_string().contains(bad), "{e}");
        }
        assert_eq!(
            HarvesterVersion::parse("1.3.2").unwrap_err().to_string(),
            "harvesterVersion \"1.3.2\" is not usable: it must start with 'v'; write a Harvester release such as v1.4.2 or v1.0.3"
        );
    }
}
