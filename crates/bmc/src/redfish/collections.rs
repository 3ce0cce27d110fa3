//! Reading resources and collections: JSON objects with their ETag, collection members over
//! `nextLink` pages (expanded or fetched one by one), log entries in `$top`/`$skip` pages, all
//! within bounds.

use super::RedfishClient;
use super::json::{link, string, uint};
use crate::error::BmcError;
use reqwest::Method;
use serde_json::Value;

/// Members of a collection page asked for with `$top` when the service supports it.
const PAGE_SIZE: usize = 200;
/// Pages followed before a collection is returned as it is (partial).
const MAX_PAGES: usize = 100;
/// Most members one collection page may list (each may cost a GET of its own).
pub const MAX_PAGE_MEMBERS: usize = 10_000;

impl RedfishClient {
    pub(super) async fn get(&self, path: &str) -> Result<Value, BmcError> {
        let resp = self.request(Method::GET, path, None, &[]).await?;
        let v = resp.json()?;
        if !v.is_object() {
            return Err(BmcError::Malformed(format!("{path} is not a JSON object")));
        }
        Ok(v)
    }

    pub(super) async fn get_with_etag(
        &self,
        path: &str,
    ) -> Result<(Value, Option<String>), BmcError> {
        let resp = self.request(Method::GET, path, None, &[]).await?;
        let v = resp.json()?;
        let etag = resp.header("ETag").or_else(|| string(&v, "@odata.etag"));
        Ok((v, etag))
    }

    /// All members of a collection, following `Members@odata.nextLink`; members that came
    /// with only a link are fetched. A member that cannot be read is skipped (one failing
    /// DIMM must not empty the list); after `MAX_PAGES` pages what was read is returned.
    pub(super) async fn members(&self, path: &str) -> Result<Vec<Value>, BmcError> {
        self.members_up_to(path, usize::MAX).await
    }

    /// [`RedfishClient::members`], stopping once `limit` members were read (no member past
    /// it is fetched).
    pub(super) async fn members_up_to(
        &self,
        path: &str,
        limit: usize,
    ) -> Result<Vec<Value>, BmcError> {
        let mut out = Vec::new();
        let mut next = Some(path.to_owned());
        let mut pages = 0;
        while let Some(p) = next.take() {
            pages += 1;
            if pages > MAX_PAGES {
                tracing::warn!(bmc = %self.base, collection = %path, read = out.len(), "collection longer than {MAX_PAGES} pages; returning what was read");
                break;
            }
            let coll = match self.get(&p).await {
                Ok(c) => c,
                // A later page that fails: keep what the earlier pages gave.
                Err(e) if pages > 1 && !e.is_auth() && !matches!(e, BmcError::TooLarge(_)) => {
                    tracing::warn!(bmc = %self.base, page = %p, error = %e, "collection page unreadable; returning what was read");
                    break;
                }
                Err(e) => return Err(e),
            };
            let members = page_members(&coll, &p)?;
            for m in members {
                if out.len() >= limit {
                    return Ok(out);
                }
                let Some(id) = string(m, "@odata.id") else {
                    continue;
                };
                // Expanded members carry more than the link.
                if m.as_object().is_some_and(|o| o.len() > 2) {
                    out.push(m.clone());
                    continue;
                }
                match self.get(&id).await {
                    Ok(v) => out.push(v),
                    Err(e) if e.is_auth() => return Err(e),
                    Err(e) => {
                        tracing::debug!(bmc = %self.base, member = %id, error = %e, "skipping unreadable member");
                    }
                }
            }
            next = string(&coll, "Members@odata.nextLink");
        }
        Ok(out)
    }

    /// Whether the service takes `$top` / `$skip` (`ProtocolFeaturesSupported.TopSkipQuery`).
    async fn top_skip(&self) -> bool {
        self.root().await.ok().is_some_and(|r| r.top_skip)
    }

    /// A log's entries: pages of `$top` entries (`$skip` advancing) when the service
    /// supports it, else the collection with its `nextLink`s.
    pub(super) async fn log_entries(&self, entries: &str) -> Result<Vec<Value>, BmcError> {
        if !self.top_skip().await {
            return self.members(entries).await;
        }
        let sep = if entries.contains('?') { '&' } else { '?' };
        let mut out: Vec<Value> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for page in 0..MAX_PAGES {
            let url = format!("{entries}{sep}$top={PAGE_SIZE}&$skip={}", out.len());
            let coll = match self.get(&url).await {
                Ok(c) => c,
                Err(e) if page > 0 && !e.is_auth() && !matches!(e, BmcError::TooLarge(_)) => {
                    tracing::warn!(bmc = %self.base, log = %entries, error = %e, "log page unreadable; returning what was read");
                    return Ok(out);
                }
                Err(e) => return Err(e),
            };
            let members = page_members(&coll, entries)?;
            if members.is_empty() {
                return Ok(out);
            }
            let total = uint(&coll, "Members@odata.count");
            let before = out.len();
            for m in members {
                // A service that ignores `$skip` repeats its first page: stop there.
                let Some(id) = string(m, "@odata.id") else {
                    continue;
                };
                if !seen.insert(id.clone()) {
                    continue;
                }
                if m.as_object().is_some_and(|o| o.len() > 2) {
                    out.push(m.clone());
                } else {
                    match self.get(&id).await {
                        Ok(v) => out.push(v),
                        Err(e) if e.is_auth() => return Err(e),
                        Err(e) => {
                            tracing::debug!(bmc = %self.base, entry = %id, error = %e, "skipping unreadable log entry")
                        }
                    }
                }
            }
            if out.len() == before || total.is_some_and(|t| out.len() as u64 >= t) {
                return Ok(out);
            }
        }
        tracing::warn!(bmc = %self.base, log = %entries, read = out.len(), "log longer than {MAX_PAGES} pages; returning what was read");
        Ok(out)
    }

    pub(super) async fn member_links(&self, path: &str) -> Result<Vec<String>, BmcError> {
        let coll = self.get(path).await?;
        let members = page_members(&coll, path)?;
        Ok(members
            .iter()
            .filter_map(|m| string(m, "@odata.id"))
            .collect())
    }

    pub(super) async fn optional_members(&self, resource: &Value, key: &str) -> Vec<Value> {
        match link(resource, key) {
            Some(l) => match self.members(&l).await {
                Ok(m) => m,
                Err(e) => {
                    tracing::debug!(bmc = %self.base, resource = %l, error = %e, "skipping inventory part");
                    Vec::new()
                }
            },
            None => Vec::new(),
        }
    }
}

/// The `Members` of one collection page, at most [`MAX_PAGE_MEMBERS`] of them.
fn page_members<'a>(coll: &'a Value, path: &str) -> Result<&'a Vec<Value>, BmcError> {
    let members = coll
        .get("Members")
        .and_then(Value::as_array)
        .ok_or_else(|| BmcError::Malformed(format!("{path} has no Members")))?;
    if members.len() > MAX_PAGE_MEMBERS {
        return Err(BmcError::TooLarge(format!(
            "{path} lists {} members in one page (at most {MAX_PAGE_MEMBERS} are read)",
            members.len()
        )));
    }
    Ok(members)
}
