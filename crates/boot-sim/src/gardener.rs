//! A device booted with Gardener user data (an OS image, not iPXE): its kubelet joins with the
//! bootstrap token the machine controller wrote into the user data. The token is checked as
//! kube-apiserver's bootstrap authenticator checks it: the Secret
//! `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token` exists, its
//! `token-secret` matches, `usage-bootstrap-authentication` is `true` and it has not expired.
//! The Node is named after the device hostname (the Machine name).

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

/// What the user data says about joining.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Join {
    /// Not Gardener user data: nothing to do.
    NotGardener,
    /// Gardener user data whose placeholder was never filled in: the kubelet cannot join.
    Unsubstituted,
    /// A bootstrap token `<id>.<secret>`.
    Token { id: String, secret: String },
}

/// Reads Gardener user data: a `<<BOOTSTRAP_TOKEN>>` placeholder left in it, or a bootstrap
/// token (`[a-z0-9]{6}.[a-z0-9]{16}`) written to the node agent's bootstrap-token file.
pub fn read_user_data(user_data: &str) -> Join {
    let gardener =
        user_data.contains("gardener-node-agent") || user_data.contains("bootstrap-token");
    if user_data.contains("<<BOOTSTRAP_TOKEN>>")
        || user_data.contains("%3C%3CBOOTSTRAP_TOKEN%3E%3E")
    {
        return Join::Unsubstituted;
    }
    if !gardener {
        return Join::NotGardener;
    }
    let is_token_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    for word in user_data.split(|c: char| !(is_token_char(c) || c == '.')) {
        if let Some((id, secret)) = word.split_once('.')
            && id.len() == 6
            && secret.len() == 16
            && id.chars().all(is_token_char)
            && secret.chars().all(is_token_char)
        {
            return Join::Token {
                id: id.to_owned(),
                secret: secret.to_owned(),
            };
        }
    }
    Join::Unsubstituted
}

/// Why the API server would refuse the token; None when it would accept it.
pub async fn refusal(
    client: &Client,
    id: &str,
    secret: &str,
) -> Result<Option<String>, kube::Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    let Some(found) = secrets.get_opt(&format!("bootstrap-token-{id}")).await? else {
        return Ok(Some(format!("bootstrap token {id} does not exist")));
    };
    if found.type_.as_deref() != Some("bootstrap.kubernetes.io/token") {
        return Ok(Some(format!("bootstrap token {id}: wrong Secret type")));
    }
    let data = found.data.unwrap_or_default();
    let get = |k: &str| {
        data.get(k)
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
    };
    if get("token-secret").as_deref() != Some(secret) {
        return Ok(Some(format!("bootstrap token {id}: wrong secret")));
    }
    if get("usage-bootstrap-authentication").as_deref() != Some("true") {
        return Ok(Some(format!(
            "bootstrap token {id}: not usable for authentication"
        )));
    }
    if let Some(exp) = get("expiration") {
        match DateTime::parse_from_rfc3339(&exp) {
            Ok(t) if t.with_timezone(&Utc) > Utc::now() => {}
            Ok(_) => return Ok(Some(format!("bootstrap token {id} expired at {exp}"))),
            Err(_) => {
                return Ok(Some(format!(
                    "bootstrap token {id}: bad expiration {exp:?}"
                )));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_token_from_gardener_user_data() {
        let ud = "#!/bin/bash\nmkdir -p /var/lib/gardener-node-agent/credentials\necho 'abc123.0123456789abcdef' > /var/lib/gardener-node-agent/credentials/bootstrap-token\n";
        assert_eq!(
            read_user_data(ud),
            Join::Token {
                id: "abc123".into(),
                secret: "0123456789abcdef".into()
            }
        );
        assert_eq!(
            read_user_data(
                "echo <<BOOTSTRAP_TOKEN>> > /var/lib/gardener-node-agent/credentials/bootstrap-token"
            ),
            Join::Unsubstituted
        );
        assert_eq!(
            read_user_data("#!/bin/sh\necho I am user data\n"),
            Join::NotGardener
        );
    }
}
