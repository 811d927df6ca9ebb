//! What grading produces: a [`Finding`] about one spoke, its [`Status`], its
//! [`Subject`] and the [`AlertName`] it raises, and how its credential was made.

use std::fmt;

use serde::Serialize;
use time::OffsetDateTime;

/// How a finding is graded. Ordered from best to worst for `check`'s exit code, except
/// that critical and expired rank above unknown (see [`Status::exit_code`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warning,
    /// Could not be checked: unreachable, never rotated, state unreadable.
    Unknown,
    Critical,
    Expired,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warning => "warning",
            Status::Unknown => "unknown",
            Status::Critical => "critical",
            Status::Expired => "expired",
        }
    }

    /// Nagios convention: 0 ok, 1 warning, 2 critical, 3 unknown.
    pub fn exit_code(self) -> u8 {
        match self {
            Status::Ok => 0,
            Status::Warning => 1,
            Status::Critical | Status::Expired => 2,
            Status::Unknown => 3,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a finding is about. The four certificates carry the `cert` label in alerts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Subject {
    /// The client certificate in the hub's kubeconfig (recorded state).
    Client,
    /// The cluster CA the hub's kubeconfig trusts (recorded state).
    Ca,
    /// The spoke API's serving certificate (probe).
    Serving,
    /// The sealing certificate the spoke's credential is sealed to.
    Sealing,
    /// Whether the spoke API answered the probe.
    Api,
    /// The last tick's outcome for the spoke.
    Rotation,
    /// The committed SealedSecret and its annotations.
    State,
    /// Whether the hub unsealed the pushed credential and Flux deploys with it.
    Hub,
    /// A fresh credential waiting for review (`repo.mode: pull-request`).
    Review,
    /// How the fleet repo's Flux objects deploy to the spoke (`check` only).
    Flux,
    /// Federated: the hub's issuer the spoke trusts, as fetched from spokekeeper (the
    /// certificate serving its discovery URL, its document and keys).
    Issuer,
    /// Federated: `credential.federated.next`, and whether the spoke's file trusts it.
    #[serde(rename = "next-issuer")]
    NextIssuer,
}

impl Subject {
    pub fn as_str(self) -> &'static str {
        match self {
            Subject::Client => "client",
            Subject::Ca => "ca",
            Subject::Serving => "serving",
            Subject::Sealing => "sealing",
            Subject::Api => "api",
            Subject::Rotation => "rotation",
            Subject::State => "state",
            Subject::Hub => "hub",
            Subject::Review => "review",
            Subject::Flux => "flux",
            Subject::Issuer => "issuer",
            Subject::NextIssuer => "next-issuer",
        }
    }

    pub(crate) fn is_cert(self) -> bool {
        matches!(
            self,
            Subject::Client
                | Subject::Ca
                | Subject::Serving
                | Subject::Sealing
                | Subject::Issuer
                | Subject::NextIssuer
        )
    }

    pub(super) fn title(self) -> &'static str {
        match self {
            Subject::Client => "client certificate",
            Subject::Ca => "cluster CA",
            Subject::Serving => "serving certificate",
            Subject::Sealing => "sealing certificate",
            Subject::Api => "API server",
            Subject::Rotation => "rotation",
            Subject::State => "recorded state",
            Subject::Hub => "hub",
            Subject::Review => "pull request",
            Subject::Flux => "Flux layout",
            Subject::Issuer => "issuer",
            Subject::NextIssuer => "next issuer",
        }
    }
}

/// The alert a non-ok finding raises (x509-certificate-exporter / cert-manager style).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum AlertName {
    #[serde(rename = "SpokekeeperCertificateExpiring")]
    CertificateExpiring,
    #[serde(rename = "SpokekeeperCertificateExpired")]
    CertificateExpired,
    #[serde(rename = "SpokekeeperCaMismatch")]
    CaMismatch,
    #[serde(rename = "SpokekeeperSpokeUnreachable")]
    SpokeUnreachable,
    #[serde(rename = "SpokekeeperRotationFailing")]
    RotationFailing,
    #[serde(rename = "SpokekeeperHubNotReady")]
    HubNotReady,
    #[serde(rename = "SpokekeeperReviewPending")]
    ReviewPending,
    #[serde(rename = "SpokekeeperSealingCertUntrusted")]
    SealingCertUntrusted,
    #[serde(rename = "SpokekeeperRecipientsChanged")]
    RecipientsChanged,
    #[serde(rename = "SpokekeeperIssuerUnreachable")]
    IssuerUnreachable,
    #[serde(rename = "SpokekeeperNextIssuerNotTrusted")]
    NextIssuerNotTrusted,
    #[serde(rename = "SpokekeeperIssuerDropped")]
    IssuerDropped,
}

impl AlertName {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertName::CertificateExpiring => "SpokekeeperCertificateExpiring",
            AlertName::CertificateExpired => "SpokekeeperCertificateExpired",
            AlertName::CaMismatch => "SpokekeeperCaMismatch",
            AlertName::SpokeUnreachable => "SpokekeeperSpokeUnreachable",
            AlertName::RotationFailing => "SpokekeeperRotationFailing",
            AlertName::HubNotReady => "SpokekeeperHubNotReady",
            AlertName::ReviewPending => "SpokekeeperReviewPending",
            AlertName::SealingCertUntrusted => "SpokekeeperSealingCertUntrusted",
            AlertName::RecipientsChanged => "SpokekeeperRecipientsChanged",
            AlertName::IssuerUnreachable => "SpokekeeperIssuerUnreachable",
            AlertName::NextIssuerNotTrusted => "SpokekeeperNextIssuerNotTrusted",
            AlertName::IssuerDropped => "SpokekeeperIssuerDropped",
        }
    }
}

/// One graded fact about one spoke.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub spoke: String,
    #[serde(rename = "cert")]
    pub subject: Subject,
    #[serde(rename = "severity")]
    pub status: Status,
    #[serde(with = "time::serde::rfc3339::option")]
    pub not_after: Option<OffsetDateTime>,
    /// Whole days left, rounded down; negative once expired.
    pub days_left: Option<i64>,
    /// One line for the table.
    pub detail: String,
    #[serde(rename = "alertname")]
    pub alert: Option<AlertName>,
    /// The client certificate's finding: how the committed credential was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credential: Option<Box<CredentialFacts>>,
    /// Alert annotations: one line, and the full story with exact dates and what to do
    /// (none when ok: nothing to do, and the daemon holds a finding of every spoke's
    /// every certificate while it tells the sinks).
    #[serde(skip)]
    pub summary: String,
    #[serde(skip)]
    pub description: String,
}

/// How the committed credential was made, as recorded in its annotations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CredentialFacts {
    pub mode: crate::config::CredentialMode,
    /// Minted: the user the certificate was signed for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Minted: its generation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
}

impl CredentialFacts {
    pub fn of(r: &crate::rotate::state::RecordedCredential) -> CredentialFacts {
        let minted = r.mode == crate::config::CredentialMode::Minted;
        CredentialFacts {
            mode: r.mode,
            user: r.user.clone().filter(|_| minted),
            generation: Some(r.generation).filter(|_| minted),
        }
    }

    /// `minted for USER (generation N)`; None when extracted.
    pub(crate) fn describe(&self) -> Option<String> {
        match (&self.user, self.generation) {
            (Some(u), Some(g)) => Some(format!(
                "minted for {} (generation {g})",
                crate::text::one_line(u, 200)
            )),
            _ => None,
        }
    }
}

impl Finding {
    /// The Alertmanager `severity` label, when this finding raises an alert.
    pub fn severity(&self) -> Option<&'static str> {
        self.alert?;
        match self.status {
            Status::Ok => None,
            Status::Warning | Status::Unknown => Some("warning"),
            Status::Critical | Status::Expired => Some("critical"),
        }
    }
}
