//! Kubernetes Events on the hub (`events.k8s.io/v1`): what spokekeeper did or found for a
//! spoke, recorded on the Flux object that deploys with the spoke's credential, so that
//! `kubectl events --for kustomization/NAME` and `flux events` show it beside Flux's own.
//!
//! Repeats are aggregated as client-go's events recorder does: the first occurrence of a
//! key is created as an Event, each repeat within [`Series::window`] of the last one
//! patches that Event's `series` (count, lastObservedTime). Only `create` and `patch`
//! are called ([`super::ACCESS`]): nothing is listed or read back, so the series lives in
//! memory (a restarted daemon starts new ones).

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use serde::Serialize;
use time::OffsetDateTime;

use super::consumers::{self, Consumer, Listed};
use super::verify::HubReport;
use super::{Hub, HubError};
use crate::config::{SealingFormat, SpokeConfig};

/// `reportingController` of every Event and Flux notification.
pub const CONTROLLER: &str = "spokekeeper";

/// How long client-go keeps an Event's series open after its last occurrence.
pub const CLIENT_GO_WINDOW: Duration = Duration::from_secs(6 * 60);

/// An Event's note is at most 1 kB (the API server refuses longer ones).
const NOTE_BYTES: usize = 1024;

/// Consumers named per occurrence at most (one Event each).
const MAX_REGARDING: usize = 10;

/// Why an Event is recorded: the fixed list spokekeeper reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Reason {
    /// A validated credential was committed for the spoke.
    CredentialRotated,
    /// The committed client certificate or CA expires within alerts.warn_before.
    CredentialExpiring,
    /// The committed client certificate or CA has expired.
    CredentialExpired,
    /// The tick stopped for the spoke; the committed credential is untouched.
    RotationFailed,
    /// After a push, the hub did not unseal it or a consumer is not Ready with it.
    HubVerificationFailed,
    /// Superseded minted credentials were revoked (their ClusterRoleBindings deleted).
    CredentialRevoked,
    /// Superseded minted credentials could not be revoked.
    RevocationFailed,
}

impl Reason {
    pub const ALL: [Reason; 7] = [
        Reason::CredentialRotated,
        Reason::CredentialExpiring,
        Reason::CredentialExpired,
        Reason::RotationFailed,
        Reason::HubVerificationFailed,
        Reason::CredentialRevoked,
        Reason::RevocationFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::CredentialRotated => "CredentialRotated",
            Reason::CredentialExpiring => "CredentialExpiring",
            Reason::CredentialExpired => "CredentialExpired",
            Reason::RotationFailed => "RotationFailed",
            Reason::HubVerificationFailed => "HubVerificationFailed",
            Reason::CredentialRevoked => "CredentialRevoked",
            Reason::RevocationFailed => "RevocationFailed",
        }
    }

    pub fn kind(self) -> EventType {
        match self {
            Reason::CredentialRotated | Reason::CredentialRevoked => EventType::Normal,
            _ => EventType::Warning,
        }
    }

    /// The Event's `action`: what spokekeeper was doing.
    fn action(self) -> &'static str {
        match self {
            Reason::CredentialRotated | Reason::RotationFailed => "Rotate",
            Reason::CredentialExpiring | Reason::CredentialExpired => "Check",
            Reason::HubVerificationFailed => "Verify",
            Reason::CredentialRevoked | Reason::RevocationFailed => "Revoke",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// The object an Event is about (`regarding`; Flux's `involvedObject`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Regarding {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl Regarding {
    pub fn consumer(c: &Consumer) -> Regarding {
        Regarding {
            api_version: c.kind.resource().api_version,
            kind: c.kind.as_str().to_string(),
            namespace: c.namespace.clone(),
            name: c.name.clone(),
        }
    }

    /// The committed credential as the hub holds it: the SealedSecret, or in sops
    /// format the Secret kustomize-controller decrypts (there is no SealedSecret).
    pub fn credential(spoke: &SpokeConfig) -> Regarding {
        let (api_version, kind) = match spoke.format {
            SealingFormat::SealedSecrets => {
                (super::sealed_secret_resource().api_version, "SealedSecret")
            }
            SealingFormat::Sops => ("v1".to_string(), "Secret"),
        };
        Regarding {
            api_version,
            kind: kind.into(),
            namespace: spoke.secret.namespace.clone(),
            name: spoke.secret.name.clone(),
        }
    }

    /// The API group (`kustomize.toolkit.fluxcd.io`), "" for the core group.
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }
}

impl fmt::Display for Regarding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// The Flux objects a spoke's Events are about: its consumers from this tick's
/// verification, else `spokes[].kustomization`, else `listed`; none when they are not
/// known (the caller decides what stands in).
pub fn regarding(
    spoke: &SpokeConfig,
    verified: Option<&HubReport>,
    listed: &Listed,
) -> Vec<Regarding> {
    let mut out: Vec<Regarding> = match verified.filter(|h| !h.consumers.is_empty()) {
        Some(h) => h
            .consumers
            .iter()
            .map(|c| Regarding::consumer(&c.consumer))
            .collect(),
        None => match consumers::of(spoke, listed) {
            (_, Ok(found)) => found.iter().map(Regarding::consumer).collect(),
            (_, Err(_)) => Vec::new(),
        },
    };
    out.sort();
    out.dedup();
    out.truncate(MAX_REGARDING);
    out
}

/// One thing to record about one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Occurrence {
    pub regarding: Regarding,
    pub reason: Reason,
    /// Spoke-supplied parts already made one line; never secret material.
    pub note: String,
}

/// client-go's isomorphic key (regarding, reason, action and type follow the reason),
/// and the note, as the core recorder's correlator keys them: a changed note is a new
/// Event, not a repeat that hides the new text.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    regarding: Regarding,
    reason: Reason,
    note: String,
}

impl Key {
    fn of(o: &Occurrence) -> Key {
        Key {
            regarding: o.regarding.clone(),
            reason: o.reason,
            note: o.note.clone(),
        }
    }
}

#[derive(Clone, Debug)]
struct Entry {
    /// The Event's name (in the regarding object's namespace).
    name: String,
    count: u32,
    last: OffsetDateTime,
}

/// Whether an occurrence starts a series or repeats one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    First,
    /// The `count`th occurrence of the Event `name`.
    Again {
        name: String,
        count: u32,
    },
}

/// The open series, by key. Pure: the caller says when, and what was written.
#[derive(Debug)]
pub struct Series {
    window: Duration,
    open: HashMap<Key, Entry>,
}

impl Series {
    /// A series stays open for `window` after its last occurrence: at least client-go's
    /// six minutes, longer for a daemon whose repeats come once per tick.
    pub fn new(window: Duration) -> Series {
        Series {
            window: window.max(CLIENT_GO_WINDOW),
            open: HashMap::new(),
        }
    }

    pub fn window(&self) -> Duration {
        self.window
    }

    /// Closes series whose last occurrence is older than the window, then says whether
    /// `o` repeats an open one.
    pub fn seen(&mut self, o: &Occurrence, now: OffsetDateTime) -> Seen {
        let window = self.window;
        self.open.retain(|_, e| now - e.last <= window);
        match self.open.get(&Key::of(o)) {
            Some(e) => Seen::Again {
                name: e.name.clone(),
                count: e.count + 1,
            },
            None => Seen::First,
        }
    }

    /// `o` was written: as the first of a series named `name`, or as its `count`th.
    pub fn written(&mut self, o: &Occurrence, name: &str, count: u32, now: OffsetDateTime) {
        self.open.insert(
            Key::of(o),
            Entry {
                name: name.to_string(),
                count,
                last: now,
            },
        );
    }

    /// The series' Event is gone from the hub (expired after the API server's
    /// --event-ttl, or deleted): the next occurrence starts a new one.
    fn close(&mut self, o: &Occurrence) {
        self.open.remove(&Key::of(o));
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

/// Records occurrences as Events on the hub.
#[derive(Debug)]
pub struct Recorder {
    /// `reportingInstance`: the pod's name (POD_NAME) or the host's.
    instance: String,
    series: Series,
    /// Added to the name's timestamp: one tick records several Events at one `now`.
    created: u64,
}

impl Recorder {
    pub fn new(instance: &str, window: Duration) -> Recorder {
        Recorder {
            instance: crate::text::one_line(instance, 128),
            series: Series::new(window),
            created: 0,
        }
    }

    /// Creates the Event, or patches its series when it repeats one; an Event gone from
    /// the hub is created again. Returns whether this started a series.
    pub async fn record(
        &mut self,
        hub: &Hub,
        o: &Occurrence,
        now: OffsetDateTime,
    ) -> Result<Seen, HubError> {
        let seen = self.series.seen(o, now);
        if let Seen::Again { name, count } = &seen {
            if hub
                .patch_event_series(&o.regarding.namespace, name, *count, now)
                .await?
            {
                self.series.written(o, name, *count, now);
                return Ok(seen);
            }
            self.series.close(o);
        }
        self.created += 1;
        let event = self.event(o, now);
        hub.create_event(&o.regarding.namespace, &event).await?;
        self.series.written(o, &event.metadata.name, 1, now);
        Ok(Seen::First)
    }

    /// The events.k8s.io/v1 Event for the first occurrence.
    fn event(&self, o: &Occurrence, now: OffsetDateTime) -> Event {
        // client-go: "<regarding name>.<unix nanoseconds in hex>", unique per recorder.
        let stem: String = o.regarding.name.chars().take(200).collect();
        let nanos = now.unix_timestamp_nanos() + i128::from(self.created);
        Event {
            api_version: "events.k8s.io/v1",
            kind: "Event",
            metadata: Meta {
                name: format!("{stem}.{nanos:x}"),
                namespace: o.regarding.namespace.clone(),
            },
            event_time: micro_time(now),
            reporting_controller: CONTROLLER,
            reporting_instance: self.instance.clone(),
            action: o.reason.action(),
            reason: o.reason.as_str(),
            regarding: o.regarding.clone(),
            note: note(&o.note),
            type_: o.reason.kind().as_str(),
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    api_version: &'static str,
    kind: &'static str,
    metadata: Meta,
    event_time: String,
    reporting_controller: &'static str,
    reporting_instance: String,
    action: &'static str,
    reason: &'static str,
    regarding: Regarding,
    note: String,
    #[serde(rename = "type")]
    type_: &'static str,
}

#[derive(Debug, Serialize)]
struct Meta {
    name: String,
    namespace: String,
}

/// `s` as one line of at most [`NOTE_BYTES`] bytes, cut with `…`.
fn note(s: &str) -> String {
    let line = crate::text::one_line(s, usize::MAX);
    if line.len() <= NOTE_BYTES {
        return line;
    }
    let mut out = String::new();
    for c in line.chars() {
        if out.len() + c.len_utf8() > NOTE_BYTES - '…'.len_utf8() {
            break;
        }
        out.push(c);
    }
    out.push('…');
    out
}

/// metav1.MicroTime as the API server parses it: RFC 3339, exactly six fractional digits.
pub(crate) fn micro_time(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    t.format(time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z"
    ))
    .unwrap_or_default()
}

impl Hub {
    async fn create_event(&self, namespace: &str, event: &Event) -> Result<(), HubError> {
        let what = format!("events {namespace}: create {}", event.reason);
        let path = format!("/apis/events.k8s.io/v1/namespaces/{namespace}/events");
        let body = serde_json::to_vec(event).map_err(|source| HubError::NotObject {
            what: what.clone(),
            error: source,
        })?;
        let req = hyper::http::Request::post(&path)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json")
            .body(body)?;
        let (status, answer) = self.call(req, &what).await?;
        if status.is_success() {
            return Ok(());
        }
        Err(consumers::refused(what, status, &answer))
    }

    /// Sets the Event's series (a JSON merge patch, as kube-runtime's recorder sends it);
    /// false when the Event is gone.
    async fn patch_event_series(
        &self,
        namespace: &str,
        name: &str,
        count: u32,
        now: OffsetDateTime,
    ) -> Result<bool, HubError> {
        let what = format!("events {namespace}/{name}: patch series");
        let path = format!("/apis/events.k8s.io/v1/namespaces/{namespace}/events/{name}");
        let patch = serde_json::json!({
            "series": {"count": count, "lastObservedTime": micro_time(now)}
        });
        let req = hyper::http::Request::patch(&path)
            .header("Content-Type", "application/merge-patch+json")
            .header("Accept", "application/json")
            .body(patch.to_string().into_bytes())?;
        let (status, answer) = self.call(req, &what).await?;
        if status == hyper::http::StatusCode::NOT_FOUND {
            return Ok(false);
        }
        if status.is_success() {
            return Ok(true);
        }
        Err(consumers::refused(what, status, &answer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn occ(name: &str, reason: Reason, note: &str) -> Occurrence {
        Occurrence {
            regarding: Regarding {
                api_version: "kustomize.toolkit.fluxcd.io/v1".into(),
                kind: "Kustomization".into(),
                namespace: "flux-system".into(),
                name: name.into(),
            },
            reason,
            note: note.into(),
        }
    }

    #[test]
    fn repeats_within_the_window_continue_the_series_and_later_ones_start_anew() {
        let t0 = time::macros::datetime!(2026-12-04 08:00 UTC);
        let mut s = Series::new(Duration::from_secs(30 * 60));
        let o = occ("dev", Reason::CredentialExpiring, "expires on 2027-01-01");
        assert_eq!(s.seen(&o, t0), Seen::First);
        s.written(&o, "dev.1", 1, t0);
        let t1 = t0 + Duration::from_secs(15 * 60);
        assert_eq!(
            s.seen(&o, t1),
            Seen::Again {
                name: "dev.1".into(),
                count: 2
            }
        );
        s.written(&o, "dev.1", 2, t1);
        // The window runs from the last occurrence, not the first.
        let t2 = t1 + Duration::from_secs(29 * 60);
        assert_eq!(
            s.seen(&o, t2),
            Seen::Again {
                name: "dev.1".into(),
                count: 3
            }
        );
        // Not written (the patch failed): the next one counts the same.
        assert_eq!(
            s.seen(&o, t2),
            Seen::Again {
                name: "dev.1".into(),
                count: 3
            }
        );
        // Past the window: closed, a new Event.
        let t3 = t1 + Duration::from_secs(31 * 60);
        assert_eq!(s.seen(&o, t3), Seen::First);
        assert!(s.is_empty());
    }

    #[test]
    fn another_object_reason_or_note_is_another_series() {
        let t0 = time::macros::datetime!(2026-12-04 08:00 UTC);
        let mut s = Series::new(Duration::ZERO);
        assert_eq!(
            s.window(),
            CLIENT_GO_WINDOW,
            "never shorter than client-go's"
        );
        let o = occ("dev", Reason::CredentialExpiring, "a");
        s.written(&o, "dev.1", 1, t0);
        for other in [
            occ("prod", Reason::CredentialExpiring, "a"),
            occ("dev", Reason::CredentialExpired, "a"),
            occ("dev", Reason::CredentialExpiring, "b"),
        ] {
            assert_eq!(s.seen(&other, t0), Seen::First, "{other:?}");
        }
        assert!(matches!(s.seen(&o, t0), Seen::Again { count: 2, .. }));
    }

    #[test]
    fn the_event_is_what_the_api_server_validates() {
        let t = time::macros::datetime!(2026-12-04 08:00:01.5 UTC);
        let r = Recorder::new("spokekeeper-7d9f\nx", Duration::ZERO);
        let o = occ("dev", Reason::RotationFailed, "line one\nline two");
        let v = serde_json::to_value(r.event(&o, t)).unwrap();
        assert_eq!(v["apiVersion"], "events.k8s.io/v1");
        assert_eq!(v["eventTime"], "2026-12-04T08:00:01.500000Z");
        assert_eq!(v["reportingController"], "spokekeeper");
        assert_eq!(v["reportingInstance"], "spokekeeper-7d9f x");
        assert_eq!(v["type"], "Warning");
        assert_eq!(v["reason"], "RotationFailed");
        assert_eq!(v["action"], "Rotate");
        assert_eq!(v["note"], "line one line two");
        assert_eq!(v["metadata"]["namespace"], "flux-system");
        assert_eq!(
            v["metadata"]["name"],
            format!("dev.{:x}", t.unix_timestamp_nanos())
        );
        let mut r = r;
        r.created += 1;
        let next = serde_json::to_value(r.event(&o, t)).unwrap();
        assert_ne!(
            next["metadata"]["name"], v["metadata"]["name"],
            "one name per Event"
        );
        assert_eq!(
            v["regarding"]["apiVersion"],
            "kustomize.toolkit.fluxcd.io/v1"
        );
        assert_eq!(v["regarding"]["kind"], "Kustomization");
        for long in ["x".repeat(5000), "é".repeat(1000)] {
            let long = occ("dev", Reason::RotationFailed, &long);
            let v = serde_json::to_value(r.event(&long, t)).unwrap();
            let note = v["note"].as_str().unwrap();
            assert!(note.len() <= 1024 && note.ends_with('…'), "the API's limit");
        }
    }

    #[test]
    fn every_reason_has_its_type_and_name() {
        for r in Reason::ALL {
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
            let warning = !matches!(r, Reason::CredentialRotated | Reason::CredentialRevoked);
            assert_eq!(r.kind() == EventType::Warning, warning, "{r}");
        }
    }
}
