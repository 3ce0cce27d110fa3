//! BMC credentials, read from their Secret once and kept until that Secret changes.
//!
//! Reading the Secret on every poll cost one GET per Machine per poll (55 a second at 10,000
//! Machines). Upstream Rufio reads Secrets from an informer cache that holds every Secret of the
//! cluster; here a metadata-only watch of Secrets says when kept credentials are out of date,
//! and nothing is held but the username and password of the Secrets BMCs use.
//!
//! Kept credentials are used only while the watch is current (it has listed, and has not
//! listed again since): before that, and for Secrets outside the watched namespace, every
//! read goes to the API server, as without the cache.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use ingot_api::rufio::Connection;
use k8s_openapi::api::core::v1::Secret;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client, ResourceExt};
use tracing::debug;

use super::bmcs::{self, ConnectionError, Credentials};

/// The credentials of the Secrets BMCs use, by `namespace/name`.
pub struct SecretCache {
    slots: Mutex<HashMap<String, Slot>>,
    /// The namespace the watch covers; `None`: every namespace.
    scope: Option<String>,
    /// The watch has listed every Secret and follows their changes.
    current: AtomicBool,
}

enum Slot {
    /// A read from the API server is under way; `changed`: the Secret changed since it began
    /// (its answer may be the old one, so it is not kept).
    Reading {
        changed: bool,
    },
    Kept(Credentials),
}

impl SecretCache {
    pub fn new(scope: Option<String>) -> Self {
        SecretCache {
            slots: Mutex::default(),
            scope,
            current: AtomicBool::new(false),
        }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn covers(&self, namespace: &str) -> bool {
        self.scope.as_deref().is_none_or(|scope| scope == namespace)
    }

    /// The credentials of `connection.authSecretRef` (keys `username` and `password`): kept
    /// ones while the watch is current, else read from the API server (and kept).
    pub async fn credentials(
        &self,
        client: &Client,
        connection: &Connection,
        default_namespace: &str,
    ) -> Result<Credentials, ConnectionError> {
        let (namespace, name) = bmcs::secret_ref(connection, default_namespace)?;
        let key = format!("{namespace}/{name}");
        let cacheable = self.covers(&namespace) && self.current.load(Ordering::Acquire);
        if cacheable {
            let mut slots = self.slots();
            match slots.get(&key) {
                Some(Slot::Kept(credentials)) => return Ok(credentials.clone()),
                Some(Slot::Reading { .. }) => {}
                None => {
                    slots.insert(key.clone(), Slot::Reading { changed: false });
                }
            }
        }
        let read = bmcs::read_credentials(client, &namespace, &name).await;
        if cacheable {
            let mut slots = self.slots();
            if let Some(Slot::Reading { changed }) = slots.get(&key) {
                match (&read, *changed) {
                    (Ok(credentials), false) => {
                        slots.insert(key, Slot::Kept(credentials.clone()));
                    }
                    _ => {
                        slots.remove(&key);
                    }
                }
            }
        }
        read
    }

    /// A Secret changed or went: its kept credentials are out of date.
    fn changed(&self, key: &str) {
        let mut slots = self.slots();
        match slots.get_mut(key) {
            Some(Slot::Reading { changed }) => *changed = true,
            Some(Slot::Kept(_)) => {
                slots.remove(key);
            }
            None => {}
        }
    }

    /// The watch lists again (changes may have been missed): nothing kept is trusted.
    fn relisting(&self) {
        self.current.store(false, Ordering::Release);
        let mut slots = self.slots();
        slots.retain(|_, slot| matches!(slot, Slot::Reading { .. }));
        for slot in slots.values_mut() {
            *slot = Slot::Reading { changed: true };
        }
    }

    /// Follows the Secrets' metadata until the stream ends (it does not, but for shutdown).
    pub async fn watch(&self, api: Api<PartialObjectMeta<Secret>>) {
        watcher(api, watcher::Config::default())
            .default_backoff()
            .for_each(|event| {
                match event {
                    Ok(Event::Init) => self.relisting(),
                    Ok(Event::InitDone) => self.current.store(true, Ordering::Release),
                    Ok(Event::Apply(meta) | Event::InitApply(meta) | Event::Delete(meta)) => {
                        let namespace = meta.namespace().unwrap_or_default();
                        self.changed(&format!("{namespace}/{}", meta.name_any()));
                    }
                    // The watcher resumes where it was (or lists again, `Init`); until then
                    // kept credentials are as good as an informer cache's.
                    Err(error) => debug!(%error, "the Secret watch failed; retrying"),
                }
                std::future::ready(())
            })
            .await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn kept(cache: &SecretCache, key: &str) -> bool {
        matches!(cache.slots().get(key), Some(Slot::Kept(_)))
    }

    fn credentials() -> Credentials {
        Credentials {
            username: "admin".into(),
            password: ingot_bmc::Password::new("pw"),
        }
    }

    #[test]
    fn a_change_during_a_read_keeps_nothing_and_a_change_after_it_drops_the_kept_one() {
        let cache = SecretCache::new(None);
        cache.current.store(true, Ordering::Release);
        cache
            .slots()
            .insert("ns/a".into(), Slot::Reading { changed: false });
        cache.changed("ns/a");
        assert!(matches!(
            cache.slots().get("ns/a"),
            Some(Slot::Reading { changed: true })
        ));
        cache
            .slots()
            .insert("ns/b".into(), Slot::Kept(credentials()));
        cache.changed("ns/b");
        assert!(!kept(&cache, "ns/b"));
        // Secrets no BMC uses are not tracked.
        cache.changed("ns/other");
        assert!(cache.slots().get("ns/other").is_none());
    }

    #[test]
    fn listing_again_forgets_everything_kept() {
        let cache = SecretCache::new(Some("ns".into()));
        cache.current.store(true, Ordering::Release);
        cache
            .slots()
            .insert("ns/b".into(), Slot::Kept(credentials()));
        cache
            .slots()
            .insert("ns/c".into(), Slot::Reading { changed: false });
        cache.relisting();
        assert!(!cache.current.load(Ordering::Acquire));
        assert!(!kept(&cache, "ns/b"));
        assert!(matches!(
            cache.slots().get("ns/c"),
            Some(Slot::Reading { changed: true })
        ));
        assert!(cache.covers("ns") && !cache.covers("elsewhere"));
    }
}
