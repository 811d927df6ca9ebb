//! `alerts.flux`: spokekeeper's Events posted to Flux's notification-controller in the
//! form the Flux controllers post theirs (fluxcd/pkg/runtime/events' recorder: the
//! event.toolkit.fluxcd.io Event as JSON, POSTed to the controllers' `--events-addr`),
//! so an existing Alert whose eventSources name a spoke's Kustomization forwards them
//! through its Provider.
//!
//! The first occurrence of a series is posted, not its repeats (the hub's Event counts
//! those): an expiry warning is one notification, not one per tick.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use time::OffsetDateTime;

use super::notify::{NotifyError, NotifyOptions, Sink, SinkError, client, post};
use crate::hub::recorder::{CONTROLLER, EventType, Occurrence, Regarding, Seen, Series};

/// fluxcd/pkg/apis/event/v1beta1.Event.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FluxEvent<'a> {
    pub involved_object: &'a Regarding,
    /// `info` or `error` (Normal and Warning, as eventTypeToSeverity maps them).
    pub severity: &'static str,
    /// metav1.Time: RFC 3339, whole seconds.
    pub timestamp: String,
    pub message: &'a str,
    pub reason: &'static str,
    /// Keys under the involved object's API group: notification-controller keeps only
    /// those (and event.toolkit.fluxcd.io's), and passes them on without the prefix.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    pub reporting_controller: &'static str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub reporting_instance: &'a str,
}

impl<'a> FluxEvent<'a> {
    pub(crate) fn of(
        o: &'a Occurrence,
        spoke: &str,
        instance: &'a str,
        now: OffsetDateTime,
    ) -> FluxEvent<'a> {
        let mut metadata = BTreeMap::new();
        metadata.insert(format!("{}/spoke", o.regarding.group()), spoke.to_string());
        FluxEvent {
            involved_object: &o.regarding,
            severity: match o.reason.kind() {
                EventType::Normal => "info",
                EventType::Warning => "error",
            },
            timestamp: crate::rotate::state::rfc3339(now),
            message: &o.note,
            reason: o.reason.as_str(),
            metadata,
            reporting_controller: CONTROLLER,
            reporting_instance: instance,
        }
    }
}

/// notification-controller's event endpoint and the series already posted.
pub(crate) struct FluxSink {
    client: reqwest::Client,
    opts: NotifyOptions,
    address: url::Url,
    instance: String,
    series: Series,
}

impl FluxSink {
    pub(crate) fn new(
        address: &url::Url,
        instance: &str,
        window: Duration,
        opts: NotifyOptions,
    ) -> Result<FluxSink, NotifyError> {
        Ok(FluxSink {
            client: client(&opts)?,
            opts,
            address: address.clone(),
            instance: crate::text::one_line(instance, 128),
            series: Series::new(window),
        })
    }

    /// Posts `o` unless it repeats a series already posted; retried and bounded like the
    /// other sinks. A failed post is tried again at the next occurrence.
    pub(crate) async fn send(
        &mut self,
        o: &Occurrence,
        spoke: &str,
        now: OffsetDateTime,
    ) -> Result<Seen, SinkError> {
        let seen = self.series.seen(o, now);
        let (name, count) = match &seen {
            Seen::Again { name, count } => (name.clone(), *count),
            Seen::First => {
                let event = FluxEvent::of(o, spoke, &self.instance, now);
                post(&self.client, &self.opts, Sink::Flux, &self.address, &event).await?;
                (String::new(), 1)
            }
        };
        self.series.written(o, &name, count, now);
        Ok(seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::recorder::Reason;

    #[test]
    fn the_payload_is_fluxs_event() {
        let o = Occurrence {
            regarding: Regarding {
                api_version: "kustomize.toolkit.fluxcd.io/v1".into(),
                kind: "Kustomization".into(),
                namespace: "flux-system".into(),
                name: "dev".into(),
            },
            reason: Reason::CredentialExpiring,
            note: "the client certificate of spoke dev expires on 2027-01-01T00:00:00Z".into(),
        };
        let t = time::macros::datetime!(2026-12-04 08:00:01.5 UTC);
        let v = serde_json::to_value(FluxEvent::of(&o, "dev", "spokekeeper-0", t)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "involvedObject": {
                    "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
                    "kind": "Kustomization",
                    "namespace": "flux-system",
                    "name": "dev"
                },
                "severity": "error",
                "timestamp": "2026-12-04T08:00:01Z",
                "message": "the client certificate of spoke dev expires on 2027-01-01T00:00:00Z",
                "reason": "CredentialExpiring",
                "metadata": {"kustomize.toolkit.fluxcd.io/spoke": "dev"},
                "reportingController": "spokekeeper",
                "reportingInstance": "spokekeeper-0"
            })
        );
        let rotated = Occurrence {
            reason: Reason::CredentialRotated,
            ..o
        };
        let v = serde_json::to_value(FluxEvent::of(&rotated, "dev", "", t)).unwrap();
        assert_eq!(v["severity"], "info");
        assert!(v.get("reportingInstance").is_none(), "omitempty, as in Go");
    }

    fn quick() -> NotifyOptions {
        NotifyOptions {
            attempts: 2,
            timeout: Duration::from_secs(2),
            backoff: Duration::from_millis(10),
            ..NotifyOptions::default()
        }
    }

    #[tokio::test]
    async fn a_series_is_posted_once_and_an_undelivered_one_again() {
        use spokekeeper_lab::webhook::{Mode, Receiver};
        let r = Receiver::start("/").await;
        let url = url::Url::parse(&r.url()).unwrap();
        let mut sink = FluxSink::new(&url, "pod-0", Duration::from_secs(600), quick()).unwrap();
        let o = Occurrence {
            regarding: Regarding {
                api_version: "kustomize.toolkit.fluxcd.io/v1".into(),
                kind: "Kustomization".into(),
                namespace: "flux-system".into(),
                name: "dev".into(),
            },
            reason: Reason::CredentialExpiring,
            note: "spoke dev: the client certificate expires on 2027-01-01T00:00:00Z (warning)"
                .into(),
        };
        let t = time::macros::datetime!(2026-12-04 08:00 UTC);
        r.set(Mode::Answer500);
        let e = sink.send(&o, "dev", t).await.unwrap_err();
        assert_eq!((e.sink, e.attempts), (Sink::Flux, 2), "{e}");
        r.set(Mode::Answer200);
        assert_eq!(sink.send(&o, "dev", t).await.unwrap(), Seen::First);
        let later = t + Duration::from_secs(300);
        assert!(matches!(
            sink.send(&o, "dev", later).await.unwrap(),
            Seen::Again { count: 2, .. }
        ));
        let expired = Occurrence {
            reason: Reason::CredentialExpired,
            ..o.clone()
        };
        assert_eq!(
            sink.send(&expired, "dev", later).await.unwrap(),
            Seen::First
        );
        let posts = r.posts();
        let reasons: Vec<&str> = posts
            .iter()
            .map(|p| p.body["reason"].as_str().unwrap())
            .collect();
        // Delivered: the series' first occurrence once, then the new one; the repeat not.
        assert_eq!(reasons, ["CredentialExpiring", "CredentialExpired"]);
        assert_eq!(r.requests(), 4, "two refused tries, then two posts");
        assert_eq!(
            posts[0].body["metadata"]["kustomize.toolkit.fluxcd.io/spoke"],
            "dev"
        );
        r.assert_clean();
    }
}
