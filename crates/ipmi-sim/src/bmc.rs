//! One simulated BMC: RMCP+ session table (server side of RAKP), power
//! state machine, boot flags, SEL, FRU and Get Device ID.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::wire::{self, Keys, Request, Suite};
use crate::{BmcConfig, BootRecord, Faults, SimSensor};

const PRIV_USER: u8 = 2;
const PRIV_OPERATOR: u8 = 3;
const PRIV_ADMIN: u8 = 4;
/// Half-open sessions (RAKP not finished) are forgotten after this long.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

enum Phase {
    /// Open Session answered; waiting for RAKP 1.
    Opened,
    /// RAKP 2 sent; waiting for RAKP 3.
    Challenged {
        rm: [u8; 16],
        rc: [u8; 16],
        role: u8,
        name: Vec<u8>,
        rakp2: Vec<u8>,
    },
    /// RAKP 4 sent; the session carries IPMI messages.
    Active { keys: Keys, rakp4: Vec<u8>, tag: u8 },
}

/// `(rqSeq/LUN, netfn, cmd, data)` of an in-session request.
type RequestKey = (u8, u8, u8, Vec<u8>);
/// `(completion code, data)` of its answer.
type Answer = (u8, Vec<u8>);

struct Sess {
    console_sid: u32,
    suite: Suite,
    phase: Phase,
    priv_max: u8,
    priv_now: u8,
    out_seq: u32,
    top_seq: u32,
    seen: u32,
    touched: Instant,
    /// The last request `(rqSeq, netfn, cmd, data)` and its answer `(cc, data)`: a
    /// retransmission (same rqSeq, new session sequence number) is answered again
    /// without being carried out twice, as the IPMI spec lets a responder do.
    last: Option<(RequestKey, Answer)>,
}

impl Sess {
    fn accept_seq(&mut self, seq: u32) -> bool {
        if seq == 0 {
            return false;
        }
        if seq > self.top_seq {
            let d = seq - self.top_seq;
            self.seen = if d >= 32 { 1 } else { (self.seen << d) | 1 };
            self.top_seq = seq;
            return true;
        }
        let back = self.top_seq - seq;
        if back >= 16 || self.seen & (1 << back) != 0 {
            return false;
        }
        self.seen |= 1 << back;
        true
    }
}

/// Mutable state of a simulated BMC.
pub(crate) struct Bmc {
    pub cfg: BmcConfig,
    pub faults: Faults,
    pub power_on: bool,
    pub boot: [u8; 5],
    pub boot_in_progress: u8,
    /// Parameter 3: which events leave the valid bit set (bit 3: the 60 s timeout).
    boot_clearing: u8,
    /// When the valid bit of parameter 5 was last set.
    boot_valid_since: Option<Instant>,
    pub peak_active: usize,
    pub commands: Vec<(u8, u8)>,
    pub boot_params_written: Vec<u8>,
    pub sel: Vec<[u8; 16]>,
    next_record: u16,
    reservation: u16,
    last_add: u32,
    last_erase: u32,
    sessions: HashMap<u32, Sess>,
    pub peak_sessions: usize,
    pub sessions_opened: u64,
    pub rejected_full: u64,
    pub controls: Vec<u8>,
    fru: Vec<u8>,
    sensors: Vec<SimSensor>,
    sdr_reservation: u16,
    /// Console session id and next sequence number of a session closed by
    /// the request being answered (its reply still goes out under its keys).
    closing: Option<(u32, u32)>,
    /// A power transition in progress: (when, resulting state).
    pending_power: Option<(Instant, bool)>,
    /// Every time the host started, oldest first.
    pub boots: Vec<BootRecord>,
}

fn now_secs() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0)
}

fn nonzero() -> u32 {
    loop {
        let v: u32 = rand::random();
        if v != 0 {
            return v;
        }
    }
}

impl Bmc {
    pub fn new(cfg: BmcConfig) -> Bmc {
        let fru = cfg.fru.encode();
        let mut b = Bmc {
            faults: Faults::default(),
            power_on: cfg.power_on,
            boot: cfg.boot_flags,
            boot_in_progress: 0,
            boot_clearing: 0,
            boot_valid_since: None,
            peak_active: 0,
            commands: Vec::new(),
            boot_params_written: Vec::new(),
            sel: Vec::new(),
            next_record: 1,
            reservation: 0,
            last_add: 0,
            last_erase: 0,
            sessions: HashMap::new(),
            peak_sessions: 0,
            sessions_opened: 0,
            rejected_full: 0,
            controls: Vec::new(),
            fru,
            sensors: cfg.sensors.clone(),
            sdr_reservation: 0,
            closing: None,
            pending_power: None,
            boots: Vec::new(),
            cfg,
        };
        if b.power_on {
            // A server found on has booted its disk.
            b.boots.push(BootRecord {
                count: 1,
                device: "disk".into(),
                efi: b.cfg.uefi,
                override_applied: false,
                flags: b.boot,
                powered_off: false,
            });
        }
        for r in b.cfg.sel.clone() {
            b.add_sel(r);
        }
        b
    }

    /// Append a record (bytes 2..16 of the 16-byte layout); returns its id.
    pub fn add_sel(&mut self, body: [u8; 14]) -> u16 {
        let id = self.next_record;
        self.next_record = self.next_record.wrapping_add(1).max(1);
        let mut rec = [0u8; 16];
        rec[..2].copy_from_slice(&id.to_le_bytes());
        rec[2..].copy_from_slice(&body);
        self.sel.push(rec);
        self.last_add = now_secs();
        self.reservation = 0; // any change cancels reservations
        id
    }

    pub fn active_sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Sessions that finished RAKP.
    pub fn activated_sessions(&self) -> usize {
        self.sessions
            .values()
            .filter(|s| matches!(s.phase, Phase::Active { .. }))
            .count()
    }

    pub fn expire(&mut self, now: Instant) {
        let idle = self.cfg.session_timeout;
        self.sessions.retain(|_, s| {
            let limit = if matches!(s.phase, Phase::Active { .. }) {
                idle
            } else {
                SETUP_TIMEOUT
            };
            now.duration_since(s.touched) < limit
        });
    }

    /// Complete a power transition whose time has come.
    pub fn settle(&mut self, now: Instant) {
        if let Some((at, on)) = self.pending_power
            && now >= at
        {
            self.pending_power = None;
            if on && !self.power_on {
                self.power_on = true;
                self.boot_happens();
            } else if !on {
                self.power_off_now();
            }
        }
        // The chassis timeout: valid boot flags not used within 60 s are
        // invalidated, unless parameter 3 says not to.
        if let Some(since) = self.boot_valid_since
            && self.boot[0] & 0x80 != 0
            && self.boot_clearing & 0x08 == 0
            && now.duration_since(since) >= self.cfg.boot_flags_timeout
        {
            self.boot[0] &= 0x7F;
            self.boot_valid_since = None;
        }
    }

    /// Kg: the BMC key when configured, else the password.
    fn kg(&self) -> Vec<u8> {
        match &self.cfg.bmc_key {
            Some(k) => {
                let mut k = k.as_bytes().to_vec();
                k.truncate(20);
                k.resize(20, 0);
                k
            }
            None => self.password(),
        }
    }

    fn password(&self) -> Vec<u8> {
        let mut p = self.cfg.password.as_bytes().to_vec();
        if self.faults.wrong_password {
            p.extend_from_slice(b"-rotated");
        }
        p.truncate(20);
        p.resize(20, 0);
        p
    }

    /// Handle one datagram; returns the datagrams to send back.
    pub fn handle(&mut self, dgram: &[u8]) -> Vec<Vec<u8>> {
        let now = Instant::now();
        self.expire(now);
        self.settle(now);
        if dgram.len() < 5 || dgram[0] != 0x06 {
            return vec![];
        }
        match dgram[3] & 0x1F {
            0x06 => self.asf(dgram).into_iter().collect(),
            0x07 if dgram[4] == 0x00 => self.sessionless(dgram).into_iter().collect(),
            0x07 if dgram[4] == 0x06 => self.v2(dgram, now).into_iter().collect(),
            _ => vec![],
        }
    }

    /// ASF Presence Ping → Pong.
    fn asf(&self, d: &[u8]) -> Option<Vec<u8>> {
        if d.len() < 12 || d[4..8] != [0, 0, 0x11, 0xBE] || d[8] != 0x80 {
            return None;
        }
        let mut out = vec![
            0x06, 0x00, 0xFF, 0x06, 0, 0, 0x11, 0xBE, 0x40, d[9], 0x00, 0x10,
        ];
        out.extend([0, 0, 0x11, 0xBE, 0, 0, 0, 0, 0x81, 0x00, 0, 0, 0, 0, 0, 0]);
        Some(out)
    }

    /// IPMI 1.5 session-less requests (Get Channel Authentication
    /// Capabilities and Get Channel Cipher Suites, which ipmitool sends first).
    fn sessionless(&self, d: &[u8]) -> Option<Vec<u8>> {
        if d.len() < 14 || d[9..13] != [0, 0, 0, 0] {
            return None;
        }
        let len = usize::from(d[13]);
        let req = wire::parse_request(d.get(14..14 + len)?)?;
        let (cc, data) = match (req.netfn, req.cmd) {
            (0x06, 0x38) => (0, self.auth_caps()),
            (0x06, 0x54) => self.cipher_suites(&req.data),
            _ => return None,
        };
        let msg = wire::build_response(&req, cc, &data);
        let mut out = vec![
            0x06,
            0x00,
            0xFF,
            0x07,
            0x00,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            msg.len() as u8,
        ];
        out.extend(msg);
        Some(out)
    }

    fn auth_caps(&self) -> Vec<u8> {
        // Channel 1; IPMI 2.0 extended data; no IPMI 1.5 auth types;
        // non-null user names; IPMI 2.0 connections supported.
        vec![0x01, 0x80, 0x04, 0x02, 0, 0, 0, 0]
    }

    fn cipher_suites(&self, data: &[u8]) -> (u8, Vec<u8>) {
        let Some(index) = data.get(2) else {
            return (0xC7, vec![]);
        };
        let mut recs = Vec::new();
        for s in &self.cfg.suites {
            let (a, i, c) = s.algorithms();
            recs.extend([0xC0, s.id(), a, 0x40 | i, 0x80 | c]);
        }
        let from = usize::from(index & 0x3F) * 16;
        let mut out = vec![0x01];
        out.extend(recs.iter().skip(from).take(16));
        (0, out)
    }

    fn v2(&mut self, d: &[u8], now: Instant) -> Option<Vec<u8>> {
        let p = wire::parse_v2(d)?;
        match p.ptype & 0x3F {
            0x10 => self.open_session(p.payload, now),
            0x12 => self.rakp1(p.payload, now),
            0x14 => self.rakp3(p.payload, now),
            0x00 => self.in_session(&p, now),
            _ => None,
        }
    }

    fn open_session(&mut self, m: &[u8], now: Instant) -> Option<Vec<u8>> {
        if m.len() < 32 {
            return None;
        }
        let tag = m[0];
        let console_sid = u32::from_le_bytes([m[4], m[5], m[6], m[7]]);
        // A retransmitted request is not recognised: it gets a new table entry,
        // as OpenBMC's netipmid does (the client must cope with the orphan).
        let fail = |status: u8| {
            let mut r = vec![tag, status, 0, 0];
            r.extend(console_sid.to_le_bytes());
            wire::seal(0x11, 0, 0, &r, None)
        };
        let rec = |i: usize| (m[8 + i * 8], m[8 + i * 8 + 4] & 0x3F);
        let (a, i, c) = (rec(0), rec(1), rec(2));
        if a.0 != 0 || i.0 != 1 || c.0 != 2 {
            return fail(0x12);
        }
        let Some(suite) =
            Suite::from_algorithms(a.1, i.1, c.1).filter(|s| self.cfg.suites.contains(s))
        else {
            return fail(0x11);
        };
        if self.faults.session_table_full || self.sessions.len() >= self.cfg.max_sessions {
            self.rejected_full += 1;
            return fail(0x01);
        }
        let mut bmc_sid = nonzero();
        while self.sessions.contains_key(&bmc_sid) {
            bmc_sid = nonzero();
        }
        let (aa, ia, ca) = suite.algorithms();
        let mut r = vec![tag, 0, PRIV_ADMIN, 0];
        r.extend(console_sid.to_le_bytes());
        r.extend(bmc_sid.to_le_bytes());
        r.extend([
            0, 0, 0, 8, aa, 0, 0, 0, 1, 0, 0, 8, ia, 0, 0, 0, 2, 0, 0, 8, ca, 0, 0, 0,
        ]);
        self.sessions.insert(
            bmc_sid,
            Sess {
                console_sid,
                suite,
                phase: Phase::Opened,
                priv_max: PRIV_ADMIN,
                priv_now: PRIV_USER,
                out_seq: 0,
                top_seq: 0,
                seen: 0,
                touched: now,
                last: None,
            },
        );
        self.peak_sessions = self.peak_sessions.max(self.sessions.len());
        wire::seal(0x11, 0, 0, &r, None)
    }

    fn rakp1(&mut self, m: &[u8], now: Instant) -> Option<Vec<u8>> {
        if m.len() < 28 {
            return None;
        }
        let tag = m[0];
        let bmc_sid = u32::from_le_bytes([m[4], m[5], m[6], m[7]]);
        let mut rm = [0u8; 16];
        rm.copy_from_slice(&m[8..24]);
        let role = m[24];
        let ulen = usize::from(m[27]);
        let name = m.get(28..28 + ulen).map(<[u8]>::to_vec);
        let password = self.password();
        let guid = self.cfg.guid;
        let username = self.cfg.username.clone();
        let Some(s) = self.sessions.get_mut(&bmc_sid) else {
            let r = [tag, 0x02, 0, 0, 0, 0, 0, 0];
            return wire::seal(0x13, 0, 0, &r, None);
        };
        s.touched = now;
        let console_sid = s.console_sid;
        let fail = |status: u8| {
            let mut r = vec![tag, status, 0, 0];
            r.extend(console_sid.to_le_bytes());
            wire::seal(0x13, 0, 0, &r, None)
        };
        match &s.phase {
            Phase::Challenged { rm: old, rakp2, .. } if *old == rm => {
                return wire::seal(0x13, 0, 0, &rakp2.clone(), None);
            }
            Phase::Active { .. } => return None,
            _ => {}
        }
        let priv_req = role & 0x0F;
        let name_ok = name.as_deref() == Some(username.as_bytes());
        if ulen > 16 || !name_ok {
            self.sessions.remove(&bmc_sid);
            return fail(0x0D);
        }
        if !(1..=PRIV_ADMIN).contains(&priv_req) {
            self.sessions.remove(&bmc_sid);
            return fail(0x09);
        }
        let name = name.unwrap_or_default();
        let rc: [u8; 16] = rand::random();
        let code = s.suite.mac(
            &password,
            &[
                &console_sid.to_le_bytes(),
                &bmc_sid.to_le_bytes(),
                &rm,
                &rc,
                &guid,
                &[role, ulen as u8],
                &name,
            ],
        );
        let mut r = vec![tag, 0, 0, 0];
        r.extend(console_sid.to_le_bytes());
        r.extend(rc);
        r.extend(guid);
        r.extend(code);
        s.priv_max = priv_req;
        s.phase = Phase::Challenged {
            rm,
            rc,
            role,
            name,
            rakp2: r.clone(),
        };
        wire::seal(0x13, 0, 0, &r, None)
    }

    fn rakp3(&mut self, m: &[u8], now: Instant) -> Option<Vec<u8>> {
        if m.len() < 8 {
            return None;
        }
        let tag = m[0];
        let status = m[1];
        let bmc_sid = u32::from_le_bytes([m[4], m[5], m[6], m[7]]);
        let password = self.password();
        let kg = self.kg();
        let guid = self.cfg.guid;
        let s = self.sessions.get_mut(&bmc_sid)?;
        s.touched = now;
        let console_sid = s.console_sid;
        if let Phase::Active { rakp4, tag: t, .. } = &s.phase {
            // A retransmitted RAKP 3: repeat RAKP 4.
            return (*t == tag)
                .then(|| wire::seal(0x15, 0, 0, &rakp4.clone(), None))
                .flatten();
        }
        if status != 0 {
            // The console gave up on a session being set up (e.g. our RAKP 2 did not verify,
            // or it is the entry of a retransmitted Open Session Request): free the slot.
            self.sessions.remove(&bmc_sid);
            return None;
        }
        let Phase::Challenged {
            rm, rc, role, name, ..
        } = &s.phase
        else {
            return None;
        };
        let suite = s.suite;
        let want = suite.mac(
            &password,
            &[
                rc,
                &console_sid.to_le_bytes(),
                &[*role, name.len() as u8],
                name,
            ],
        );
        let got = &m[8..];
        if want.len() != got.len() || want.iter().zip(got).fold(0u8, |a, (x, y)| a | (x ^ y)) != 0 {
            self.sessions.remove(&bmc_sid);
            let mut r = vec![tag, 0x0F, 0, 0];
            r.extend(console_sid.to_le_bytes());
            return wire::seal(0x15, 0, 0, &r, None);
        }
        let sik = suite.mac(&kg, &[rm, rc, &[*role, name.len() as u8], name]);
        let icv = suite.mac(&sik, &[rm, &bmc_sid.to_le_bytes(), &guid]);
        let mut r = vec![tag, 0, 0, 0];
        r.extend(console_sid.to_le_bytes());
        r.extend(icv.get(..suite.trunc_len())?);
        s.phase = Phase::Active {
            keys: Keys::from_sik(suite, &sik),
            rakp4: r.clone(),
            tag,
        };
        self.sessions_opened += 1;
        self.peak_active = self.peak_active.max(self.activated_sessions());
        wire::seal(0x15, 0, 0, &r, None)
    }

    fn in_session(&mut self, p: &wire::Inbound<'_>, now: Instant) -> Option<Vec<u8>> {
        let s = self.sessions.get_mut(&p.sid)?;
        let Phase::Active { keys, .. } = &s.phase else {
            return None;
        };
        let keys = keys.clone();
        let plain = wire::unseal(p, &keys)?;
        if !s.accept_seq(p.seq) {
            return None;
        }
        s.touched = now;
        let req = wire::parse_request(&plain)?;
        let priv_now = s.priv_now;
        let key = (req.rq_seq_lun, req.netfn, req.cmd, req.data.clone());
        let dedup = !self.faults.no_dedup;
        let cached = s
            .last
            .as_ref()
            .filter(|(k, _)| dedup && *k == key)
            .map(|(_, answer)| answer.clone());
        self.commands.push((req.netfn, req.cmd));
        let (cc, data) = match cached {
            Some(answer) => answer,
            None => {
                let answer = self.command(p.sid, priv_now, &req);
                if let Some(s) = self.sessions.get_mut(&p.sid) {
                    s.last = Some((key, answer.clone()));
                }
                answer
            }
        };
        if self.faults.mute_commands.contains(&(req.netfn, req.cmd)) {
            // Executed, but the answer is lost.
            if let Some(s) = self.sessions.get_mut(&p.sid) {
                s.out_seq = s.out_seq.wrapping_add(1).max(1);
            }
            return None;
        }
        let msg = wire::build_response(&req, cc, &data);
        // Close Session removes the entry after the answer is built.
        let s = match self.sessions.get_mut(&p.sid) {
            Some(s) => s,
            None => {
                let (console_sid, seq) = self.closing.take()?;
                return wire::seal(0x00, console_sid, seq, &msg, Some(&keys));
            }
        };
        s.out_seq = s.out_seq.wrapping_add(1).max(1);
        wire::seal(0x00, s.console_sid, s.out_seq, &msg, Some(&keys))
    }

    fn command(&mut self, sid: u32, priv_now: u8, req: &Request) -> (u8, Vec<u8>) {
        let need = |level: u8| priv_now >= level;
        let d = &req.data;
        match (req.netfn, req.cmd) {
            (0x06, 0x01) => (0, self.device_id()),
            (0x06, 0x08) => (0, self.cfg.guid.to_vec()),
            (0x06, 0x38) => (0, self.auth_caps()),
            (0x06, 0x54) => self.cipher_suites(d),
            (0x06, 0x3B) => {
                let Some(s) = self.sessions.get_mut(&sid) else {
                    return (0xFF, vec![]);
                };
                let want = d.first().map(|b| b & 0x0F).unwrap_or(0);
                if want == 0 {
                    return (0, vec![s.priv_now]);
                }
                if !(1..=PRIV_ADMIN).contains(&want) {
                    return (0x80, vec![]);
                }
                if want > s.priv_max {
                    return (0x81, vec![]);
                }
                s.priv_now = want;
                (0, vec![want])
            }
            (0x06, 0x3C) => {
                let Some(target) = d
                    .get(..4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                else {
                    return (0xC7, vec![]);
                };
                match self.sessions.remove(&target) {
                    Some(gone) => {
                        if target == sid {
                            self.closing =
                                Some((gone.console_sid, gone.out_seq.wrapping_add(1).max(1)));
                        } else if priv_now < PRIV_ADMIN {
                            self.sessions.insert(target, gone);
                            return (0xD4, vec![]);
                        }
                        (0, vec![])
                    }
                    None => (0x87, vec![]),
                }
            }
            (0x00, 0x01) => {
                let byte0 = u8::from(self.power_on) | (self.cfg.restore_policy & 3) << 5;
                (0, vec![byte0, 0, 0, 0])
            }
            (0x00, 0x02) if !need(PRIV_OPERATOR) => (0xD4, vec![]),
            (0x00, 0x02) => {
                let Some(op) = d.first().map(|b| b & 0x0F) else {
                    return (0xC7, vec![]);
                };
                let now = Instant::now();
                let cc = match op {
                    0 if !self.cfg.power_delay.is_zero() && self.power_on => {
                        self.pending_power = Some((now + self.cfg.power_delay, false));
                        0
                    }
                    0 => {
                        self.pending_power = None;
                        self.power_off_now();
                        0
                    }
                    1 if !self.cfg.power_delay.is_zero() && !self.power_on => {
                        self.pending_power = Some((now + self.cfg.power_delay, true));
                        0
                    }
                    1 => {
                        self.pending_power = None;
                        if !self.power_on {
                            self.power_on = true;
                            self.boot_happens();
                        }
                        0
                    }
                    2 | 3 if !self.power_on => 0xD5,
                    2 if !self.cfg.cycle_delay.is_zero() => {
                        self.power_off_now();
                        self.pending_power = Some((now + self.cfg.cycle_delay, true));
                        0
                    }
                    2 | 3 => {
                        self.boot_happens();
                        0
                    }
                    4 => 0,
                    5 if !self.cfg.soft_off_delay.is_zero() => {
                        self.pending_power = Some((now + self.cfg.soft_off_delay, false));
                        0
                    }
                    5 => {
                        self.power_off_now();
                        0
                    }
                    _ => 0xCC,
                };
                if cc == 0 {
                    self.controls.push(op);
                }
                (cc, vec![])
            }
            (0x00, 0x08) if !need(PRIV_OPERATOR) => (0xD4, vec![]),
            (0x00, 0x08) => match d.first().map(|b| b & 0x7F) {
                Some(0) => {
                    self.boot_params_written.push(0);
                    self.boot_in_progress = d.get(1).copied().unwrap_or(0) & 3;
                    (0, vec![])
                }
                Some(3) => match d.get(1) {
                    Some(v) => {
                        self.boot_params_written.push(3);
                        self.boot_clearing = v & 0x1F;
                        (0, vec![])
                    }
                    None => (0xC7, vec![]),
                },
                Some(4) => {
                    self.boot_params_written.push(4);
                    (0, vec![])
                }
                Some(5) => match d.get(1..6) {
                    Some(b) => {
                        self.boot_params_written.push(5);
                        self.boot.copy_from_slice(b);
                        if self.faults.drop_efi_bit {
                            self.boot[0] &= !0x20;
                        }
                        self.boot_valid_since = (b[0] & 0x80 != 0).then(Instant::now);
                        (0, vec![])
                    }
                    None => (0xC7, vec![]),
                },
                Some(_) => (0x80, vec![]),
                None => (0xC7, vec![]),
            },
            (0x00, 0x09) => match d.first().map(|b| b & 0x7F) {
                Some(0) => (0, vec![1, 0, self.boot_in_progress]),
                Some(3) => (0, vec![1, 3, self.boot_clearing]),
                Some(4) => (0, vec![1, 4, 0, 0]),
                Some(5) => {
                    let mut r = vec![1, 5];
                    r.extend(self.boot);
                    (0, r)
                }
                Some(_) => (0x80, vec![]),
                None => (0xC7, vec![]),
            },
            (0x0A, 0x10) => match d.first() {
                Some(0) => {
                    let [lo, hi] = (self.fru.len() as u16).to_le_bytes();
                    (0, vec![lo, hi, 0])
                }
                Some(_) => (0xCB, vec![]),
                None => (0xC7, vec![]),
            },
            (0x0A, 0x11) => {
                if d.len() < 4 {
                    return (0xC7, vec![]);
                }
                if d[0] != 0 {
                    return (0xCB, vec![]);
                }
                let off = usize::from(u16::from_le_bytes([d[1], d[2]]));
                let count = usize::from(d[3]);
                if count > self.cfg.fru_max_read {
                    return (0xCA, vec![]);
                }
                if off >= self.fru.len() {
                    return (0xC9, vec![]);
                }
                let end = (off + count).min(self.fru.len());
                let mut r = vec![(end - off) as u8];
                r.extend_from_slice(&self.fru[off..end]);
                (0, r)
            }
            (0x0A, 0x20) => {
                let mut r = vec![0x51];
                r.extend((self.sensors.len() as u16).to_le_bytes());
                r.extend([0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0]);
                r.push(0x02); // reserve supported
                (0, r)
            }
            (0x0A, 0x22) => {
                self.sdr_reservation = self.sdr_reservation.wrapping_add(1).max(1);
                (0, self.sdr_reservation.to_le_bytes().to_vec())
            }
            (0x0A, 0x23) => self.get_sdr(d),
            (0x04, 0x2D) => match d.first().and_then(|n| self.sensor(*n)) {
                Some(s) => match s.thresholds {
                    Some(t) => {
                        let raw = s.raw;
                        // Comparison status: at or below LNC, LC, LNR; at or above UNC, UC, UNR.
                        let mut bits = 0u8;
                        for (i, v) in t.iter().enumerate() {
                            if let Some(v) = v
                                && ((i < 3 && raw <= *v) || (i >= 3 && raw >= *v))
                            {
                                bits |= 1 << i;
                            }
                        }
                        (0, vec![raw, 0xC0, bits | 0xC0])
                    }
                    None => {
                        let [lo, hi] = s.states.to_le_bytes();
                        (0, vec![0, 0xC0, lo, hi | 0x80])
                    }
                },
                None => (0xCB, vec![]),
            },
            (0x04, 0x27) => match d.first().and_then(|n| self.sensor(*n)) {
                Some(SimSensor {
                    thresholds: Some(t),
                    ..
                }) => {
                    let mut r = vec![0u8];
                    for (i, v) in t.iter().enumerate() {
                        if v.is_some() {
                            r[0] |= 1 << i;
                        }
                        r.push(v.unwrap_or(0));
                    }
                    (0, r)
                }
                Some(_) => (0xCD, vec![]),
                None => (0xCB, vec![]),
            },
            (0x0A, 0x40) => {
                let mut r = vec![0x51];
                r.extend((self.sel.len() as u16).to_le_bytes());
                r.extend(
                    (((self.cfg.sel_capacity.saturating_sub(self.sel.len())) * 16).min(0xFFFE)
                        as u16)
                        .to_le_bytes(),
                );
                r.extend(self.last_add.to_le_bytes());
                r.extend(self.last_erase.to_le_bytes());
                r.push(0x02 | 0x08); // reserve + delete supported
                (0, r)
            }
            (0x0A, 0x42) => {
                self.reservation = self.reservation.wrapping_add(1).max(1);
                (0, self.reservation.to_le_bytes().to_vec())
            }
            (0x0A, 0x43) => self.get_sel_entry(d),
            (0x0A, 0x44) if !need(PRIV_OPERATOR) => (0xD4, vec![]),
            (0x0A, 0x44) => match d.get(2..16) {
                Some(b) => {
                    let mut body = [0u8; 14];
                    body.copy_from_slice(b);
                    (0, self.add_sel(body).to_le_bytes().to_vec())
                }
                None => (0xC7, vec![]),
            },
            (0x0A, 0x47) if !need(PRIV_OPERATOR) => (0xD4, vec![]),
            (0x0A, 0x47) => {
                if d.len() < 6 || d[2..5] != *b"CLR" {
                    return (0xCC, vec![]);
                }
                if u16::from_le_bytes([d[0], d[1]]) != self.reservation || self.reservation == 0 {
                    return (0xC5, vec![]);
                }
                if d[5] == 0xAA {
                    self.sel.clear();
                    self.last_erase = now_secs();
                    self.reservation = 0;
                }
                (0, vec![0x01])
            }
            (0x0A, 0x48) => (0, now_secs().to_le_bytes().to_vec()),
            _ => (0xC1, vec![]),
        }
    }

    /// The host (re)boots: it boots the override's device in the override's mode when the
    /// flags are valid and name a device, else the disk in the machine's own mode; the boot is
    /// recorded (a reset ends the boot before it) and a next-boot-only override is consumed.
    pub fn boot_happens(&mut self) {
        if let Some(last) = self.boots.last_mut() {
            last.powered_off = true;
        }
        let valid = self.boot[0] & 0x80 != 0;
        let selector = (self.boot[1] >> 2) & 0x0F;
        let applies = valid && selector != 0;
        self.boots.push(BootRecord {
            count: self.boots.last().map_or(1, |b| b.count + 1),
            device: if applies {
                crate::selector_name(selector).into()
            } else {
                "disk".into()
            },
            efi: if applies {
                self.boot[0] & 0x20 != 0
            } else {
                self.cfg.uefi
            },
            override_applied: applies,
            flags: self.boot,
            powered_off: false,
        });
        if self.boot[0] & 0xC0 == 0x80 {
            self.boot[0] &= 0x7F;
        }
    }

    /// A power transition ending in `on` at `at`.
    pub fn set_pending_power(&mut self, at: Instant, on: bool) {
        self.pending_power = Some((at, on));
    }

    /// The power goes off: the running host stops.
    pub fn power_off_now(&mut self) {
        if self.power_on
            && let Some(last) = self.boots.last_mut()
        {
            last.powered_off = true;
        }
        self.power_on = false;
    }

    fn device_id(&self) -> Vec<u8> {
        let dev = &self.cfg.device;
        let mut r = vec![
            dev.device_id,
            dev.device_revision & 0x0F,
            dev.firmware_major & 0x7F,
            dev.firmware_minor_bcd,
            0x02,
            0x9D, // chassis, SEL, FRU, SDR repository, sensor device
        ];
        r.extend(&dev.manufacturer_id.to_le_bytes()[..3]);
        r.extend(dev.product_id.to_le_bytes());
        r.extend(dev.aux_firmware);
        r
    }

    fn sensor(&self, number: u8) -> Option<&SimSensor> {
        self.sensors.iter().find(|s| s.number == number)
    }

    pub fn set_sensor(&mut self, number: u8, f: impl FnOnce(&mut SimSensor)) {
        if let Some(s) = self.sensors.iter_mut().find(|s| s.number == number) {
            f(s);
        }
    }

    /// The SDR record of the sensor at `index` (record id `index + 1`).
    fn sdr_record(&self, index: usize) -> Option<Vec<u8>> {
        let s = self.sensors.get(index)?;
        let id = (index as u16 + 1).to_le_bytes();
        let name = s.name.as_bytes();
        let name = &name[..name.len().min(16)];
        let mut r = match s.thresholds {
            Some(t) => {
                let mut r = vec![0u8; 48];
                r[3] = 0x01;
                r[10] = 0x7F;
                r[11] = 1 << 2; // thresholds readable
                r[13] = 0x01;
                let mask = t
                    .iter()
                    .enumerate()
                    .filter(|(_, v)| v.is_some())
                    .fold(0u8, |m, (i, _)| m | (1 << i));
                r[18] = mask;
                r[19] = mask;
                r[21] = s.unit;
                r[24] = (s.m & 0xFF) as u8;
                r[25] = (((s.m >> 8) & 3) as u8) << 6;
                r[47] = 0xC0 | name.len() as u8;
                r
            }
            None => {
                let mut r = vec![0u8; 32];
                r[3] = 0x02;
                r[10] = 0x43;
                r[13] = 0x6F;
                r[31] = 0xC0 | name.len() as u8;
                r
            }
        };
        r[0] = id[0];
        r[1] = id[1];
        r[2] = 0x51;
        r[5] = 0x20;
        r[7] = s.number;
        r[8] = 0x07;
        r[9] = 1;
        r[12] = s.sensor_type;
        r.extend_from_slice(name);
        r[4] = (r.len() - 5) as u8;
        Some(r)
    }

    fn get_sdr(&mut self, d: &[u8]) -> (u8, Vec<u8>) {
        if d.len() < 6 {
            return (0xC7, vec![]);
        }
        let res = u16::from_le_bytes([d[0], d[1]]);
        let id = u16::from_le_bytes([d[2], d[3]]);
        let (off, n) = (usize::from(d[4]), d[5]);
        if off != 0 {
            if self.faults.sdr_cancellations > 0 {
                self.faults.sdr_cancellations -= 1;
                self.sdr_reservation = self.sdr_reservation.wrapping_add(1).max(1);
                return (0xC5, vec![]);
            }
            if res == 0 || res != self.sdr_reservation {
                return (0xC5, vec![]);
            }
        }
        let index = if id == 0 { 0 } else { usize::from(id) - 1 };
        let Some(rec) = self.sdr_record(index) else {
            return (0xCB, vec![]);
        };
        let end = if n == 0xFF {
            rec.len()
        } else {
            if usize::from(n) > self.cfg.sdr_max_read {
                return (0xCA, vec![]);
            }
            (off + usize::from(n)).min(rec.len())
        };
        if off > end {
            return (0xC9, vec![]);
        }
        let next = if index + 1 < self.sensors.len() {
            index as u16 + 2
        } else {
            0xFFFF
        };
        let mut r = next.to_le_bytes().to_vec();
        r.extend_from_slice(&rec[off..end]);
        (0, r)
    }

    fn get_sel_entry(&self, d: &[u8]) -> (u8, Vec<u8>) {
        if d.len() < 6 {
            return (0xC7, vec![]);
        }
        let res = u16::from_le_bytes([d[0], d[1]]);
        let id = u16::from_le_bytes([d[2], d[3]]);
        let (off, n) = (usize::from(d[4]), d[5]);
        if (res != 0 && res != self.reservation) || (res == 0 && off != 0) {
            return (0xC5, vec![]);
        }
        let idx = match id {
            0x0000 if !self.sel.is_empty() => Some(0),
            0xFFFF if !self.sel.is_empty() => Some(self.sel.len() - 1),
            _ => self.sel.iter().position(|r| r[..2] == id.to_le_bytes()),
        };
        let Some(idx) = idx else {
            return (0xCB, vec![]);
        };
        let next = self
            .sel
            .get(idx + 1)
            .map(|r| [r[0], r[1]])
            .unwrap_or([0xFF, 0xFF]);
        let rec = &self.sel[idx];
        let end = if n == 0xFF {
            16
        } else {
            (off + usize::from(n)).min(16)
        };
        if off > 16 || off > end {
            return (0xC9, vec![]);
        }
        let mut r = next.to_vec();
        r.extend_from_slice(&rec[off..end]);
        (0, r)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn bmc() -> Bmc {
        Bmc::new(BmcConfig::new(0, "pw"))
    }

    /// An in-session command at Administrator privilege; its completion code.
    fn run(b: &mut Bmc, netfn: u8, cmd: u8, data: &[u8]) -> u8 {
        let req = Request {
            rs_addr: 0x20,
            netfn,
            rs_lun: 0,
            rq_addr: 0x81,
            rq_seq_lun: 0,
            cmd,
            data: data.to_vec(),
        };
        b.command(1, PRIV_ADMIN, &req).0
    }

    #[test]
    fn boots_are_recorded_with_the_override_device_and_mode_and_it_is_used_once() {
        let mut b = bmc();
        assert!(b.boots.is_empty());
        // PXE, next boot only, UEFI (valid, EFI bit): what ingot writes.
        assert_eq!(run(&mut b, 0x00, 0x08, &[5, 0xA0, 0x04, 0, 0, 0]), 0);
        assert_eq!(run(&mut b, 0x00, 0x02, &[1]), 0);
        assert_eq!(b.boots.len(), 1);
        let first = b.boots[0].clone();
        assert_eq!(
            (
                first.count,
                first.device.as_str(),
                first.efi,
                first.override_applied
            ),
            (1, "pxe", true, true)
        );
        assert_eq!(first.flags, [0xA0, 0x04, 0, 0, 0]);
        assert!(!first.powered_off);
        assert_eq!(
            b.boot[0] & 0x80,
            0,
            "the next-boot-only override is used up"
        );
        // A reset boots the disk in the machine's mode and ends the boot before.
        assert_eq!(run(&mut b, 0x00, 0x02, &[3]), 0);
        assert!(b.boots[0].powered_off);
        let second = &b.boots[1];
        assert_eq!(
            (
                second.count,
                second.device.as_str(),
                second.efi,
                second.override_applied
            ),
            (2, "disk", true, false)
        );
        // Power down ends it; a Legacy override boots Legacy.
        assert_eq!(run(&mut b, 0x00, 0x02, &[0]), 0);
        assert!(b.boots[1].powered_off);
        assert_eq!(run(&mut b, 0x00, 0x08, &[5, 0x80, 0x04, 0, 0, 0]), 0);
        assert_eq!(run(&mut b, 0x00, 0x02, &[1]), 0);
        assert_eq!((b.boots[2].device.as_str(), b.boots[2].efi), ("pxe", false));
    }

    #[test]
    fn a_bmc_started_on_has_booted_its_disk() {
        let mut cfg = BmcConfig::new(0, "pw");
        cfg.power_on = true;
        let b = Bmc::new(cfg);
        assert_eq!(b.boots.len(), 1);
        let boot = &b.boots[0];
        assert_eq!(
            (boot.count, boot.device.as_str(), boot.efi, boot.powered_off),
            (1, "disk", true, false)
        );
    }

    #[test]
    fn a_legacy_machine_boots_legacy_without_an_override() {
        let mut cfg = BmcConfig::new(0, "pw");
        cfg.uefi = false;
        let mut b = Bmc::new(cfg);
        assert_eq!(run(&mut b, 0x00, 0x02, &[1]), 0);
        assert_eq!(
            (b.boots[0].device.as_str(), b.boots[0].efi),
            ("disk", false)
        );
    }

    #[test]
    fn power_transitions_take_the_power_delay() {
        let mut cfg = BmcConfig::new(0, "pw");
        cfg.power_delay = Duration::from_secs(2);
        let mut b = Bmc::new(cfg);
        let t0 = Instant::now();
        assert_eq!(run(&mut b, 0x00, 0x02, &[1]), 0);
        b.settle(t0);
        assert!(
            !b.power_on && b.boots.is_empty(),
            "still off right after power up"
        );
        b.settle(t0 + Duration::from_secs(3));
        assert!(b.power_on);
        assert_eq!(b.boots.len(), 1);
        let t1 = Instant::now();
        assert_eq!(run(&mut b, 0x00, 0x02, &[0]), 0);
        b.settle(t1);
        assert!(
            b.power_on && !b.boots[0].powered_off,
            "still on right after power down"
        );
        b.settle(t1 + Duration::from_secs(3));
        assert!(!b.power_on && b.boots[0].powered_off);
    }

    #[test]
    fn garbage_never_panics_and_gets_no_answer() {
        let mut b = bmc();
        let mut x: u32 = 7;
        for i in 0..5000 {
            let len = (x % 90) as usize;
            let mut d = Vec::with_capacity(len);
            for _ in 0..len {
                x = x.wrapping_mul(1664525).wrapping_add(1013904223);
                d.push((x >> 24) as u8);
            }
            if d.len() > 6 {
                d[0] = 0x06;
                d[3] = 0x07;
                d[4] = if i % 2 == 0 { 0x06 } else { 0x00 };
                d[5] = [0x00, 0x10, 0x12, 0x14, 0xC0][i % 5];
            }
            let answer = b.handle(&d);
            assert!(
                answer.is_empty(),
                "garbage datagram {i} ({d:02x?}) was answered: {answer:02x?}"
            );
        }
        // Still serving: a well-formed request after the garbage is answered, so the silence
        // above is the garbage's, not a dead BMC's.
        let ping = [
            0x06, 0x00, 0xFF, 0x06, 0x00, 0x00, 0x11, 0xBE, 0x80, 0x21, 0x00, 0x00,
        ];
        assert_eq!(b.handle(&ping).len(), 1, "no pong after the garbage");
    }

    #[test]
    fn presence_ping_gets_a_pong() {
        let mut b = bmc();
        let ping = [
            0x06, 0x00, 0xFF, 0x06, 0x00, 0x00, 0x11, 0xBE, 0x80, 0x21, 0x00, 0x00,
        ];
        let r = b.handle(&ping);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0][8], 0x40);
        assert_eq!(r[0][9], 0x21);
    }

    #[test]
    fn open_session_retransmissions_take_new_entries_and_the_table_size_holds() {
        let mut b = Bmc::new(BmcConfig {
            max_sessions: 1,
            ..BmcConfig::new(0, "pw")
        });
        let mut req = vec![
            0x06, 0x00, 0xFF, 0x07, 0x06, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0,
        ];
        req.extend([9, 0, 0, 0, 1, 2, 3, 4]);
        req.extend([
            0, 0, 0, 8, 1, 0, 0, 0, 1, 0, 0, 8, 1, 0, 0, 0, 2, 0, 0, 8, 1, 0, 0, 0,
        ]);
        let a = b.handle(&req);
        assert_eq!(a[0][16 + 1], 0, "opened");
        assert_eq!(b.active_sessions(), 1);
        // A retransmission is a new request (OpenBMC): the one-entry table is full.
        let r = b.handle(&req);
        assert_eq!(r[0][16 + 1], 0x01, "insufficient resources");
        assert_eq!(b.rejected_full, 1);
        b.sessions.clear();
        b.cfg.max_sessions = 4;
        let again = b.handle(&req);
        let third = b.handle(&req);
        assert_ne!(again, third, "each retransmission gets its own session id");
        assert_eq!(b.active_sessions(), 2);
        // Suite 0 ("none" everywhere) is never accepted.
        let mut none = req.clone();
        none[20] = 6;
        for at in [16 + 8 + 4, 16 + 16 + 4, 16 + 24 + 4] {
            none[at] = 0;
        }
        b.sessions.clear();
        let r = b.handle(&none);
        assert_eq!(r[0][16 + 1], 0x11);
    }

    #[test]
    fn fru_image_checksums() {
        let img = crate::FruInfo::example(3).encode();
        assert_eq!(img[..8].iter().fold(0u8, |a, b| a.wrapping_add(*b)), 0);
        for off in [img[2], img[3], img[4]] {
            let start = usize::from(off) * 8;
            let len = usize::from(img[start + 1]) * 8;
            assert_eq!(
                img[start..start + len]
                    .iter()
                    .fold(0u8, |a, b| a.wrapping_add(*b)),
                0
            );
        }
    }
}
