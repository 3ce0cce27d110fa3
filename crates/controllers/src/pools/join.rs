//! Where new nodes join: the cluster's join token and its address, found the way the original
//! addon finds them (the token `ingot run` was given in `TOKEN`, else the rancherd config file;
//! the VIP of `kube-system/ingress-expose`, from its watched cache), with explicit overrides.

use std::path::PathBuf;

use ingot_harvester::Secret as HarvesterSecret;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::{ObjectRef, Store};

/// How to find the join parameters.
#[derive(Clone, Debug)]
pub struct JoinSettings {
    /// The join token given to `ingot run` (the original's `TOKEN`); wins over the file.
    pub token: Option<HarvesterSecret>,
    /// A fixed cluster address (VIP); otherwise the ingress-expose Service's load balancer.
    pub cluster_address: Option<String>,
    /// The rancherd config holding `token:`, read when `TOKEN` is not set.
    pub rancherd_config: PathBuf,
}

impl Default for JoinSettings {
    fn default() -> Self {
        Self {
            token: None,
            cluster_address: None,
            rancherd_config: PathBuf::from("/etc/rancher/rancherd/config.yaml"),
        }
    }
}

/// The token and address a node joins with. `Debug` hides the token.
#[derive(Clone, Debug)]
pub struct Join {
    pub token: HarvesterSecret,
    pub address: String,
}

#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error(
        "no join token: set TOKEN in the operator's environment or make {path} readable with a `token:` key ({reason})"
    )]
    NoToken { path: String, reason: String },
    #[error(
        "no cluster address: Service kube-system/ingress-expose has no load-balancer address yet; set --cluster-address to the cluster VIP"
    )]
    NoAddress,
}

impl JoinError {
    pub fn reason(&self) -> &'static str {
        match self {
            JoinError::NoToken { .. } => "NoJoinToken",
            JoinError::NoAddress => "NoClusterAddress",
        }
    }
}

pub fn discover(services: &Store<Service>, settings: &JoinSettings) -> Result<Join, JoinError> {
    let token = token(settings)?;
    let address = match &settings.cluster_address {
        Some(address) => address.clone(),
        None => services
            .get(&ObjectRef::new("ingress-expose").within("kube-system"))
            .and_then(|s| s.status.clone())
            .and_then(|s| s.load_balancer)
            .and_then(|lb| lb.ingress)
            .and_then(|ingress| ingress.into_iter().find_map(|i| i.ip.or(i.hostname)))
            .ok_or(JoinError::NoAddress)?,
    };
    Ok(Join { token, address })
}

fn token(settings: &JoinSettings) -> Result<HarvesterSecret, JoinError> {
    if let Some(token) = &settings.token {
        return Ok(token.clone());
    }
    let path = settings.rancherd_config.display().to_string();
    let text =
        std::fs::read_to_string(&settings.rancherd_config).map_err(|e| JoinError::NoToken {
            path: path.clone(),
            reason: e.to_string(),
        })?;
    let value: serde_yaml::Value = serde_yaml::from_str(&text).map_err(|e| JoinError::NoToken {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    match value.get("token") {
        Some(serde_yaml::Value::String(token)) if !token.is_empty() => {
            Ok(HarvesterSecret::new(token.clone()))
        }
        _ => Err(JoinError::NoToken {
            path,
            reason: "no string `token` key".to_owned(),
        }),
    }
}
