//! One RMCP+ session over a connected UDP socket: the RAKP handshake,
//! sequence numbers, retransmission and matching of responses.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::time::Instant;

use crate::crypto::{CipherSuite, Password, SessionKeys};
use crate::error::{Error, Result};
use crate::packet::{self, Reject, Response, SeqWindow, payload};
use crate::rakp::{self, Handshake, NAME_ONLY_LOOKUP, Privilege};

/// Largest datagram we expect; anything longer is truncated and then rejected.
const MAX_DATAGRAM: usize = 2048;

/// Retransmission policy for one exchange.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retry {
    pub timeout: Duration,
    pub retries: u32,
    /// Wait this long (instead of `timeout`) before the first retransmission.
    pub hedge: Option<Duration>,
}

impl Retry {
    /// How long transmission `attempt` (0-based) waits for its answer: the first two
    /// copies of a hedged exchange follow each other after the short delay (an answer to
    /// any earlier copy is still taken), the rest after the full timeout.
    fn wait(&self, attempt: u32) -> Duration {
        match self.hedge {
            Some(h) if attempt < 2 && h < self.timeout => h,
            _ => self.timeout,
        }
    }

    fn unhedged(self) -> Retry {
        Retry {
            hedge: None,
            ..self
        }
    }
}

/// What a receive filter decided about one datagram.
enum Verdict<T> {
    Done(T),
    Ignore,
    BadIntegrity,
}

/// Send `pkt` and wait for a datagram `accept` takes, retransmitting the same
/// bytes up to `retry.retries` times (session-setup messages only: they carry
/// no sequence number, so an identical retransmission is correct).
async fn exchange_fixed<T>(
    sock: &UdpSocket,
    pkt: &[u8],
    retry: Retry,
    phase: &'static str,
    mut accept: impl FnMut(&[u8]) -> Result<Option<T>>,
) -> Result<T> {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    for attempt in 0..=retry.retries {
        sock.send(pkt).await?;
        let deadline = Instant::now() + retry.wait(attempt);
        loop {
            match recv_until(sock, &mut buf, deadline).await? {
                None => break,
                Some(n) => {
                    if let Some(v) = accept(&buf[..n])? {
                        return Ok(v);
                    }
                }
            }
        }
    }
    Err(Error::Timeout {
        phase,
        attempts: retry.retries + 1,
        per_attempt: retry.timeout,
    })
}

/// Receive one datagram before `deadline`; `None` when the deadline passed.
/// An ICMP port-unreachable (ECONNREFUSED on a connected socket) counts as
/// silence: the attempt simply waits out its deadline.
async fn recv_until(sock: &UdpSocket, buf: &mut [u8], deadline: Instant) -> Result<Option<usize>> {
    match tokio::time::timeout_at(deadline, sock.recv(buf)).await {
        Err(_) => Ok(None),
        Ok(Ok(n)) => Ok(Some(n)),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            tokio::time::sleep_until(deadline).await;
            Ok(None)
        }
        Ok(Err(e)) => Err(e.into()),
    }
}

/// Table entries the BMC opened for retransmitted copies of one Open Session Request.
struct Copies {
    tag: u8,
    console_sid: u32,
    suite: CipherSuite,
    /// The session the handshake goes on with.
    chosen: u32,
    orphans: Vec<u32>,
}

impl Copies {
    /// Notes a late Open Session Response to a copy.
    fn note(&mut self, payload_type: u8, p: &[u8]) {
        if payload_type != payload::OPEN_SESSION_RESPONSE {
            return;
        }
        if let Ok(Some(osr)) =
            rakp::parse_open_session_response(p, self.tag, self.console_sid, self.suite)
            && osr.bmc_sid != self.chosen
            && !self.orphans.contains(&osr.bmc_sid)
        {
            self.orphans.push(osr.bmc_sid);
        }
    }

    /// Tells the BMC to drop each orphan now: a RAKP 3 with an error status ends a session
    /// that is being set up (as after a RAKP 2 that did not verify).
    async fn release(&self, sock: &UdpSocket) {
        for sid in &self.orphans {
            // 0x12: illegal or unrecognized parameter (the copy was not wanted).
            let mut abort = vec![self.tag, 0x12, 0, 0];
            abort.extend_from_slice(&sid.to_le_bytes());
            if let Ok(p) = packet::encode_v2(payload::RAKP3, 0, 0, &abort, None) {
                let _ = sock.send(&p).await;
            }
            tracing::debug!(
                bmc_sid = sid,
                "released the session of a retransmitted Open Session Request"
            );
        }
    }
}

/// Credentials and algorithms for one handshake.
pub(crate) struct Login<'a> {
    pub suite: CipherSuite,
    pub username: &'a str,
    pub password: &'a Password,
    pub bmc_key: Option<&'a Password>,
    pub privilege: Privilege,
}

/// An established RMCP+ session.
#[derive(Debug)]
pub(crate) struct Session {
    pub keys: SessionKeys,
    pub console_sid: u32,
    pub bmc_sid: u32,
    out_seq: u32,
    window: SeqWindow,
    rq_seq: u8,
    pub privilege: Privilege,
    /// Packets dropped by the replay window / integrity check (shared with the client's stats).
    pub counters: Arc<Counters>,
}

/// Drop counters that outlive individual sessions.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub replays: AtomicU64,
    pub integrity: AtomicU64,
}

fn nonzero_u32() -> u32 {
    loop {
        let v: u32 = rand::random();
        if v != 0 {
            return v;
        }
    }
}

/// Session-less Get Channel Authentication Capabilities (IPMI 1.5 framing,
/// as every lanplus client sends it first): proves the BMC is alive and
/// speaks IPMI 2.0 before any session state is created on it.
pub(crate) async fn channel_auth_caps(
    sock: &UdpSocket,
    privilege: Privilege,
    retry: Retry,
) -> Result<()> {
    let rq_seq: u8 = rand::random::<u8>() & 0x3F;
    // Channel 0x0E = this channel, bit 7 = report IPMI 2.0 extended data.
    let msg = packet::encode_request(0x06, 0x38, rq_seq, &[0x8E, privilege as u8]);
    let mut pkt = Vec::with_capacity(14 + msg.len());
    pkt.extend_from_slice(&packet::RMCP_IPMI);
    pkt.extend_from_slice(&[0x00, 0, 0, 0, 0, 0, 0, 0, 0, msg.len() as u8]);
    pkt.extend_from_slice(&msg);
    let caps = exchange_fixed(
        sock,
        &pkt,
        retry,
        "channel authentication capabilities",
        |buf| {
            if buf.len() < 14 || buf[..4] != packet::RMCP_IPMI || buf[4] != 0x00 {
                return Ok(None);
            }
            let len = usize::from(buf[13]);
            let Some(m) = buf.get(14..14 + len) else {
                return Ok(None);
            };
            match packet::decode_response(m) {
                Ok(r) if r.netfn == 0x07 && r.cmd == 0x38 && r.rq_seq == rq_seq => Ok(Some(r)),
                _ => Ok(None),
            }
        },
    )
    .await?;
    if caps.completion != 0 {
        return Err(Error::CompletionCode {
            command: "Get Channel Authentication Capabilities",
            code: caps.completion,
        });
    }
    let d = &caps.data;
    if d.len() < 4 || d[1] & 0x80 == 0 || d[3] & 0x02 == 0 {
        return Err(Error::Protocol(
            "the BMC does not offer IPMI 2.0 (RMCP+) on this channel".into(),
        ));
    }
    Ok(())
}

impl Session {
    /// Open Session, RAKP 1–4 and Set Session Privilege Level.
    pub async fn establish(
        sock: &UdpSocket,
        login: &Login<'_>,
        retry: Retry,
        counters: Arc<Counters>,
    ) -> Result<Session> {
        let suite = login.suite;
        // Open Session is not retransmitted early: some BMCs (OpenBMC) give
        // every copy its own session-table entry.
        let setup = retry.unhedged();
        // Keys that cannot be used fail before anything is sent.
        login.password.key()?;
        if let Some(k) = login.bmc_key {
            k.key()?;
        }
        let console_sid = nonzero_u32();
        let tag: u8 = rand::random();

        let req = rakp::open_session_request(tag, console_sid, suite);
        let pkt = packet::encode_v2(payload::OPEN_SESSION_REQUEST, 0, 0, &req, None)?;
        let osr = exchange_fixed(
            sock,
            &pkt,
            setup,
            "open session",
            |buf| match packet::decode_v2(buf, None) {
                Ok(p) if p.payload_type == payload::OPEN_SESSION_RESPONSE => {
                    rakp::parse_open_session_response(&p.payload, tag, console_sid, suite)
                }
                _ => Ok(None),
            },
        )
        .await?;

        // Each retransmitted Open Session Request may take a table entry of its own (OpenBMC
        // does not recognise a copy): answers to the copies that arrive while the handshake
        // goes on name them, and they are released at the end rather than left to the BMC's
        // setup timer.
        let mut copies = Copies {
            tag,
            console_sid,
            suite,
            chosen: osr.bmc_sid,
            orphans: Vec::new(),
        };
        let r = Self::handshake(
            sock,
            login,
            retry,
            counters,
            tag,
            console_sid,
            osr,
            &mut copies,
        )
        .await;
        copies.release(sock).await;
        r
    }

    /// RAKP 1–4 and Set Session Privilege Level on the session the BMC opened.
    #[allow(clippy::too_many_arguments)]
    async fn handshake(
        sock: &UdpSocket,
        login: &Login<'_>,
        retry: Retry,
        counters: Arc<Counters>,
        tag: u8,
        console_sid: u32,
        osr: rakp::OpenSessionResponse,
        copies: &mut Copies,
    ) -> Result<Session> {
        let suite = login.suite;
        let setup = retry.unhedged();
        let kuid = login.password.key()?;
        let kg = match login.bmc_key {
            Some(k) => k.key()?,
            None => kuid,
        };
        let hs = Handshake {
            suite,
            console_sid,
            bmc_sid: osr.bmc_sid,
            rm: rand::random(),
            role: login.privilege as u8 | NAME_ONLY_LOOKUP,
            username: login.username.as_bytes().to_vec(),
        };
        let pkt = packet::encode_v2(payload::RAKP1, 0, 0, &hs.rakp1(tag)?, None)?;
        let rakp2 = exchange_fixed(
            sock,
            &pkt,
            setup,
            "RAKP 1/2",
            |buf| match packet::decode_v2(buf, None) {
                Ok(p) if p.payload_type == payload::RAKP2 => hs.check_rakp2(&p.payload, tag, &kuid),
                Ok(p) => {
                    copies.note(p.payload_type, &p.payload);
                    Ok(None)
                }
                _ => Ok(None),
            },
        )
        .await;
        let (rc, guid) = match rakp2 {
            Ok(v) => v,
            Err(e @ Error::AuthFailed(_)) => {
                // Tell the BMC to drop the half-open session now rather than
                // when its setup timer expires (RAKP 3 with an error status).
                let mut abort = vec![tag, 0x0F, 0, 0];
                abort.extend_from_slice(&hs.bmc_sid.to_le_bytes());
                if let Ok(p) = packet::encode_v2(payload::RAKP3, 0, 0, &abort, None) {
                    let _ = sock.send(&p).await;
                }
                return Err(e);
            }
            Err(e) => return Err(e),
        };

        let sik = hs.sik(&kg, &rc)?;
        let pkt = packet::encode_v2(payload::RAKP3, 0, 0, &hs.rakp3(tag, &kuid, &rc)?, None)?;
        let keys = exchange_fixed(
            sock,
            &pkt,
            setup,
            "RAKP 3/4",
            |buf| match packet::decode_v2(buf, None) {
                Ok(p) if p.payload_type == payload::RAKP4 => {
                    hs.check_rakp4(&p.payload, tag, &sik, &guid)
                }
                Ok(p) => {
                    copies.note(p.payload_type, &p.payload);
                    Ok(None)
                }
                _ => Ok(None),
            },
        )
        .await;
        let keys = match keys {
            Ok(k) => k,
            Err(e @ Error::Timeout { .. }) => {
                // The BMC may have activated the session and only its RAKP 4
                // got lost: close it with the keys it would be using, so the
                // slot is not held until the BMC's idle timer fires.
                let mut orphan = Session {
                    keys: SessionKeys::derive(suite, &sik)?,
                    console_sid,
                    bmc_sid: hs.bmc_sid,
                    out_seq: 0,
                    window: SeqWindow::default(),
                    counters: Arc::new(Counters::default()),
                    rq_seq: 0,
                    privilege: Privilege::User,
                };
                orphan
                    .close(
                        sock,
                        Retry {
                            timeout: retry.timeout,
                            retries: 0,
                            hedge: None,
                        },
                    )
                    .await;
                return Err(e);
            }
            Err(e) => return Err(e),
        };

        let mut session = Session {
            keys,
            console_sid,
            bmc_sid: hs.bmc_sid,
            out_seq: 0,
            window: SeqWindow::default(),
            counters,
            rq_seq: 0,
            privilege: Privilege::User,
        };
        // Sessions start at User; raise to what was asked for. From here on
        // the session exists on the BMC: every failure closes it.
        let r = match session
            .request(
                sock,
                retry,
                "Set Session Privilege Level",
                0x06,
                0x3B,
                &[login.privilege as u8],
            )
            .await
        {
            Ok(r) => r,
            Err(e) => {
                session.close(sock, retry.unhedged()).await;
                return Err(e);
            }
        };
        match r.completion {
            0 => {}
            0x80 | 0x81 | 0xD4 => {
                session.close(sock, retry.unhedged()).await;
                return Err(Error::Unauthorized(
                    "the BMC refused the requested privilege level",
                ));
            }
            code => {
                session.close(sock, retry.unhedged()).await;
                return Err(Error::CompletionCode {
                    command: "Set Session Privilege Level",
                    code,
                });
            }
        }
        session.privilege = login.privilege;
        tracing::debug!(
            suite = suite.id(),
            bmc_sid = session.bmc_sid,
            "IPMI session established"
        );
        Ok(session)
    }

    fn next_out_seq(&mut self) -> u32 {
        self.out_seq = self.out_seq.wrapping_add(1);
        if self.out_seq == 0 {
            self.out_seq = 1;
        }
        self.out_seq
    }

    /// Send one IPMI request and wait for its response. Each retransmission
    /// carries a fresh session sequence number (the BMC's replay window would
    /// drop a repeated one) and the same IPMI rqSeq, so a late answer to an
    /// earlier transmission is accepted too. A socket error once the request
    /// is out is [`Error::MaybeSent`]: the BMC may have carried it out.
    pub async fn request(
        &mut self,
        sock: &UdpSocket,
        retry: Retry,
        phase: &'static str,
        netfn: u8,
        cmd: u8,
        data: &[u8],
    ) -> Result<Response> {
        self.rq_seq = (self.rq_seq + 1) & 0x3F;
        let rq_seq = self.rq_seq;
        let msg = packet::encode_request(netfn, cmd, rq_seq, data);
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let mut integrity_failures = 0u32;
        for attempt in 0..=retry.retries {
            let seq = self.next_out_seq();
            let pkt = packet::encode_v2(
                payload::IPMI,
                self.bmc_sid,
                seq,
                &msg,
                Some((&self.keys, rand::random())),
            )?;
            let lost = |e: Error| match e {
                Error::Io(source) => Error::MaybeSent {
                    command: phase,
                    source,
                },
                other => other,
            };
            match sock.send(&pkt).await {
                Ok(_) => {}
                Err(e) if attempt == 0 => return Err(e.into()),
                Err(e) => return Err(lost(e.into())),
            }
            let deadline = Instant::now() + retry.wait(attempt);
            while let Some(n) = recv_until(sock, &mut buf, deadline).await.map_err(lost)? {
                match self.match_response(&buf[..n], netfn, cmd, rq_seq) {
                    Verdict::Done(r) => return Ok(r),
                    Verdict::BadIntegrity => {
                        integrity_failures += 1;
                        self.counters.integrity.fetch_add(1, Ordering::Relaxed);
                    }
                    Verdict::Ignore => {}
                }
            }
        }
        if integrity_failures > 0 {
            return Err(Error::Integrity(integrity_failures));
        }
        Err(Error::Timeout {
            phase,
            attempts: retry.retries + 1,
            per_attempt: retry.timeout,
        })
    }

    fn match_response(&mut self, buf: &[u8], netfn: u8, cmd: u8, rq_seq: u8) -> Verdict<Response> {
        let p = match packet::decode_v2(buf, Some(&self.keys)) {
            Ok(p) => p,
            Err(Reject::Integrity) => {
                tracing::debug!(
                    bmc_sid = self.bmc_sid,
                    "dropping packet with a bad integrity code"
                );
                return Verdict::BadIntegrity;
            }
            Err(Reject::Malformed(why)) => {
                tracing::trace!(%why, "ignoring datagram");
                return Verdict::Ignore;
            }
        };
        if p.payload_type != payload::IPMI || !p.authenticated || p.session_id != self.console_sid {
            return Verdict::Ignore;
        }
        if !self.window.accept(p.seq) {
            self.counters.replays.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(seq = p.seq, "dropping replayed or too old sequence number");
            return Verdict::Ignore;
        }
        match packet::decode_response(&p.payload) {
            Ok(r) if r.rq_seq == rq_seq && r.cmd == cmd && r.netfn == netfn | 1 => Verdict::Done(r),
            _ => Verdict::Ignore,
        }
    }

    /// Close Session (best effort, one short exchange).
    pub async fn close(&mut self, sock: &UdpSocket, retry: Retry) {
        let sid = self.bmc_sid.to_le_bytes();
        // Hedged when the caller hedges (a shutdown of many sessions under loss): a
        // lost Close Session leaves the session on the BMC until its idle timer.
        let once = Retry {
            timeout: retry.timeout,
            retries: retry.retries.min(if retry.hedge.is_some() { 3 } else { 1 }),
            hedge: retry.hedge,
        };
        match self
            .request(sock, once, "Close Session", 0x06, 0x3C, &sid)
            .await
        {
            Ok(_) => tracing::debug!(bmc_sid = self.bmc_sid, "IPMI session closed"),
            Err(e) => {
                tracing::debug!(bmc_sid = self.bmc_sid, error = %e, "Close Session got no answer")
            }
        }
    }
}

#[cfg(feature = "fuzzing")]
impl Session {
    /// A session as `establish` leaves it, without a BMC: for the fuzz targets.
    pub(crate) fn for_fuzzing(keys: SessionKeys, console_sid: u32, bmc_sid: u32) -> Session {
        Session {
            keys,
            console_sid,
            bmc_sid,
            out_seq: 0,
            window: SeqWindow::default(),
            rq_seq: 0,
            privilege: Privilege::User,
            counters: Arc::new(Counters::default()),
        }
    }

    /// `request`'s handling of one received datagram: `Ok(Some)` is the answer, `Err` a bad
    /// integrity code.
    pub(crate) fn receive_for_fuzzing(
        &mut self,
        buf: &[u8],
        netfn: u8,
        cmd: u8,
        rq_seq: u8,
    ) -> std::result::Result<Option<Response>, ()> {
        match self.match_response(buf, netfn, cmd, rq_seq) {
            Verdict::Done(r) => Ok(Some(r)),
            Verdict::Ignore => Ok(None),
            Verdict::BadIntegrity => Err(()),
        }
    }
}
