//! A federated spoke as committed, judged without SSH: its ConfigMap against the record
//! beside it (what observe reads), and whether the spoke still takes a hub token (what
//! a tick asks of a healthy spoke).

use super::*;
use crate::config::ServiceAccount;
use crate::flux::remote::RemoteError;
use crate::rotate::output::InvalidKind;
use crate::rotate::state::AnnotationError;

/// Why a federated spoke whose certificate is as `recorded` (just probed) refuses a hub
/// token of the check account now (None: it accepts it, or this is no such spoke, or the
/// hub or the spoke could not be asked: their own errors are the hub's and the probe's
/// to report). One TokenRequest and one SelfSubjectReview, no SSH and no file read: the
/// spoke verifies the token with the keys it fetched from the hub's issuer, so a refusal
/// is a trust that is gone (file reverted, API server restarted without the flag, a
/// server node rebuilt) or broken (keys it cannot fetch). A spoke with `servers` is asked
/// on each node's own API server.
pub(in crate::rotate) async fn refused(
    tick: &Tick<'_>,
    spoke: &SpokeConfig,
    recorded: &Recorded,
) -> Option<String> {
    let policy = spoke.credential.federated.as_ref()?;
    let hub = tick.hub?;
    if spoke.credential.mode != CredentialMode::Federated
        || recorded.credential.mode != CredentialMode::Federated
    {
        return None;
    }
    let audience = federate::audience(&recorded.server, recorded.credential.generation);
    let token = match hub_token(hub, policy, &audience).await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(spoke = %spoke.name, error = %e, "cannot get the hub's token to check the spoke's trust");
            return None;
        }
    };
    let ca_pem = crate::certs::to_pem(&recorded.ca_bundle);
    let user = federate::authn::username(&policy.username_prefix, &policy.check_as.subject());
    let limit = tick.context.live_timeout;
    // Each server node by itself: a rebuilt one refuses even when the others take it.
    let urls = match nodes::urls(spoke, &recorded.server) {
        Ok(urls) => urls,
        Err(e) => {
            tracing::warn!(spoke = %spoke.name, error = %e, "cannot reach the spoke's server nodes to check its trust");
            return None;
        }
    };
    for url in urls {
        let server = crate::kubeconfig::server_string(&url);
        let discovery = policy.discovery();
        match check::accepts(&server, &ca_pem, &token, (&user, &discovery), limit).await {
            Ok(()) => {}
            Err(e @ (FederateError::NotTrusted { .. } | FederateError::WrongUser { .. })) => {
                return Some(crate::text::one_line(&e.to_string(), 300));
            }
            Err(e) => {
                tracing::warn!(spoke = %spoke.name, server, error = %e, "cannot check the spoke's trust of the hub");
            }
        }
    }
    None
}

/// What the ConfigMap tells Flux for the spoke at `server`: its one audience is the one
/// [`trust_of`] writes on the node; with the spoke's own hub ServiceAccount, its name
/// (Flux looks it up in the ConfigMap's namespace, which is the account's).
pub(super) fn reach(
    server: String,
    ca_pem: String,
    audience: String,
    own_account: Option<&ServiceAccount>,
) -> Reach {
    Reach {
        audiences: vec![audience],
        address: server,
        ca_pem,
        service_account: own_account.map(|a| a.name.clone()),
    }
}

/// Whether a committed ConfigMap says what spokekeeper wrote with the record beside it
/// and the spoke's own hub ServiceAccount as configured (`own_account`; the record does
/// not say it, so an edit of both cannot choose it). Anyone who can push can edit both;
/// this catches an edit of the data alone (an address, audience or account of someone
/// else's), and the record's own fields are judged as every spoke's are (the server
/// against the configuration, the CAs against the probe).
pub(in crate::rotate) fn written(
    remote: &Remote,
    recorded: &Recorded,
    own_account: Option<&ServiceAccount>,
) -> Result<(), InvalidKind> {
    let audience = federate::audience(&recorded.server, recorded.credential.generation);
    let want = reach(
        recorded.server.clone(),
        crate::certs::to_pem(&recorded.ca_bundle),
        audience,
        own_account,
    );
    let named = remote.data.get(crate::flux::remote::SERVICE_ACCOUNT);
    if named != want.service_account.as_ref() {
        return Err(InvalidKind::ConfigMap(RemoteError::NotOwnAccount));
    }
    remote.holds(&want).map_err(InvalidKind::ConfigMap)?;
    if content_of(&remote.data) != recorded.content_sha256 {
        return Err(InvalidKind::Annotations(AnnotationError::Disagree {
            key: crate::rotate::state::CONTENT_SHA256,
            other: "data",
        }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A federated spoke's record and the ConfigMap a tick commits with it.
    fn committed() -> (Recorded, Remote) {
        let now = time::OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        let ca = params.self_signed(&key).unwrap().der().to_vec();
        let server = "https://10.0.0.1:6443".to_string();
        let data = reach(
            server.clone(),
            crate::certs::to_pem(std::slice::from_ref(&ca)),
            federate::audience(&server, 0),
            None,
        )
        .data();
        let recorded = Recorded {
            spoke: "dev".into(),
            server,
            ca_sha256: Fingerprint::of(&ca),
            ca_bundle: vec![ca],
            ca_not_after: now + time::Duration::days(3000),
            client_sha256: None,
            client_not_after: None,
            content_sha256: content_of(&data),
            sealed_to: SealedTo::Nothing,
            rotated_at: now,
            credential: crate::mint::RecordedCredential {
                mode: CredentialMode::Federated,
                user: None,
                generation: 0,
            },
            trust_sha256: Some(Fingerprint::from_digest([7; 32])),
        };
        let remote = Remote {
            name: "dev-kubeconfig".into(),
            namespace: "dev".into(),
            labels: Default::default(),
            annotations: recorded.to_annotations(),
            data,
        };
        (recorded, remote)
    }

    /// What observe reads of the committed file (its own test is the real-stack one).
    fn read(remote: &Remote) -> Result<Recorded, String> {
        read_for(remote, None)
    }

    /// [`read`] for a spoke configured with its own hub ServiceAccount `own`.
    fn read_for(remote: &Remote, own: Option<&ServiceAccount>) -> Result<Recorded, String> {
        let back = Remote::parse(remote.to_yaml().as_bytes()).map_err(|e| e.to_string())?;
        let recorded = Recorded::from_annotations(&back.annotations).map_err(|e| e.to_string())?;
        written(&back, &recorded, own).map_err(|e| e.to_string())?;
        Ok(recorded)
    }

    #[test]
    fn a_configmap_names_exactly_the_spokes_own_account_as_configured() {
        let (recorded, remote) = committed();
        let own = ServiceAccount {
            namespace: "dev".into(),
            name: "dev-flux".into(),
        };
        let data = reach(
            recorded.server.clone(),
            crate::certs::to_pem(&recorded.ca_bundle),
            federate::audience(&recorded.server, 0),
            Some(&own),
        )
        .data();
        // Its name alone: Flux looks it up in the ConfigMap's namespace.
        assert_eq!(data["serviceAccountName"], "dev-flux");
        let mut record = recorded.clone();
        record.content_sha256 = content_of(&data);
        let named = Remote {
            annotations: record.to_annotations(),
            data,
            ..remote.clone()
        };
        assert_eq!(read_for(&named, Some(&own)), Ok(record));
        let account_refused = |remote: &Remote, own: Option<&ServiceAccount>| {
            let e = read_for(remote, own).unwrap_err();
            assert!(
                e.contains("data.serviceAccountName is not what spokekeeper wrote for credential.federated.service_account_name"),
                "{e}"
            );
        };
        // Configured, not committed (the setting is new, or an edit dropped it).
        account_refused(&remote, Some(&own));
        // Committed, not configured (the setting was dropped, or an edit added it).
        account_refused(&named, None);
        // Another spoke's account, its fingerprint recomputed.
        let mut other = named.clone();
        other
            .data
            .insert("serviceAccountName".into(), "lab-flux".into());
        let mut record = Recorded::from_annotations(&other.annotations).unwrap();
        record.content_sha256 = content_of(&other.data);
        other.annotations = record.to_annotations();
        account_refused(&other, Some(&own));
    }

    #[test]
    fn a_configmap_as_written_reads_back_as_its_record() {
        let (recorded, remote) = committed();
        assert_eq!(read(&remote), Ok(recorded));
    }

    #[test]
    fn a_configmap_whose_data_was_edited_is_unreadable_naming_the_key() {
        let (_, remote) = committed();
        let edits: [(&str, Option<&str>); 5] = [
            // The hub's own audience: its token for this spoke would work on the hub.
            (
                "audiences",
                Some("https://kubernetes.default.svc.cluster.local"),
            ),
            // The spoke's audience and another server's: Flux asks for both.
            (
                "audiences",
                Some("https://10.0.0.1:6443\nhttps://evil.example"),
            ),
            ("address", Some("https://evil.example:6443")),
            ("ca.crt", None),
            // Object-level identity: a token of another hub ServiceAccount.
            ("serviceAccountName", Some("default")),
        ];
        for (key, value) in edits {
            let mut edited = remote.clone();
            match value {
                Some(v) => edited.data.insert(key.into(), v.into()),
                None => edited.data.remove(key),
            };
            // The attacker recomputes the fingerprint too: the data is still judged.
            let mut record = Recorded::from_annotations(&edited.annotations).unwrap();
            record.content_sha256 = content_of(&edited.data);
            edited.annotations = record.to_annotations();
            let e = read(&edited).unwrap_err();
            assert!(
                e.contains(&format!("data.{key} is not what spokekeeper wrote")),
                "{key}: {e}"
            );
        }
    }

    #[test]
    fn a_revoked_generations_configmap_reads_back_and_one_with_another_generation_does_not() {
        let (_, remote) = committed();
        let mut record = Recorded::from_annotations(&remote.annotations).unwrap();
        record.credential.generation = 2;
        let data = reach(
            record.server.clone(),
            crate::certs::to_pem(&record.ca_bundle),
            federate::audience(&record.server, 2),
            None,
        )
        .data();
        assert_eq!(data["audiences"], "https://10.0.0.1:6443#generation-2");
        record.content_sha256 = content_of(&data);
        let revoked = Remote {
            annotations: record.to_annotations(),
            data,
            ..remote.clone()
        };
        assert_eq!(read(&revoked), Ok(record.clone()));
        // The generation annotation wound back (its fingerprint recomputed): the
        // audiences are not that generation's.
        record.credential.generation = 1;
        let wound_back = Remote {
            annotations: record.to_annotations(),
            ..revoked
        };
        let e = read(&wound_back).unwrap_err();
        assert!(
            e.contains("data.audiences is not what spokekeeper wrote"),
            "{e}"
        );
    }

    #[test]
    fn a_configmap_whose_content_fingerprint_was_edited_is_unreadable() {
        let (_, mut remote) = committed();
        let mut record = Recorded::from_annotations(&remote.annotations).unwrap();
        record.content_sha256 = Fingerprint::from_digest([1; 32]);
        remote.annotations = record.to_annotations();
        let e = read(&remote).unwrap_err();
        assert!(
            e.contains("spokekeeper.io/content-sha256 and data disagree"),
            "{e}"
        );
    }
}
