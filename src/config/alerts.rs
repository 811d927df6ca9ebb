//! `alerts:`: when a credential's expiry warns and turns critical, and where alerts go.

use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, Loading, Span};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAlerts {
    warn_before: Option<Span>,
    critical_before: Option<Span>,
    alertmanager: Option<String>,
    webhook: Option<String>,
    pending_review_after: Option<Span>,
    flux: Option<RawFlux>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFlux {
    address: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlertsConfig {
    pub warn_before: Duration,
    pub critical_before: Duration,
    pub alertmanager: Option<url::Url>,
    pub webhook: Option<url::Url>,
    /// How long a fix for a broken hub credential may wait for review before an alert.
    pub pending_review_after: Duration,
    /// Flux's notification-controller: its event endpoint, as the Flux controllers'
    /// `--events-addr` names it.
    pub flux: Option<url::Url>,
}

/// Defaults filled in (no `alerts:` at all takes them all); the sinks must be http(s)
/// URLs, and critical must come after warn.
pub(super) fn load(raw: Option<RawAlerts>, l: &Loading) -> Result<AlertsConfig, ConfigError> {
    let url = |field: &str, v: Option<String>| -> Result<Option<url::Url>, ConfigError> {
        v.map(|s| {
            url::Url::parse(&s)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https"))
                .ok_or_else(|| l.bad(field, format!("{field} {s:?} is not an http(s) URL")))
        })
        .transpose()
    };
    let a = raw.unwrap_or_default();
    let alerts = AlertsConfig {
        warn_before: a
            .warn_before
            .map_or(Duration::from_secs(30 * 86_400), |s| s.0),
        critical_before: a
            .critical_before
            .map_or(Duration::from_secs(7 * 86_400), |s| s.0),
        alertmanager: url("alerts.alertmanager", a.alertmanager)?,
        webhook: url("alerts.webhook", a.webhook)?,
        pending_review_after: a
            .pending_review_after
            .map_or(Duration::from_secs(4 * 3600), |s| s.0),
        flux: url("alerts.flux.address", a.flux.map(|f| f.address))?,
    };
    if alerts.critical_before > alerts.warn_before {
        return Err(l.bad(
            "alerts.critical_before",
            format!(
                "alerts.critical_before ({}) is longer than alerts.warn_before ({}): critical must come later, closer to expiry",
                Span(alerts.critical_before),
                Span(alerts.warn_before)
            ),
        ));
    }
    Ok(alerts)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{MIN, parse, refused};

    #[test]
    fn the_flux_address_is_an_http_url_and_nothing_else_is_taken() {
        refused(
            &format!("{MIN}alerts: {{flux: {{address: notification-controller:9090}}}}\n"),
            &["alerts.flux.address", "http(s) URL"],
        );
        refused(
            &format!("{MIN}alerts: {{flux: {{url: http://nc/}}}}\n"),
            &["url"],
        );
        let c = parse(&format!(
            "{MIN}alerts: {{flux: {{address: 'http://notification-controller.flux-system.svc.cluster.local./'}}}}\nhub: {{}}\n"
        ))
        .unwrap();
        assert_eq!(
            c.alerts.flux.unwrap().as_str(),
            "http://notification-controller.flux-system.svc.cluster.local./"
        );
    }

    #[test]
    fn flux_alerts_need_a_flux_object_for_every_spoke() {
        let flux = "alerts: {flux: {address: 'http://nc/'}}\n";
        refused(
            &format!("{MIN}{flux}"),
            &["line 5: alerts.flux", "spokes[0].kustomization", "add hub:"],
        );
        let named = MIN.replace("10.0.0.1}", "10.0.0.1, kustomization: {}}");
        assert!(parse(&format!("{named}{flux}")).is_ok());
        let hub = format!("{MIN}{flux}hub: {{}}\n");
        assert!(parse(&hub).is_ok(), "the hub lists the consumers");
    }

    #[test]
    fn critical_must_come_after_warn() {
        refused(
            &format!("{MIN}alerts: {{warn_before: 1d, critical_before: 7d}}\n"),
            &["critical_before", "warn_before"],
        );
    }
}
