//! Deletion of an Instance: every server with its tag (404 counts as gone), then the Node,
//! then the finalizers (the Go addon's too). Without credentials, or when Metal refuses, the
//! finalizer stays and the condition says why: a server is never leaked.

use std::time::Duration;

use ingot_api::equinix::{INSTANCE_FINALIZER, WRANGLER_INSTANCE_FINALIZER};
use k8s_openapi::api::core::v1::Node;
use kube::api::DeleteParams;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use tracing::info;

use super::super::credentials;
use super::phase::Blocked;
use super::{Error, OWNER_TAG_PREFIX, Reconciler};

impl Reconciler<'_> {
    pub(super) async fn finalize(&self) -> Result<Action, Error> {
        if !self.has_finalizer(INSTANCE_FINALIZER)
            && !self.has_finalizer(WRANGLER_INSTANCE_FINALIZER)
        {
            return Ok(Action::await_change());
        }
        let credentials =
            match credentials::load(&self.ctx.pools.caches.credentials, &self.settings.secret) {
                Ok(credentials) => credentials,
                Err(problem) => {
                    let message = format!("cannot delete the server: {problem}");
                    return self
                        .blocked(Blocked {
                            reason: problem.reason(),
                            message,
                            retry: Duration::from_secs(30),
                        })
                        .await;
                }
            };
        let cloud = self.ctx.pools.cloud(&credentials)?;
        if let Err(error) = self.delete_servers(cloud.as_ref()).await {
            return self.metal_error(error).await;
        }
        let nodes: Api<Node> = Api::all(self.ctx.client.clone());
        match nodes.delete(&self.name(), &DeleteParams::default()).await {
            Ok(_) => info!(instance = %self.name(), "node deleted"),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error.into()),
        }
        let remaining: Vec<String> = self
            .instance
            .finalizers()
            .iter()
            .filter(|f| {
                f.as_str() != INSTANCE_FINALIZER && f.as_str() != WRANGLER_INSTANCE_FINALIZER
            })
            .cloned()
            .collect();
        self.patch_finalizers(remaining).await?;
        Ok(Action::await_change())
    }

    /// Every server this Instance may own: the one in its status and every one with its tag
    /// (a crash can leave one whose id never reached the status).
    async fn delete_servers(
        &self,
        cloud: &dyn ingot_metal::BareMetalCloud,
    ) -> Result<(), ingot_metal::Error> {
        let mut ids = Vec::new();
        let id = self.status().instance_id;
        if !id.is_empty() {
            ids.push(id);
        }
        let tag = format!(
            "{OWNER_TAG_PREFIX}{}",
            self.instance.metadata.uid.as_deref().unwrap_or_default()
        );
        for server in cloud.list_servers(&tag).await? {
            if !ids.contains(&server.id) {
                ids.push(server.id);
            }
        }
        for id in &ids {
            cloud.delete_server(id).await?;
            info!(instance = %self.name(), server = %id, "server deleted");
            self.ctx.pools.crash_point("during-finalize");
        }
        Ok(())
    }
}
