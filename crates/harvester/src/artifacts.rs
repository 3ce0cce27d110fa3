//! Where a Harvester release's boot artifacts live.
//!
//! Harvester publishes every release under `https://releases.rancher.com/harvester/<v>/` as
//! `harvester-<v>-vmlinuz-amd64`, `harvester-<v>-initrd-amd64`,
//! `harvester-<v>-rootfs-amd64.squashfs` and `harvester-<v>-amd64.iso`. A mirror with the same
//! layout (`<base>/<v>/<file>`) can replace the base, e.g. a plain-HTTP mirror for iPXE builds
//! that cannot verify the release host's certificate chain.

use url::Url;

use crate::version::HarvesterVersion;

/// The release host's base URL.
pub const DEFAULT_RELEASE_BASE: &str = "https://releases.rancher.com/harvester/";

/// A mirror base URL that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactsError {
    #[error(
        "the artifact mirror {value:?} is not a URL ({reason}); write e.g. http://mirror.example/harvester/"
    )]
    InvalidBase { value: String, reason: String },
    #[error("the artifact mirror {value:?} must be http or https, not {scheme}")]
    UnsupportedScheme { value: String, scheme: String },
    #[error("the artifact mirror {value:?} must not carry a query or fragment")]
    QueryOrFragment { value: String },
}

/// The four artifact URLs of one release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifacts {
    pub version: HarvesterVersion,
    pub kernel: Url,
    pub initrd: Url,
    pub rootfs: Url,
    pub iso: Url,
}

impl Artifacts {
    /// The amd64 artifacts of `version` on the release host, or on `mirror` when given.
    pub fn new(version: &HarvesterVersion, mirror: Option<&str>) -> Result<Self, ArtifactsError> {
        Self::for_arch(version, mirror, "amd64")
    }

    /// The artifacts of `version` for `arch` (`amd64`, `arm64`: the suffix Harvester's file
    /// names carry) on the release host, or on `mirror` when given.
    pub fn for_arch(
        version: &HarvesterVersion,
        mirror: Option<&str>,
        arch: &str,
    ) -> Result<Self, ArtifactsError> {
        let raw = mirror
            .filter(|m| !m.is_empty())
            .unwrap_or(DEFAULT_RELEASE_BASE);
        let mut base = Url::parse(raw).map_err(|e| ArtifactsError::InvalidBase {
            value: raw.to_owned(),
            reason: e.to_string(),
        })?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(ArtifactsError::UnsupportedScheme {
                value: raw.to_owned(),
                scheme: base.scheme().to_owned(),
            });
        }
        if base.query().is_some() || base.fragment().is_some() {
            return Err(ArtifactsError::QueryOrFragment {
                value: raw.to_owned(),
            });
        }
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let v = version.to_string();
        let file = |suffix: &str| {
            base.join(&format!("{v}/harvester-{v}-{suffix}"))
                .map_err(|e| ArtifactsError::InvalidBase {
                    value: raw.to_owned(),
                    reason: e.to_string(),
                })
        };
        Ok(Self {
            version: version.clone(),
            kernel: file(&format!("vmlinuz-{arch}"))?,
            initrd: file(&format!("initrd-{arch}"))?,
            rootfs: file(&format!("rootfs-{arch}.squashfs"))?,
            iso: file(&format!("{arch}.iso"))?,
        })
    }

    /// The initrd's file name, which iPXE uses as the image name (`initrd=<name>` on the kernel
    /// line).
    pub fn initrd_name(&self) -> &str {
        self.initrd
            .path_segments()
            .and_then(|mut s| s.next_back())
            .unwrap_or("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_host_urls() {
        let v = HarvesterVersion::parse("v1.3.2").unwrap();
        let a = Artifacts::new(&v, None).unwrap();
        assert_eq!(
            a.kernel.as_str(),
            "https://releases.rancher.com/harvester/v1.3.2/harvester-v1.3.2-vmlinuz-amd64"
        );
        assert_eq!(
            a.initrd.as_str(),
            "https://releases.rancher.com/harvester/v1.3.2/harvester-v1.3.2-initrd-amd64"
        );
        assert_eq!(
            a.rootfs.as_str(),
            "https://releases.rancher.com/harvester/v1.3.2/harvester-v1.3.2-rootfs-amd64.squashfs"
        );
        assert_eq!(
            a.iso.as_str(),
            "https://releases.rancher.com/harvester/v1.3.2/harvester-v1.3.2-amd64.iso"
        );
        assert_eq!(a.initrd_name(), "harvester-v1.3.2-initrd-amd64");
    }

    #[test]
    fn mirror_with_or_without_trailing_slash() {
        let v = HarvesterVersion::parse("v1.0.3").unwrap();
        for m in [
            "http://mirror.example:8080/harvester",
            "http://mirror.example:8080/harvester/",
        ] {
            let a = Artifacts::new(&v, Some(m)).unwrap();
            assert_eq!(
                a.kernel.as_str(),
                "http://mirror.example:8080/harvester/v1.0.3/harvester-v1.0.3-vmlinuz-amd64"
            );
        }
        let a = Artifacts::new(&v, Some("http://10.0.0.5")).unwrap();
        assert_eq!(
            a.iso.as_str(),
            "http://10.0.0.5/v1.0.3/harvester-v1.0.3-amd64.iso"
        );
        assert_eq!(
            Artifacts::new(&v, Some("")).unwrap(),
            Artifacts::new(&v, None).unwrap()
        );
    }

    #[test]
    fn arm64_artifacts() {
        let v = HarvesterVersion::parse("v1.7.1").unwrap();
        let a = Artifacts::for_arch(&v, Some("http://10.0.0.5:8080"), "arm64").unwrap();
        assert_eq!(
            a.kernel.as_str(),
            "http://10.0.0.5:8080/v1.7.1/harvester-v1.7.1-vmlinuz-arm64"
        );
        assert_eq!(a.initrd_name(), "harvester-v1.7.1-initrd-arm64");
        assert_eq!(
            a.rootfs.as_str(),
            "http://10.0.0.5:8080/v1.7.1/harvester-v1.7.1-rootfs-arm64.squashfs"
        );
        assert_eq!(
            a.iso.as_str(),
            "http://10.0.0.5:8080/v1.7.1/harvester-v1.7.1-arm64.iso"
        );
    }

    #[test]
    fn bad_mirrors() {
        let v = HarvesterVersion::parse("v1.3.2").unwrap();
        assert!(matches!(
            Artifacts::new(&v, Some("mirror/harvester")),
            Err(ArtifactsError::InvalidBase { .. })
        ));
        assert!(matches!(
            Artifacts::new(&v, Some("ftp://mirror/harvester/")),
            Err(ArtifactsError::UnsupportedScheme { .. })
        ));
        assert!(matches!(
            Artifacts::new(&v, Some("https://mirror/h/?x=1")),
            Err(ArtifactsError::QueryOrFragment { .. })
        ));
    }
}
