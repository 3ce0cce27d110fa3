//! The iPXE side of an install: which script URL a server boots into the installer with, and
//! the script ingot serves for an Instance at `/ipxe/instances/<name>.ipxe`.

use ingot_api::equinix::{DEFAULT_MANAGEMENT_INTERFACE, Instance, InstanceSpec};
use ingot_harvester::{Artifacts, HarvesterVersion, InstallBoot};
use kube::ResourceExt;

use super::Settings;

/// The install iPXE script URL the Go addon kept on its Instances (copied from the pool's
/// `ipxeScriptUrl`).
pub const RECONFIG_ANNOTATION: &str = "reconfig_ipxe_url";

/// The path under `--ipxe-base-url` where ingot serves an Instance's install script.
pub fn served_script_path(instance: &str) -> String {
    format!("/ipxe/instances/{instance}.ipxe")
}

/// The install iPXE script: the pool's `ipxeScriptUrl` (kept on the Instance as the Go addon's
/// annotation, or in its spec) if set, else the one ingot serves for this Instance.
pub fn install_script_url(settings: &Settings, instance: &Instance) -> Option<String> {
    let own = instance
        .annotations()
        .get(RECONFIG_ANNOTATION)
        .filter(|u| !u.is_empty())
        .cloned();
    if own.is_some() {
        return own;
    }
    let base = settings.ipxe_base_url.as_ref()?;
    Some(format!(
        "{}{}",
        base.trim_end_matches('/'),
        served_script_path(&instance.name_any())
    ))
}

pub(crate) fn management_interfaces(spec: &InstanceSpec) -> Vec<String> {
    spec.management_interfaces
        .clone()
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| vec![DEFAULT_MANAGEMENT_INTERFACE.to_owned()])
}

/// Why an install script cannot be rendered for an Instance.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error(transparent)]
    Version(#[from] ingot_harvester::VersionError),
    #[error(transparent)]
    Artifacts(#[from] ingot_harvester::ArtifactsError),
    #[error(transparent)]
    Ipxe(#[from] ingot_harvester::IpxeError),
    #[error("the installer's config URL: {0}")]
    Url(#[from] url::ParseError),
}

/// The install iPXE script ingot serves for an Instance: the installer of its Harvester
/// release, with the management MACs on the kernel command line when it boots once
/// (`singleBoot`).
pub fn install_script(settings: &Settings, instance: &Instance) -> Result<String, ScriptError> {
    let spec = &instance.spec;
    let version = HarvesterVersion::parse_or_default(spec.harvester_version.as_deref())?;
    let artifacts = Artifacts::new(&version, settings.harvester_mirror.as_deref())?;
    let mut boot = InstallBoot::reinstall(artifacts)?;
    if spec.single_boot == Some(true) {
        boot.single_boot = Some(ingot_harvester::ipxe::SingleBoot {
            interfaces: management_interfaces(spec),
            bond_options: spec.management_bonding_options.clone().unwrap_or_default(),
        });
    }
    Ok(boot.script()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn instance(annotations: &[(&str, &str)]) -> Instance {
        let mut instance = Instance::new("pool-abcdefgh", InstanceSpec::default());
        instance.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
        );
        instance
    }

    #[test]
    fn the_pool_script_wins_over_the_served_one() {
        let settings = Settings {
            ipxe_base_url: Some("http://ingot.example:8080/".to_owned()),
            ..Settings::default()
        };
        assert_eq!(
            install_script_url(&settings, &instance(&[])).as_deref(),
            Some("http://ingot.example:8080/ipxe/instances/pool-abcdefgh.ipxe")
        );
        assert_eq!(
            install_script_url(
                &settings,
                &instance(&[(RECONFIG_ANNOTATION, "http://pxe.example/install.ipxe")])
            )
            .as_deref(),
            Some("http://pxe.example/install.ipxe")
        );
        assert_eq!(
            install_script_url(&Settings::default(), &instance(&[])),
            None
        );
    }
}
