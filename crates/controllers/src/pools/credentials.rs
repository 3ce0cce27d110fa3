//! The Equinix Metal credentials: Secret `equinix-addon` in `harvester-system` with keys
//! `METAL_AUTH_TOKEN` and `PROJECT_ID`, as the original addon reads it. The environment
//! variables `EQUINIX_SECRET` and `NAMESPACE` move it, as they did upstream.

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

pub const DEFAULT_SECRET_NAME: &str = "equinix-addon";
pub const DEFAULT_SECRET_NAMESPACE: &str = "harvester-system";
pub const TOKEN_KEY: &str = "METAL_AUTH_TOKEN";
pub const PROJECT_KEY: &str = "PROJECT_ID";

/// Where the pools controller finds its credentials.
#[derive(Clone, Debug)]
pub struct Settings {
    pub secret_namespace: String,
    pub secret_name: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            secret_namespace: DEFAULT_SECRET_NAMESPACE.to_owned(),
            secret_name: DEFAULT_SECRET_NAME.to_owned(),
        }
    }
}

impl Settings {
    /// The defaults, moved by `EQUINIX_SECRET` and `NAMESPACE` when set.
    pub fn from_env() -> Self {
        let mut settings = Self::default();
        if let Ok(name) = std::env::var("EQUINIX_SECRET")
            && !name.is_empty()
        {
            settings.secret_name = name;
        }
        if let Ok(namespace) = std::env::var("NAMESPACE")
            && !namespace.is_empty()
        {
            settings.secret_namespace = namespace;
        }
        settings
    }

    pub fn secret_ref(&self) -> String {
        format!("{}/{}", self.secret_namespace, self.secret_name)
    }
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
    #[error(transparent)]
    Api(kube::Error),
}

impl CredentialsError {
    /// The condition and Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            CredentialsError::SecretNotFound { .. } => "SecretNotFound",
            CredentialsError::MissingKey { .. } => "SecretIncomplete",
            CredentialsError::Api(_) => "SecretUnreadable",
        }
    }
}

/// Reads the Secret and checks that both keys are present and non-empty.
pub async fn check(client: &Client, settings: &Settings) -> Result<(), CredentialsError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &settings.secret_namespace);
    let secret = match secrets
        .get_opt(&settings.secret_name)
        .await
        .map_err(CredentialsError::Api)?
    {
        Some(secret) => secret,
        None => {
            return Err(CredentialsError::SecretNotFound {
                secret: settings.secret_ref(),
            });
        }
    };
    for key in [TOKEN_KEY, PROJECT_KEY] {
        let present = secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .is_some_and(|v| !v.0.is_empty())
            || secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .is_some_and(|v| !v.is_empty());
        if !present {
            return Err(CredentialsError::MissingKey {
                secret: settings.secret_ref(),
                key,
            });
        }
    }
    Ok(())
}
