//! The leader gate before each sink (issue 39, defect 6): a replica that lost the lease
//! tells no sink more, whether it lost it before the alerts or between two sinks, and
//! [`Gate::bound`] ends what was started when the tenure it reports runs out. Emulated
//! receivers on 127.0.0.1 record what arrives.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use spokekeeper::alerts::{Events, Notifier, NotifyOptions};
use spokekeeper::config::Config;
use spokekeeper::rotate::{Gate, Outcome, SpokeReport, TickReport};
use spokekeeper_lab::webhook::{Mode, Receiver};
use time::OffsetDateTime;

use super::sinks::critical;

const AM_PATH: &str = "/api/v2/alerts";
const HOOK_PATH: &str = "/hook";
const FLUX_PATH: &str = "/";

const QUICK: NotifyOptions = NotifyOptions {
    attempts: 1,
    timeout: Duration::from_secs(2),
    backoff: Duration::from_millis(50),
    evaluation_period: Duration::from_secs(60),
};

struct Sinks {
    am: Receiver,
    hook: Receiver,
    flux: Receiver,
    config: Config,
}

/// Alertmanager, the webhook and Flux's receiver, for spokes `dev` and `prod`.
async fn sinks() -> Sinks {
    let (am, hook, flux) = (
        Receiver::start(AM_PATH).await,
        Receiver::start(HOOK_PATH).await,
        Receiver::start(FLUX_PATH).await,
    );
    let text = format!(
        "repo: {{path: f}}\nsealing: {{cert: c}}\nspokes:\n  - {{name: dev, address: 10.0.0.1, kustomization: {{}}}}\n  - {{name: prod, address: 10.0.0.2, kustomization: {{}}}}\nalerts: {{alertmanager: '{}', webhook: '{}', flux: {{address: '{}'}}}}\n",
        am.base,
        hook.url(),
        flux.url()
    );
    let config = Config::parse(&text, "spokekeeper.yaml", std::path::Path::new("/")).unwrap();
    Sinks {
        am,
        hook,
        flux,
        config,
    }
}

/// Both spokes rotated: a notification each for Flux.
fn rotated() -> TickReport {
    let commit = || Outcome::Rotated {
        commit: "0123456789abcdef0123".into(),
    };
    TickReport::of(vec![
        SpokeReport::new("dev", commit()),
        SpokeReport::new("prod", commit()),
    ])
}

/// A gate open for the first `open` questions, closed after.
fn closing_after(open: usize) -> Gate {
    let asked = Arc::new(AtomicUsize::new(0));
    Gate::new(move || match asked.fetch_add(1, Ordering::SeqCst) < open {
        true => Ok(()),
        false => Err(std::io::Error::other(
            "this replica no longer holds the lease",
        )),
    })
}

async fn tell(s: &Sinks, gate: &Gate) {
    let mut notifier = Notifier::new(&s.config.alerts, QUICK).unwrap();
    let mut events = Events::new(&s.config, "test", Duration::from_secs(600), QUICK).unwrap();
    let now = OffsetDateTime::now_utc();
    let findings = [critical("dev")];
    notifier.notify_while(&findings, now, gate).await;
    events
        .record(&s.config, &rotated(), &findings, now, gate)
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_open_gate_tells_every_sink() {
    let s = sinks().await;
    tell(&s, &Gate::default()).await;
    assert_eq!(s.am.posts().len(), 1);
    assert_eq!(s.hook.posts().len(), 1);
    // One per rotated spoke, one for dev's critical finding.
    assert_eq!(s.flux.posts().len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_closed_gate_tells_no_sink() {
    let s = sinks().await;
    tell(&s, &closing_after(0)).await;
    assert_eq!(s.am.requests() + s.hook.requests() + s.flux.requests(), 0);
}

/// Lost between two sinks: Alertmanager and the webhook (asked first) are told, then
/// one Flux notification; the gate closed, the second is not sent.
#[tokio::test(flavor = "multi_thread")]
async fn a_gate_closing_between_sinks_stops_the_rest() {
    let s = sinks().await;
    // Alertmanager, the webhook, the Events' start, the first notification.
    tell(&s, &closing_after(4)).await;
    assert_eq!(s.am.posts().len(), 1);
    assert_eq!(s.hook.posts().len(), 1);
    assert_eq!(s.flux.posts().len(), 1);
}

/// A gate whose tenure runs out ends a hung send there; one that renews keeps it.
#[tokio::test(flavor = "multi_thread")]
async fn bound_ends_the_work_with_the_tenure_unless_renewed() {
    let hung = Receiver::start(HOOK_PATH).await;
    hung.set(Mode::Hang);
    let until = Instant::now() + Duration::from_millis(300);
    let expiring = Gate::with_tenure(move || match until.checked_duration_since(Instant::now()) {
        Some(left) => Ok(Some(left)),
        None => Err(std::io::Error::other("tenure over")),
    });
    let started = Instant::now();
    let client = reqwest::Client::new();
    let send = client.post(hung.url()).json(&[1]).send();
    let ended = expiring.bound(send).await;
    assert!(ended.is_err(), "the hung send was cut");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "{took:?}");
    // Renewed every time it is asked: the work runs to its end.
    let renewing = Gate::with_tenure(|| Ok::<_, std::io::Error>(Some(Duration::from_millis(50))));
    let done = renewing
        .bound(tokio::time::sleep(Duration::from_millis(400)))
        .await;
    assert!(done.is_ok());
}
