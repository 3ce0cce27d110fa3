//! The Equinix Metal credentials: Secret `equinix-addon` in `harvester-system` with keys
//! `METAL_AUTH_TOKEN` and `PROJECT_ID`, as the original addon reads it (`ingot run` moves it
//! by the original's environment variables `EQUINIX_SECRET` and `NAMESPACE`). It is read from
//! its watched cache at every reconcile, so a rotated token reaches every pool and Instance at
//! once.

use ingot_metal::ApiToken;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::{ObjectRef, Store};

pub const DEFAULT_SECRET_NAME: &str = "equinix-addon";
pub const DEFAULT_SECRET_NAMESPACE: &str = "harvester-system";
pub const TOKEN_KEY: &str = "METAL_AUTH_TOKEN";
pub const PROJECT_KEY: &str = "PROJECT_ID";

/// Where the credentials Secret is.
#[derive(Clone, Debug)]
pub struct SecretLocation {
    pub namespace: String,
    pub name: String,
}

impl Default for SecretLocation {
    fn default() -> Self {
        Self {
            namespace: DEFAULT_SECRET_NAMESPACE.to_owned(),
            name: DEFAULT_SECRET_NAME.to_owned(),
        }
    }
}

impl std::fmt::Display for SecretLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Usable credentials. `Debug` never shows the token.
#[derive(Clone, Debug)]
pub struct Credentials {
    pub token: ApiToken,
    pub project_id: String,
}

/// Why the credentials cannot be used. The messages say how to fix it and never contain the
/// token.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("Secret {secret} not found: create it with keys {TOKEN_KEY} and {PROJECT_KEY}")]
    SecretNotFound { secret: String },
    #[error(
        "Secret {secret} has no non-empty key {key}: add it (keys {TOKEN_KEY} and {PROJECT_KEY} are needed)"
    )]
    MissingKey { secret: String, key: &'static str },
}

impl CredentialsError {
    /// The condition and Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            CredentialsError::SecretNotFound { .. } => "SecretNotFound",
            CredentialsError::MissingKey { .. } => "SecretIncomplete",
        }
    }
}

/// Reads the Secret from its cache: both keys present and non-empty.
pub fn load(
    secrets: &Store<Secret>,
    location: &SecretLocation,
) -> Result<Credentials, CredentialsError> {
    let Some(secret) = secrets.get(&ObjectRef::new(&location.name).within(&location.namespace))
    else {
        return Err(CredentialsError::SecretNotFound {
            secret: location.to_string(),
        });
    };
    let value = |key: &'static str| -> Result<String, CredentialsError> {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .ok_or(CredentialsError::MissingKey {
                secret: location.to_string(),
                key,
            })
    };
    Ok(Credentials {
        token: ApiToken::new(value(TOKEN_KEY)?),
        project_id: value(PROJECT_KEY)?,
    })
}
