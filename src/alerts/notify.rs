//! The sinks: Alertmanager, a generic JSON webhook, the log. A failing sink is retried a
//! bounded number of times with a short timeout and reported; it never fails or stalls
//! the evaluation (both HTTP sinks are sent concurrently, each bounded by
//! `attempts * (timeout + backoff)`).

use std::fmt;
use std::time::Duration;

use time::OffsetDateTime;

use super::alertmanager::AlertmanagerState;
use super::webhook::{Change, Payload, WebhookState};
use super::{Finding, Status};
use crate::config::AlertsConfig;
use crate::rotate::Gate;

#[derive(Clone, Debug)]
pub struct NotifyOptions {
    /// Tries per sink and evaluation.
    pub attempts: u32,
    /// Per try, from connect to the end of the answer.
    pub timeout: Duration,
    /// Pause before the second try; doubled for each further one.
    pub backoff: Duration,
    /// How often the daemon evaluates: active alerts stay valid for a few of these.
    pub evaluation_period: Duration,
}

impl Default for NotifyOptions {
    fn default() -> Self {
        NotifyOptions {
            attempts: 3,
            timeout: Duration::from_secs(5),
            backoff: Duration::from_millis(500),
            evaluation_period: Duration::from_secs(15 * 60),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sink {
    Alertmanager,
    Webhook,
    /// Flux's notification-controller (alerts.flux).
    Flux,
}

impl fmt::Display for Sink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Sink::Alertmanager => "alertmanager",
            Sink::Webhook => "webhook",
            Sink::Flux => "flux",
        })
    }
}

/// A sink that did not take the alerts. The URL is shown without credentials, query or
/// (for the webhook, whose path often is the secret) path.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "alerts.{sink} {target}: not delivered after {attempts} tries, last: {last}; they are sent again at the next evaluation: check that the receiver is up and the URL"
)]
pub struct SinkError {
    pub sink: Sink,
    pub target: String,
    pub attempts: u32,
    pub last: String,
}

/// The alert HTTP client cannot be built (never a sink's URL or credentials).
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("cannot set up TLS for alert sinks: {0}")]
    Tls(rustls::Error),
    #[error("cannot set up the alert HTTP client: {}", chain(.0))]
    Client(reqwest::Error),
}

/// The sinks and what each was last told: hold one across ticks.
pub struct Notifier {
    client: reqwest::Client,
    opts: NotifyOptions,
    alertmanager: Option<url::Url>,
    webhook: Option<url::Url>,
    am: AlertmanagerState,
    hook: WebhookState,
    log: WebhookState,
}

impl fmt::Debug for Notifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Notifier")
            .field("alertmanager", &self.alertmanager.as_ref().map(shown_am))
            .field("webhook", &self.webhook.as_ref().map(shown_hook))
            .finish_non_exhaustive()
    }
}

impl Notifier {
    pub fn new(cfg: &AlertsConfig, opts: NotifyOptions) -> Result<Notifier, NotifyError> {
        let client = client(&opts)?;
        let alertmanager = cfg.alertmanager.as_ref().map(|u| {
            let mut u = u.clone();
            let path = format!("{}/api/v2/alerts", u.path().trim_end_matches('/'));
            u.set_path(&path);
            u
        });
        Ok(Notifier {
            client,
            opts,
            alertmanager,
            webhook: cfg.webhook.clone(),
            am: AlertmanagerState::default(),
            hook: WebhookState::default(),
            log: WebhookState::default(),
        })
    }

    /// Logs what changed, sends to Alertmanager and the webhook (concurrently), and
    /// returns the sinks that failed. Bounded in time; never panics.
    pub async fn notify(&mut self, findings: &[Finding], now: OffsetDateTime) -> Vec<SinkError> {
        self.notify_while(findings, now, &Gate::default()).await
    }

    /// [`Notifier::notify`], each sink told only if `gate` is open right before it (a
    /// replica that lost the lease tells nothing more); a sink not told is told at the
    /// next evaluation, as one that failed.
    pub async fn notify_while(
        &mut self,
        findings: &[Finding],
        now: OffsetDateTime,
        gate: &Gate,
    ) -> Vec<SinkError> {
        self.log_changes(findings);
        let batch = self.am.batch(findings, now, self.opts.evaluation_period);
        let changes = self.hook.changes(findings);
        let am = async {
            match &self.alertmanager {
                Some(_) if gate.check().is_err() => Some(Err(None)),
                Some(url) if !batch.alerts.is_empty() => Some(
                    post(
                        &self.client,
                        &self.opts,
                        Sink::Alertmanager,
                        url,
                        &batch.alerts,
                    )
                    .await
                    .map_err(Some),
                ),
                _ => None,
            }
        };
        let hook = async {
            match &self.webhook {
                Some(_) if gate.check().is_err() => Some(Err(None)),
                Some(url) if !changes.is_empty() => {
                    let body = Payload {
                        source: "spokekeeper",
                        at: now,
                        changes: &changes,
                    };
                    let sent = post(&self.client, &self.opts, Sink::Webhook, url, &body).await;
                    Some(sent.map_err(Some))
                }
                _ => None,
            }
        };
        let (am, hook) = tokio::join!(am, hook);
        let mut errors = Vec::new();
        // Without an Alertmanager there is nothing to deliver: the state still moves on.
        self.am.settle(batch, !matches!(am, Some(Err(_))));
        if !matches!(hook, Some(Err(_))) {
            self.hook.remember(findings);
        }
        for result in [am, hook].into_iter().flatten() {
            if let Err(Some(e)) = result {
                tracing::warn!(sink = %e.sink, error = %e, "alert sink failed");
                errors.push(e);
            }
        }
        errors
    }

    /// The alerts active at the last evaluation (e.g. for a metric).
    pub fn active_alerts(&self) -> impl Iterator<Item = &super::PostableAlert> {
        self.am.active()
    }

    /// The log sink: one line per change, at a level that matches its status.
    fn log_changes(&mut self, findings: &[Finding]) {
        for c in self.log.changes(findings) {
            log_change(&c);
        }
        self.log.remember(findings);
    }
}

/// The HTTP client every sink posts with.
pub(super) fn client(opts: &NotifyOptions) -> Result<reqwest::Client, NotifyError> {
    // reqwest is built without a crypto provider: it uses the process default, and
    // panics without one. Installing twice is harmless (the first one stays).
    let _ = rustls::crypto::ring::default_provider().install_default();
    match client_builder(opts).build() {
        Ok(c) => Ok(c),
        Err(e) => {
            // No system CA certificates (a minimal image): http sinks still work.
            tracing::warn!(
                error = %chain(&e),
                "https alert sinks cannot be verified without the system's CA certificates: install ca-certificates"
            );
            without_system_roots(opts)
        }
    }
}

fn client_builder(opts: &NotifyOptions) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .timeout(opts.timeout)
        .connect_timeout(opts.timeout)
        .user_agent(concat!("spokekeeper/", env!("CARGO_PKG_VERSION")))
}

/// A client that trusts no CA: every https sink fails verification, clearly, per send.
fn without_system_roots(opts: &NotifyOptions) -> Result<reqwest::Client, NotifyError> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(NotifyError::Tls)?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    client_builder(opts)
        .tls_backend_preconfigured(tls)
        .build()
        .map_err(NotifyError::Client)
}

fn log_change(c: &Change) {
    let alert = c.alertname.map(|a| a.as_str()).unwrap_or("");
    let (spoke, cert, was) = (c.spoke.as_str(), c.cert.as_str(), c.previous.as_str());
    match c.severity {
        Status::Ok => {
            tracing::info!(spoke, cert, was, "resolved: {}", c.summary)
        }
        Status::Warning | Status::Unknown => {
            tracing::warn!(spoke, cert, alert, severity = %c.severity, "{}", c.description)
        }
        Status::Critical | Status::Expired => {
            tracing::error!(spoke, cert, alert, severity = %c.severity, "{}", c.description)
        }
    }
}

pub(super) async fn post<T: serde::Serialize + ?Sized>(
    client: &reqwest::Client,
    opts: &NotifyOptions,
    sink: Sink,
    url: &url::Url,
    body: &T,
) -> Result<(), SinkError> {
    let attempts = opts.attempts.max(1);
    let mut last = String::new();
    let mut tried = 0;
    for attempt in 0..attempts {
        if attempt > 0 {
            tokio::time::sleep(opts.backoff.saturating_mul(1 << (attempt - 1).min(8))).await;
        }
        tried += 1;
        match client.post(url.clone()).json(body).send().await {
            Ok(resp) if resp.status().is_success() => return Ok(()),
            // notification-controller's answer to a duplicate within its rate limit
            // interval: taken (Flux's own recorder does not retry it either).
            Ok(resp)
                if sink == Sink::Flux
                    && resp.status() == reqwest::StatusCode::TOO_MANY_REQUESTS =>
            {
                return Ok(());
            }
            Ok(resp) => {
                let status = resp.status();
                let text = resp.text().await.unwrap_or_default();
                let text = crate::spoke::sanitize_remote_text(&text, 200);
                last = if text.is_empty() {
                    format!("HTTP {status}")
                } else {
                    format!("HTTP {status}: {text}")
                };
                // The request itself is wrong: the same one will be refused again.
                let retry = status.is_server_error()
                    || status == reqwest::StatusCode::TOO_MANY_REQUESTS
                    || status == reqwest::StatusCode::REQUEST_TIMEOUT;
                if !retry {
                    break;
                }
            }
            Err(e) if e.is_timeout() => {
                last = format!("no answer within {:?}", opts.timeout);
            }
            Err(e) => last = chain(&e.without_url()),
        }
    }
    let target = match sink {
        Sink::Alertmanager => shown_am(url),
        Sink::Webhook | Sink::Flux => shown_hook(url),
    };
    Err(SinkError {
        sink,
        target,
        attempts: tried,
        last,
    })
}

/// An error and its causes on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cause = c.source();
    }
    s
}

fn origin(url: &url::Url) -> String {
    let mut s = format!("{}://{}", url.scheme(), url.host_str().unwrap_or("?"));
    if let Some(port) = url.port() {
        s.push_str(&format!(":{port}"));
    }
    s
}

fn shown_am(url: &url::Url) -> String {
    format!("{}{}", origin(url), url.path())
}

fn shown_hook(url: &url::Url) -> String {
    match url.path() {
        "" | "/" => origin(url),
        _ => format!("{}/...", origin(url)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_urls_carry_no_credentials() {
        let u =
            url::Url::parse("https://user:pw@hooks.example.org:8443/T0/B1/secret?token=x").unwrap();
        assert_eq!(shown_hook(&u), "https://hooks.example.org:8443/...");
        let u = url::Url::parse("http://u:p@am.monitoring:9093/api/v2/alerts?x=1").unwrap();
        assert_eq!(shown_am(&u), "http://am.monitoring:9093/api/v2/alerts");
    }

    /// The fallback for hosts without CA certificates still delivers to http sinks.
    #[tokio::test]
    async fn the_client_without_system_roots_posts_over_http() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url =
            url::Url::parse(&format!("http://{}/hook", listener.local_addr().unwrap())).unwrap();
        let server = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut req = Vec::new();
            let mut buf = [0u8; 4096];
            while !String::from_utf8_lossy(&req).contains("[1,2]") {
                let n = sock.read(&mut buf).await.unwrap();
                assert!(n > 0, "closed before the body");
                req.extend_from_slice(&buf[..n]);
            }
            sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            String::from_utf8_lossy(&req).into_owned()
        });
        let opts = NotifyOptions::default();
        let client = without_system_roots(&opts).unwrap();
        post(&client, &opts, Sink::Webhook, &url, &[1, 2])
            .await
            .unwrap();
        let req = server.await.unwrap();
        assert!(req.starts_with("POST /hook HTTP/1.1\r\n"), "{req}");
        assert!(
            req.to_lowercase()
                .contains("content-type: application/json"),
            "{req}"
        );
    }

    #[test]
    fn alertmanager_path_is_appended_to_a_prefix() {
        let cfg = AlertsConfig {
            warn_before: Duration::from_secs(10),
            critical_before: Duration::from_secs(5),
            alertmanager: Some(url::Url::parse("http://am:9093/prefix/").unwrap()),
            webhook: None,
            pending_review_after: Duration::from_secs(3600),
            flux: None,
        };
        let n = Notifier::new(&cfg, NotifyOptions::default()).unwrap();
        assert_eq!(
            n.alertmanager.as_ref().unwrap().as_str(),
            "http://am:9093/prefix/api/v2/alerts"
        );
    }
}
