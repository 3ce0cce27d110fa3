//! Sessions: login at the session collection (its usual URI first, else the root's link),
//! HTTP Basic where none is offered, re-login after a 401 with a back-off, logout on close or
//! drop, and the authenticated request every call goes through.

use super::RedfishClient;
use super::discovery::ServiceRoot;
use super::hedging::RedfishStats;
use super::json::{link, string};
use super::options::AuthMode;
use super::transport::{Response, acquire, check_status, execute, join_url, same_path};
use crate::error::BmcError;
use reqwest::header::HeaderValue;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How requests are authenticated: not yet, with a session's token, or with HTTP Basic.
#[derive(Clone, Default)]
pub(super) enum Auth {
    #[default]
    None,
    Session {
        token: String,
        location: Option<String>,
    },
    Basic,
}

/// The session token is a credential: never printed.
impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::None => f.write_str("None"),
            Auth::Session { location, .. } => f
                .debug_struct("Session")
                .field("token", &"<redacted>")
                .field("location", location)
                .finish(),
            Auth::Basic => f.write_str("Basic"),
        }
    }
}

/// `X-Auth-Token` marked sensitive, so that HTTP-level Debug output and logs leave it out.
pub(super) fn token_header(token: &str) -> HeaderValue {
    let mut v = HeaderValue::from_str(token).unwrap_or(HeaderValue::from_static(""));
    v.set_sensitive(true);
    v
}

/// Re-login back-off after a 401 on a fresh session.
#[derive(Debug, Default)]
pub(super) struct Relogin {
    not_before: Option<Instant>,
    delay: Duration,
}

/// Where BMCs serve the session collection (the URI the Redfish specification and the vendors'
/// guides give it). A first contact logs in there without reading the service root; a BMC that
/// serves it elsewhere answers 404 or 405, and the client follows its service root's links.
pub(super) const SESSIONS_URI: &str = "/redfish/v1/SessionService/Sessions";

const RELOGIN_BACKOFF_MIN: Duration = Duration::from_secs(1);
const RELOGIN_BACKOFF_MAX: Duration = Duration::from_secs(300);

impl RedfishClient {
    async fn sessions_link(&self, root: &ServiceRoot) -> Result<Option<String>, BmcError> {
        if let Some(l) = &root.sessions {
            return Ok(Some(l.clone()));
        }
        if let Some(ss) = &root.session_service {
            // Fetching the SessionService may itself need authentication.
            let resp = self
                .send_raw(Method::GET, ss, None, &Auth::Basic, &[])
                .await?;
            if resp.status.is_success() {
                let v = resp.json()?;
                return Ok(link(&v, "Sessions"));
            }
        }
        Ok(None)
    }

    /// Establishes authentication: a session, or Basic where sessions are not offered.
    async fn login(&self) -> Result<Auth, BmcError> {
        if self.options.auth == AuthMode::Basic {
            return Ok(Auth::Basic);
        }
        let auto = self.options.auth == AuthMode::Auto;
        let mut refused_at_usual_uri = None;
        if self.known_root().is_none() {
            match self.login_at(SESSIONS_URI, false).await {
                Ok(auth) => return Ok(auth),
                // Not answered, or the session table is full: the root would not change that.
                Err(
                    e @ (BmcError::Timeout(_)
                    | BmcError::Unreachable(_)
                    | BmcError::MaybeSent(_)
                    | BmcError::Tls(_)
                    | BmcError::Unavailable { .. }
                    | BmcError::SessionLimit),
                ) => return Err(e),
                // No session collection there (a 404, or the 401 of a BMC that guards every
                // path but its root), or no Redfish at all: the root tells.
                Err(e) => refused_at_usual_uri = Some(e),
            }
        }
        let root = self.root().await?;
        let Some(sessions) = self.sessions_link(&root).await? else {
            return match self.options.auth {
                AuthMode::Session => Err(BmcError::Unsupported("SessionService".into())),
                _ => Ok(Auth::Basic),
            };
        };
        if let Some(e) = refused_at_usual_uri
            && same_path(&sessions, SESSIONS_URI)
        {
            // Its sessions are where they were asked for: not a second login (a refused one
            // counts towards an account's lockout), and the answer stands.
            return match e {
                BmcError::Http {
                    status: 404 | 405 | 501,
                    ..
                } if auto => Ok(Auth::Basic),
                e => Err(e),
            };
        }
        self.login_at(&sessions, auto).await
    }

    /// A login POST to `sessions`; `basic_if_absent`: a 404, 405 or 501 means the BMC offers
    /// no sessions (use Basic) rather than an error.
    async fn login_at(&self, sessions: &str, basic_if_absent: bool) -> Result<Auth, BmcError> {
        // A login whose answer never came created no session on a BMC that never read it,
        // and at worst one that expires on its own: tried once more, never hedged.
        match self.post_login(sessions, basic_if_absent).await {
            Err(BmcError::Timeout(_)) => self.post_login(sessions, basic_if_absent).await,
            other => other,
        }
    }

    /// The session POST runs in a task of its own: when the caller is cancelled (a
    /// controller's deadline) after the BMC created the session, the task still reads the
    /// token and deletes the session instead of leaking it.
    async fn post_login(&self, sessions: &str, basic_if_absent: bool) -> Result<Auth, BmcError> {
        let body = json!({"UserName": self.user, "Password": self.password.expose()});
        let req = self.build(Method::POST, sessions, Some(&body), &Auth::None, &[]);
        let task = LoginTask {
            // A login without an answer after `hedge_after` (at most half the timeout; not the
            // adaptive delay of reads: logins are slow on many BMCs and a copy costs a session
            // slot for a moment) is sent a second time; the session that comes second is
            // deleted.
            hedge: self
                .options
                .hedge_after
                .map(|h| h.min(self.options.timeout / 2)),
            gate: self.gate.clone(),
            timeout: self.options.timeout,
            stats: self.stats.clone(),
            http: self.http.clone(),
            base: self.base.clone(),
            sessions: sessions.to_owned(),
            basic_if_absent,
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(task.run(req, tx));
        let auth = rx
            .await
            .map_err(|_| BmcError::Config("the login task ended".into()))??;
        if let Auth::Session { .. } = auth {
            tracing::debug!(bmc = %self.base, "redfish session opened");
        }
        Ok(auth)
    }

    /// Current authentication, logging in first if there is none.
    pub(super) async fn current_auth(&self) -> Result<Auth, BmcError> {
        let mut guard = self.auth.lock().await;
        if matches!(*guard, Auth::None) {
            *guard = self.login().await?;
        }
        Ok(guard.clone())
    }

    /// After a 401 with `stale`: log in again unless another caller already did. The old
    /// session is deleted (a 401 is not always an expired session), and a BMC that keeps
    /// refusing fresh sessions is not asked for new ones more often than the back-off.
    pub(super) async fn relogin(&self, stale: &Auth) -> Result<Auth, BmcError> {
        let mut guard = self.auth.lock().await;
        let same = match (&*guard, stale) {
            (Auth::Session { token: a, .. }, Auth::Session { token: b, .. }) => a == b,
            (Auth::None, _) => true,
            _ => false,
        };
        if same {
            {
                let mut r = self
                    .relogin
                    .lock()
                    .map_err(|_| BmcError::Config("re-login lock poisoned".into()))?;
                let now = Instant::now();
                if r.not_before.is_some_and(|t| now < t) {
                    tracing::debug!(bmc = %self.base, "401 again soon after a re-login; backing off");
                    return Err(BmcError::Unauthorized);
                }
                r.delay = (r.delay * 2).clamp(RELOGIN_BACKOFF_MIN, RELOGIN_BACKOFF_MAX);
                r.not_before = Some(now + r.delay);
            }
            self.stats.relogins.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(bmc = %self.base, "redfish session refused; logging in again");
            let old = std::mem::take(&mut *guard);
            self.delete_session_in_background(old);
            *guard = self.login().await?;
        }
        Ok(guard.clone())
    }

    /// Best effort DELETE of a session no longer used (401/404 when it already expired).
    fn delete_session_in_background(&self, auth: Auth) {
        let Auth::Session {
            token,
            location: Some(loc),
        } = auth
        else {
            return;
        };
        let http = self.http.clone();
        let url = self.url(&loc);
        let timeout = self.options.timeout;
        let stats = self.stats.clone();
        let gate = self.gate.clone();
        tokio::spawn(async move {
            if delete_session(&http, &url, &token, timeout, &gate).await {
                stats.sessions_closed.fetch_add(1, Ordering::Relaxed);
            }
        });
    }

    /// A request went through on a session: the re-login back-off starts over.
    fn session_works(&self) {
        if let Ok(mut r) = self.relogin.lock()
            && r.delay > Duration::ZERO
            && r.not_before.is_some_and(|t| Instant::now() >= t)
        {
            *r = Relogin::default();
        }
    }

    /// An authenticated request; a 401 on a session triggers one re-login and one retry.
    pub(super) async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&'static str, String)],
    ) -> Result<Response, BmcError> {
        let auth = self.current_auth().await?;
        let resp = self
            .send_raw(method.clone(), path, body, &auth, headers)
            .await?;
        if resp.status == StatusCode::UNAUTHORIZED
            && let Auth::Session { .. } = auth
        {
            let auth = self.relogin(&auth).await?;
            let resp = self
                .send_raw(method.clone(), path, body, &auth, headers)
                .await?;
            check_status(&resp, method.as_str(), path)?;
            return Ok(resp);
        }
        if let Auth::Session { .. } = auth {
            self.session_works();
        }
        check_status(&resp, method.as_str(), path)?;
        Ok(resp)
    }
}

/// DELETE of a session of ours (best effort; sent again once if it timed out: deleting a
/// session twice is harmless). Returns whether the BMC answered.
async fn delete_session(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    timeout: Duration,
    gate: &Option<Arc<tokio::sync::Semaphore>>,
) -> bool {
    for _ in 0..2 {
        let Ok(_permit) = acquire(gate).await else {
            return false;
        };
        let req = http.delete(url).header("X-Auth-Token", token_header(token));
        match execute(req, timeout).await {
            Ok(_) => return true,
            Err(BmcError::Timeout(_)) => continue,
            Err(_) => return false,
        }
    }
    false
}

/// The answer to the session POST. Its body is never quoted in an error or a log: some
/// BMCs echo the request, password included, in their error messages.
pub(super) fn login_answer(resp: &Response, sessions: &str, auto: bool) -> Result<Auth, BmcError> {
    match resp.status.as_u16() {
        200 | 201 | 202 | 204 => {}
        404 | 405 | 501 if auto => return Ok(Auth::Basic),
        _ => {
            return Err(match check_status(resp, "POST", sessions) {
                Err(BmcError::Http {
                    status,
                    method,
                    path,
                    ..
                }) => BmcError::Http {
                    status,
                    method,
                    path,
                    message: None,
                },
                Err(e) => e,
                Ok(()) => BmcError::Malformed("login refused".into()),
            });
        }
    }
    let Some(token) = resp.header("X-Auth-Token") else {
        return Err(BmcError::Malformed(
            "session created without an X-Auth-Token".into(),
        ));
    };
    let location = resp
        .header("Location")
        .or_else(|| resp.json().ok().and_then(|v| string(&v, "@odata.id")));
    Ok(Auth::Session { token, location })
}

impl RedfishClient {
    /// Closes the session (a DELETE of it); further calls open a new one.
    pub(super) async fn logout(&self) -> Result<(), BmcError> {
        let auth = std::mem::take(&mut *self.auth.lock().await);
        if let Auth::Session {
            location: Some(loc),
            ..
        } = &auth
        {
            // Deleting our own session twice is harmless (the second gets 404): hedged.
            let resp = self
                .send_idempotent(Method::DELETE, loc, &auth, &[])
                .await?;
            self.stats.sessions_closed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(bmc = %self.base, status = resp.status.as_u16(), "redfish session closed");
            // 401/404: the session already expired; nothing more to do.
            if !resp.status.is_success() && !matches!(resp.status.as_u16(), 401 | 404) {
                check_status(&resp, "DELETE", loc)?;
            }
        }
        Ok(())
    }
}

/// A login POST and its hedged copy, in a task that outlives its caller: what it needs of the
/// client.
struct LoginTask {
    hedge: Option<Duration>,
    gate: Option<Arc<tokio::sync::Semaphore>>,
    timeout: Duration,
    stats: Arc<RedfishStats>,
    http: reqwest::Client,
    base: String,
    sessions: String,
    basic_if_absent: bool,
}

impl LoginTask {
    /// Sends the login (and its copy after `hedge`), hands the first session to `tx` and logs
    /// out every session nobody takes: the copy's, and the winner's when the caller gave up.
    async fn run(
        self,
        req: reqwest::RequestBuilder,
        tx: tokio::sync::oneshot::Sender<Result<Auth, BmcError>>,
    ) {
        let mut spare = self.hedge.and(req.try_clone());
        let mut pending = futures::stream::FuturesUnordered::new();
        // The login and its copy go out under one fleet permit (as a hedged read's do).
        let permit = match acquire(&self.gate).await {
            Ok(p) => p,
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        pending.push(self.attempt(req, false));
        let result = loop {
            tokio::select! {
                r = futures::StreamExt::next(&mut pending) => match r {
                    Some(Ok(auth)) => break Ok(auth),
                    Some(Err(e)) if pending.is_empty() => break Err(e),
                    Some(Err(_)) => {}
                    None => break Err(BmcError::Timeout(self.timeout)),
                },
                _ = tokio::time::sleep(self.hedge.unwrap_or(self.timeout)), if spare.is_some() => {
                    if let Some(r) = spare.take().filter(|_| self.stats.copy_allowed()) {
                        pending.push(self.attempt(r, true));
                    }
                }
            }
        };
        drop(permit);
        if let Err(Ok(auth)) = tx.send(result) {
            // Nobody waits for this session any more: log it out.
            tracing::debug!(bmc = %self.base, "login finished after its caller gave up; logging out");
            self.logout(auth).await;
        }
        // The copy that lost the race: its session, if it made one, is not used.
        while let Some(r) = futures::StreamExt::next(&mut pending).await {
            if let Ok(auth) = r {
                self.logout(auth).await;
            }
        }
    }

    /// One login POST and what its answer gives.
    async fn attempt(&self, req: reqwest::RequestBuilder, copy: bool) -> Result<Auth, BmcError> {
        if copy {
            self.stats.hedged.fetch_add(1, Ordering::Relaxed);
        }
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let resp = execute(req, self.timeout).await?;
        let auth = login_answer(&resp, &self.sessions, self.basic_if_absent)?;
        if let Auth::Session { .. } = auth {
            self.stats.sessions_opened.fetch_add(1, Ordering::Relaxed);
        }
        Ok(auth)
    }

    /// Deletes a session of this login that nobody uses.
    async fn logout(&self, auth: Auth) {
        if let Auth::Session {
            token,
            location: Some(loc),
        } = auth
        {
            let url = join_url(&self.base, &loc);
            if delete_session(&self.http, &url, &token, self.timeout, &self.gate).await {
                self.stats.sessions_closed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl Drop for RedfishClient {
    /// Best effort: a client dropped with a live session logs out in the background.
    fn drop(&mut self) {
        let auth = std::mem::take(self.auth.get_mut());
        let Auth::Session {
            token,
            location: Some(loc),
        } = auth
        else {
            return;
        };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let req = self
            .http
            .delete(self.url(&loc))
            .header("X-Auth-Token", token_header(&token))
            .timeout(self.options.timeout);
        let stats = self.stats.clone();
        handle.spawn(async move {
            if req.send().await.is_ok() {
                stats.sessions_closed.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::redfish::RedfishOptions;
    use crate::{Endpoint, Password};

    #[test]
    fn the_session_token_never_reaches_debug_output() {
        let token = "tok-5ecret-0123456789";
        let auth = Auth::Session {
            token: token.into(),
            location: Some("/redfish/v1/SessionService/Sessions/7".into()),
        };
        let shown = format!("{auth:?}");
        assert!(!shown.contains(token), "{shown}");
        assert!(shown.contains("Sessions/7"), "{shown}");
        let ep = Endpoint::parse("https://bmc.example:8443", None).unwrap();
        let c = RedfishClient::new(&ep, "admin", Password::new("pw"), RedfishOptions::default())
            .unwrap();
        let req = c
            .build(Method::GET, "/redfish/v1/Systems", None, &auth, &[])
            .build()
            .unwrap();
        let header = req.headers().get("X-Auth-Token").unwrap();
        assert!(header.is_sensitive());
        assert_eq!(header.to_str().unwrap(), token);
        let shown = format!("{req:?} {:?}", req.headers());
        assert!(!shown.contains(token), "{shown}");
    }

    #[test]
    fn a_link_names_the_usual_sessions_uri_with_or_without_host_and_slash() {
        for link in [
            "/redfish/v1/SessionService/Sessions",
            "/redfish/v1/SessionService/Sessions/",
            "https://bmc.example/redfish/v1/SessionService/Sessions",
        ] {
            assert!(same_path(link, SESSIONS_URI), "{link}");
        }
        assert!(!same_path(
            "/redfish/v1/AccountService/Sessions",
            SESSIONS_URI
        ));
    }
}
