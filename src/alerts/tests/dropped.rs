use super::*;
use crate::federate::FederateError;
use crate::rotate::Reason;

/// A spoke whose issuer was dropped raises its own alert, whether this tick dropped it
/// or refused to trust the hub again; any other failure stays RotationFailing.
#[test]
fn a_dropped_issuer_is_its_own_alert_until_the_hub_is_trusted_again() {
    let at = "2026-12-07T21:40:05Z";
    let mut dropping = SpokeReport::new("edge", Outcome::Unchanged);
    dropping.reason = Some(Reason::IssuerDropped {
        at: at.into(),
        generation: 0,
        audience: "https://10.0.0.5:6443".into(),
    });
    let refused = SpokeReport::new(
        "edge",
        Outcome::Failed(SpokeError::Federate(std::sync::Arc::new(
            FederateError::IssuerDropped {
                spoke: "edge".into(),
                at: at.into(),
            },
        ))),
    );
    for report in [&dropping, &refused] {
        let f = super::super::rules::rotation("edge", report);
        assert_eq!(
            (f.subject, f.status, f.alert),
            (
                Subject::Rotation,
                Status::Warning,
                Some(AlertName::IssuerDropped)
            )
        );
        assert!(f.summary.contains(&format!("since {at}")), "{}", f.summary);
        assert!(
            f.description.contains("spokekeeper rotate edge --force"),
            "{}",
            f.description
        );
    }
    let other = SpokeReport::new(
        "edge",
        Outcome::Failed(SpokeError::Federate(std::sync::Arc::new(
            FederateError::NoHub,
        ))),
    );
    let f = super::super::rules::rotation("edge", &other);
    assert_eq!(f.alert, Some(AlertName::RotationFailing));
    let healthy =
        super::super::rules::rotation("edge", &SpokeReport::new("edge", Outcome::Healthy));
    assert_eq!((healthy.status, healthy.alert), (Status::Ok, None));
}
