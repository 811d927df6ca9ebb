//! The commit message of a rotation: one line that says why, then the facts.

use super::decide::Reason;
use super::state::{Recorded, SealedTo, rfc3339};
use crate::config::SpokeConfig;
use crate::spoke::{self};

/// One line that says why, then the facts a reviewer wants. What the spoke reported
/// (and what the fleet repo held) is quoted as one bounded line each: a hostile value
/// cannot add lines or forge a trailer.
pub(super) fn commit_message(
    spoke: &SpokeConfig,
    reason: &Reason,
    previous: Option<&Recorded>,
    new: &Recorded,
    live: &spoke::LiveReport,
) -> String {
    use crate::text::one_line;
    let why = match (reason, previous) {
        (Reason::CaChanged { old }, _) => {
            format!("CA changed {} -> {}", old.short(), new.ca_sha256.short())
        }
        _ => reason.to_string(),
    };
    let minted = new.credential.mode == crate::config::CredentialMode::Minted;
    let title = match (&new.credential.user, minted) {
        (Some(user), true) => format!("{}: rotate kubeconfig, minted {user}: {why}", spoke.name),
        _ => format!("{}: rotate kubeconfig: {why}", spoke.name),
    };
    let mut msg = one_line(&title, 200);
    msg.push_str("\n\n");
    if let (Some(user), true) = (&new.credential.user, minted) {
        msg.push_str(&format!(
            "credential: minted for user {} (generation {}, ClusterRoleBinding {}); the admin credential is not committed\n",
            one_line(user, 200),
            new.credential.generation,
            crate::mint::binding_name(
                &crate::mint::Scope::of(spoke),
                new.credential.generation
            )
        ));
    }
    msg.push_str(&format!("server: {}\n", one_line(&new.server, 200)));
    msg.push_str(&format!(
        "CA: {} (valid until {})\n",
        new.ca_sha256,
        rfc3339(new.ca_not_after)
    ));
    if let (Some(fp), Some(na)) = (&new.client_sha256, new.client_not_after) {
        msg.push_str(&format!(
            "client certificate: {fp} (valid until {})\n",
            rfc3339(na)
        ));
    }
    msg.push_str(&format!(
        "validated: authenticated as {} against {} ({})\n",
        one_line(&live.username, 200),
        one_line(&live.server, 200),
        one_line(&live.git_version, 64)
    ));
    msg.push_str(&match new.sealed_to {
        SealedTo::Cert(cert) => format!(
            "sealed to: {cert} ({} {}/{})\n",
            spoke.scope, spoke.secret.namespace, spoke.secret.name
        ),
        SealedTo::Age(age) => format!(
            "encrypted with sops for age recipients {age} ({}/{})\n",
            spoke.secret.namespace, spoke.secret.name
        ),
        SealedTo::Nothing => String::new(),
    });
    msg
}

/// A federated spoke's commit: the ConfigMap Flux reaches it through, and what was proven.
pub(super) fn federated_message(
    spoke: &SpokeConfig,
    reason: &Reason,
    previous: Option<&Recorded>,
    new: &Recorded,
) -> String {
    use crate::text::one_line;
    let why = match (reason, previous) {
        (Reason::CaChanged { old }, _) => {
            format!("CA changed {} -> {}", old.short(), new.ca_sha256.short())
        }
        _ => reason.to_string(),
    };
    let mut msg = one_line(
        &format!("{}: trust the hub (federated): {why}", spoke.name),
        200,
    );
    msg.push_str("\n\n");
    msg.push_str(&format!(
        "ConfigMap {}/{}: the spoke's address and CA for Flux (provider: generic); nothing secret\n",
        spoke.secret.namespace, spoke.secret.name
    ));
    msg.push_str(&format!("server: {}\n", one_line(&new.server, 200)));
    msg.push_str(&format!(
        "CA: {} (valid until {})\n",
        new.ca_sha256,
        rfc3339(new.ca_not_after)
    ));
    let binding = crate::federate::binding::name(&crate::mint::Scope::of(spoke));
    msg.push_str(&format!(
        "trust: the spoke's authentication configuration written and loaded, a hub token accepted, ClusterRoleBinding {binding} checked\n",
    ));
    if let Reason::Revoked { generation, .. } = reason {
        let audience = |g| one_line(&crate::federate::audience(&new.server, g), 240);
        msg.push_str(&format!(
            "revoked: ClusterRoleBinding {binding} emptied at once; the spoke trusts hub tokens for audience {} only (generation {}), one for {} is refused (401)\n",
            audience(new.credential.generation),
            new.credential.generation,
            audience(*generation),
        ));
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::rotate::review;
    use time::OffsetDateTime;

    /// A spoke reports a username and version built to add lines, forge a trailer and
    /// inject Markdown/HTML: the commit message keeps one line per fact and no trailer,
    /// and the pull request body shows the values as escaped text.
    #[test]
    fn spoke_supplied_text_cannot_add_lines_trailers_or_markup() {
        let text =
            "repo: {path: f}\nsealing: {cert: c}\nspokes:\n  - {name: dev, address: 10.0.0.1}\n";
        let spoke = Config::parse(text, "t.yaml", std::path::Path::new("/"))
            .unwrap()
            .spokes
            .remove(0);
        let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let new = Recorded {
            spoke: "dev".into(),
            server: "https://10.0.0.1:6443\nSigned-off-by: server".into(),
            ca_sha256: crate::fingerprint::Fingerprint::from_digest([1; 32]),
            ca_bundle: vec![vec![]],
            ca_not_after: now + time::Duration::days(3000),
            client_sha256: None,
            client_not_after: None,
            content_sha256: crate::fingerprint::Fingerprint::from_digest([3; 32]),
            sealed_to: SealedTo::Cert(crate::fingerprint::Fingerprint::from_digest([4; 32])),
            rotated_at: now,
            credential: Default::default(),
            trust_sha256: None,
        };
        let live = spoke::LiveReport {
            server: "https://10.0.0.1:6443".into(),
            git_version: "v1.33.1\n\n# Approved\n[merge me](https://evil.example)".into(),
            platform: "linux/amd64".into(),
            username: "admin\nSigned-off-by: x\n<script>alert(1)</script> @org/admins\u{202E}"
                .into(),
            uid: None,
            groups: vec![],
        };
        let msg = commit_message(&spoke, &Reason::Initial, None, &new, &live);
        let lines: Vec<&str> = msg.lines().collect();
        assert_eq!(lines.len(), 6, "{msg}");
        assert!(
            lines.iter().all(|l| !l.starts_with("Signed-off-by")
                && !l.starts_with('#')
                && !l.starts_with('[')),
            "{msg}"
        );
        assert_eq!(
            lines[4],
            "validated: authenticated as admin Signed-off-by: x <script>alert(1)</script> @org/admins against https://10.0.0.1:6443 (v1.33.1 # Approved [merge me](https://evil.example))"
        );
        assert_eq!(
            lines[2],
            "server: https://10.0.0.1:6443 Signed-off-by: server"
        );

        let (title, body) = review::describe(&msg, None, None, &"a".repeat(40));
        assert_eq!(title, "dev: rotate kubeconfig: initial credential");
        assert!(
            body.contains("admin Signed\\-off\\-by: x \\<script\\>alert\\(1\\)\\</script\\> @&#8203;org/admins")
                && body.contains("\\[merge me\\]\\(https:&#8203;//evil\\.example\\)")
                && body.contains("\\#&#8203; Approved"),
            "{body}"
        );
        assert!(
            !body.contains("<script>") && !body.contains("\n#"),
            "{body}"
        );
    }
}
