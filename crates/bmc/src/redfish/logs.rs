//! Event logs: the log services of the system and of every manager, their entries, oldest first.

use super::RedfishClient;
use super::json::{link, string};
use crate::error::BmcError;
use crate::types::*;

impl RedfishClient {
    /// The log services of a system or manager; a resource whose logs cannot be listed
    /// (404, unsupported) contributes none, while transport and auth errors propagate.
    async fn log_services_of(&self, resource: &str) -> Result<Vec<String>, BmcError> {
        let v = self.get(resource).await?;
        let Some(l) = link(&v, "LogServices") else {
            return Ok(Vec::new());
        };
        match self.member_links(&l).await {
            Ok(links) => Ok(links),
            Err(e @ (BmcError::Http { .. } | BmcError::Unsupported(_))) => {
                tracing::debug!(bmc = %self.base, resource = %l, error = %e, "skipping log services");
                Ok(Vec::new())
            }
            Err(e) => Err(e),
        }
    }

    /// Event log entries of the system's and every manager's log services, oldest first.
    pub(super) async fn read_event_log(&self) -> Result<Vec<LogEntry>, BmcError> {
        let system = self.system_path().await?;
        let mut services = self.log_services_of(&system).await?;
        let root = self.root().await?;
        if let Some(managers) = &root.managers {
            for m in self.member_links(managers).await? {
                services.extend(self.log_services_of(&m).await?);
            }
        }
        if services.is_empty() {
            return Err(BmcError::Unsupported("LogServices".into()));
        }
        let mut entries = Vec::new();
        for service in services {
            let s = self.get(&service).await?;
            let Some(l) = link(&s, "Entries") else {
                continue;
            };
            let members = match self.log_entries(&l).await {
                Ok(m) => m,
                Err(e @ BmcError::Http { .. }) => {
                    tracing::debug!(bmc = %self.base, log = %service, error = %e, "skipping log");
                    continue;
                }
                Err(e) => return Err(e),
            };
            for e in members {
                let Some(id) = string(&e, "@odata.id") else {
                    continue;
                };
                entries.push(LogEntry {
                    id,
                    log: service.clone(),
                    created: string(&e, "Created"),
                    severity: string(&e, "Severity"),
                    message: string(&e, "Message").unwrap_or_default(),
                    message_id: string(&e, "MessageId"),
                    entry_type: string(&e, "EntryType"),
                });
            }
        }
        entries.sort_by(|a, b| (&a.created, &a.id).cmp(&(&b.created, &b.id)));
        Ok(entries)
    }
}
