//! Installing the CRDs: ingot's generated ones, and Gardener's `machine.sapcloud.io` files from
//! the shared fixtures (Gardener owns that group, so its files are installed unchanged).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use crate::{Error, Result};

const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(30);

/// The shared fixtures and research directory: `INGOT_SHARED_DIR`, else `shared` beside the
/// repository. The repository is the one this crate was built in or, when that path is gone
/// (a build reused from another checkout), the nearest one above the working directory.
pub fn shared_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("INGOT_SHARED_DIR") {
        return PathBuf::from(dir);
    }
    let built_in = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared");
    if built_in.join("fixtures").is_dir() {
        return built_in;
    }
    std::env::current_dir()
        .ok()
        .and_then(|cwd| {
            cwd.ancestors()
                .map(|dir| dir.join("shared"))
                .find(|shared| shared.join("fixtures").is_dir())
        })
        .unwrap_or(built_in)
}

/// Gardener's CRD files for `machine.sapcloud.io`.
pub fn gardener_crds() -> Result<Vec<CustomResourceDefinition>> {
    let dir = shared_dir().join("fixtures/upstream-crds");
    let mut crds = Vec::new();
    for kind in [
        "machineclasses",
        "machines",
        "machinesets",
        "machinedeployments",
    ] {
        let path = dir.join(format!("machine.sapcloud.io_{kind}.yaml"));
        let text = std::fs::read_to_string(&path).map_err(|e| Error::CrdFile {
            path: path.clone(),
            message: format!("{e} (set INGOT_SHARED_DIR to the shared fixtures directory)"),
        })?;
        let crd: CustomResourceDefinition =
            serde_yaml::from_str(&text).map_err(|e| Error::CrdFile {
                path: path.clone(),
                message: e.to_string(),
            })?;
        crds.push(crd);
    }
    Ok(crds)
}

/// Applies every CRD (server-side, idempotent) and waits until each is established.
pub async fn install_crds(client: &Client) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply("ingot-testenv").force();
    let mut crds = ingot_api::crds::generated();
    crds.extend(gardener_crds()?);
    let mut names = Vec::new();
    for mut crd in crds {
        crd.metadata.managed_fields = None;
        crd.metadata.creation_timestamp = None;
        crd.status = None;
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &params, &Patch::Apply(&crd)).await?;
        names.push(name);
    }
    let started = Instant::now();
    for name in names {
        loop {
            let crd = api.get(&name).await?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            if started.elapsed() > ESTABLISH_TIMEOUT {
                return Err(Error::CrdNotEstablished {
                    name,
                    seconds: ESTABLISH_TIMEOUT.as_secs(),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}
