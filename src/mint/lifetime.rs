//! Whether the lifetime a spoke issued is usable. Kubernetes caps a CSR's
//! `expirationSeconds` at kube-controller-manager's `--cluster-signing-duration` and at
//! the signing CA's own notAfter, so a certificate can come back shorter than
//! `credential.ttl`; one that ends within `credential.renew_before` would be renewed at
//! once, every tick. Pure: the caller supplies the clock.

use std::time::Duration;

use time::OffsetDateTime;

use crate::config::Span;

/// How far short of `ttl` still counts as what was asked: the signer backdates notAfter
/// by 5 minutes (for 8h or more), and some seconds pass between signing and this check.
const SLACK: Duration = Duration::from_secs(10 * 60);

/// What cut a certificate short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// The signer's own maximum (`--cluster-signing-duration`).
    Signer,
    /// The issuing CA expires then: no certificate outlives its issuer.
    CaExpiry { ca_not_after: OffsetDateTime },
    /// The issuing CA is not at hand (neither the admin kubeconfig nor the signer
    /// returned it), so which of the two cannot be told.
    Unknown,
}

/// A certificate that came back shorter than `credential.ttl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shortfall {
    /// What is left of it now.
    pub issued: Duration,
    pub asked: Duration,
    pub limit: Limit,
}

/// The verdict on an issued lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lifetime {
    /// As asked (within [`SLACK`]).
    Full,
    /// Shorter than asked, but longer than `renew_before`: usable, renewed sooner.
    Short(Shortfall),
    /// Not longer than `renew_before`: it would be renewed at once, every tick.
    TooShort(Shortfall),
}

/// Judges a leaf ending at `not_after`, issued by a CA ending at `ca_not_after` (when
/// known), against the policy's `ttl` and `renew_before`, at `now`.
pub(crate) fn judge(
    not_after: OffsetDateTime,
    ca_not_after: Option<OffsetDateTime>,
    now: OffsetDateTime,
    ttl: Duration,
    renew_before: Duration,
) -> Lifetime {
    let issued = Duration::try_from(not_after - now).unwrap_or(Duration::ZERO);
    if issued + SLACK >= ttl {
        return Lifetime::Full;
    }
    let limit = match ca_not_after {
        // The signer sets notAfter to the CA's own when it would outlive it.
        Some(ca) if not_after >= ca => Limit::CaExpiry { ca_not_after: ca },
        Some(_) => Limit::Signer,
        None => Limit::Unknown,
    };
    let short = Shortfall {
        issued,
        asked: ttl,
        limit,
    };
    if issued <= renew_before {
        Lifetime::TooShort(short)
    } else {
        Lifetime::Short(short)
    }
}

impl Limit {
    /// Why, in words.
    pub(crate) fn cause(&self) -> String {
        match self {
            Limit::Signer => "the spoke's signer caps certificates at that \
                 (kube-controller-manager --cluster-signing-duration)"
                .into(),
            Limit::CaExpiry { ca_not_after } => format!(
                "the spoke's client CA, which signs them, expires at {}",
                when(*ca_not_after)
            ),
            Limit::Unknown => "the spoke's signer caps certificates at that \
                 (--cluster-signing-duration) or its client CA expires then (the issuing CA \
                 is not in the admin kubeconfig, so which cannot be told)"
                .into(),
        }
    }

    /// What to change.
    pub(crate) fn fix(&self) -> &'static str {
        match self {
            Limit::Signer => {
                "lower credential.renew_before below what is issued, or raise the signer's \
                 --cluster-signing-duration (k3s/RKE2: --kube-controller-manager-arg=\
                 cluster-signing-duration=...)"
            }
            Limit::CaExpiry { .. } => {
                "renew the spoke's client CA (k3s/RKE2: `certificate rotate-ca`; kubeadm: a \
                 new /etc/kubernetes/pki/ca.crt), or lower credential.renew_before below \
                 what is issued"
            }
            Limit::Unknown => {
                "lower credential.renew_before below what is issued, raise the signer's \
                 --cluster-signing-duration, or renew the spoke's client CA"
            }
        }
    }
}

impl std::fmt::Display for Shortfall {
    /// One line: what was issued, what was asked, and why.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the spoke issued a certificate for {}, not the {} asked (credential.ttl): {}",
            approx(self.issued),
            Span(self.asked),
            self.limit.cause()
        )
    }
}

fn when(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.to_string())
}

/// A remaining lifetime, to the minute (the signer's backdating makes seconds noise).
pub(crate) fn approx(d: Duration) -> String {
    let m = d.as_secs() / 60;
    let (days, hours, mins) = (m / 1440, m / 60 % 24, m % 60);
    match (days, hours, mins) {
        (0, 0, m) => format!("{m}m"),
        (0, h, 0) => format!("{h}h"),
        (0, h, m) => format!("{h}h{m}m"),
        (d, 0, 0) => format!("{d}d"),
        (d, h, _) => format!("{d}d{h}h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Duration = Duration::from_secs(3600);

    fn at(secs: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000 + secs).unwrap()
    }

    #[test]
    fn a_lifetime_as_asked_is_full_despite_the_signers_backdating() {
        let now = at(0);
        // 30d asked, notAfter backdated 5 minutes: as asked.
        let ttl = 720 * H;
        let not_after = at(720 * 3600 - 300);
        assert_eq!(judge(not_after, None, now, ttl, 240 * H), Lifetime::Full);
        assert_eq!(
            judge(at(3600), None, now, H, 3590 * H / 3600),
            Lifetime::Full
        );
    }

    #[test]
    fn a_24h_signer_under_a_30d_ttl_is_short_when_renew_before_is_less() {
        let now = at(0);
        let ca = Some(at(3650 * 86_400));
        let not_after = at(24 * 3600 - 300);
        let ttl = 720 * H;
        let Lifetime::Short(s) = judge(not_after, ca, now, ttl, 12 * H) else {
            panic!("short")
        };
        assert_eq!(s.limit, Limit::Signer);
        assert_eq!(s.issued, Duration::from_secs(24 * 3600 - 300));
        let text = s.to_string();
        assert!(text.contains("for 23h55m, not the 30d asked"), "{text}");
        assert!(text.contains("--cluster-signing-duration"), "{text}");
    }

    #[test]
    fn a_lifetime_not_longer_than_renew_before_is_too_short() {
        let now = at(0);
        let ca = Some(at(3650 * 86_400));
        let not_after = at(24 * 3600 - 300);
        for renew_before in [24 * H, 10 * 24 * H, Duration::from_secs(24 * 3600 - 300)] {
            let verdict = judge(not_after, ca, now, 720 * H, renew_before);
            assert!(
                matches!(verdict, Lifetime::TooShort(s) if s.limit == Limit::Signer),
                "{renew_before:?}: {verdict:?}"
            );
        }
        // Already expired (clock skew or a dead CA): nothing left, too short.
        assert!(matches!(
            judge(at(-10), ca, now, 720 * H, H),
            Lifetime::TooShort(s) if s.issued == Duration::ZERO
        ));
    }

    #[test]
    fn a_leaf_ending_with_its_ca_was_cut_by_the_cas_expiry() {
        let now = at(0);
        let ca_end = at(5 * 86_400);
        let verdict = judge(ca_end, Some(ca_end), now, 720 * H, 240 * H);
        let Lifetime::TooShort(s) = verdict else {
            panic!("{verdict:?}")
        };
        assert_eq!(
            s.limit,
            Limit::CaExpiry {
                ca_not_after: ca_end
            }
        );
        assert!(s.limit.cause().contains("client CA"), "{}", s.limit.cause());
        assert!(s.limit.fix().contains("rotate-ca"));
        // The CA unknown: both causes are named.
        let Lifetime::TooShort(s) = judge(ca_end, None, now, 720 * H, 240 * H) else {
            panic!()
        };
        assert_eq!(s.limit, Limit::Unknown);
        assert!(s.limit.cause().contains("--cluster-signing-duration"));
        assert!(s.limit.cause().contains("client CA"));
    }

    #[test]
    fn lifetimes_are_shown_to_the_minute() {
        let m = |x: u64| Duration::from_secs(x * 60 + 7);
        assert_eq!(approx(m(59)), "59m");
        assert_eq!(approx(m(120)), "2h");
        assert_eq!(approx(m(23 * 60 + 55)), "23h55m");
        assert_eq!(approx(m(2 * 1440)), "2d");
        assert_eq!(approx(m(2 * 1440 + 5 * 60 + 3)), "2d5h");
    }
}
